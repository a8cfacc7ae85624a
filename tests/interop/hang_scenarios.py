"""Unchanged PyTorch training scripts (gloo DDP; they never import cohort) that hang, or seem to,
for cohortrun's hang tests and the fault suite. HANG_SCENARIO chooses; HANG_RANK is the rank that
misbehaves (default 1); it does so at step HANG_STEP (default 5), after writing the time to
HANG_MARK when that is set (the tests' clock for "named within the timeout plus 5 s").

  stall     the rank sleeps in Python (stuck_in_data_loading) while the others wait in DDP's
            gradient allreduce
  native    the rank blocks in a native call that releases the GIL (libc's sleep through ctypes)
  native_gil the same call holding the GIL (ctypes.PyDLL): it cannot answer a probe
  desync    every rank calls one more collective; the rank calls all_gather where the others call
            all_reduce
  exit      the rank exits with code 3 while the others wait in the allreduce
  eval      no rank misbehaves: every rank evaluates for HANG_EVAL_S seconds (no collective, no
            optimizer step), then trains on and finishes
  straggler the rank sleeps HANG_SLOW_S more than the others at every step, and finishes
HANG_SECONDS bounds a stall (default 600). STEPS steps in all (default 12).
"""
import ctypes
import datetime
import os
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

scenario = os.environ.get("HANG_SCENARIO", "stall")
bad_rank = int(os.environ.get("HANG_RANK", "1"))
bad_step = int(os.environ.get("HANG_STEP", "5"))
stall_s = float(os.environ.get("HANG_SECONDS", "600"))

dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=600))
rank = dist.get_rank()
torch.manual_seed(0)
model = DDP(torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1)))
opt = torch.optim.SGD(model.parameters(), lr=0.01)


def mark():
    if os.environ.get("HANG_MARK"):
        with open(os.environ["HANG_MARK"], "w") as f:
            f.write(str(time.time()))


def stuck_in_data_loading():
    mark()
    time.sleep(stall_s)


def blocked_in_native_code(hold_gil):
    mark()
    libc = ctypes.PyDLL(None) if hold_gil else ctypes.CDLL(None)
    libc.sleep(int(stall_s))


def evaluate():
    mark()
    deadline = time.monotonic() + float(os.environ.get("HANG_EVAL_S", "20"))
    with torch.no_grad():
        while time.monotonic() < deadline:
            model.module(torch.randn(64, 32))
            time.sleep(0.05)


def step():
    opt.zero_grad()
    model(torch.randn(8, 32)).sum().backward()
    opt.step()


for i in range(int(os.environ.get("STEPS", "12"))):
    if i == bad_step:
        if scenario == "eval":
            evaluate()
        elif rank == bad_rank and scenario == "stall":
            stuck_in_data_loading()
        elif rank == bad_rank and scenario in ("native", "native_gil"):
            blocked_in_native_code(scenario == "native_gil")
        elif rank == bad_rank and scenario == "exit":
            mark()
            os._exit(3)
        elif scenario == "desync":
            if rank == bad_rank:
                mark()
                dist.all_gather([torch.zeros(4) for _ in range(dist.get_world_size())],
                                torch.ones(4))
            else:
                dist.all_reduce(torch.ones(4))
    if scenario == "straggler" and rank == bad_rank:
        time.sleep(float(os.environ.get("HANG_SLOW_S", "0.3")))
    step()
    time.sleep(0.02)
print(f"rank {rank}: done", flush=True)
dist.destroy_process_group()
