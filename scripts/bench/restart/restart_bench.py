#!/usr/bin/python3
"""restart_bench: how fast a crashed PyTorch job is back, under cohortrun and under torchrun.

The job: ddp_crash.py, a gloo DistributedDataParallel loop on 2 workers, --standalone,
--max-restarts 1; rank 1 exits with code 3 on attempt 0. The figure: from that exit (the worker
stamps the time just before os._exit) to every rank of the restarted group having finished its
first DDP step (forward, backward and its gradient allreduce, optimizer step), median of --reps
runs that healed. Launchers, in the same run:

  cohortrun             its default: restarted workers forked from its per-rank fork servers
  cohortrun-exec        cohortrun --no-fork-server: restarted workers exec'd, as torchrun does
  torchrun              torchrun 2.x (--torchrun), same script, same PyTorch
  torchrun-1.13         with --torch1: python3 -m torch.distributed.run of PyTorch 1.13, same
                        script on 1.13 (another PyTorch: its ratio is indicative only)

cohortrun's fork servers import torch while attempt 0 runs; the benchmark has rank 1 crash once
cohortrun has logged that they are ready (a crash before that waits for them), so the figure is a
restart's, not the start-up's. Beside it, launch -> every rank's first step of attempt 0 (the
start-up, which the servers' imports share the machine with). A run is bounded (--run-timeout);
one that does not heal is counted and not timed; the launchers take turns, one run each, so a
machine busy with something else weighs on each alike. Prints a table (the median of each phase of
the restarted workers, too) and one JSON line. Timings are of this machine at this moment:
compare within one run.
"""
import argparse
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "ddp_crash.py")
TORCH2_PYTHON = os.path.expanduser("~/.cache/cohort/torch-2.15.0/bin/python")
TORCH1_PYTHON = "/usr/bin/python3"
NPROC = 2


def command(kind, cohortrun, torchrun, out, go):
    worker = [WORKER, out, "--crash-when", go]
    common = ["--standalone", "--nproc-per-node", str(NPROC), "--max-restarts", "1"]
    if kind == "cohortrun":
        return [cohortrun, *common, *worker]
    if kind == "cohortrun-exec":
        return [cohortrun, "--no-fork-server", *common, *worker]
    if kind == "torchrun":
        return [torchrun, *common, *worker]
    # torchrun 1.13 on Python 3.11 needs explicit -r/-t values (docs/TORCHRUN.md §3.1).
    return [TORCH1_PYTHON, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node",
            str(NPROC), "--max_restarts", "1", "-r", "1", "-t", "1", *worker]


def python_of(kind, torchrun):
    if kind == "torchrun-1.13":
        return TORCH1_PYTHON
    return os.path.join(os.path.dirname(torchrun), "python")


def read_ns(path):
    with open(path) as f:
        return int(f.read())


def one_run(kind, cohortrun, torchrun, timeout):
    """(figure in s, phases, launch -> attempt 0's first step in s) of a run that healed, or
    None."""
    out = tempfile.mkdtemp(prefix="restart_bench_")
    go = os.path.join(out, "go")
    env = dict(os.environ, PYTHON_EXEC=python_of(kind, torchrun), LOGLEVEL="WARNING",
               COHORT_LOG_LEVEL="info", OMP_NUM_THREADS="1")
    env.pop("COHORT_FORK_SERVER", None)
    forking = kind == "cohortrun"
    if not forking:
        open(go, "w").close()
    launched = time.clock_gettime_ns(time.CLOCK_REALTIME)
    p = subprocess.Popen(command(kind, cohortrun, torchrun, out, go), env=env,
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                         start_new_session=True)
    ready = set()

    def watch_stderr():
        # cohortrun: "fork server of local rank N ready ..." once per rank, or why it cannot
        # serve (then that rank's restart execs, and the run says so in its figure).
        for line in p.stderr:
            m = re.search(r"fork server of local rank (\d+) (ready|cannot|did not finish)", line)
            if m:
                ready.add(int(m.group(1)))
                if len(ready) == NPROC:
                    open(go, "w").close()

    reader = threading.Thread(target=watch_stderr, daemon=True)
    reader.start()
    try:
        p.wait(timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()
    reader.join(5)
    try:
        crash = read_ns(os.path.join(out, "crash"))
        first_start = (max(read_ns(os.path.join(out, "first_0_%d" % r)) for r in range(NPROC))
                       - launched) / 1e9
        firsts = [read_ns(os.path.join(out, "first_1_%d" % r)) for r in range(NPROC)]
        phases = []
        for r in range(NPROC):
            with open(os.path.join(out, "phases_1_%d" % r)) as f:
                t0, imported, pg, step = map(int, f.read().split())
            phases.append(((t0 - crash) / 1e9, (imported - t0) / 1e9, (pg - imported) / 1e9,
                           (step - pg) / 1e9))
        return (max(firsts) - crash) / 1e9, phases, first_start
    except (OSError, ValueError):
        return None
    finally:
        shutil.rmtree(out, ignore_errors=True)


def measure(kinds, args):
    """Every launcher's runs, interleaved (one run of each in turn), so that what else the machine
    does at the time weighs on each alike."""
    runs = {k: {"figures": [], "phases": [], "starts": [], "tries": 0} for k in kinds}

    def wanted(k):
        return len(runs[k]["figures"]) < args.reps and runs[k]["tries"] < args.max_tries

    while any(wanted(k) for k in kinds):
        for kind in filter(wanted, kinds):
            m = runs[kind]
            m["tries"] += 1
            r = one_run(kind, args.cohortrun, args.torchrun, args.run_timeout)
            if r is not None:
                m["figures"].append(r[0])
                m["phases"].extend(r[1])
                m["starts"].append(r[2])
            if args.verbose:
                print("  %s run %d: %s" % (kind, m["tries"], "%.3f s" % r[0] if r else
                                           "did not heal"), file=sys.stderr, flush=True)
    return {k: summary(runs[k]) for k in kinds}


def summary(m):
    figures = m["figures"]
    if not figures:
        return {"healed": 0, "tries": m["tries"]}
    med = [statistics.median(p[i] for p in m["phases"]) for i in range(4)]
    return {"median_s": statistics.median(figures), "healed": len(figures), "tries": m["tries"],
            "min_s": min(figures), "max_s": max(figures),
            "first_attempt_s": statistics.median(m["starts"]),
            "phases_s": dict(zip(("start", "import", "process_group", "ddp_step"), med))}


def fmt(s):
    return "%8.0f ms" % (s * 1000) if s < 10 else "%8.2f s " % s


def main():
    root = os.path.normpath(os.path.join(HERE, "..", "..", ".."))
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cohortrun", default=os.path.join(root, "build", "bin", "cohortrun"))
    ap.add_argument("--torchrun", default=os.path.join(os.path.dirname(TORCH2_PYTHON), "torchrun"))
    ap.add_argument("--reps", type=int, default=10, help="healed runs per launcher (median)")
    ap.add_argument("--max-tries", type=int, default=20, help="runs per launcher at most")
    ap.add_argument("--run-timeout", type=float, default=120)
    ap.add_argument("--torch1", action="store_true", help="also torchrun of PyTorch 1.13")
    ap.add_argument("--only", help="comma-separated launchers to run")
    ap.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args()
    kinds = ["cohortrun", "cohortrun-exec", "torchrun"] + (["torchrun-1.13"] if args.torch1 else [])
    if args.only:
        kinds = [k for k in kinds if k in args.only.split(",")]
    version = subprocess.run([python_of("torchrun", args.torchrun), "-c",
                              "import torch; print(torch.__version__)"],
                             capture_output=True, text=True).stdout.strip()
    results = measure(kinds, args)
    base = results.get("torchrun", {}).get("median_s")
    print("%-16s %11s %8s %9s %11s   %s" % ("launcher", "crash->step", "healed", "vs torch",
                                              "launch->step", "restart: start / import / pg / "
                                              "ddp step (medians)"))
    for k in kinds:
        r = results[k]
        if "median_s" not in r:
            print("%-16s %11s %4d/%-3d" % (k, "-", r["healed"], r["tries"]))
            continue
        if base and k != "torchrun":
            r["speedup_vs_torchrun"] = base / r["median_s"]
        ratio = "%8.1fx" % r["speedup_vs_torchrun"] if "speedup_vs_torchrun" in r else "-"
        ph = r["phases_s"]
        print("%-16s %11s %4d/%-3d %9s %11s   %s" % (
            k, fmt(r["median_s"]), r["healed"], r["tries"], ratio, fmt(r["first_attempt_s"]),
            " / ".join(fmt(ph[x]).strip()
                       for x in ("start", "import", "process_group", "ddp_step"))))
    print(json.dumps({"bench": "restart", "cpus": os.cpu_count(), "torch": version,
                      "workers": NPROC, "results": results}))


if __name__ == "__main__":
    main()
