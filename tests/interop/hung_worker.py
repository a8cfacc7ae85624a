"""A PyTorch worker whose rank 1 hangs at step 20 (in stuck_waiting_for_data), while rank 0 keeps
stepping. An unchanged script: it never imports cohort, and beats all the same, since cohortrun
loads its worker module into every Python worker (every optimizer step is a heartbeat). With
HANG_MARK set, rank 1 writes the time it stops stepping there (the fault suite's clock); with
HANG_SECONDS, it hangs that long (default 600) and then goes on; STEPS steps in all (600)."""
import os
import time

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)


def stuck_waiting_for_data():
    if os.environ.get("HANG_MARK"):
        with open(os.environ["HANG_MARK"], "w") as f:
            f.write(str(time.time()))
    time.sleep(float(os.environ.get("HANG_SECONDS", "600")))


for step in range(int(os.environ.get("STEPS", "600"))):
    opt.zero_grad()
    model(torch.ones(2, 4)).sum().backward()
    opt.step()
    if step == 20 and rank == 1:
        stuck_waiting_for_data()
    time.sleep(0.05)
