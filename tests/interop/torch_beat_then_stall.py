"""A single-process PyTorch worker, in no process group (a one-GPU script), that takes a few
optimizer steps and then stalls in stuck_in_a_kernel() for STALL_S seconds (default 600).

BEAT_BY_HAND=1: it also beats by hand, as a script that wants its silence judged writes to
cohortrun's heartbeat pipe (README: "Hung workers"). Then the worker module's own beats on the
optimizer steps are not all it says, and its silence is a hang. Without it, only the module beats,
on optimizer steps: a phase without steps is quiet, however long (tests/launcher/hang_torch_test.cc).
"""
import os
import time

import torch

by_hand = os.environ.get("BEAT_BY_HAND") == "1"
fd = int(os.environ.get("COHORT_HEARTBEAT_FD", "-1"))
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(5):
    loss = model(torch.ones(8, 4)).sum()
    opt.zero_grad()
    loss.backward()
    opt.step()
    if by_hand:
        os.write(fd, b"b")
    time.sleep(0.06)


def stuck_in_a_kernel():
    time.sleep(float(os.environ.get("STALL_S", "600")))


stuck_in_a_kernel()
print("done", flush=True)
