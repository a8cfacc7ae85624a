#!/usr/bin/python3
"""heal_rate: how often a restart heals an ordinary gloo DDP job, cohortrun beside torchrun, same
script (tests/interop/heal_worker.py), same run. Prints a table and one JSON line.

Each launcher runs the script once with --standalone --nproc-per-node N --max-restarts R. Every
attempt builds a gloo process group through env:// and a DistributedDataParallel model; in
attempts below R rank --dying-rank exits with code 3 after two steps, so the launcher restarts
the group R times. A restart heals when every rank of the next attempt formed its process group
(each attempt is bounded by --attempt-timeout, so a group that hangs counts as not healed
instead of stopping the run). A restart that did not heal is spent all the same, so every run
makes R restarts and the rate is healed / R.

  --launchers  which to run, of cohortrun2 (cohortrun, PyTorch 2.x workers), torchrun2,
               cohortrun1 (PyTorch 1.13 workers), torchrun1, and cohortrun2-exec,
               cohortrun1-exec (--no-fork-server: restarts exec'd, not forked from cohortrun's
               fork servers) (default: cohortrun2,torchrun2)
  --torch2     the PyTorch 2.x interpreter (torchrun2 is its torch.distributed.run)
"""
import argparse
import collections
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", "..", ".."))
WORKER = os.path.join(ROOT, "tests", "interop", "heal_worker.py")
TORCH1 = "/usr/bin/python3"
TORCH2 = os.path.expanduser("~/.cache/cohort/torch-2.15.0/bin/python")


def launcher_cmd(kind, cohortrun, python, nproc, restarts):
    # cohortrun runs the script as `cohortrun script.py` does, with PYTHON_EXEC (see measure):
    # restarts forked from its fork servers, or exec'd with -exec.
    if kind.startswith("cohortrun"):
        return [cohortrun, "--standalone", "--nproc-per-node", str(nproc), "--max-restarts",
                str(restarts)] + (["--no-fork-server"] if kind.endswith("-exec") else [])
    if kind == "torchrun1":
        # torchrun 1.13 on Python 3.11 needs explicit -r/-t values (docs/TORCHRUN.md §3.1).
        return [python, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node",
                str(nproc), "--max_restarts", str(restarts), "-r", "1", "-t", "1"]
    return [python, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(nproc),
            "--max-restarts", str(restarts)]


def torch_version(python):
    return subprocess.run([python, "-c", "import torch; print(torch.__version__.split('+')[0])"],
                          capture_output=True, text=True).stdout.strip()


def measure(kind, cohortrun, python, nproc, restarts, dying_rank, attempt_timeout):
    with tempfile.TemporaryDirectory(prefix="heal_rate_") as d:
        log = os.path.join(d, "attempts")
        cmd = launcher_cmd(kind, cohortrun, python, nproc, restarts) + [
            WORKER, "--no-probe", "--fail-until", str(restarts), "--dying-rank", str(dying_rank),
            "--attempt-timeout", str(attempt_timeout), "--attempt-log", log]
        # Every attempt is bounded; the launcher's own work between attempts is not, so allow for
        # it generously rather than cut a slow run short.
        limit = (restarts + 1) * (attempt_timeout + 60)
        t0 = time.monotonic()
        p = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                           env=dict(os.environ, LOGLEVEL="ERROR", PYTHON_EXEC=python),
                           timeout=limit)
        elapsed = time.monotonic() - t0
        formed = collections.defaultdict(int)
        if os.path.exists(log):
            for line in open(log):
                attempt, _rank, what, _secs = line.split()
                if what == "formed":
                    formed[int(attempt)] += 1
    healed = sum(1 for a in range(1, restarts + 1) if formed[a] == nproc)
    return {"healed": healed, "restarts": restarts, "rate": healed / restarts,
            "exit": p.returncode, "seconds": elapsed}


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--restarts", type=int, default=20)
    ap.add_argument("--nproc", type=int, default=2)
    ap.add_argument("--dying-rank", type=int, default=1)
    ap.add_argument("--attempt-timeout", type=float, default=30.0)
    ap.add_argument("--launchers", default="cohortrun2,torchrun2")
    ap.add_argument("--torch1", default=TORCH1)
    ap.add_argument("--torch2", default=TORCH2)
    args = ap.parse_args()
    cohortrun = os.path.join(os.path.abspath(args.build), "bin", "cohortrun")
    results = {}
    print(f"{'launcher':16} {'torch':>8} {'restarts':>9} {'healed':>7} {'rate':>6} {'exit':>5} "
          f"{'time':>8}", flush=True)
    for kind in args.launchers.split(","):
        python = args.torch1 if kind.removesuffix("-exec").endswith("1") else args.torch2
        r = measure(kind, cohortrun, python, args.nproc, args.restarts, args.dying_rank,
                    args.attempt_timeout)
        r["torch"] = torch_version(python)
        results[kind] = r
        print(f"{kind:16} {r['torch']:>8} {r['restarts']:9d} {r['healed']:7d} "
              f"{r['rate'] * 100:5.0f}% {r['exit']:5d} {r['seconds']:7.0f}s", flush=True)
    print(json.dumps({"bench": "heal_rate", "cpus": os.cpu_count(), "nproc": args.nproc,
                      "dying_rank": args.dying_rank, **results}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
