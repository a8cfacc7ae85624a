"""A PyTorch worker for tests/install/wheel_test.sh: gloo allreduce of rank + 1 over env://, then
one line naming the interpreter and the torch that ran it."""
import sys

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
t = torch.tensor([float(rank + 1)])
dist.all_reduce(t)
want = world * (world + 1) / 2
assert t.item() == want, (t.item(), want)
print("wheel worker rank %d of %d: sum %g torch %s python %s"
      % (rank, world, t.item(), torch.__version__, sys.executable), flush=True)
dist.destroy_process_group()
