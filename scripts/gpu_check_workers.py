#!/usr/bin/env python3
"""The PyTorch workers of scripts/gpu_check.sh's hand checks, each run under cohortrun.

    gpu_check_workers.py hang GIB      holds GIB GiB of GPU memory, beats once, then waits in
                                       torch.cuda.synchronize() behind a kernel that spins for
                                       minutes: cohortrun --worker-hang-timeout must find it,
                                       with its Python stack, and its memory must come free
    gpu_check_workers.py nccl_hang     an NCCL group of one rank: one allreduce, then a second
                                       queued behind a kernel that spins for minutes, and
                                       torch.cuda.synchronize(): the collective never completes,
                                       so cohortrun must name it and collect the rank's Flight
                                       Recorder through PyTorch's dump pipe
    gpu_check_workers.py hold GIB      holds GIB GiB of GPU memory, prints "holding", sleeps:
                                       kill -9 of cohortrun must free it
    gpu_check_workers.py amp_ddp       the seeds' way to train fast, on the NCCL backend: DDP,
                                       a DistributedSampler, autocast with GradScaler (fp16),
                                       gradient accumulation under no_sync(); prints one JSON
                                       line (rank 0) with the first and last losses

Each prints what it does on stdout (flushed), which gpu_check.sh reads.
"""
import contextlib
import json
import os
import sys
import time

import torch


def beat():
    # cohortrun's heartbeat pipe (README: "Hung workers"); the cohort module does the same.
    fd = int(os.environ.get("COHORT_HEARTBEAT_FD", "-1"))
    if fd >= 0:
        try:
            os.write(fd, b"b")
        except OSError:
            pass


def hold(gib):
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
    x = torch.ones(int(gib * (1 << 30)) // 4, device=device)
    torch.cuda.synchronize(device)
    return x


def hang(gib):
    x = hold(gib)
    beat()
    print(f"holding {gib} GiB, now hanging in a kernel", flush=True)
    torch.cuda._sleep(1 << 40)  # a spin kernel of ~2^40 cycles: about ten minutes
    torch.cuda.synchronize()
    print("the kernel ended: nobody stopped the worker", flush=True)
    return x


def nccl_hang():
    import torch.distributed as dist

    dist.init_process_group("nccl")
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    x = torch.ones(1 << 20, device="cuda")
    dist.all_reduce(x)
    torch.cuda.synchronize()
    beat()
    print("nccl group ready, now hanging in a collective behind a kernel", flush=True)
    torch.cuda._sleep(1 << 40)  # about ten minutes; NCCL's stream waits for it
    dist.all_reduce(x)
    torch.cuda.synchronize()
    print("the kernel ended: nobody stopped the worker", flush=True)


def hold_and_sleep(gib):
    x = hold(gib)
    beat()
    print(f"holding {gib} GiB", flush=True)
    time.sleep(600)
    return x


def amp_ddp():
    import torch.distributed as dist
    import torch.nn as nn
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

    dist.init_process_group("nccl")
    rank, local = dist.get_rank(), int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local)
    torch.manual_seed(0)
    # A separable problem: 4 classes from 64 features through a small MLP.
    n, d = 8192, 64
    w_true = torch.randn(d, 4)
    x = torch.randn(n, d)
    y = (x @ w_true).argmax(dim=1)
    sampler = DistributedSampler(TensorDataset(x, y), shuffle=True, seed=0)
    loader = DataLoader(TensorDataset(x, y), batch_size=128, sampler=sampler, drop_last=True)
    model = DDP(nn.Sequential(nn.Linear(d, 256), nn.ReLU(), nn.Linear(256, 4)).cuda(),
                device_ids=[local])
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    scaler = (torch.amp.GradScaler("cuda") if hasattr(torch.amp, "GradScaler")
              else torch.cuda.amp.GradScaler())
    accum, losses = 2, []
    for epoch in range(3):
        sampler.set_epoch(epoch)
        for i, (xb, yb) in enumerate(loader):
            xb, yb = xb.cuda(non_blocking=True), yb.cuda(non_blocking=True)
            sync = (i + 1) % accum == 0
            ctx = model.no_sync() if not sync else contextlib.nullcontext()
            with ctx:
                with torch.autocast("cuda", dtype=torch.float16):
                    loss = nn.functional.cross_entropy(model(xb), yb) / accum
                scaler.scale(loss).backward()
            if sync:
                scaler.step(opt)
                scaler.update()
                opt.zero_grad(set_to_none=True)
                beat()
            losses.append(loss.item() * accum)
    # Every rank ends with the same weights (DDP synchronised the gradients).
    flat = torch.cat([p.detach().float().flatten() for p in model.parameters()])
    gathered = [torch.zeros_like(flat) for _ in range(dist.get_world_size())]
    dist.all_gather(gathered, flat)
    same = all(torch.equal(g, gathered[0]) for g in gathered)
    if rank == 0:
        print(json.dumps({"amp_ddp": {"world_size": dist.get_world_size(), "backend": "nccl",
                                      "first_loss": round(sum(losses[:8]) / 8, 4),
                                      "last_loss": round(sum(losses[-8:]) / 8, 4),
                                      "loss_scale": scaler.get_scale(), "ranks_agree": same,
                                      "torch": torch.__version__}}), flush=True)
    dist.destroy_process_group()


def main():
    what = sys.argv[1] if len(sys.argv) > 1 else ""
    if what == "hang":
        hang(float(sys.argv[2]))
    elif what == "nccl_hang":
        nccl_hang()
    elif what == "hold":
        hold_and_sleep(float(sys.argv[2]))
    elif what == "amp_ddp":
        amp_ddp()
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
