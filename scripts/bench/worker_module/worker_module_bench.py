#!/usr/bin/python3
"""worker_module_bench: what cohortrun's worker module costs a training step (issue 26's goal:
under 1 % of a 10 ms step). Prints a table and one JSON line.

  1. hook cost: the CPU time per optimizer step the module's hooks add (hook_cost.py: one
     process, a tiny step, hooks on and off in alternating blocks, the least disturbed block of
     each), per PyTorch generation;
  2. flight recorder cost: the CPU time one collective gains from PyTorch's Flight Recorder, which
     the module turns on for 2.x workers (fr_cost.py: one gloo rank, runs with
     TORCH_FR_BUFFER_SIZE=200 and =0 alternating, the least disturbed of each); a DDP step of
     step_worker.py's model issues one gradient allreduce (one bucket);
  3. steps per second of an unchanged 2-rank DDP (gloo) script (step_worker.py, about 10 ms a
     step) under cohortrun with the module (its default), cohortrun --no-cohort-module and
     torchrun (no module), alternating runs; the ratios to torchrun's.

Timings on a shared machine are noisy: the end-to-end ratios are within a few percent of 1 when
the module costs nothing measurable; the hook cost is the precise figure.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
GENERATIONS = {"1.13": "/usr/bin/python3",
               "2.x": os.path.expanduser("~/.cache/cohort/torch-2.15.0/bin/python")}


def run_json(cmd, env):
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    for line in reversed(p.stdout.splitlines()):
        if "{" in line:  # torchrun -t prefixes it with the rank's name
            return json.loads(line[line.index("{"):])
    raise SystemExit("%s failed (exit %d): %s" % (" ".join(cmd), p.returncode, p.stderr[-2000:]))


def launcher(kind, cohortrun, python):
    script = os.path.join(HERE, "step_worker.py")
    if kind == "torchrun":
        torchrun = os.path.join(os.path.dirname(python), "torchrun")
        if not os.path.exists(torchrun):
            torchrun = "/usr/bin/torchrun"
        # torchrun 1.13 on Python 3.11 needs explicit redirects and tee, other than 0
        # (docs/TORCHRUN.md §3.1): stdout to a file and copied to the console, as "[default0]:...".
        return [torchrun, "--nproc_per_node", "2", "--rdzv_backend", "c10d",
                "--rdzv_endpoint", "127.0.0.1:0", "--standalone", "-r", "1", "-t", "1", script]
    flags = ["--no-cohort-module"] if kind == "cohortrun --no-cohort-module" else []
    return [cohortrun, "--nproc-per-node", "2", *flags, script]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--steps", type=int, default=300)
    args = ap.parse_args()
    cohortrun = os.path.join(args.build, "bin", "cohortrun")
    result = {}
    rows = []
    for gen, python in GENERATIONS.items():
        if not os.path.exists(python):
            continue
        hook = run_json([python, os.path.join(HERE, "hook_cost.py")], dict(os.environ))
        fr_cost_us = None
        if not hook["torch"].startswith("1."):  # 1.13 has no Flight Recorder
            on, off = [], []
            for _ in range(args.reps):
                for size, into in (("200", on), ("0", off)):
                    r = run_json([python, os.path.join(HERE, "fr_cost.py")],
                                 dict(os.environ, TORCH_FR_BUFFER_SIZE=size))
                    if (r["fr_entries"] > 0) != (size != "0"):
                        raise SystemExit("fr_cost.py: the Flight Recorder was %s with %s entries"
                                         % ("on" if r["fr_entries"] else "off", size))
                    into.append(r["collective_s"])
            fr_cost_us = 1e6 * (min(on) - min(off))
        env = dict(os.environ, PYTHON_EXEC=python, OMP_NUM_THREADS="1", STEPS=str(args.steps))
        kinds = ["cohortrun", "cohortrun --no-cohort-module", "torchrun"]
        sps = {k: [] for k in kinds}
        for _ in range(args.reps):
            for k in kinds:
                r = run_json(launcher(k, cohortrun, python), env)
                if r["module"] != (k == "cohortrun"):
                    raise SystemExit("%s: the module was %s" % (k, "loaded" if r["module"]
                                                                else "not loaded"))
                sps[k].append(r["steps_per_s"])
        med = {k: statistics.median(v) for k, v in sps.items()}
        per_step_us = hook["cost_us"] + (fr_cost_us or 0.0)
        result[gen] = {"torch": hook["torch"], "hook_cost_us": hook["cost_us"],
                       "hook_cost_of_10ms_step_pct": hook["cost_us"] / 100.0,
                       "flight_recorder_cost_us_per_collective": fr_cost_us,
                       "module_cost_of_10ms_step_pct": per_step_us / 100.0,
                       "steps_per_s": med,
                       "ratio_to_torchrun": {k: med[k] / med["torchrun"] for k in kinds}}
        rows.append((gen, hook, fr_cost_us, med))
    print("%-6s %-14s %-16s %-12s | %-30s %8s %8s" % (
        "torch", "hook cost/step", "recorder/coll.", "of 10 ms", "launcher", "steps/s", "ratio"))
    for gen, hook, fr_us, med in rows:
        first = True
        for k, v in med.items():
            cost = hook["cost_us"] + (fr_us or 0.0)
            print("%-6s %-14s %-16s %-12s | %-30s %8.1f %8.3f" % (
                gen if first else "", ("%.2f us" % hook["cost_us"]) if first else "",
                ("-" if fr_us is None else "%.2f us" % fr_us) if first else "",
                ("%.3f %%" % (cost / 100.0)) if first else "", k, v, v / med["torchrun"]))
            first = False
    print(json.dumps({"bench": "worker_module", **result}))


if __name__ == "__main__":
    sys.exit(main())
