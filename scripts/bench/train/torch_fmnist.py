#!/usr/bin/python3
"""PyTorch 1.13 twin of cohort-train-fmnist, for scripts/bench/train_bench.

Same model (conv 1->32 3x3 pad 1, ReLU, maxpool 2; conv 32->64; linear 3136->128, ReLU; linear
128->10), same data (Debian's dataset-fashion-mnist IDX files, scaled to [0,1], normalised with
mean 0.2860 std 0.3530), same optimiser (SGD lr 0.05 momentum 0.9, Nesterov), same per-rank
batch, same DistributedSampler order (seed + epoch), the same weight average for evaluation
(--ema-decay, with cohort's rule: decay min(d, (1 + step) / (10 + step))), DDP on gloo. Launch with torchrun (or
cohortrun), or run alone for one worker. Prints one JSON line on rank 0.
"""
import argparse
import gzip
import json
import math
import os
import struct
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data.distributed import DistributedSampler


def read_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    magic, = struct.unpack(">I", data[:4])
    ndim = magic & 0xFF
    dims = struct.unpack(">" + "I" * ndim, data[4:4 + 4 * ndim])
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def load(data_dir, split):
    prefix = "train" if split == "train" else "t10k"
    x = read_idx(os.path.join(data_dir, f"{prefix}-images-idx3-ubyte.gz"))
    y = read_idx(os.path.join(data_dir, f"{prefix}-labels-idx1-ubyte.gz"))
    x = torch.from_numpy(x.astype(np.float32) / 255.0)
    x = ((x - 0.2860) / 0.3530).unsqueeze(1).contiguous()
    return x, torch.from_numpy(y.astype(np.int64))


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 3, padding=1)
        self.conv2 = nn.Conv2d(32, 64, 3, padding=1)
        self.fc1 = nn.Linear(3136, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = F.relu(self.fc1(torch.flatten(x, 1)))
        return self.fc2(x)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--nesterov", action=argparse.BooleanOptionalAction, default=True,
                   help="Nesterov momentum, as cohort-train-fmnist's default")
    p.add_argument("--lr-schedule", choices=["constant", "cosine"], default="constant")
    p.add_argument("--warmup-steps", type=int, default=0)
    p.add_argument("--ema-decay", type=float, default=0.98,
                   help="evaluate a moving average of the weights (0: the weights themselves)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max-steps", type=int, default=0, help="stop after this many steps (0: no limit)")
    p.add_argument("--threads", type=int, default=0, help="intra-op threads (0: OMP_NUM_THREADS or 1)")
    args = p.parse_args()

    threads = args.threads or int(os.environ.get("OMP_NUM_THREADS", "1"))
    torch.set_num_threads(threads)
    distributed = "WORLD_SIZE" in os.environ and int(os.environ["WORLD_SIZE"]) > 1
    if distributed:
        dist.init_process_group("gloo")
        rank, world = dist.get_rank(), dist.get_world_size()
    else:
        rank, world = 0, 1
    torch.manual_seed(args.seed)
    model = Net()
    if distributed:
        model = DDP(model)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum,
                          nesterov=args.nesterov)
    params = list(model.parameters())
    average = [q.detach().clone() for q in params] if args.ema_decay > 0 else None
    x_train, y_train = load(args.data, "train")
    x_test, y_test = load(args.data, "test")
    sampler = DistributedSampler(range(len(x_train)), num_replicas=world, rank=rank, shuffle=True,
                                 seed=args.seed)

    steps_per_epoch = -(-len(sampler) // args.batch_size)
    total_steps = steps_per_epoch * args.epochs
    if args.max_steps:
        total_steps = min(total_steps, args.max_steps)

    def lr_at(it):  # cohort's cosine_lr with min_lr 0
        if args.lr_schedule == "constant":
            return args.lr
        if it < args.warmup_steps:
            return args.lr * (it + 1) / args.warmup_steps
        if it > total_steps or total_steps <= args.warmup_steps:
            return 0.0
        ratio = (it - args.warmup_steps) / (total_steps - args.warmup_steps)
        return 0.5 * (1.0 + math.cos(math.pi * ratio)) * args.lr

    step = 0
    train_time = 0.0
    samples = 0
    result = {}
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        idx = torch.tensor(list(iter(sampler)), dtype=torch.int64)
        model.train()
        t0 = time.perf_counter()
        nb = len(idx) // args.batch_size + (1 if len(idx) % args.batch_size else 0)
        for b in range(nb):
            bi = idx[b * args.batch_size:(b + 1) * args.batch_size]
            xb, yb = x_train[bi], y_train[bi]
            loss = F.cross_entropy(model(xb), yb)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            for g in opt.param_groups:
                g["lr"] = lr_at(step)
            opt.step()
            if average is not None:
                with torch.no_grad():
                    d = min(args.ema_decay, (1 + step) / (10 + step))
                    for a, q in zip(average, params):
                        a.mul_(d).add_(q, alpha=1 - d)
            step += 1
            samples += len(bi) * world
            if args.max_steps and step >= args.max_steps:
                break
        train_time += time.perf_counter() - t0
        # Evaluation: every rank scores a disjoint shard, (correct, count, loss) summed; the
        # weight average when there is one, and the weights themselves.
        model.eval()

        def score():
            with torch.no_grad():
                shard = slice(rank, len(x_test), world)
                out = model(x_test[shard])
                stats = torch.tensor([(out.argmax(1) == y_test[shard]).sum().item(), out.shape[0],
                                      F.cross_entropy(out, y_test[shard], reduction="sum").item()],
                                     dtype=torch.float64)
                if distributed:
                    dist.all_reduce(stats)
            return stats[0].item() / stats[1].item(), stats[2].item() / stats[1].item()

        raw_acc, raw_loss = score()
        acc, loss_ = raw_acc, raw_loss
        if average is not None:
            with torch.no_grad():
                held = [q.detach().clone() for q in params]
                for q, a in zip(params, average):
                    q.copy_(a)
                acc, loss_ = score()
                for q, h in zip(params, held):
                    q.copy_(h)
        result = {"epoch": epoch + 1, "test_accuracy": acc, "test_loss": loss_,
                  "raw_test_accuracy": raw_acc, "raw_test_loss": raw_loss}
        if rank == 0:
            print(f"epoch {epoch + 1}: test accuracy {100 * acc:.2f}% loss {loss_:.4f} "
                  f"(the weights themselves: {100 * raw_acc:.2f}%)", flush=True)
        if args.max_steps and step >= args.max_steps:
            break
    if rank == 0:
        result.update({"impl": "pytorch", "model": "fmnist", "world_size": world, "threads": threads,
                       "steps": step, "samples_per_s": samples / train_time,
                       "train_seconds": train_time})
        print(json.dumps(result), flush=True)
    if distributed:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
