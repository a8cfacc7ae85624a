"""What a worker inherits from cohortrun: the descriptors it holds before it opens any, and what a
DataLoader worker it forks shares with cohortrun. Each rank writes <OUT>/fds.<rank>.json:
  start:     "fd -> target" of the worker's descriptors above 2 before it opened one (torchrun's
             workers have none: subprocess.Popen closes the others);
  heartbeat: COHORT_HEARTBEAT_FD, and control: COHORT_CONTROL_FD (cohortrun's hang probes), the
             two descriptors cohortrun means a worker to keep;
  shared:    what the DataLoader worker (a fork of the worker, as PyTorch's are) holds open that
             cohortrun holds too: pipes and sockets by inode, beyond the worker's stdio, heartbeat
             and control socket.
Then a gloo allreduce, so that the job is a real one."""
import json
import os
import sys


def descriptors(pid="self"):
    """{fd: target} of a process's open descriptors."""
    out = {}
    base = f"/proc/{pid}/fd"
    for name in os.listdir(base):
        try:
            out[int(name)] = os.readlink(f"{base}/{name}")
        except OSError:  # the listing's own descriptor, gone once listed
            pass
    return out


start = {fd: t for fd, t in descriptors().items() if fd > 2 and not t.endswith("/fd")}
agent = os.getppid()  # cohortrun spawns its workers itself
heartbeat = int(os.environ.get("COHORT_HEARTBEAT_FD", "-1"))
control = int(os.environ.get("COHORT_CONTROL_FD", "-1"))

import torch  # noqa: E402  (after the listing: torch opens descriptors of its own)
import torch.distributed as dist  # noqa: E402
from torch.utils.data import DataLoader, Dataset  # noqa: E402


class Probe(Dataset):
    """Its one item is what the DataLoader worker holds that cohortrun holds too."""

    def __len__(self):
        return 1

    def __getitem__(self, i):
        mine = descriptors()
        # The worker's own stdio, heartbeat pipe and control socket are cohortrun's on purpose.
        meant = {mine.get(fd) for fd in (0, 1, 2, heartbeat, control)}
        theirs = set(descriptors(agent).values())
        shared = sorted(f"{fd} -> {t}" for fd, t in mine.items()
                        if t in theirs and t not in meant and ("pipe:" in t or "socket:" in t))
        return json.dumps(shared)


dist.init_process_group("gloo")
rank = dist.get_rank()
loader = DataLoader(Probe(), batch_size=None, num_workers=1,
                    multiprocessing_context="fork")
shared = json.loads(next(iter(loader)))
t = torch.ones(4)
dist.all_reduce(t)
assert t[0].item() == dist.get_world_size(), t
with open(os.path.join(os.environ["OUT"], f"fds.{rank}.json"), "w") as f:
    json.dump({"start": sorted(f"{fd} -> {t}" for fd, t in start.items()),
               "heartbeat": heartbeat, "control": control, "shared": shared, "agent": agent}, f)
print(f"rank {rank}: {len(start)} inherited, {len(shared)} shared with cohortrun", flush=True)
dist.destroy_process_group()
