"""PyTorch gloo all_reduce timed like cohort_allreduce_bench: N processes on this machine,
float32 SUM, per size the mean time per call of the slowest rank. One JSON object per line.

Run with a Python that has torch (Debian's /usr/bin/python3):
    gloo_bench.py [--world 2] [--min 4096] [--max 67108864]
"""
import argparse
import json
import os
import socket
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def iterations(nbytes):
    return max(5, min(2000, (1 << 30) // nbytes))


def sizes(lo, hi):
    s = lo
    while s <= hi:
        yield s
        s *= 4


def worker(rank, world, port, lo, hi, out):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}",
                            rank=rank, world_size=world)
    for nbytes in sizes(lo, hi):
        t = torch.ones(nbytes // 4, dtype=torch.float32)
        iters = iterations(nbytes)
        for _ in range(3):
            dist.all_reduce(t)
        dist.barrier()
        t0 = time.perf_counter()
        for _ in range(iters):
            dist.all_reduce(t)
        per = torch.tensor([(time.perf_counter() - t0) / iters], dtype=torch.float64)
        dist.all_reduce(per, op=dist.ReduceOp.MAX)
        if rank == 0:
            algbw = nbytes / per.item() / 1e9
            busbw = algbw * 2 * (world - 1) / world
            out.put(json.dumps({"impl": "gloo", "bytes": nbytes, "iters": iters,
                                "time_us": round(per.item() * 1e6, 2),
                                "algbw_GBps": round(algbw, 3), "busbw_GBps": round(busbw, 3)}))
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--world", type=int, default=2)
    p.add_argument("--min", type=int, default=4096)
    p.add_argument("--max", type=int, default=64 << 20)
    a = p.parse_args()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    procs = [ctx.Process(target=worker, args=(r, a.world, port, a.min, a.max, out))
             for r in range(a.world)]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join()
    while not out.empty():
        print(out.get())
    return 0 if all(proc.exitcode == 0 for proc in procs) else 1


if __name__ == "__main__":
    sys.exit(main())
