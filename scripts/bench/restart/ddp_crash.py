"""A gloo DDP job whose rank 1 dies on attempt 0: the worker of the restart benchmark.

    <launcher> ... ddp_crash.py OUT_DIR [--crash-after S] [--crash-when FILE] [--steps N]

Attempt 0: every rank trains; rank 1, once the attempt has run --crash-after seconds (and at least
one step) and FILE exists (when given: the benchmark creates it once cohortrun's fork servers are
ready), writes OUT_DIR/crash (CLOCK_REALTIME, ns) and exits with code 3 at once (os._exit).
Attempt 0's ranks write OUT_DIR/first_0_<rank> at their first step (the start-up's cost).
Every later attempt: each rank writes OUT_DIR/first_<attempt>_<rank> with the time its first DDP
step (forward, backward with its gradient allreduce, optimizer step) finished, trains --steps steps
and exits 0. The figure is max(first_1_*) - crash.
"""
import argparse
import datetime
import os
import time

T0 = time.clock_gettime_ns(time.CLOCK_REALTIME)

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


def stamp(path):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(str(time.clock_gettime_ns(time.CLOCK_REALTIME)))
    os.rename(tmp, path)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("out_dir")
    p.add_argument("--crash-after", type=float, default=0.0)
    p.add_argument("--crash-when", default="")
    p.add_argument("--steps", type=int, default=3)
    a = p.parse_args()
    attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    rank = int(os.environ["RANK"])
    t_import = time.clock_gettime_ns(time.CLOCK_REALTIME)
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=30))
    t_pg = time.clock_gettime_ns(time.CLOCK_REALTIME)
    torch.manual_seed(0)
    model = DDP(nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 8)))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(32, 64), torch.randn(32, 8)
    start = time.monotonic()
    step = 0
    while True:
        opt.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        opt.step()
        step += 1
        if step == 1 and attempt == 0:
            stamp(os.path.join(a.out_dir, "first_0_%d" % rank))
        if step == 1 and attempt > 0:
            stamp(os.path.join(a.out_dir, "first_%d_%d" % (attempt, rank)))
            with open(os.path.join(a.out_dir, "phases_%d_%d" % (attempt, rank)), "w") as f:
                now = time.clock_gettime_ns(time.CLOCK_REALTIME)
                f.write("%d %d %d %d\n" % (T0, t_import, t_pg, now))
        if attempt == 0 and rank == 1 and time.monotonic() - start >= a.crash_after and \
                (not a.crash_when or os.path.exists(a.crash_when)):
            stamp(os.path.join(a.out_dir, "crash"))
            os._exit(3)
        if attempt > 0 and step >= a.steps:
            break
        if attempt == 0:
            time.sleep(0.01)  # a slow step, so rank 0 is not spinning while it waits
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
