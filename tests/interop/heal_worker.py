"""An ordinary gloo DDP worker that rebuilds its process group in every attempt, for the healing
tests and the healing-rate benchmark (scripts/bench/restart/heal_rate.py).

Each attempt (TORCHELASTIC_RESTART_COUNT) runs init_process_group("gloo") through env://, as a
user's script does, wraps a small model in DistributedDataParallel and takes SGD steps. While the
attempt is below --fail-until, rank --dying-rank exits with code 3 after its second step, so the
launcher must restart the group; the last attempt takes every step and exits 0.

Before its process group exists, every rank also looks at the store the launcher gave this
attempt (MASTER_ADDR:MASTER_PORT) as a plain TCPStore client: a key that any rank wrote there in
an earlier attempt must be absent (exit 9, "STALE ..."), and it writes its own for the next
attempt to look for; no rank builds its group before every rank has looked, so gloo's own
addresses, which PyTorch 2.x names the same in every attempt, are looked for too.
--no-probe leaves the store alone (the benchmark counts what heals on its own).

--backend nccl builds an NCCL group instead, each rank on the GPU of its LOCAL_RANK
(scripts/gpu_check.sh; needs a GPU).

Each attempt is bounded: --attempt-timeout seconds for the store and for gloo (default 30), so a
group that cannot form fails instead of hanging for gloo's default 30 minutes.

--attempt-log FILE appends one line per rank and attempt: "<attempt> <rank> formed|failed <seconds>",
where seconds is the time from the interpreter's start to the process group formed (or failed).
"""
import argparse
import datetime
import os
import sys
import time

START = time.monotonic()

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch.nn.parallel import DistributedDataParallel  # noqa: E402

STALE_EXIT = 9


def parse_args():
    p = argparse.ArgumentParser()
    p.add_argument("--fail-until", type=int, default=1,
                   help="attempts below this one lose --dying-rank after two steps")
    p.add_argument("--dying-rank", type=int, default=1)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--attempt-timeout", type=float, default=30.0)
    p.add_argument("--attempt-log", default="")
    p.add_argument("--backend", choices=["gloo", "nccl"], default="gloo")
    p.add_argument("--no-probe", action="store_true",
                   help="leave the store alone (the benchmark: count what heals on its own)")
    return p.parse_args()


def note(path, text):
    if not path:
        return
    with open(path, "a") as f:  # one short write: lines of concurrent ranks do not interleave
        f.write(text + "\n")


ABSENT = b"heal_worker: no such key"


def exists(store, key):
    """Store.check() without 1.13's lack of it: a COMPARE_SET of a missing key with an expected
    value writes nothing and answers the expected value."""
    return store.compare_set(key, ABSENT, ABSENT + b"!") != ABSENT


def probe_store(attempt, rank, world, timeout, backend):
    """Fails the attempt when a key of an earlier attempt is visible in this attempt's store."""
    store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]),
                          is_master=False, timeout=timeout)
    earlier = [f"heal/probe/{a}/{r}" for a in range(attempt) for r in range(world)]
    # gloo's full-mesh addresses of the default group, as PyTorch 2.x names them (1.13 adds
    # /worker/attempt_<n>/ in front, which does not find them).
    if backend == "gloo" and attempt > 0:
        earlier += [f"default_pg/0//cpu//0/{r}" for r in range(world)]
    seen = [k for k in earlier if exists(store, k)]
    if seen:
        print(f"STALE attempt {attempt} rank {rank} sees {seen}", flush=True)
        sys.exit(STALE_EXIT)
    store.set(f"heal/probe/{attempt}/{rank}", str(os.getpid()))
    # No rank builds its group (and writes this attempt's gloo keys) before every rank has looked.
    store.wait([f"heal/probe/{attempt}/{r}" for r in range(world)])
    return store


def main():
    args = parse_args()
    attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    timeout = datetime.timedelta(seconds=args.attempt_timeout)
    store = None if args.no_probe else probe_store(attempt, rank, world, timeout, args.backend)
    device = torch.device("cpu")
    if args.backend == "nccl":
        device = torch.device("cuda", int(os.environ["LOCAL_RANK"]))
        torch.cuda.set_device(device)
    try:
        dist.init_process_group(args.backend, timeout=timeout)
        model = DistributedDataParallel(torch.nn.Linear(16, 4).to(device),
                                        device_ids=[device.index] if device.type == "cuda" else None)
    except Exception as e:  # the group did not form: this is what a failed heal looks like
        note(args.attempt_log, f"{attempt} {rank} failed {time.monotonic() - START:.3f}")
        print(f"attempt {attempt} rank {rank}: no process group: {e}", file=sys.stderr, flush=True)
        sys.exit(1)
    note(args.attempt_log, f"{attempt} {rank} formed {time.monotonic() - START:.3f}")
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(args.steps):
        loss = model(torch.randn(8, 16, device=device)).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step == 1 and attempt < args.fail_until and rank == args.dying_rank:
            sys.exit(3)
    print(f"HEALED attempt {attempt} rank {rank}/{world}", flush=True)
    dist.destroy_process_group()
    del store


if __name__ == "__main__":
    main()
