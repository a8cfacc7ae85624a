"""store_differential.py's sequence of every TCPStore operation, run by this interpreter's PyTorch
client through a node's store relay (docs/RELAY.md) and directly against cohortd: every result
must be identical. Then what only a relay shows: a waiter behind the relay woken by a direct
writer and the other way round; a node's waiters on one key sharing one parked wait in cohortd
(read from its metrics), one of them timing out while the others stay parked; and the token:
with cohortd requiring one, PyTorch's clients are refused alike on both paths, and served alike
from a network allowed to skip it.

Usage: store_relay_differential.py COHORTD_BINARY RELAY_HOST_BINARY"""
import os
import socket
import subprocess
import sys
import tempfile
import threading
import urllib.request

os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

import store_differential as sd  # noqa: E402  (the sequence, and outcome/woken)
from cohort_testlib import Cohortd, wait_until  # noqa: E402

COHORTD = sys.argv[1] if len(sys.argv) > 1 else "build/bin/cohortd"
RELAY_HOST = sys.argv[2] if len(sys.argv) > 2 else "build/bin/relay_host"
TIMEOUT = sd.TIMEOUT
SHORT = sd.SHORT


class Relay:
    """relay_host in front of the store at `port`; stopped on exit."""

    def __init__(self, port):
        self.proc = subprocess.Popen([RELAY_HOST, "127.0.0.1", str(port)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline().strip()
        if not line:
            raise RuntimeError("relay_host printed no address (exit %s)" % self.proc.wait())
        self.host, port = line.rsplit(":", 1)
        self.port = int(port)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.proc.stdin.close()
        self.proc.wait(timeout=10)


def client_factory(host, port):
    def connect(timeout=TIMEOUT):
        c = dist.TCPStore(host, port, None, False, TIMEOUT)
        c.set_timeout(timeout)
        return c
    return connect


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def metric(url, name):
    text = urllib.request.urlopen(url, timeout=5).read().decode()
    for line in text.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{}"):
            return float(line.split()[-1])
    raise AssertionError(f"{name} not in {url}")


def same_sequence():
    """The whole sequence directly and through a relay, each on a fresh cohortd."""
    with Cohortd(COHORTD) as d:
        direct = sd.sequence(client_factory("127.0.0.1", d.port))
    with Cohortd(COHORTD) as d, Relay(d.port) as r:
        relayed = sd.sequence(client_factory(r.host, r.port))
    failures = []
    for (step, a), (step2, b) in zip(direct, relayed):
        assert step == step2
        if a != b:
            failures.append(f"{step}: direct {a!r}, through the relay {b!r}")
        print(f"  {step:<45} {a}")
    return len(direct), failures


def relay_only_steps():
    failures = []

    def expect(what, got, want):
        print(f"  {what:<60} {got}")
        if got != want:
            failures.append(f"{what}: {got!r}, expected {want!r}")

    metrics_addr = f"127.0.0.1:{free_port()}"
    url = f"http://{metrics_addr}/metrics"
    with Cohortd(COHORTD, "--metrics-addr", metrics_addr) as d, Relay(d.port) as r:
        direct = client_factory("127.0.0.1", d.port)
        relayed = client_factory(r.host, r.port)
        writer_d, writer_r = direct(), relayed()
        expect("a waiter behind the relay, a direct writer",
               sd.woken(relayed, ["x1"], lambda: sd.outcome(lambda: writer_d.set("x1", "1"))),
               "wake None; waiter None")
        expect("a direct waiter, a writer behind the relay",
               sd.woken(direct, ["x2"], lambda: sd.outcome(lambda: writer_r.set("x2", "1"))),
               "wake None; waiter None")

        # Four waiters of the node on one key: one parked wait in cohortd.
        results = {}

        def wait_go(i):
            results[i] = sd.outcome(lambda: relayed().wait(["go"], TIMEOUT))

        threads = [threading.Thread(target=wait_go, args=(i,)) for i in range(4)]
        for t in threads:
            t.start()
        wait_until(lambda: metric(url, "cohortd_shared_waits") == 4, 10, "4 waits shared")
        expect("four waiters on one key: parked waits", metric(url, "cohortd_parked_waits"), 1.0)
        # A fifth times out (its CANCEL_WAIT, or with 1.13 its next request, leaves the share);
        # the others stay parked.
        late = relayed(SHORT)
        expect("a fifth waiter times out", sd.outcome(lambda: late.wait(["go"])),
               "raises DistStoreError" if sd.TORCH2 else "raises RuntimeError")
        if sd.TORCH2:  # a 1.13 client sends nothing after a timed-out WAIT until its next call
            wait_until(lambda: metric(url, "cohortd_shared_waits") == 4, 10, "the fifth gone")
        expect("the others still wait", sorted(results), [])
        writer_d.set("go", "now")
        for t in threads:
            t.join(TIMEOUT.total_seconds() + 5)
        expect("one set wakes all four", [results.get(i) for i in range(4)], ["None"] * 4)
        wait_until(lambda: metric(url, "cohortd_parked_waits") == 0, 10, "no wait parked")
    return failures


def token_steps():
    """PyTorch cannot authenticate: refused alike on both paths, unless its network may skip."""
    failures = []
    with tempfile.NamedTemporaryFile("w", suffix=".token") as f:
        f.write("relay-differential-token-0123456789\n")
        f.flush()
        os.chmod(f.name, 0o600)
        for allow in ([], ["--allow-unauthenticated-from", "127.0.0.0/8"]):
            with Cohortd(COHORTD, "--auth-token-file", f.name, *allow) as d, Relay(d.port) as r:
                paths = {}
                for name, (host, port) in {"direct": ("127.0.0.1", d.port),
                                           "relay": (r.host, r.port)}.items():
                    paths[name] = sd.outcome(
                        lambda: client_factory(host, port)(SHORT).add("t-" + name, 1))
                label = "token, " + ("127.0.0.0/8 allowed" if allow else "none allowed")
                print(f"  {label:<45} direct {paths['direct']}, relay {paths['relay']}")
                want = "1" if allow else None
                if paths["direct"] != paths["relay"]:
                    failures.append(f"{label}: {paths}")
                elif want is not None and paths["direct"] != want:
                    failures.append(f"{label}: {paths['direct']}, expected {want}")
                elif want is None and not paths["direct"].startswith("raises"):
                    failures.append(f"{label}: a client without the token was served")
    return failures


def main():
    print(f"PyTorch {torch.__version__}")
    steps, failures = same_sequence()
    failures += relay_only_steps()
    failures += token_steps()
    if failures:
        print("DIFFERENCES:\n  " + "\n  ".join(failures))
        return 1
    print(f"identical through the relay and directly: {steps} steps; relay-only checks pass")
    return 0


if __name__ == "__main__":
    sys.exit(main())
