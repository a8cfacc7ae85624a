"""A script written for torch.distributed.launch of PyTorch 1.x (ImageNet-example style): it takes
its local rank from a --local_rank argument only, and argparse refuses any other argument."""
import argparse
import os

import torch
import torch.distributed as dist

parser = argparse.ArgumentParser()
parser.add_argument("--local_rank", type=int, default=-1)
parser.add_argument("--epochs", type=int, default=1)
args = parser.parse_args()
assert args.local_rank == int(os.environ["LOCAL_RANK"]), (args.local_rank, os.environ["LOCAL_RANK"])
dist.init_process_group("gloo")
t = torch.ones(4)
dist.all_reduce(t)
assert t[0].item() == dist.get_world_size(), t
print(f"local rank {args.local_rank}: allreduce ok", flush=True)
dist.destroy_process_group()
