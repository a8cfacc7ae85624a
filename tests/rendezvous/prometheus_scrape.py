#!/usr/bin/env python3
"""A real Prometheus (Debian's `prometheus`) scrapes cohortd's --metrics-addr endpoint; the test
asks Prometheus' HTTP API for the series and checks their values, and `promtool check metrics`
checks the endpoint's text. PyTorch's own TCPStore client makes the requests.

    prometheus_scrape.py <cohortd>        (run by ctest as store.prometheus_scrape)
"""
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from datetime import timedelta

DEADLINE_S = 60


def fail(msg):
    print("FAIL: " + msg, flush=True)
    sys.exit(1)


def wait_for(what, probe, timeout=DEADLINE_S):
    """Calls probe() until it returns something true; fails naming `what` at the deadline."""
    end = time.monotonic() + timeout
    last = None
    while time.monotonic() < end:
        try:
            last = probe()
            if last:
                return last
        except Exception as e:  # not up yet: retried until the deadline
            last = e
        time.sleep(0.05)
    fail(f"{what} within {timeout} s (last: {last!r})")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(cmd, log):
    return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


def stop(proc):
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def query(api, expr):
    url = api + "/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    with urllib.request.urlopen(url, timeout=5) as r:
        body = json.load(r)
    if body.get("status") != "success":
        raise RuntimeError(body)
    return {json.dumps(s["metric"], sort_keys=True): float(s["value"][1])
            for s in body["data"]["result"]}


def main():
    cohortd = sys.argv[1]
    prometheus, promtool = shutil.which("prometheus"), shutil.which("promtool")
    if not prometheus or not promtool:
        fail("prometheus and promtool are needed (Debian: apt-get install prometheus; "
             "scripts/setup.sh installs it)")
    import torch.distributed as dist

    tmp = tempfile.mkdtemp(prefix="cohort-prom-")
    procs = []
    try:
        log_path = os.path.join(tmp, "cohortd.log")
        port_file = os.path.join(tmp, "port")
        with open(log_path, "w") as log:
            procs.append(start([cohortd, "--host", "127.0.0.1", "--port", "0", "--port-file",
                                port_file, "--metrics-addr", "127.0.0.1:0", "--data-dir",
                                os.path.join(tmp, "data")], log))
        url = wait_for("cohortd logs its metrics address", lambda: re.search(
            r"serving metrics at (http://\S+)", open(log_path).read()))[1]
        port = int(wait_for("cohortd writes --port-file", lambda: open(port_file).read().strip()))

        store = dist.TCPStore("127.0.0.1", port, None, False, timedelta(seconds=30))
        for i in range(25):
            store.set(f"k{i}", "v" * 100)
        for i in range(7):
            store.add("counter", 1)
        store.get("k3")

        text = urllib.request.urlopen(url, timeout=5).read().decode()
        check = subprocess.run([promtool, "check", "metrics"], input=text, text=True,
                               capture_output=True)
        if check.returncode != 0:
            fail("promtool check metrics refused cohortd's text:\n" + check.stdout + check.stderr)
        print("promtool check metrics: accepted", flush=True)

        target = url[len("http://"):].split("/", 1)[0]
        config = os.path.join(tmp, "prometheus.yml")
        with open(config, "w") as f:
            f.write("global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
                    "scrape_configs:\n  - job_name: cohortd\n"
                    f"    static_configs:\n      - targets: ['{target}']\n")
        for attempt in range(3):  # the free port may be taken between our probe and its bind
            web = free_port()
            with open(os.path.join(tmp, "prometheus.log"), "w") as log:
                prom = start([prometheus, "--config.file", config, "--storage.tsdb.path",
                              os.path.join(tmp, f"tsdb{attempt}"), "--web.listen-address",
                              f"127.0.0.1:{web}"], log)
            procs.append(prom)
            api = f"http://127.0.0.1:{web}"
            ready = False
            end = time.monotonic() + DEADLINE_S
            while time.monotonic() < end and prom.poll() is None:
                try:
                    urllib.request.urlopen(api + "/-/ready", timeout=2)
                    ready = True
                    break
                except Exception:
                    time.sleep(0.1)
            if ready:
                break
            stop(prom)
        else:
            fail("prometheus did not start:\n" + open(os.path.join(tmp, "prometheus.log")).read())

        def one(expr):
            got = query(api, expr)
            return next(iter(got.values())) if len(got) == 1 else None

        wait_for("Prometheus scrapes cohortd (up == 1)", lambda: one('up{job="cohortd"}') == 1)
        expect = {
            "cohortd_keys": 26,  # k0..k24 and counter
            'cohortd_request_duration_seconds_count{op="SET"}': 25,
            'cohortd_request_duration_seconds_count{op="ADD"}': 7,
            'cohortd_request_duration_seconds_count{op="GET"}': 1,
            'sum(cohortd_connections{dialect!="unknown"})': 1,  # 1.13 adds a silent one
            "cohortd_log_replayed_records": 0,
        }
        for expr, want in expect.items():
            wait_for(f"{expr} == {want} in Prometheus", lambda: one(expr) == want)
        stored = wait_for("cohortd_stored_bytes", lambda: one("cohortd_stored_bytes"))
        if stored < 25 * 100:
            fail(f"cohortd_stored_bytes is {stored}, under the 2,500 bytes of values set")
        log_bytes = wait_for("cohortd_log_bytes", lambda: one("cohortd_log_bytes"))
        if log_bytes < 25 * 100:
            fail(f"cohortd_log_bytes is {log_bytes}, under the 2,500 bytes of values logged")
        p99 = one('histogram_quantile(0.99, sum by (le) '
                  '(cohortd_request_duration_seconds_bucket{op="SET"}))')
        if p99 is None or not 0 < p99 < 1:
            fail(f"the SET latency's p99 is {p99}, not between 0 and 1 s")
        print(f"Prometheus saw cohortd's series: keys 26, 25 SETs (p99 {p99 * 1e6:.0f} us), "
              f"{stored:.0f} bytes stored, log {log_bytes:.0f} bytes", flush=True)
    finally:
        for p in reversed(procs):
            stop(p)
        shutil.rmtree(tmp, ignore_errors=True)
    print("PASS")


if __name__ == "__main__":
    main()
