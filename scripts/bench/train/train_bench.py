#!/usr/bin/python3
"""train_bench: cohort's trainers against their PyTorch 1.13 twins, in the same run.

For each model (the Fashion-MNIST CNN, the GPT) and each worker count (default 1 and 2), runs
cohort (cohort-train-* under cohortrun) and PyTorch (torch_fmnist.py / torch_gpt.py, DDP on gloo,
processes started with the env:// variables) with the same per-worker batch, the same data and
seed, and OMP_NUM_THREADS = cores / workers for both. Throughput counts training steps only (no
data loading, no evaluation). Prints a table, the cohort/PyTorch ratios, and one JSON line.
Benchmarks are not tests: nothing here gates anything.
"""
import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TORCH_PY = "/usr/bin/python3"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def threads_for(workers):
    return max(1, (os.cpu_count() or 1) // workers)


def run_torch(script, workers, args, log):
    """Starts `workers` PyTorch processes with torchrun's environment; returns rank 0's JSON."""
    port = free_port()
    procs = []
    for r in range(workers):
        env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(r),
                   LOCAL_RANK=str(r), WORLD_SIZE=str(workers), LOCAL_WORLD_SIZE=str(workers),
                   OMP_NUM_THREADS=str(threads_for(workers)))
        out = open(log if r == 0 else os.devnull, "w")
        procs.append(subprocess.Popen([TORCH_PY, os.path.join(HERE, script), *args], env=env,
                                      stdout=out, stderr=subprocess.STDOUT))
    codes = [p.wait() for p in procs]
    if any(codes):
        raise SystemExit(f"PyTorch {script} x{workers} failed {codes}; see {log}")
    for line in reversed(open(log).read().splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    raise SystemExit(f"no JSON result in {log}")


def run_cohort(build, binary, workers, args, log, summary):
    cohortrun = os.path.join(build, "bin", "cohortrun")
    env = dict(os.environ, OMP_NUM_THREADS=str(threads_for(workers)))
    cmd = [cohortrun, "--standalone", "--nproc-per-node", str(workers), "--no-python",
           os.path.join(build, "bin", binary), *args, "--summary-json", summary]
    with open(log, "w") as out:
        rc = subprocess.run(cmd, env=env, stdout=out, stderr=subprocess.STDOUT).returncode
    if rc != 0:
        raise SystemExit(f"cohort {binary} x{workers} failed (exit {rc}); see {log}")
    return json.loads(open(summary).read())


def main():
    global TORCH_PY
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--build", required=True, help="cohort build directory (with bin/)")
    p.add_argument("--workers", default="1,2", help="worker counts, comma-separated")
    p.add_argument("--models", default="fmnist,gpt")
    p.add_argument("--fmnist-epochs", type=int, default=1)
    p.add_argument("--fmnist-steps", type=int, default=0,
                   help="stop the CNN after this many steps (0: whole epochs)")
    p.add_argument("--gpt-steps", type=int, default=20)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--repeat", type=int, default=1,
                   help="runs per configuration, alternating which goes first (medians reported)")
    p.add_argument("--quick", action="store_true",
                   help="fewer steps (CNN 150, GPT 6): throughput only, accuracy not comparable")
    p.add_argument("--keep", action="store_true", help="keep the logs (printed directory)")
    p.add_argument("--python", default=TORCH_PY,
                   help="the Python whose PyTorch runs the DDP twins (e.g. scripts/torch2.sh's 2.x)")
    a = p.parse_args()
    TORCH_PY = a.python
    if a.quick:
        a.fmnist_steps, a.gpt_steps = 150, 6
    workers = [int(w) for w in a.workers.split(",")]
    tmp = tempfile.mkdtemp(prefix="train_bench_")
    rows, results = [], {}

    common_fm = ["--seed", str(a.seed), "--epochs", str(a.fmnist_epochs)]
    if a.fmnist_steps:
        common_fm += ["--max-steps", str(a.fmnist_steps)]
    gpt_args = ["--max-steps", str(a.gpt_steps), "--warmup-steps", str(max(1, a.gpt_steps // 10)),
                "--seed", str(a.seed)]
    load_before = os.getloadavg()
    for model in a.models.split(","):
        for w in workers:
            key = f"{model}_{w}w"
            t0 = time.time()
            runs = {"cohort": [], "pytorch": []}
            for rep in range(a.repeat):
                # Alternate who goes first, so a change in the machine's load hits both alike.
                order = ["cohort", "pytorch"] if rep % 2 == 0 else ["pytorch", "cohort"]
                for impl in order:
                    tag = f"{tmp}/{key}_{impl}_{rep}"
                    if model == "fmnist" and impl == "cohort":
                        r = run_cohort(a.build, "cohort-train-fmnist", w,
                                       common_fm + ["--metrics", "-", "--log-every", "100"],
                                       tag + ".log", tag + ".json")
                    elif model == "fmnist":
                        r = run_torch("torch_fmnist.py", w, common_fm, tag + ".log")
                    elif impl == "cohort":
                        r = run_cohort(a.build, "cohort-train-gpt", w,
                                       gpt_args + ["--metrics", "-", "--eval-interval", "0"],
                                       tag + ".log", tag + ".json")
                    else:
                        r = run_torch("torch_gpt.py", w, gpt_args, tag + ".log")
                    runs[impl].append(r)
            unit, rate_key, qkey = (("samples/s", "samples_per_s", "test_accuracy")
                                    if model == "fmnist" else
                                    ("tokens/s", "tokens_per_s", "val_loss"))
            rate_c = statistics.median(r[rate_key] for r in runs["cohort"])
            rate_t = statistics.median(r[rate_key] for r in runs["pytorch"])
            qc, qt = runs["cohort"][0][qkey], runs["pytorch"][0][qkey]
            results[key] = {
                "workers": w, "threads_per_worker": threads_for(w), "unit": unit,
                "cohort": rate_c, "pytorch": rate_t, "ratio": rate_c / rate_t,
                "cohort_runs": [r[rate_key] for r in runs["cohort"]],
                "pytorch_runs": [r[rate_key] for r in runs["pytorch"]],
                qkey: {"cohort": qc, "pytorch": qt},
                "seconds": time.time() - t0}
            if model == "fmnist":  # both evaluate the weight average; this is the last weights'
                results[key]["raw_test_accuracy"] = {
                    impl: runs[impl][0].get("raw_test_accuracy") for impl in runs}
            rows.append((model, w, threads_for(w), unit, rate_c, rate_t, rate_c / rate_t, qkey, qc,
                         qt))
            print(f"  {key}: cohort {rate_c:,.0f} {unit}, pytorch {rate_t:,.0f} {unit}, "
                  f"ratio {rate_c / rate_t:.2f}x; {qkey} {qc:.4f} vs {qt:.4f}", file=sys.stderr,
                  flush=True)
    load_after = os.getloadavg()

    print(f"{'model':8} {'workers':>7} {'threads':>7} {'cohort':>12} {'pytorch':>12} {'ratio':>7}"
          f"  {'quality':>14} {'cohort':>8} {'pytorch':>8}")
    for m, w, th, unit, rc, rt, ratio, qn, qc, qt in rows:
        print(f"{m:8} {w:>7} {th:>7} {rc:>12,.0f} {rt:>12,.0f} {ratio:>6.2f}x  {qn:>14} "
              f"{qc:>8.4f} {qt:>8.4f}   ({unit})")
    if max(load_before[0], load_after[0]) > 0.5 + (os.cpu_count() or 1):
        print(f"note: the machine was busy (load average {load_before[0]:.1f} before, "
              f"{load_after[0]:.1f} after): throughput figures are noisy; use --repeat",
              file=sys.stderr)
    print(json.dumps({"bench": "train", "cpus": os.cpu_count(), "seed": a.seed,
                      "repeat": a.repeat, "load_avg": [load_before[0], load_after[0]],
                      "fmnist_epochs": a.fmnist_epochs, "fmnist_steps": a.fmnist_steps,
                      "gpt_steps": a.gpt_steps, "results": results}))
    if a.keep:
        print(f"logs in {tmp}", file=sys.stderr)
    else:
        subprocess.run(["rm", "-rf", tmp])


if __name__ == "__main__":
    main()
