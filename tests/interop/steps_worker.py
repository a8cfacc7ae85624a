"""A gloo worker that runs STEPS allreduces, 50 ms apart, for the node-loss interop tests. It
records itself at start in MARK_DIR (<run id>.<rank>.<restart>: its pid) so that a test can kill
its node while it runs, and prints its world size when done."""
import os
import time

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
restart = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
mark = os.path.join(os.environ["MARK_DIR"], f"{os.environ['TORCHELASTIC_RUN_ID']}.{rank}.{restart}")
with open(mark + ".tmp", "w") as f:
    f.write(str(os.getpid()))
os.rename(mark + ".tmp", mark)
for _ in range(int(os.environ.get("STEPS", "40"))):
    t = torch.ones(1000)
    dist.all_reduce(t)
    assert torch.all(t == world), t[:4]
    time.sleep(0.05)
print(f"rank {rank}/{world}: steps ok after restart {restart}", flush=True)
dist.destroy_process_group()
