"""What the Prometheus tests share: processes in their own session (stopped by process group),
deadline-bounded waits, and a real Prometheus (Debian's `prometheus`) scraping given targets,
asked through its HTTP API. Standard library only."""
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request

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
        except Exception as e:  # not there yet: retried until the deadline
            last = e
        time.sleep(0.05)
    fail(f"{what} within {timeout} s (last: {last!r})")


def tools():
    prometheus, promtool = shutil.which("prometheus"), shutil.which("promtool")
    if not prometheus or not promtool:
        fail("prometheus and promtool are needed (Debian: apt-get install prometheus; "
             "scripts/setup.sh installs it)")
    return prometheus, promtool


def start(cmd, log, env=None, cwd=None):
    return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                            env=env, cwd=cwd)


def stop(proc, sig=signal.SIGTERM):
    if proc.poll() is None:
        os.killpg(proc.pid, sig)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def scrape(url):
    return urllib.request.urlopen(url, timeout=5).read().decode()


def promtool_check(text, what):
    _, promtool = tools()
    check = subprocess.run([promtool, "check", "metrics"], input=text, text=True,
                           capture_output=True)
    if check.returncode != 0:
        fail(f"promtool check metrics refused {what}'s text:\n" + check.stdout + check.stderr)


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Prometheus:
    """A real Prometheus scraping `targets` ({job: "host:port"}) every second."""

    def __init__(self, tmp, targets, procs):
        prometheus, _ = tools()
        config = os.path.join(tmp, "prometheus.yml")
        with open(config, "w") as f:
            f.write("global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\nscrape_configs:\n")
            for job, target in targets.items():
                f.write(f"  - job_name: {job}\n    static_configs:\n"
                        f"      - targets: ['{target}']\n")
        log_path = os.path.join(tmp, "prometheus.log")
        for attempt in range(3):  # the free port may be taken between our probe and its bind
            web = _free_port()
            with open(log_path, "w") as log:
                proc = start([prometheus, "--config.file", config, "--storage.tsdb.path",
                              os.path.join(tmp, f"tsdb{attempt}"), "--web.listen-address",
                              f"127.0.0.1:{web}"], log)
            procs.append(proc)
            self.api = f"http://127.0.0.1:{web}"
            end = time.monotonic() + DEADLINE_S
            while time.monotonic() < end and proc.poll() is None:
                try:
                    urllib.request.urlopen(self.api + "/-/ready", timeout=2)
                    return
                except Exception:
                    time.sleep(0.1)
            stop(proc)
        fail("prometheus did not start:\n" + open(log_path).read())

    def query(self, expr):
        """{labels as JSON: value} of an instant query."""
        url = self.api + "/api/v1/query?" + urllib.parse.urlencode({"query": expr})
        with urllib.request.urlopen(url, timeout=5) as r:
            body = json.load(r)
        if body.get("status") != "success":
            raise RuntimeError(body)
        return {json.dumps(s["metric"], sort_keys=True): float(s["value"][1])
                for s in body["data"]["result"]}

    def one(self, expr):
        """The value of a query with exactly one series, else None."""
        got = self.query(expr)
        return next(iter(got.values())) if len(got) == 1 else None
