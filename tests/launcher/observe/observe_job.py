#!/usr/bin/env python3
"""A running job seen from outside: cohortrun's metrics endpoint, its status records in the store
and its straggler check, on real jobs of 4 libcohort workers (runtime_test_worker steps) whose
store is a real cohortd; a real Prometheus scrapes the job, promtool checks the text.

1. Rank 2 computes 3x as long per step: it is named within the window, once, by log line, by
   metric and in node rank 0's status record (and by `cohortctl status`). The stand-in NVML
   (tests/launcher/gpu/fake_nvml) says rank 2's GPU is throttled for heat: the log line says so, and
   the GPU metrics are on the endpoint.
2. No rank is slow: nobody is ever named.

    observe_job.py <cohortrun> <cohortd> <runtime_test_worker> <cohortctl> <fake NVML dir>
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "common"))
from prometheus_harness import Prometheus, fail, promtool_check, scrape, start, stop, tools, wait_for  # noqa: E402

COHORTRUN, COHORTD, WORKER, COHORTCTL, FAKE_NVML_DIR = sys.argv[1:6]


def fake_nvml_env(tmp, hot_gpu):
    """Four GPUs for the four workers; `hot_gpu` throttled for heat at 91 C."""
    def gpu(i):
        hot = i == hot_gpu
        return {"uuid": f"GPU-0000000{i}-aaaa-bbbb-cccc-dddddddddddd", "name": "NVIDIA H200",
                "memory": {"used": 0, "total": 150754820096},
                "temperature": 91 if hot else 60, "throttle": 0x40 if hot else 0,
                "ecc": {"uncorrected": 0, "corrected": 0}, "processes": [],
                "remapped_rows": {"corrected": 0, "uncorrected": 0, "pending": False,
                                  "failure": False}}
    script = os.path.join(tmp, "nvml.json")
    with open(script, "w") as f:
        json.dump({"devices": [gpu(i) for i in range(4)]}, f)
    return {"LD_LIBRARY_PATH": FAKE_NVML_DIR, "COHORT_FAKE_NVML_SCRIPT": script,
            "CUDA_VISIBLE_DEVICES": "0,1,2,3"}


def read(path):
    with open(path) as f:
        return f.read()


def run_job(tmp, procs, store_port, run_id, slow_rank, steps, window_s, extra_env=None):
    """Starts the job; returns (process, log path, metrics URL)."""
    log_path = os.path.join(tmp, run_id + ".log")
    env = dict(os.environ, COHORT_TEST_STEPS=str(steps), COHORT_TEST_SLOW_RANK=str(slow_rank),
               **(extra_env or {}))
    with open(log_path, "w") as log:
        job = start([COHORTRUN, "--nnodes", "1", "--nproc-per-node", "4", "--rdzv-backend", "c10d",
                     "--rdzv-endpoint", f"127.0.0.1:{store_port}", "--rdzv-id", run_id,
                     "--metrics-addr", "127.0.0.1:0", "--straggler-window", str(window_s),
                     "--no-python", WORKER, "steps"], log, env=env, cwd=tmp)
    procs.append(job)
    url = wait_for(f"{run_id}: cohortrun logs its metrics address", lambda: re.search(
        r"serving metrics at (http://\S+)", read(log_path)))[1]
    return job, log_path, url


def series(text, name):
    """{labels text: value} of one family in an exposition text."""
    out = {}
    for line in text.splitlines():
        m = re.match(re.escape(name) + r"(\{[^}]*\})? (\S+)$", line)
        if m:
            out[m[1] or ""] = float(m[2])
    return out


def cohortctl(port, run_id):
    r = subprocess.run([COHORTCTL, "status", "--store", f"127.0.0.1:{port}", "--job", run_id,
                        "--json"], capture_output=True, text=True, timeout=30)
    if r.returncode != 0:
        raise RuntimeError(r.stdout + r.stderr)
    return json.loads(r.stdout)


def straggler_ranks(doc):
    """The ranks in every "stragglers" list anywhere in a JSON document."""
    found = set()
    if isinstance(doc, dict):
        for k, v in doc.items():
            if k == "stragglers" and isinstance(v, list):
                found |= {g.get("rank") for g in v if isinstance(g, dict)}
            else:
                found |= straggler_ranks(v)
    elif isinstance(doc, list):
        for v in doc:
            found |= straggler_ranks(v)
    return found


def main():
    tools()
    tmp = tempfile.mkdtemp(prefix="cohort-observe-")
    procs = []
    try:
        port_file = os.path.join(tmp, "port")
        with open(os.path.join(tmp, "cohortd.log"), "w") as log:
            procs.append(start([COHORTD, "--host", "127.0.0.1", "--port", "0", "--port-file",
                                port_file], log))
        port = int(wait_for("cohortd writes --port-file", lambda: read(port_file).strip()))

        # 1. A straggler: 60 ms against 20 ms of compute per step, for about 12 s.
        job, log_path, url = run_job(tmp, procs, port, "slowjob", 2, 200, 1.5,
                                     fake_nvml_env(tmp, hot_gpu=2))
        prom = Prometheus(tmp, {"cohortrun": url[len("http://"):].split("/", 1)[0]}, procs)
        text = wait_for("cohortrun's metrics name rank 2 a straggler", lambda: (
            lambda t: t if series(t, "cohortrun_straggler").get('{rank="2",host="%s"}' %
                                                                 os.uname().nodename) else None)(
            scrape(url)), timeout=40)
        promtool_check(text, "cohortrun")
        steps = series(text, "cohortrun_worker_step")
        if len(steps) != 4 or min(steps.values()) < 1:
            fail(f"cohortrun_worker_step should have 4 ranks past step 0: {steps}")
        ages = series(text, "cohortrun_worker_heartbeat_age_seconds")
        if len(ages) != 4 or max(ages.values()) > 5:
            fail(f"heartbeat ages of 4 ranks under 5 s expected: {ages}")
        rss = series(text, "cohortrun_worker_rss_bytes")
        if len(rss) != 4 or min(rss.values()) < 1 << 20:
            fail(f"every worker's RSS should be over 1 MiB: {rss}")
        if series(text, "cohortrun_stragglers").get("") != 1:
            fail("cohortrun_stragglers should be 1:\n" + text)
        temps = series(text, "cohort_gpu_temperature_celsius")
        if sorted(temps.values()) != [60, 60, 60, 91]:
            fail(f"the stand-in NVML's four GPUs should be on the endpoint: {temps}")
        wait_for("Prometheus sees rank 2's ratio above 2",
                 lambda: (prom.one('cohortrun_straggler_ratio{rank="2"}') or 0) > 2)
        wait_for("Prometheus sees 4 workers running",
                 lambda: prom.one('cohortrun_workers{state="running"}') == 4)
        status = wait_for("cohortctl status names rank 2 a straggler",
                          lambda: 2 in straggler_ranks(cohortctl(port, "slowjob")) and
                          cohortctl(port, "slowjob"))
        print("cohortctl status --json:", json.dumps(status)[:400], flush=True)
        stop(job)  # SIGTERM: the job has shown what it should
        log = read(log_path)
        named = re.findall(r"straggler: rank (\d+) on \S+ computes ([\d.]+)x.*", log)
        if [r for r, _ in named] != ["2"] or float(named[0][1]) < 2:
            fail("the log should name rank 2 once, at 2x or more:\n" + log)
        if "its GPU: thermal throttle at 91 C" not in log:
            fail("the straggler line should give its GPU's condition:\n" + log)

        # 2. Nobody slow: nobody named, at any scrape.
        job, log_path, url = run_job(tmp, procs, port, "evenjob", -1, 150, 1.5)
        while job.poll() is None:
            try:
                text = scrape(url)
            except OSError:
                break  # the job ended between two scrapes
            if series(text, "cohortrun_stragglers").get("", 0) != 0:
                fail("an even job had a straggler:\n" + text)
        if job.wait() != 0:
            fail("the even job failed:\n" + read(log_path))
        if "straggler:" in read(log_path):
            fail("an even job named a straggler:\n" + read(log_path))
        print("rank 2 named at", named[0][1] + "x; the even job named nobody", flush=True)
    finally:
        for p in reversed(procs):
            stop(p)
        shutil.rmtree(tmp, ignore_errors=True)
    print("PASS")


if __name__ == "__main__":
    main()
