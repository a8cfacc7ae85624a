"""A gloo worker for the interop tests: env:// rendezvous, allreduce, broadcast, barrier."""
import os

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
t = torch.full((1000,), float(rank + 1))
dist.all_reduce(t)
expected = world * (world + 1) / 2
assert torch.all(t == expected), t[:4]
obj = [{"from": 0}] if rank == 0 else [None]
dist.broadcast_object_list(obj, src=0)
assert obj[0] == {"from": 0}
dist.barrier()
print(f"rank {rank}/{world}: allreduce ok")
dist.destroy_process_group()
