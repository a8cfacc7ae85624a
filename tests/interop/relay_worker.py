"""A gloo worker for the store relay's netns tests (tests/launcher/relay_netns_test.cc).

It says where its store is (MASTER_ADDR:MASTER_PORT, and the address of its own node), builds its
group (env://, gloo), checks an allreduce, a broadcast and a barrier, and writes
MARK_DIR/relay.<rank>.<restart> with "<MASTER_ADDR> <MASTER_PORT> <its node's address>".

With CUT_ROUND=<r>: in restart r, after the mark, it waits (up to 60 s) for MARK_DIR/cut.<r>
(the test cuts this node's connections to its relay meanwhile), then uses the store: a worker
whose store connection was cut fails there (exit 3) as it would on losing the store itself."""
import datetime
import os
import pathlib
import socket
import sys
import time

import torch
import torch.distributed as dist

mark_dir = pathlib.Path(os.environ["MARK_DIR"])
restart = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
rank, world = dist.get_rank(), dist.get_world_size()
t = torch.full((100,), float(rank + 1))
dist.all_reduce(t)
assert torch.all(t == world * (world + 1) / 2), t[:4]
obj = [{"from": 0, "restart": restart}] if rank == 0 else [None]
dist.broadcast_object_list(obj, src=0)
assert obj[0] == {"from": 0, "restart": restart}, obj
dist.barrier()

# The node's own address: the one that routes towards the peers (eth0 in the namespaces).
probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
probe.connect((os.environ.get("PEER_ADDR", "10.0.0.1"), 9))
own = probe.getsockname()[0]
probe.close()
(mark_dir / f"relay.{rank}.{restart}").write_text(
    f"{os.environ['MASTER_ADDR']} {os.environ['MASTER_PORT']} {own}\n")

if os.environ.get("CUT_ROUND") == str(restart):
    cut = mark_dir / f"cut.{restart}"
    deadline = time.monotonic() + 60
    while not cut.exists():
        if time.monotonic() > deadline:
            print(f"rank {rank}: no cut within 60 s", file=sys.stderr)
            sys.exit(4)
        time.sleep(0.05)  # polling a file the test creates; bounded by the deadline above
    store = dist.distributed_c10d._get_default_store()
    try:
        store.set(f"after-cut/{rank}", "x")
        store.get(f"after-cut/{rank}")
    except Exception as e:  # noqa: BLE001 - any failure of the store is this test's subject
        print(f"rank {rank}: store lost: {type(e).__name__}: {e}", file=sys.stderr, flush=True)
        sys.exit(3)
    dist.barrier()

print(f"rank {rank}/{world}: relayed ok at restart {restart}", flush=True)
dist.destroy_process_group()
