#!/usr/bin/env python3
"""A real Prometheus (Debian's `prometheus`) scrapes cohortd's --metrics-addr endpoint; the test
asks Prometheus' HTTP API for the series and checks their values, and `promtool check metrics`
checks the endpoint's text. PyTorch's own TCPStore client makes the requests.

    prometheus_scrape.py <cohortd>        (run by ctest as store.prometheus_scrape)
"""
import os
import re
import shutil
import sys
import tempfile
from datetime import timedelta

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "common"))
from prometheus_harness import Prometheus, fail, promtool_check, scrape, start, stop, tools, wait_for  # noqa: E402


def main():
    cohortd = sys.argv[1]
    tools()
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

        promtool_check(scrape(url), "cohortd")
        print("promtool check metrics: accepted", flush=True)

        prom = Prometheus(tmp, {"cohortd": url[len("http://"):].split("/", 1)[0]}, procs)
        wait_for("Prometheus scrapes cohortd (up == 1)", lambda: prom.one('up{job="cohortd"}') == 1)
        expect = {
            "cohortd_keys": 26,  # k0..k24 and counter
            'cohortd_request_duration_seconds_count{op="SET"}': 25,
            'cohortd_request_duration_seconds_count{op="ADD"}': 7,
            'cohortd_request_duration_seconds_count{op="GET"}': 1,
            'sum(cohortd_connections{dialect!="unknown"})': 1,  # 1.13 adds a silent one
            "cohortd_log_replayed_records": 0,
        }
        for expr, want in expect.items():
            wait_for(f"{expr} == {want} in Prometheus", lambda: prom.one(expr) == want)
        stored = wait_for("cohortd_stored_bytes", lambda: prom.one("cohortd_stored_bytes"))
        if stored < 25 * 100:
            fail(f"cohortd_stored_bytes is {stored}, under the 2,500 bytes of values set")
        log_bytes = wait_for("cohortd_log_bytes", lambda: prom.one("cohortd_log_bytes"))
        if log_bytes < 25 * 100:
            fail(f"cohortd_log_bytes is {log_bytes}, under the 2,500 bytes of values logged")
        p99 = prom.one('histogram_quantile(0.99, sum by (le) '
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
