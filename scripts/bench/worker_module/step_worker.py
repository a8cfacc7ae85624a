"""worker_module_bench's worker: a DDP (gloo) training loop that never imports cohort; rank 0
prints its steady-state steps per second as one JSON line. STEPS steps after WARMUP, a model of
WIDTH (the default makes a step of about 10 ms on one core)."""
import json
import os
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

torch.set_num_threads(1)
dist.init_process_group("gloo")
width = int(os.environ.get("WIDTH", "512"))
model = DDP(torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.ReLU(),
                                torch.nn.Linear(width, 10)))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x = torch.randn(64, width)
y = torch.randint(0, 10, (64,))
loss_fn = torch.nn.CrossEntropyLoss()


def step():
    opt.zero_grad()
    loss_fn(model(x), y).backward()
    opt.step()


for _ in range(int(os.environ.get("WARMUP", "30"))):
    step()
steps = int(os.environ.get("STEPS", "300"))
dist.barrier()
t0, c0 = time.perf_counter(), time.process_time()
for _ in range(steps):
    step()
wall, cpu = time.perf_counter() - t0, time.process_time() - c0
if dist.get_rank() == 0:
    print(json.dumps({"steps_per_s": steps / wall, "cpu_s_per_step": cpu / steps,
                      "module": "_cohort_worker" in __import__("sys").modules}), flush=True)
dist.destroy_process_group()
