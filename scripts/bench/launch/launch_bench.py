#!/usr/bin/python3
"""launch_bench: cohortrun against torchrun at its defaults (PyTorch 1.13's, or the one --torchrun
names, e.g. ~/.cache/cohort/torch-2.15.0/bin/torchrun), same workers, same run. Prints a table and
one JSON line.

  1. launch + rendezvous + teardown of `--no-python /bin/true` with 1, 2 and 8 workers;
  2. crash-to-restarted: rank 0 exits 1 on attempt 0 (the others sleep); time from its exit to the
     last worker of attempt 1 starting (--max-restarts 1);
  3. crash-to-exit: the same crash with --max-restarts 0; time from the exit to the launcher
     having printed its summary and exited.
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time


def now_ns():
    return time.clock_gettime_ns(time.CLOCK_REALTIME)


TORCHRUN = "/usr/bin/torchrun"


def launcher_cmd(kind, cohortrun, nproc, extra, program):
    if kind == "cohortrun":
        return [cohortrun, "--nproc-per-node", str(nproc), *extra, "--no-python", *program]
    # torchrun 1.13 on Python 3.11 needs explicit -r/-t values (docs/TORCHRUN.md §3.1).
    underscored = ["--" + e[2:].replace("-", "_") if e.startswith("--") else e for e in extra]
    return [TORCHRUN, "--nproc_per_node", str(nproc), *underscored,
            "--no_python", "-r", "1", "-t", "1", *program]


def run_timed(cmd, env):
    t0 = time.perf_counter()
    p = subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - t0, p.returncode


def launch_teardown(kind, cohortrun, nproc, reps, env):
    times = []
    for _ in range(reps):
        t, rc = run_timed(launcher_cmd(kind, cohortrun, nproc, [], ["/bin/true"]), env)
        if rc != 0:
            raise SystemExit(f"{kind} with /bin/true failed (exit {rc})")
        times.append(t)
    return statistics.median(times)


def crash_run(kind, cohortrun, worker, nproc, max_restarts, env):
    d = tempfile.mkdtemp(prefix="launch_bench_")
    try:
        cmd = launcher_cmd(kind, cohortrun, nproc, ["--max-restarts", str(max_restarts)], [worker, d])
        t0 = time.perf_counter()
        p = subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        exited = now_ns()
        crash = int(open(os.path.join(d, "crash")).read())
        if max_restarts == 0:
            if p.returncode == 0:
                raise SystemExit(f"{kind}: expected a failure exit")
            return (exited - crash) / 1e9
        starts = [int(open(os.path.join(d, f"start.1.{r}")).read()) for r in range(nproc)]
        if p.returncode != 0:
            raise SystemExit(f"{kind}: restarted group failed (exit {p.returncode})")
        return (max(starts) - crash) / 1e9
    finally:
        shutil.rmtree(d, ignore_errors=True)


def fmt(s):
    return f"{s * 1000:9.1f} ms" if s < 10 else f"{s:9.2f} s "


def main():
    global TORCHRUN
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(here, "..", "..", "..", "build"))
    ap.add_argument("--reps", type=int, default=5, help="repetitions for cohortrun (median)")
    ap.add_argument("--torch-reps", type=int, default=2, help="repetitions for torchrun (median)")
    ap.add_argument("--workers", default="1,2,8")
    ap.add_argument("--no-torchrun", action="store_true")
    ap.add_argument("--torchrun", default=TORCHRUN, help="the torchrun to compare with")
    args = ap.parse_args()
    TORCHRUN = args.torchrun
    torch_version = subprocess.run(
        [os.path.join(os.path.dirname(os.path.realpath(TORCHRUN)), "python3"), "-c",
         "import torch; print(torch.__version__)"] if not TORCHRUN.startswith("/usr/bin") else
        ["/usr/bin/python3", "-c", "import torch; print(torch.__version__)"],
        capture_output=True, text=True).stdout.strip()
    bindir = os.path.join(os.path.abspath(args.build), "bin")
    cohortrun = os.path.join(bindir, "cohortrun")
    worker = os.path.join(bindir, "launch_bench_worker")
    env = dict(os.environ, OMP_NUM_THREADS="1", LOGLEVEL="ERROR")
    kinds = ["cohortrun"] + ([] if args.no_torchrun else ["torchrun"])
    reps = {"cohortrun": args.reps, "torchrun": args.torch_reps}

    results = {}
    rows = []
    for n in [int(x) for x in args.workers.split(",")]:
        for k in kinds:
            results[f"launch_{n}_{k}_s"] = launch_teardown(k, cohortrun, n, reps[k], env)
        rows.append((f"launch+teardown, {n} workers", f"launch_{n}"))
    for k in kinds:
        results[f"restart_{k}_s"] = statistics.median(
            crash_run(k, cohortrun, worker, 2, 1, env) for _ in range(reps[k]))
        results[f"crash_exit_{k}_s"] = statistics.median(
            crash_run(k, cohortrun, worker, 2, 0, env) for _ in range(reps[k]))
    rows.append(("crash -> restarted group up (2 workers)", "restart"))
    rows.append(("crash -> exit with summary (2 workers)", "crash_exit"))

    print(f"{'measure':42} {'cohortrun':>12} {'torchrun':>12} {'ratio':>9}")
    for label, key in rows:
        c = results[f"{key}_cohortrun_s"]
        t = results.get(f"{key}_torchrun_s")
        ratio = t / c if t else None
        if ratio:
            results[f"{key}_speedup"] = ratio
        print(f"{label:42} {fmt(c):>12} {fmt(t) if t else '-':>12} {f'{ratio:8.0f}x' if ratio else '-':>9}")
    print(json.dumps({"bench": "launch", "cpus": os.cpu_count(), "torch": torch_version, **results}))


if __name__ == "__main__":
    main()
