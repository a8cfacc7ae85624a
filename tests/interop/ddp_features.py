"""A PyTorch DDP script (gloo) using the features people rely on: init_process_group with env://,
DistributedDataParallel (with gradient accumulation under no_sync), all_reduce, all_gather_object,
broadcast_object_list, new_group, monitored_barrier, barrier."""
import datetime
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

# Gradient accumulation: two micro-batches, the first under no_sync (no allreduce), the second
# synchronising. The result must equal one step on the concatenated batch, averaged over ranks.
torch.manual_seed(1)
acc = DDP(torch.nn.Linear(8, 1, bias=False))
ref = torch.nn.Linear(8, 1, bias=False)
ref.load_state_dict(acc.module.state_dict())
batches = [torch.full((2, 8), float(rank + 1 + i)) for i in range(2)]
with acc.no_sync():
    acc(batches[0]).sum().backward()
local_only = acc.module.weight.grad.clone()
acc(batches[1]).sum().backward()
# Reference: every rank's both micro-batches, summed per rank, averaged over ranks.
for r in range(world):
    for i in range(2):
        ref(torch.full((2, 8), float(r + 1 + i))).sum().backward()
expected = ref.weight.grad / world
assert torch.allclose(acc.module.weight.grad, expected), (acc.module.weight.grad, expected)
# Under no_sync the first micro-batch's gradient stayed this rank's own (ranks' data differ).
own = torch.nn.Linear(8, 1, bias=False)
own.load_state_dict(ref.state_dict())
own(batches[0]).sum().backward()
assert torch.allclose(local_only, own.weight.grad), "no_sync synchronised the gradient"

objects = [None] * world
dist.all_gather_object(objects, {"rank": rank, "tag": f"r{rank}"})
assert objects == [{"rank": r, "tag": f"r{r}"} for r in range(world)], objects

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
dist.monitored_barrier(timeout=datetime.timedelta(seconds=60), wait_all_ranks=True)
dist.barrier()
print(f"rank {rank}: ddp ok", flush=True)
dist.destroy_process_group()
