"""A PyTorch DDP script (gloo) using the features people rely on: init_process_group with env://,
DistributedDataParallel, all_reduce, broadcast_object_list, new_group, barrier."""
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
assert rank == int(os.environ["RANK"]) and world == int(os.environ["WORLD_SIZE"])

torch.manual_seed(0)
model = DDP(torch.nn.Linear(8, 2))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x = torch.full((4, 8), float(rank + 1))
loss = model(x).sum()
loss.backward()
opt.step()
# DDP averaged the gradients: every rank holds the same weights.
w = model.module.weight.detach().clone()
gathered = [torch.zeros_like(w) for _ in range(world)]
dist.all_gather(gathered, w)
assert all(torch.equal(g, gathered[0]) for g in gathered), "weights diverged"

t = torch.tensor([float(rank)])
dist.all_reduce(t)
assert t.item() == sum(range(world))

obj = [{"lr": 0.1, "from": rank}] if rank == 0 else [None]
dist.broadcast_object_list(obj, src=0)
assert obj[0] == {"lr": 0.1, "from": 0}

evens = dist.new_group([r for r in range(world) if r % 2 == 0])
if rank % 2 == 0:
    e = torch.ones(1)
    dist.all_reduce(e, group=evens)
    assert e.item() == len(range(0, world, 2))
dist.barrier()
print(f"rank {rank}: ddp ok", flush=True)
dist.destroy_process_group()
