"""A PyTorch worker whose rank 1 hangs at step 20 (in stuck_waiting_for_data), while rank 0 keeps
stepping. It beats through `import cohort` alone: every optimizer step is a heartbeat. With
HANG_MARK set, rank 1 writes the time it stops stepping there (the fault suite's clock)."""
import os
import time

import torch
import torch.distributed as dist

import cohort  # noqa: F401  (the heartbeats)

dist.init_process_group("gloo")
rank = dist.get_rank()
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)


def stuck_waiting_for_data():
    if os.environ.get("HANG_MARK"):
        with open(os.environ["HANG_MARK"], "w") as f:
            f.write(str(time.time()))
    time.sleep(600)


for step in range(600):
    opt.zero_grad()
    model(torch.ones(2, 4)).sum().backward()
    opt.step()
    if step == 20 and rank == 1:
        stuck_waiting_for_data()
    time.sleep(0.05)
