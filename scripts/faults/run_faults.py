#!/usr/bin/python3
"""cohort's fault-injection suite: real processes, real faults, one row per scenario.

For every scenario it records how long until cohort noticed, what the user saw, whether the job
recovered, and whether anything was left behind (processes, shared memory, listening ports). Each
scenario states what it must show (its expectation); the run fails when any row misses it.
The table goes to OUT (default: BUILD/faults/RELIABILITY.md); --update-docs also writes
docs/RELIABILITY.md; --merge-docs puts the rows of this run (--only's) into docs/RELIABILITY.md in
the suite's order, replacing those of the same scenarios and keeping the others as they are.

Usage: run_faults.py [--build BUILD] [--only substring] [--update-docs | --merge-docs]
Network scenarios need root (network namespaces); they are skipped, and say so, otherwise."""
import argparse
import glob
import os
import random
import re
import selectors
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import types

from fault_kit import (SCENARIOS, authenticated, current_dialect, polite_set_get, raise_nofile,
                       recv_exact, row, scenario, start_cohortd, status_kib, wire_bytes)

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
class Ctx:
    def __init__(self, build):
        self.bin = os.path.join(build, "bin")
        self.tag = None
        self.dir = None

    def path(self, name):
        return os.path.join(self.bin, name)

    def env(self, **kw):
        env = dict(os.environ, COHORT_FAULT_TAG=self.tag, OMP_NUM_THREADS="1",
                   PYTHON_EXEC="/usr/bin/python3")
        env.update({k: str(v) for k, v in kw.items()})
        return env

    def run(self, argv, timeout=120, env=None, **kw):
        t0 = time.monotonic()
        p = subprocess.run(argv, env=env or self.env(), capture_output=True, text=True,
                           timeout=timeout, **kw)
        return p, time.monotonic() - t0

    def cohortrun(self, flags, worker_args, timeout=120, env=None):
        argv = [self.path("cohortrun"), *flags, "--no-python", self.path("cohort_test_worker"),
                "--out", self.dir, *worker_args]
        return self.run(argv, timeout=timeout, env=env)

    # ---- evidence ------------------------------------------------------------------------------
    def mtime(self, rank, attempt, what="pid"):
        f = os.path.join(self.dir, f"{rank}.attempt{attempt}.{what}")
        return os.stat(f).st_mtime if os.path.exists(f) else None

    def leftovers(self):
        """Processes still alive carrying this scenario's tag, and shared memory of its runs."""
        found = []
        for d in glob.glob("/proc/[0-9]*"):
            try:
                with open(d + "/environ", "rb") as f:
                    if f"COHORT_FAULT_TAG={self.tag}".encode() in f.read():
                        with open(d + "/stat") as s:
                            state = s.read().rsplit(")", 1)[1].split()[0]
                        if state not in ("Z", "X"):
                            found.append("pid " + d.rsplit("/", 1)[1])
            except OSError:
                pass
        found += [os.path.basename(p) for p in glob.glob(f"/dev/shm/*{self.tag}*")]
        return found

    def wait_clean(self, timeout=3.0):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.leftovers():
                return "nothing"
            time.sleep(0.05)
        return ", ".join(self.leftovers())


def summary_line(text, *patterns):
    """The first line of `text` matching any pattern, trimmed (what the user saw)."""
    for line in text.splitlines():
        for p in patterns:
            if re.search(p, line):
                return line.strip()[:110]
    return text.strip().splitlines()[-1][:110] if text.strip() else "(nothing)"


def free_port():
    """A free port drawn below the kernel's ephemeral range, so that no port-0 server or outgoing
    connection of a test running beside this suite takes it before we use it (see
    tests/common/free_port.h)."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            below = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        below = 32768
    for _ in range(200 if below - 10000 >= 1000 else 0):
        port = random.randrange(10000, below)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
                return port
            except OSError:
                continue
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def port_open(port):
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
        return True
    except OSError:
        return False


# ---- worker failures ------------------------------------------------------------------------------

def crash_and_recover(ctx, fault_args, expect_in_summary):
    p, _ = ctx.cohortrun(["--nproc-per-node", "2", "--max-restarts", "1", "--rdzv-id", ctx.tag],
                         [*fault_args, "--on-rank", "1", "--until-attempt", "1", "--sleep", "1"])
    t_fault, t_back = ctx.mtime(1, 0), ctx.mtime(1, 1, "env")
    detected = (t_back - t_fault) if (t_fault and t_back) else None
    saw = summary_line(p.stderr, expect_in_summary)
    ok = p.returncode == 0 and t_back is not None and re.search(expect_in_summary, p.stderr)
    left = ctx.wait_clean()
    return row(detected, saw, "yes" if p.returncode == 0 else "no", left, bool(ok) and left == "nothing",
               "restarted group must finish; the log names the fault")


@scenario("worker exits with code 3", "worker")
def worker_exit(ctx):
    return crash_and_recover(ctx, ["--exit-code", "3"], r"exited with code 3")


@scenario("worker dies of SIGSEGV", "worker")
def worker_segv(ctx):
    return crash_and_recover(ctx, ["--signal", "SEGV"], r"SIGSEGV")


@scenario("worker dies of SIGABRT", "worker")
def worker_abrt(ctx):
    return crash_and_recover(ctx, ["--signal", "ABRT"], r"SIGABRT")


@scenario("worker killed with SIGKILL", "worker")
def worker_kill(ctx):
    return crash_and_recover(ctx, ["--signal", "KILL"], r"SIGKILL")


@scenario("worker hangs (stops heartbeating)", "worker")
def worker_hang(ctx):
    p, _ = ctx.cohortrun(["--nproc-per-node", "2", "--max-restarts", "1", "--worker-hang-timeout", "1",
                          "--term-timeout", "1", "--rdzv-id", ctx.tag],
                         ["--beat", "3", "--hang", "--on-rank", "1", "--until-attempt", "1"])
    t_start, t_back = ctx.mtime(1, 0), ctx.mtime(1, 1, "env")
    # The last beat is about 0.36 s after the start (3 beats, 120 ms apart).
    detected = (t_back - t_start - 0.36) if (t_start and t_back) else None
    ok = p.returncode == 0 and "hung: no heartbeat for 1 s" in p.stderr
    left = ctx.wait_clean()
    return row(detected, summary_line(p.stderr, "hung"), "yes" if p.returncode == 0 else "no", left,
               ok and left == "nothing", "--worker-hang-timeout 1: noticed, group restarted")


@scenario("allocation failure under ulimit -v", "worker")
def worker_oom(ctx):
    if "asan" in os.environ.get("COHORT_SANITIZER", ""):
        # ASan reserves terabytes of shadow address space at start-up, which ulimit -v forbids.
        return row(None, "not run under AddressSanitizer (its shadow memory needs more than "
                   "ulimit -v allows)", "n/a", "nothing", True, "")
    argv = ["bash", "-c", 'ulimit -v 400000; exec "$@"', "bash", ctx.path("cohortrun"),
            "--nproc-per-node", "1", "--rdzv-id", ctx.tag, "--no-python",
            ctx.path("cohort_test_worker"), "--out", ctx.dir, "--alloc-mb", "1024"]
    p, took = ctx.run(argv)
    ok = p.returncode == 1 and "std::bad_alloc" in p.stderr and "SIGABRT" in p.stderr
    left = ctx.wait_clean()
    return row(took, summary_line(p.stderr, "bad_alloc"), "no (deterministic)", left,
               ok and left == "nothing", "exit 1; the summary shows std::bad_alloc and SIGABRT")


@scenario("failure with no restarts left", "worker")
def worker_exhausted(ctx):
    p, took = ctx.cohortrun(["--nproc-per-node", "2", "--max-restarts", "2", "--rdzv-id", ctx.tag],
                            ["--exit-code", "7", "--on-rank", "0", "--grandchild", "--sleep", "30"])
    attempts = len(glob.glob(os.path.join(ctx.dir, "0.attempt*.env")))
    ok = p.returncode == 1 and attempts == 3 and "Root Cause" in p.stderr
    left = ctx.wait_clean()
    return row(took, summary_line(p.stderr, "exitcode"), "no (3 attempts)", left,
               ok and left == "nothing", "exactly 1 + --max-restarts attempts, then the root cause")


# ---- launcher and store -----------------------------------------------------------------------------

@scenario("cohortrun killed with SIGKILL", "launcher")
def launcher_kill(ctx):
    proc = subprocess.Popen([ctx.path("cohortrun"), "--nproc-per-node", "2", "--rdzv-id", ctx.tag,
                             "--no-python", ctx.path("cohort_test_worker"), "--out", ctx.dir,
                             "--grandchild", "--sleep", "60"], env=ctx.env(),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and not (ctx.mtime(0, 0) and ctx.mtime(1, 0)):
        time.sleep(0.02)
    time.sleep(0.2)
    before = len(ctx.leftovers())
    proc.kill()
    proc.wait()
    t0 = time.monotonic()
    left = ctx.wait_clean(timeout=1.0)
    gone = time.monotonic() - t0
    ok = before >= 4 and left == "nothing"
    return row(gone, f"{before} worker processes (2 workers, 2 children) gone", "n/a", left, ok,
               "every worker and its children gone within 1 s")


def persistent_cohortd(ctx, port):
    """A cohortd on 127.0.0.1:port keeping its store in the scenario's directory, once listening."""
    s = subprocess.Popen([ctx.path("cohortd"), "--host", "127.0.0.1", "--port", str(port),
                          "--data-dir", os.path.join(ctx.dir, "store")], stdout=subprocess.PIPE,
                         stderr=subprocess.DEVNULL, text=True, env=ctx.env())
    s.stdout.readline()
    return s


@scenario("cohortd killed (SIGKILL) during a job, restarted", "store")
def store_kill(ctx):
    port = free_port()
    store = persistent_cohortd(ctx, port)
    conf = "last_call_timeout=0.5,keep_alive_interval=1,keep_alive_max_attempt=5,is_host=0"
    agents = [subprocess.Popen([ctx.path("cohortrun"), "--nnodes", "2", "--nproc-per-node", "1",
                                "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}",
                                "--local-addr", "127.0.0.1",  # both nodes on this machine
                                "--rdzv-id", ctx.tag, "--rdzv-conf", conf, "--no-python",
                                ctx.path("cohort_test_worker"), "--out", ctx.dir, "--sleep", "3"],
                               env=ctx.env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                               text=True) for _ in range(2)]
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not (ctx.mtime(0, 0) and ctx.mtime(1, 0)):
        time.sleep(0.02)
    store.kill()
    store.wait()
    t0 = time.monotonic()
    store = persistent_cohortd(ctx, port)
    rcs = [a.wait(timeout=60) for a in agents]
    errs = "".join(a.stderr.read() for a in agents)
    store.send_signal(signal.SIGTERM)
    store.wait()
    took = time.monotonic() - t0
    restarted = ctx.mtime(0, 1, "env") is not None
    ok = rcs == [0, 0] and not restarted
    left = ctx.wait_clean()
    return row(took, "workers kept running; agents reconnected (keys from --data-dir)",
               "yes, no restart" if ok else f"no ({rcs})", left, ok and left == "nothing",
               "both agents exit 0 without restarting the workers" + ("" if ok else ": " + errs[-300:]))


FAST_CONF = "last_call_timeout=0.5,keep_alive_interval=0.5,keep_alive_max_attempt=3"


def elastic_agent(ctx, port, nnodes, run_id, out, sleep, extra=(), conf=FAST_CONF):
    return subprocess.Popen([ctx.path("cohortrun"), "--nnodes", nnodes, "--nproc-per-node", "1",
                             "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}",
                             "--local-addr", "127.0.0.1", "--rdzv-id", run_id, "--rdzv-conf", conf,
                             *extra, "--no-python", ctx.path("cohort_test_worker"), "--out", out,
                             "--sleep", str(sleep)],
                            env=ctx.env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True)


def wait_until(cond, timeout=30):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not cond():
        time.sleep(0.02)
    return cond()


@scenario("cohortd down for 10 s during a job, then restarted", "store")
def store_outage(ctx):
    port = free_port()
    store = persistent_cohortd(ctx, port)
    # Keep-alives that notice a silent peer in 1.5 s; the outage is far longer.
    agents = [elastic_agent(ctx, port, "2", ctx.tag, ctx.dir, 14, ["--store-loss-grace", "30"],
                            FAST_CONF + ",is_host=0") for _ in range(2)]
    wait_until(lambda: ctx.mtime(0, 0) and ctx.mtime(1, 0))
    store.kill()
    store.wait()
    time.sleep(10)  # the outage
    store = persistent_cohortd(ctx, port)
    rcs = [a.wait(timeout=60) for a in agents]
    errs = "".join(a.stderr.read() for a in agents)
    store.send_signal(signal.SIGTERM)
    store.wait()
    restarted = ctx.mtime(0, 1, "env") is not None
    ok = rcs == [0, 0] and not restarted
    left = ctx.wait_clean()
    return row(None, summary_line(errs, "workers keep running"),
               "yes, no restart" if ok else f"no ({rcs})", left, ok and left == "nothing",
               "--store-loss-grace 30: both agents exit 0 without restarting the workers" +
               ("" if ok else ": " + errs[-300:]))


@scenario("agent that started the c10d endpoint's store killed", "launcher")
def endpoint_host_kill(ctx):
    port = free_port()  # nobody serves it: the first agent starts its cohortd
    extra = ["--max-restarts", "1"]
    first = elastic_agent(ctx, port, "1:2", ctx.tag, ctx.dir, 3, extra)
    wait_until(lambda: ctx.mtime(0, 0))
    second = elastic_agent(ctx, port, "1:2", ctx.tag, ctx.dir, 3, extra)
    wait_until(lambda: ctx.mtime(1, 0))
    first.kill()
    first.wait()
    t0 = time.time()
    rc = second.wait(timeout=60)
    back = ctx.mtime(0, 1, "env")
    err = second.stderr.read()
    ok = rc == 0 and back is not None
    left = ctx.wait_clean()
    return row(back - t0 if back else None, summary_line(err, "lost: no keep-alive"),
               "yes (1 survivor, restart 1)" if ok else f"no ({rc})", left,
               ok and left == "nothing",
               "the endpoint's store is a cohortd of its own: the survivor re-forms and finishes" +
               ("" if ok else ": " + err[-300:]))


@scenario("a job ends while another job runs on its c10d endpoint", "launcher")
def endpoint_shared(ctx):
    port = free_port()
    dir_a, dir_b = os.path.join(ctx.dir, "a"), os.path.join(ctx.dir, "b")
    os.makedirs(dir_a)
    os.makedirs(dir_b)
    a = elastic_agent(ctx, port, "1", ctx.tag + "a", dir_a, 0.5)
    wait_until(lambda: os.path.exists(os.path.join(dir_a, "0.attempt0.env")))
    b = [elastic_agent(ctx, port, "2", ctx.tag + "b", dir_b, 4) for _ in range(2)]
    wait_until(lambda: os.path.exists(os.path.join(dir_b, "1.attempt0.env")))
    rc_a = a.wait(timeout=60)
    rcs = [p.wait(timeout=60) for p in b]
    errs = "".join(p.stderr.read() for p in [a, *b])
    ok = rc_a == 0 and rcs == [0, 0]
    left = ctx.wait_clean()
    return row(None, "both jobs exit 0" if ok else summary_line(errs, "store"),
               "n/a (nothing lost)" if ok else f"no ({rc_a}, {rcs})", left,
               ok and left == "nothing",
               "job B's rendezvous store is not inside job A's agent: both exit 0" +
               ("" if ok else ": " + errs[-300:]))


@scenario("1.13 watcher that never reads, under 1,200 SETs of 1 MB", "store")
def store_slow_watcher(ctx):
    budget = 128 << 20
    s, port = start_cohortd(ctx, "--max-unsent-bytes", str(32 << 20),
                            "--connection-memory-budget", str(budget))
    writer = current_dialect(port)
    writer.sendall(b"\x01" + wire_bytes(b"big") + wire_bytes(b"a" * (1 << 20)))
    watcher = socket.create_connection(("127.0.0.1", port))
    watcher.sendall(b"\x07" + wire_bytes(b"big"))  # 1.13 WATCH_KEY, never read
    polite = current_dialect(port)
    polite_set_get(polite, -1)
    mb = b"\x01" + wire_bytes(b"big") + wire_bytes(b"b" * (1 << 20))
    worst = 0.0
    t0 = time.monotonic()
    for i in range(1200):
        writer.sendall(mb)
        if i % 20 == 0:
            worst = max(worst, polite_set_get(polite, i))
    worst = max(worst, polite_set_get(polite, 1200))
    took = time.monotonic() - t0
    hwm = status_kib(s.pid, "VmHWM") >> 10
    watcher.settimeout(10)
    try:
        while watcher.recv(1 << 20):
            pass
        closed = True
    except (ConnectionResetError, socket.timeout) as e:
        closed = isinstance(e, ConnectionResetError)
    s.send_signal(signal.SIGTERM)
    _, err = s.communicate(timeout=10)
    ok = closed and hwm * (1 << 20) < budget + (256 << 20) and worst < 0.1 and s.returncode == 0
    return row(took, summary_line(err.decode(), "max-unsent-bytes"),
               f"peak RSS {hwm} MiB, others served (worst {worst * 1000:.0f} ms)", "nothing", ok,
               "the watcher is closed at --max-unsent-bytes with a log line; cohortd's peak RSS "
               "stays under --connection-memory-budget + 256 MiB; a polite client is served "
               "within 100 ms throughout")


@scenario("cohortd's stderr not read, then its reader gone", "store")
def store_unread_log(ctx):
    r, w = os.pipe()
    s = subprocess.Popen([ctx.path("cohortd"), "--host", "127.0.0.1", "--port", "0"],
                         stdout=subprocess.PIPE, stderr=w, env=ctx.env())
    os.close(w)
    port = int(s.stdout.readline().decode().strip().rsplit(":", 1)[1])
    bad = b"\x00" + (1 << 40).to_bytes(8, "little")  # a key over the limit: one warning line

    def provoke(n):
        for _ in range(n):
            c = socket.create_connection(("127.0.0.1", port))
            c.sendall(bad)
            c.close()
    t0 = time.monotonic()
    provoke(1000)  # about 150 KB of warnings into a 64 KiB pipe nobody reads
    served_unread = polite_set_get(current_dialect(port), 1) < 5
    os.close(r)  # the reader goes away
    provoke(50)
    served_closed = polite_set_get(current_dialect(port), 2) < 5
    alive = s.poll() is None
    took = time.monotonic() - t0
    s.send_signal(signal.SIGTERM)
    s.wait(timeout=10)
    ok = served_unread and served_closed and alive and s.returncode == 0
    return row(took, "clients served with the log unread, and after its reader closed",
               "store unaffected" if ok else f"no (alive={alive}, rc={s.returncode})", "nothing",
               ok, "log lines never block the loop (dropped and counted instead) and SIGPIPE is "
               "ignored: clients are served and cohortd exits 0 on SIGTERM")


@scenario("a 3-byte token file for cohortd", "input")
def store_short_token(ctx):
    token = os.path.join(ctx.dir, "token")
    with open(token, "w") as f:
        f.write("abc\n")
    p, took = ctx.run([ctx.path("cohortd"), "--port", "0", "--auth-token-file", token], timeout=10)
    ok = p.returncode == 2 and token in p.stderr and "at least 16" in p.stderr
    return row(took, summary_line(p.stderr, "cohortd:"), "n/a", "nothing", ok,
               "exit 2 naming the file, the minimum and how to make a token")


@scenario("2,000 APPENDs of 1 KiB with --data-dir", "store")
def store_append_log(ctx):
    data = os.path.join(ctx.dir, "store")
    s, port = start_cohortd(ctx, "--data-dir", data, "--fsync", "never")
    c = current_dialect(port)
    t0 = time.monotonic()
    for _ in range(2000):
        c.sendall(b"\x09" + wire_bytes(b"grows") + wire_bytes(b"a" * 1024))  # APPEND (no reply)
    c.sendall(b"\x03" + wire_bytes(b"grows"))  # GET: all appends ran
    n = int.from_bytes(recv_exact(c, 8), "little")
    recv_exact(c, n)
    took = time.monotonic() - t0
    s.send_signal(signal.SIGTERM)
    s.wait(timeout=10)
    log_bytes = os.path.getsize(os.path.join(data, "store.log"))
    ok = n == 2000 * 1024 and log_bytes < 4 << 20 and s.returncode == 0
    return row(took, f"a {n >> 10} KiB value, store.log {log_bytes / 2**20:.1f} MB", "n/a",
               "nothing", ok, "each APPEND is logged as its delta: the log stays O(total), under "
               "4 MB for a 2 MB value (it was 2 GB written)")


def running(pid):
    """Whether pid runs (a zombie not yet reaped by whoever adopted it does not)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False


def outgrow_data(c, big):
    """Keys big0.. of 1 MiB, written twice and three of them once more: cohortd's log outgrows the
    data twice over, so it compacts at its next look (once a second)."""
    for gen, keys in ((b"0", big), (b"1", big), (b"2", 3)):
        for i in range(keys):
            c.sendall(b"\x01" + wire_bytes(b"big%d" % i) + wire_bytes(gen * (1 << 20)))  # SET


@scenario("compaction of an idle 200 MB --data-dir store", "store")
def store_compaction_pause(ctx):
    data = os.path.join(ctx.dir, "store")
    s, port = start_cohortd(ctx, "--data-dir", data, "--fsync", "never")
    c = current_dialect(port)
    outgrow_data(c, 200)
    polite_set_get(c, 0)  # its reply comes once the fill is done
    log = os.path.join(data, "store.log")
    before = os.path.getsize(log)
    worst, probes, t0 = 0.0, 1, time.monotonic()
    while time.monotonic() - t0 < 30 and os.path.getsize(log) > 300 << 20:
        worst = max(worst, polite_set_get(c, probes))
        probes += 1
        time.sleep(0.001)  # pacing the probe
    took = time.monotonic() - t0
    s.send_signal(signal.SIGTERM)
    _, err = s.communicate(timeout=20)
    after = os.path.getsize(log)
    compacted = after < 300 << 20 and "in a child process" in err.decode()
    ok = compacted and worst < 0.2 and s.returncode == 0
    return row(took, f"store.log {before >> 20} -> {after >> 20} MiB, {probes} SET+GETs meanwhile"
               if compacted else summary_line(err.decode(), "compact"),
               f"{'served throughout' if worst < 0.2 else 'stalled'} (worst {worst * 1000:.0f} ms)",
               "nothing", ok,
               "the log (400 MB for 200 MB of data) is compacted in a forked child while the loop "
               "serves: no SET+GET waits 200 ms (the target is 50; it waited 165-850 ms, up to "
               "3 s, when compaction ran in the loop)")


@scenario("cohortd SIGKILLed while compacting --data-dir", "store")
def store_kill_compacting(ctx):
    data = os.path.join(ctx.dir, "store")
    s, port = start_cohortd(ctx, "--data-dir", data, "--fsync", "never")
    c = current_dialect(port)
    big = 96
    outgrow_data(c, big)
    tmp = os.path.join(data, "store.log.compact")
    child = None
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and child is None:  # the compaction's child at work
        if os.path.exists(tmp) and os.path.getsize(tmp) > 0:
            with open(f"/proc/{s.pid}/task/{s.pid}/children") as f:
                pids = f.read().split()
            child = int(pids[0]) if pids else None
        else:
            time.sleep(0.002)
    if child is None:
        s.kill()
        s.wait()
        return row(None, "no compaction child seen", "?", "nothing", False, "")
    for i in range(20):  # written while the child runs: in the old log's tail
        c.sendall(b"\x01" + wire_bytes(b"small%d" % i) + wire_bytes(b"v%d" % i))
    c.sendall(b"\x03" + wire_bytes(b"small19"))  # GET: its reply acknowledges the SETs before it
    recv_exact(c, 8 + 3)
    s.kill()
    s.wait()
    killed_mid = os.path.exists(tmp)
    child_left = not wait_until(lambda: not running(child), timeout=5)
    t0 = time.monotonic()
    s, port = start_cohortd(ctx, "--data-dir", data, "--fsync", "never")
    tmp_removed = not os.path.exists(tmp)  # before its own first compaction, a second on
    c = current_dialect(port)
    lost = []
    for key, want in [(b"big%d" % i, (b"2" if i < 3 else b"1") * (1 << 20)) for i in range(big)] + \
            [(b"small%d" % i, b"v%d" % i) for i in range(20)]:
        c.sendall(b"\x05" + (1).to_bytes(8, "little") + wire_bytes(key))  # CHECK: 0 when set
        if recv_exact(c, 1) != b"\x00":
            lost.append(key.decode())
            continue
        c.sendall(b"\x03" + wire_bytes(key))  # GET
        n = int.from_bytes(recv_exact(c, 8), "little")
        if recv_exact(c, n) != want:
            lost.append(key.decode())
    took = time.monotonic() - t0
    s.send_signal(signal.SIGTERM)
    s.wait(timeout=20)
    ok = killed_mid and tmp_removed and not lost and not child_left and s.returncode == 0
    return row(took, f"{big + 20 - len(lost)} of {big + 20} keys back"
               + ("" if killed_mid else " (the compaction ended before the kill)")
               + ("" if tmp_removed else ", store.log.compact kept"),
               "yes, nothing lost" if not lost else f"no: lost {', '.join(lost[:5])}",
               "compaction child alive" if child_left else "nothing", ok,
               "the compaction's child writes the snapshot while cohortd serves; killed then, the "
               "old log still holds every acknowledged write (20 made during the compaction "
               "included), the child dies with cohortd, and the restart removes its file")


@scenario("MULTI_SET cut short in the log by a crash", "store")
def store_torn_multi_set(ctx):
    data = os.path.join(ctx.dir, "store")
    s, port = start_cohortd(ctx, "--data-dir", data, "--fsync", "always")
    c = current_dialect(port)
    keys = [b"a", b"b", b"c"]
    msg = b"\x0b" + len(keys).to_bytes(8, "little")  # MULTI_SET: count, then key and value each
    for k in keys:
        msg += wire_bytes(k) + wire_bytes(b"v")
    c.sendall(msg + b"\x03" + wire_bytes(b"c"))
    recv_exact(c, 9)
    s.kill()
    s.wait()
    path = os.path.join(data, "store.log")
    os.truncate(path, os.path.getsize(path) - 1)  # the crash tore the last write
    t0 = time.monotonic()
    s, port = start_cohortd(ctx, "--data-dir", data)
    c = current_dialect(port)
    survived = []
    for k in keys:  # CHECK of each key alone: 0 ready (it survived), 1 not ready
        c.sendall(b"\x05" + (1).to_bytes(8, "little") + wire_bytes(k))
        if recv_exact(c, 1) == b"\x00":
            survived.append(k.decode())
    took = time.monotonic() - t0
    s.send_signal(signal.SIGTERM)
    _, err = s.communicate(timeout=10)
    ok = not survived and s.returncode == 0
    return row(took, summary_line(err.decode(), "torn"), "all three keys gone together" if ok
               else f"no: {', '.join(survived)} survived without the rest", "nothing", ok,
               "a MULTI_SET is one log record: a torn one loses all its keys, never some")


@scenario("a byte flipped in the middle of store.log", "store")
def store_log_flip(ctx):
    data = os.path.join(ctx.dir, "store")
    s, port = start_cohortd(ctx, "--data-dir", data)
    c = current_dialect(port)
    for i in range(200):
        c.sendall(b"\x01" + wire_bytes(b"k%d" % i) + wire_bytes(b"v" * 40))  # SET (no reply)
    c.sendall(b"\x04" + wire_bytes(b"counter") + (7).to_bytes(8, "little"))  # ADD: the last record
    recv_exact(c, 8)
    c.close()
    s.send_signal(signal.SIGTERM)
    s.wait(timeout=10)
    path = os.path.join(data, "store.log")
    with open(path, "rb") as f:
        damaged = bytearray(f.read())
    at = len(damaged) // 2
    damaged[at] ^= 0x20
    with open(path, "wb") as f:
        f.write(damaged)
    p, took = ctx.run([ctx.path("cohortd"), "--host", "127.0.0.1", "--port", "0", "--data-dir",
                       data], timeout=10)
    with open(path, "rb") as f:
        untouched = f.read() == damaged
    refused = (p.returncode != 0 and f"{path} is damaged at offset " in p.stderr and
               "--accept-log-damage" in p.stderr)
    s, port = start_cohortd(ctx, "--data-dir", data, "--accept-log-damage")
    c = current_dialect(port)
    kept = []
    for k in [b"k%d" % i for i in range(200)] + [b"counter"]:  # CHECK: 0 ready, 1 not ready
        c.sendall(b"\x05" + (1).to_bytes(8, "little") + wire_bytes(k))
        if recv_exact(c, 1) == b"\x00":
            kept.append(k.decode())
    c.close()
    s.send_signal(signal.SIGTERM)
    _, err = s.communicate(timeout=10)
    copies = glob.glob(os.path.join(data, "store.log.damaged-*"))
    copied = any(open(cp, "rb").read() == damaged for cp in copies)
    prefix = kept == [f"k{i}" for i in range(len(kept))]  # the keys before the damage, no others
    ok = (refused and untouched and copied and prefix and 0 < len(kept) < 200 and
          s.returncode == 0)
    return row(took, summary_line(p.stderr, "is damaged at offset"),
               f"with --accept-log-damage: {len(kept)} of 200 keys (those before the damage), "
               f"copy aside: {'yes' if copied else 'no'}" if refused and untouched
               else f"no (refused={refused}, file untouched={untouched})", "nothing", ok,
               "cohortd refuses to start, naming the file and the offset, and leaves the file "
               "byte for byte as it was (it used to truncate at the damage: 80 of 200 keys lost "
               "silently); with --accept-log-damage it starts with the keys before the damage, "
               "the damaged file copied aside first" + ("" if ok else ": " + err.decode()[-300:]))


def silent_flood(ctx, silent, half, token=None):
    """silent + half connections (half: AUTH_HELLO sent, the challenge read, never the proof) fill
    a cohortd whose --max-connections is 100 below their number, with 1 s to speak; then a
    newcomer (a token holder when there is a token) connects, SETs and GETs."""
    flood, deadline_s = silent + half, 1.0
    if not raise_nofile(flood + 500):
        return row(None, f"descriptor limit under {flood + 500}", "n/a", "nothing", False, "")
    flags = ["--max-connections", str(flood - 100), "--first-request-timeout", str(deadline_s),
             "--handshake-timeout", str(deadline_s)]
    if token:
        path = os.path.join(ctx.dir, "token")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        os.write(fd, token + b"\n")
        os.close(fd)
        flags += ["--auth-token-file", path]
    s, port = start_cohortd(ctx, *flags)
    sel = selectors.DefaultSelector()
    socks = []
    t_first = time.monotonic()
    for i in range(flood):
        c = socket.create_connection(("127.0.0.1", port))
        if i >= silent:
            c.sendall(b"\x41")  # AUTH_HELLO, and never the proof
        socks.append(c)
    t_last = time.monotonic()
    for c in socks:
        c.setblocking(False)
        sel.register(c, selectors.EVENT_READ)
    closed_at, early = {}, 0
    limit = t_last + deadline_s + 5
    while len(closed_at) < flood and time.monotonic() < limit:
        for key, _ in sel.select(timeout=0.5):
            c = key.fileobj
            try:
                got = c.recv(64)  # a half-handshake's challenge, or the close
            except ConnectionResetError:
                got = b""
            except BlockingIOError:
                continue
            if not got:
                now = time.monotonic()
                closed_at[c] = now
                early += now < t_first + deadline_s
                sel.unregister(c)
    t0 = time.monotonic()
    c = authenticated(port, token) if token else current_dialect(port)
    polite_set_get(c, 1)
    served = time.monotonic()
    c.close()
    for c in socks:
        c.close()
    s.send_signal(signal.SIGTERM)
    _, err = s.communicate(timeout=10)
    err = err.decode()
    line = ("token handshake not completed within --handshake-timeout (1000 ms)" if token else
            "no request completed within --first-request-timeout (1000 ms)")
    after_deadline = max(0.0, served - (t_last + deadline_s))
    ok = (len(closed_at) == flood and 0 < early <= 100 and served - t0 < 0.1 and
          after_deadline < 3.0 and line in err and s.returncode == 0)
    return row(after_deadline,
               summary_line(err, "within --handshake-timeout" if token else
                            "within --first-request-timeout"),
               f"{'token holder' if token else 'newcomer'} served in {(served - t0) * 1000:.1f} ms "
               f"once all {flood - early} were closed" if len(closed_at) == flood
               else f"no: {flood - len(closed_at)} of the flood kept", "nothing", ok,
               f"{early} turned away at accept (the flood filled --max-connections), the rest "
               "closed at the 1 s deadline, not before, with a log line; a newcomer" +
               (" holding the token" if token else "") + " is then served (connect, SET, GET) "
               "within 100 ms, within 3 s of the last connection's deadline (noticed after: from "
               "that deadline to the newcomer served)")


@scenario("2,000 connections that never send a byte", "store")
def store_silent_flood(ctx):
    return silent_flood(ctx, 2000, 0)


@scenario("with a token, 1,000 silent and 1,000 half-handshakes", "store")
def store_half_handshakes(ctx):
    return silent_flood(ctx, 1000, 1000, token=b"fault-suite-token-of-32-characters")


@scenario("30 clients GET a 10 MB value 20 times, never read", "store")
def store_greedy_gets(ctx):
    budget = 1 << 30  # the defaults: --connection-memory-budget 1 GiB, --max-unsent-bytes 64 MiB
    s, port = start_cohortd(ctx)
    setup = current_dialect(port)
    setup.sendall(b"\x01" + wire_bytes(b"ten") + wire_bytes(b"t" * (10 << 20)))
    setup.sendall(b"\x05" + (1).to_bytes(8, "little") + wire_bytes(b"ten"))  # CHECK: it is set
    recv_exact(setup, 1)
    polite = current_dialect(port)
    polite_set_get(polite, -1)
    greedy, peers = [], []
    t0 = time.monotonic()
    for _ in range(30):
        g = current_dialect(port)
        g.sendall((b"\x03" + wire_bytes(b"ten")) * 20)  # 20 GETs, never read
        greedy.append(g)
        peers.append(f"127.0.0.1:{g.getsockname()[1]}")
    worst, slow, n = 0.0, 0, 0
    while time.monotonic() < t0 + 4:
        took = polite_set_get(polite, n)
        worst = max(worst, took)
        n += 1
        slow += took > 0.1
    hwm = status_kib(s.pid, "VmHWM") >> 10
    s.send_signal(signal.SIGTERM)
    _, err = s.communicate(timeout=10)
    err = err.decode()
    budget_lines = [l for l in err.splitlines() if f"--connection-memory-budget ({budget})" in l]
    closed = sum(any(f"closing connection from {p}" in l for l in budget_lines) for p in peers)
    for g in greedy:
        g.close()
    # ASan makes the loop about twice as slow, and the asan stage runs beside other tests: the
    # polite bound is 300 ms there; the Release build holds the 100 ms.
    asan = "asan" in os.environ.get("COHORT_SANITIZER", "")
    bound = 0.3 if asan else 0.1
    ok = closed >= 1 and hwm < 128 and worst < bound and s.returncode == 0
    return row(None, summary_line(err, "connection-memory-budget"),
               f"peak RSS {hwm} MiB, {closed} of {len(greedy)} closed; {n} polite SET+GET, worst "
               f"{worst * 1000:.0f} ms, {slow} over 100 ms", "nothing", ok,
               "a GET's reply refers to the stored value instead of copying it: 30 greedy clients "
               "cost neither copies on the loop nor memory (peak RSS under 128 MiB; copying, it "
               "was 1.2 GiB), and a polite client's SET+GET is served within 100 ms throughout "
               "their first 4 s (300 ms under AddressSanitizer; copying, the loop stalled up to "
               "872 ms, 11 probes over 100 ms); past --connection-memory-budget (their unsent "
               "bytes counted as if copied) the clients holding the most are closed with a log "
               "line, the others wait, paused at --max-unsent-bytes")


# The rows of cohortd under hostile clients, disks and files (scripts/faults/store_hostile.py):
# imported here, so that they register after the rows above.
import store_hostile  # noqa: E402,F401


# ---- a real cluster's mistakes and stragglers ------------------------------------------------------

INTEROP = os.path.join(ROOT, "tests", "interop")


@scenario("a PyTorch rank hangs (beats through import cohort)", "worker")
def torch_hang(ctx):
    mark = os.path.join(ctx.dir, "hang")
    p, _ = ctx.run([ctx.path("cohortrun"), "--nproc-per-node", "2", "--worker-hang-timeout", "3",
                    "--max-restarts", "0", "--term-timeout", "2", "--rdzv-id", ctx.tag,
                    os.path.join(INTEROP, "hung_worker.py")], timeout=180,
                   env=ctx.env(HANG_MARK=mark))  # cohortrun puts its cohort module on PYTHONPATH
    done = time.time()
    hung_at = float(open(mark).read()) if os.path.exists(mark) else None
    ok = (p.returncode == 1 and "hung: no heartbeat for" in p.stderr
          and "stuck_waiting_for_data" in p.stderr)
    left = ctx.wait_clean()
    return row(done - hung_at if hung_at else None, summary_line(p.stderr, "stuck_waiting_for_data"),
               "no (--max-restarts 0)", left, ok and left == "nothing",
               "--worker-hang-timeout 3: the hung rank is stopped with its Python stack in the "
               "summary (the frame it hung in), within the timeout plus its stack's grace")


def torch_culprit(ctx, hang_scenario, nproc, expect):
    """An unchanged gloo DDP script (tests/interop/hang_scenarios.py) under --worker-hang-timeout 3:
    the summary's root cause is the rank named by every rank's answers to the hang probe."""
    mark = os.path.join(ctx.dir, "hang")
    p, _ = ctx.run([ctx.path("cohortrun"), "--nproc-per-node", str(nproc),
                    "--worker-hang-timeout", "3", "--max-restarts", "0", "--term-timeout", "2",
                    "--rdzv-id", ctx.tag, os.path.join(INTEROP, "hang_scenarios.py")], timeout=180,
                   env=ctx.env(HANG_MARK=mark, HANG_SCENARIO=hang_scenario))
    done = time.time()
    hung_at = float(open(mark).read()) if os.path.exists(mark) else None
    ok = (p.returncode == 1 and expect in p.stderr and "rank      : 1 (local_rank: 1)" in p.stderr
          and "<NO_OTHER_FAILURES>" in p.stderr)
    left = ctx.wait_clean()
    return p, (done - hung_at if hung_at else None), ok, left


@scenario("an unchanged DDP script: a rank stalls while the others wait in the allreduce", "worker")
def torch_hang_culprit(ctx):
    p, took, ok, left = torch_culprit(ctx, "stall", 4, "hung: never entered ")
    ok = ok and "in stuck_in_data_loading" in p.stderr and p.stderr.count(": waits in ") == 3
    return row(took, summary_line(p.stderr, "reason    : hung: never entered"),
               "no (--max-restarts 0)", left, ok and left == "nothing",
               "--worker-hang-timeout 3, no change to the script: every rank is asked for its "
               "collectives and stacks; the root cause is the rank that never entered the "
               "allreduce, with its line; the 3 others are listed as waiting, not as failures")


@scenario("an unchanged DDP script: a rank calls all_gather where the others call all_reduce",
          "worker")
def torch_desync_culprit(ctx):
    p, took, ok, left = torch_culprit(ctx, "desync", 2, "hung: desynchronised collective")
    return row(took, summary_line(p.stderr, "reason    : hung: desynchronised"),
               "no (--max-restarts 0)", left, ok and left == "nothing",
               "--worker-hang-timeout 3: named as a desynchronised collective, with the call of "
               "each side")


@scenario("the master address cannot be reached", "input")
def unreachable_master(ctx):
    if os.geteuid() != 0:
        return row(None, "skipped: needs root for a network namespace", "n/a", "nothing", True, "")
    ns = f"cft-iso{os.getpid()}"
    subprocess.run(["ip", "netns", "add", ns], check=True)
    try:
        subprocess.run(["ip", "-n", ns, "link", "set", "lo", "up"], check=True)
        p, took = ctx.run(["ip", "netns", "exec", ns, ctx.path("cohortrun"), "--nnodes", "2",
                           "--node-rank", "1", "--master-addr", "10.99.99.1", "--master-port",
                           "29500", "--nproc-per-node", "1", "--no-python", "/bin/true"], timeout=60)
    finally:
        subprocess.run(["ip", "netns", "delete", ns])
    ok = p.returncode == 1 and took < 15 and "cannot reach the store at 10.99.99.1:29500" in p.stderr
    return row(took, summary_line(p.stderr, "cannot reach"), "n/a", ctx.wait_clean(), ok,
               "exit 1 within 15 s naming the address and the system's reason (torchrun: silent "
               "for 900 s)")


@scenario("a loopback endpoint where several nodes may join", "input")
def loopback_endpoint(ctx):
    p, took = ctx.run([ctx.path("cohortrun"), "--nnodes", "1:2", "--rdzv-backend", "c10d",
                       "--rdzv-endpoint", "localhost:29400", "--nproc-per-node", "1",
                       "--no-python", "/bin/true"], timeout=60)
    ok = p.returncode == 2 and "loopback" in p.stderr
    return row(took, summary_line(p.stderr, "loopback"), "n/a", ctx.wait_clean(), ok,
               "exit 2 at once: other nodes would each meet a store of their own (torchrun: two "
               "1-node jobs that both exit 0)")


def static_node(ctx, port, rank, flags, worker_args):
    return subprocess.Popen([ctx.path("cohortrun"), "--nnodes", "2", "--node-rank", str(rank),
                             "--master-addr", "127.0.0.1", "--master-port", str(port),
                             "--nproc-per-node", "1", "--rdzv-id", ctx.tag, *flags, "--no-python",
                             ctx.path("cohort_test_worker"), "--out", ctx.dir, *worker_args],
                            env=ctx.env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True)


@scenario("nodes started with different --max-restarts", "input")
def budget_mismatch(ctx):
    port = free_port()
    t0 = time.monotonic()
    nodes = [static_node(ctx, port, r, ["--max-restarts", str(1 + 2 * r)], ["--sleep", "30"])
             for r in (0, 1)]
    rcs = [n.wait(timeout=60) for n in nodes]
    took = time.monotonic() - t0
    errs = [n.stderr.read() for n in nodes]
    ok = rcs == [1, 1] and all("--max-restarts" in e and "1" in e and "3" in e for e in errs)
    return row(took, summary_line(errs[0], "max-restarts"), "n/a (refused)", ctx.wait_clean(), ok,
               "refused on every node, naming the setting and both values (torchrun: the node with "
               "the larger budget hangs)")


@scenario("one node's workers finish while another's hang", "launcher")
def finished_node_bounded(ctx):
    port = free_port()
    nodes = [static_node(ctx, port, 0, ["--wait-after-first-exit", "2"], []),
             static_node(ctx, port, 1, ["--wait-after-first-exit", "2"], ["--sleep", "300"])]
    t_done = None
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and t_done is None:
        t_done = ctx.mtime(0, 0, "pid")
        time.sleep(0.02)
    rcs = [n.wait(timeout=60) for n in nodes]
    took = time.time() - t_done if t_done else None
    errs = nodes[0].stderr.read() + nodes[1].stderr.read()
    ok = rcs[1] != 0 and "(--wait-after-first-exit)" in errs and took is not None and took < 10
    return row(took, summary_line(errs, "wait-after-first-exit"), "n/a (job stopped)",
               ctx.wait_clean(), ok,
               "--wait-after-first-exit 2: the job is stopped everywhere about 2 s after node 0 "
               "finished, so an allocation is not held by a hung rank (srun -W)")


@scenario("a PyTorch rank late to init_process_group", "worker")
def late_rank(ctx):
    port = free_port()
    script = os.path.join(ctx.dir, "late.py")
    with open(script, "w") as f:
        f.write("import datetime, os, time\n"
                "import torch.distributed as dist\n"
                "if os.environ['RANK'] == '1':\n"
                "    time.sleep(30)\n"
                "dist.init_process_group('gloo', timeout=datetime.timedelta(seconds=3))\n")
    nodes = [subprocess.Popen([ctx.path("cohortrun"), "--nnodes", "2", "--node-rank", str(r),
                               "--master-addr", "127.0.0.1", "--master-port", str(port),
                               "--nproc-per-node", "1", "--rdzv-id", ctx.tag, script],
                              env=ctx.env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                              text=True) for r in (0, 1)]
    t0 = time.monotonic()
    rc0 = nodes[0].wait(timeout=120)
    took = time.monotonic() - t0
    rc1 = nodes[1].wait(timeout=60)
    err = nodes[0].stderr.read()
    nodes[1].stderr.read()
    ok = rc0 == 1 and rc1 != 0 and re.search(r"had not failed.*\n\s*1\n", err, re.S) is not None
    return row(took, summary_line(err, "had not failed"), "no (--max-restarts 0)",
               ctx.wait_clean(), ok,
               "rank 0 times out waiting in init_process_group; the summary names rank 1, the one "
               "that never arrived, not only the rank that waited")


# ---- network (namespaces) -----------------------------------------------------------------------------

NET_ENV = dict(COHORT_NETNS_PREFIX="cft", COHORT_NETNS_SUBNET="10.75.0", COHORT_NETNS_NODES="4")


def netns(ctx, what):
    subprocess.run([os.path.join(ROOT, "scripts/cluster", f"netns_{what}.sh")],
                   env=dict(os.environ, **NET_ENV), check=True, stdout=subprocess.DEVNULL)


def net_job(ctx, fault, conf="last_call_timeout=0.5,keep_alive_interval=0.5,keep_alive_max_attempt=3"):
    if os.geteuid() != 0:
        return row(None, "skipped: needs root for network namespaces", "n/a", "nothing", True, "")
    netns(ctx, "up")
    store = agents = None
    try:
        store = subprocess.Popen(["ip", "netns", "exec", "cft-n4", ctx.path("cohortd"), "--host",
                                  "10.75.0.4", "--port", "29400"], stdout=subprocess.PIPE,
                                 stderr=subprocess.DEVNULL, text=True)
        store.stdout.readline()
        agents = [subprocess.Popen(["ip", "netns", "exec", f"cft-n{i}", ctx.path("cohortrun"),
                                    "--nnodes", "2:3", "--nproc-per-node", "1", "--rdzv-backend",
                                    "c10d", "--rdzv-endpoint", "10.75.0.4:29400", "--rdzv-id",
                                    ctx.tag, "--rdzv-conf", conf, "--max-restarts", "2",
                                    "--store-loss-grace", "3", "--no-python", ctx.path("cohort_test_worker"), "--out", ctx.dir,
                                    "--sleep", "5"], env=ctx.env(), stdout=subprocess.DEVNULL,
                                   stderr=subprocess.PIPE, text=True) for i in (1, 2, 3)]
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not all(ctx.mtime(r, 0) for r in range(3)):
            time.sleep(0.02)
        return fault(agents)
    finally:
        for a in agents or []:
            if a.poll() is None:
                a.kill()
                a.wait()
        if store:
            store.kill()
            store.wait()
        netns(ctx, "down")


@scenario("network partition of one of three nodes", "network")
def net_partition(ctx):
    def fault(agents):
        subprocess.run(["ip", "-n", "cft-sw", "link", "set", "p3", "down"], check=True)
        t0 = time.time()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not (ctx.mtime(0, 1, "env") and ctx.mtime(1, 1, "env")):
            time.sleep(0.02)
        back = max(ctx.mtime(0, 1, "env") or 0, ctx.mtime(1, 1, "env") or 0)
        rcs = [a.wait(timeout=60) for a in agents[:2]]
        rc3 = agents[2].wait(timeout=60)
        errs = agents[0].stderr.read() + agents[1].stderr.read()
        ok = rcs == [0, 0] and rc3 != 0 and back > 0
        return row(back - t0 if back else None, summary_line(errs, "lost: no keep-alive"),
                   "yes (2 survivors, restart 1)" if ok else f"no ({rcs}, {rc3})", ctx.wait_clean(), ok,
                   "noticed within 1.5 s keep-alive window; the cut-off node stops itself")
    return net_job(ctx, fault)


@scenario("20% packet loss each way on one node's link", "network")
def net_loss(ctx):
    def fault(agents):
        rules = ["add table inet cft_chaos",
                 "add chain inet cft_chaos in { type filter hook input priority -10; }",
                 "add chain inet cft_chaos out { type filter hook output priority -10; }",
                 "add rule inet cft_chaos in iifname eth0 numgen random mod 100 < 20 drop",
                 "add rule inet cft_chaos out oifname eth0 numgen random mod 100 < 20 drop"]
        for r in rules:
            subprocess.run(["ip", "netns", "exec", "cft-n3", "nft", *r.split()], check=True)
        t0 = time.monotonic()
        rcs = [a.wait(timeout=120) for a in agents]
        errs = "".join(a.stderr.read() for a in agents)
        restarted = ctx.mtime(0, 1, "env") is not None
        finished = rcs[:2] == [0, 0]  # the healthy nodes always finish
        if rcs == [0, 0, 0]:
            recovered = "yes, all 3 nodes" + (" (after a restart)" if restarted else ", no restart")
        elif finished:
            recovered = "yes, without the lossy node"
        else:
            recovered = f"no ({rcs})"
        return row(time.monotonic() - t0, summary_line(errs, "lost|error") if rcs != [0, 0, 0]
                   else "job finished despite the loss", recovered, ctx.wait_clean(), finished,
                   "TCP retransmits; with 1 s x 5 keep-alives the job finishes, the lossy node kept "
                   "or dropped")
    return net_job(ctx, fault, "last_call_timeout=0.5,keep_alive_interval=1,keep_alive_max_attempt=5")


@scenario("the machine of an agent-started store dies", "network")
def store_machine_lost(ctx):
    if os.geteuid() != 0:
        return row(None, "skipped: needs root for network namespaces", "n/a", "nothing", True, "")
    netns(ctx, "up")
    agents = []
    try:
        # The endpoint is node 1's address: node 1's agent starts the store there.
        agents = [subprocess.Popen(["ip", "netns", "exec", f"cft-n{i}", ctx.path("cohortrun"),
                                    "--nnodes", "2:3", "--nproc-per-node", "1", "--rdzv-backend",
                                    "c10d", "--rdzv-endpoint", "10.75.0.1:29400", "--rdzv-id",
                                    ctx.tag, "--rdzv-conf", FAST_CONF, "--max-restarts", "2",
                                    "--no-python", ctx.path("cohort_test_worker"), "--out",
                                    ctx.dir, "--sleep", "5"], env=ctx.env(),
                                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
                  for i in (1, 2, 3)]
        wait_until(lambda: all(ctx.mtime(r, 0) for r in range(3)))
        pids = subprocess.run(["ip", "netns", "pids", "cft-n1"], capture_output=True,
                              text=True).stdout.split()
        subprocess.run(["kill", "-9", *pids], stderr=subprocess.DEVNULL)
        t0 = time.time()
        wait_until(lambda: ctx.mtime(0, 1, "env") and ctx.mtime(1, 1, "env"))
        back = max(ctx.mtime(0, 1, "env") or 0, ctx.mtime(1, 1, "env") or 0)
        rcs = [a.wait(timeout=60) for a in agents[1:]]
        errs = agents[1].stderr.read() + agents[2].stderr.read()
        ok = rcs == [0, 0] and back > 0
        return row(back - t0 if back else None, summary_line(errs, "moves it to node"),
                   "yes (2 survivors, restart 1)" if ok else f"no ({rcs})", ctx.wait_clean(), ok,
                   "the survivors move the store to the next node within the keep-alive window and "
                   "finish (torchrun: every survivor exits 1)")
    finally:
        for a in agents:
            if a.poll() is None:
                a.kill()
                a.wait()
        # The moved store lingers 30 s after its last client: it goes with the scenario.
        pids = subprocess.run(["ip", "netns", "pids", "cft-n2"], capture_output=True,
                              text=True).stdout.split()
        if pids:
            subprocess.run(["kill", "-9", *pids], stderr=subprocess.DEVNULL)
        netns(ctx, "down")


# ---- malformed input ------------------------------------------------------------------------------

@scenario("malformed bytes on the store port", "input")
def bad_store_input(ctx):
    s = subprocess.Popen([ctx.path("cohortd"), "--host", "127.0.0.1", "--port", "0",
                          "--max-key-bytes", "1024"], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, env=ctx.env())
    host, port = s.stdout.readline().strip().rsplit(":", 1)
    port = int(port)
    closed = 0
    payloads = [b"\xff" * 16, b"\x00\x00\x00\x00\x00\x00\x00\x00\x40" + b"x" * 8,
                b"\x05\xff\xff\xff\xff\xff\xff\xff\xff", b"\x00" + (5000).to_bytes(8, "little"),
                b"\x03\x01\x00\x00\x00\x00\x00\x00\x00k\x01"]
    t0 = time.monotonic()
    for payload in payloads:
        c = socket.create_connection((host, port))
        c.sendall(payload)
        c.settimeout(5)
        try:
            if c.recv(64) == b"":
                closed += 1
        except (ConnectionResetError, socket.timeout):
            closed += 1 if not isinstance(sys.exc_info()[1], socket.timeout) else 0
        c.close()
    took = time.monotonic() - t0
    good = socket.create_connection((host, port))
    good.sendall(b"\x06")
    alive = len(good.recv(8)) == 8
    good.close()
    s.send_signal(signal.SIGTERM)
    _, err = s.communicate(timeout=10)
    ok = closed >= 4 and alive and s.returncode == 0
    return row(took, summary_line(err, "closing connection"), "server unaffected" if alive else "no",
               "nothing", ok, "each bad connection closed with a log line; others served")


# ---- hostile workers, clients and signals (issue 27) ----------------------------------------------

def vm_hwm_mib(pid):
    """The high-water mark of a live process's resident memory (VmHWM) in MiB; 0 once it is gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0


def run_measured(argv, env, timeout=60, own_peak=False):
    """Runs argv; returns (exit code, stdout bytes, stderr bytes, seconds, peak RSS in MiB). The
    peak is wait4's: the program's own and its children's, not every child this suite had. With
    own_peak, it is the program's own high-water mark alone, read every 10 ms while it runs: for
    cohortrun, whose children (the worker, the process that reads its error file) count in
    wait4's figure."""
    t0 = time.monotonic()
    p = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    chunks = {p.stdout: [], p.stderr: []}
    sel = selectors.DefaultSelector()
    for f in chunks:
        sel.register(f, selectors.EVENT_READ)
    deadline = time.monotonic() + timeout
    hwm = 0
    while sel.get_map() and time.monotonic() < deadline:
        for key, _ in sel.select(timeout=0.01 if own_peak else 0.5):
            data = os.read(key.fileobj.fileno(), 1 << 16)
            if data:
                chunks[key.fileobj].append(data)
            else:
                sel.unregister(key.fileobj)
        if own_peak:
            hwm = max(hwm, vm_hwm_mib(p.pid))
    if own_peak:
        hwm = max(hwm, vm_hwm_mib(p.pid))
    if sel.get_map():
        p.kill()
    _, status, usage = os.wait4(p.pid, 0)
    p.returncode = os.waitstatus_to_exitcode(status)
    out, err = b"".join(chunks[p.stdout]), b"".join(chunks[p.stderr])
    p.stdout.close()
    p.stderr.close()
    return p.returncode, out, err, time.monotonic() - t0, hwm if own_peak else usage.ru_maxrss / 1024


def python_job(ctx, script, flags=(), timeout=60, env=None):
    """cohortrun running the Python `script` (text, written to the scenario's folder) with 1 worker
    and no restart; returns (process, seconds, cohortrun's peak RSS in MiB)."""
    path = os.path.join(ctx.dir, "worker.py")
    with open(path, "w") as f:
        f.write(script)
    rc, out, err, took, rss = run_measured(
        [ctx.path("cohortrun"), "--nproc-per-node", "1", "--max-restarts", "0", "--rdzv-id",
         ctx.tag, *flags, path], env or ctx.env(), timeout, own_peak=True)
    p = types.SimpleNamespace(returncode=rc)
    p.stdout_text = out.decode(errors="replace")
    p.stderr_text = err.decode(errors="replace")
    p.stderr_bytes = err
    return p, took, rss


def hostile_error_file(ctx, make_file, words, expectation, max_seconds=5):
    """A worker that leaves `make_file(path)` at its TORCHELASTIC_ERROR_FILE and exits 1."""
    script = ("import os, sys\n"
              "path = os.environ['TORCHELASTIC_ERROR_FILE']\n"
              "os.makedirs(os.path.dirname(path), exist_ok=True)\n"
              f"{make_file}\n"
              "sys.exit(1)\n")
    p, took, _ = python_job(ctx, script)
    err = p.stderr_text
    ok = (p.returncode == 1 and took < max_seconds and "Root Cause" in err and
          all(w in err for w in words) and "bad_alloc" not in err)
    left = ctx.wait_clean()
    return row(took, summary_line(err, words[0]), "n/a", left, ok and left == "nothing",
               expectation + ("" if ok else f" (exit {p.returncode} after {took:.1f} s): "
                              + err[-300:]))


@scenario("a worker's error file is a FIFO", "worker")
def error_file_fifo(ctx):
    return hostile_error_file(
        ctx, "os.mkfifo(path)", ["is a FIFO"],
        "the summary at once, saying the error file is a FIFO (it was read on the event loop, "
        "which waited for a writer: 19 s frozen)")


@scenario("a worker's error file links to /dev/zero", "worker")
def error_file_dev_zero(ctx):
    return hostile_error_file(
        ctx, "os.symlink('/dev/zero', path)", ["is a symbolic link"],
        "the summary, saying the error file is a symbolic link; links are not followed "
        "(reading /dev/zero ended cohortrun with std::bad_alloc and no summary)")


@scenario("a worker's error file on a mount that never answers", "worker")
def error_file_hung_mount(ctx):
    # A real FUSE mount whose daemon answers nothing after its handshake (cohort_hung_fuse, in a
    # mount namespace of its own): the worker makes its error file's folder a link there and dies.
    mount = os.path.join(ctx.dir, "hung")
    os.mkdir(mount)
    path = os.path.join(ctx.dir, "worker.py")
    with open(path, "w") as f:
        f.write("import os, shutil, sys\n"
                "d = os.path.dirname(os.environ['TORCHELASTIC_ERROR_FILE'])\n"
                "shutil.rmtree(d, ignore_errors=True)\n"
                "os.symlink(os.environ['HUNG_MOUNT'], d)\n"
                "sys.exit(1)\n")
    rc, _, err, took, _ = run_measured(
        [ctx.path("cohort_hung_fuse"), mount, "30", "--", ctx.path("cohortrun"),
         "--nproc-per-node", "1", "--max-restarts", "0", "--rdzv-id", ctx.tag, path],
        ctx.env(HUNG_MOUNT=mount), 60)
    err = err.decode(errors="replace")
    if rc == 77:
        return row(None, "no FUSE mount here (root and /dev/fuse are needed)", "n/a", "nothing",
                   False, "needs a FUSE mount: " + err[-200:])
    held = re.search(r"hung_fuse: holding \w+ 'error\.json' at ([0-9.]+) s", err)
    exited = re.search(r"hung_fuse: the command exited at ([0-9.]+) s with status 1\b", err)
    after = float(exited.group(1)) - float(held.group(1)) if held and exited else None
    ok = after is not None and after < 10 and "could not be read within 2000 ms" in err
    left = ctx.wait_clean()
    said = re.search(r"error file \S+ (could not be read.*)", err)
    saw = ("'" + said.group(1).strip() + "'; cohortrun exited, the mount still hung" if said
           else summary_line(err, "hung_fuse: the command"))
    return row(after, saw, "n/a", left, ok and left == "nothing",
               "the summary 2 s after the read began, saying the error file could not be read in "
               "time, and cohortrun's exit with the mount still hung: the file is read in a child "
               "process, which the mount may hold (read on a thread, the summary came, then "
               "cohortrun's exit waited as long as the mount hung: a thread waiting on a FUSE "
               "request that the daemon took outlives SIGKILL)" + ("" if ok else f" (exit {rc} after {took:.1f} s): " + err[-300:]))


@scenario("a worker stuck on a mount that never answers, then SIGTERM", "worker")
def worker_in_hung_mount_sigterm(ctx):
    # The worker itself reads from the hung mount (cohort_hung_fuse): neither SIGTERM nor SIGKILL
    # ends it while the mount holds it. Once the kernel holds the read, a helper in the worker's
    # group sends cohortrun SIGTERM.
    mount = os.path.join(ctx.dir, "hung")
    os.mkdir(mount)
    worker = ("p=$PPID; (until grep -qs request_wait_answer /proc/$$/wchan; do sleep 0.05; done; "
              "kill -TERM $p) & exec cat \"$HUNG_MOUNT/data\"")
    rc, _, err, took, _ = run_measured(
        [ctx.path("cohort_hung_fuse"), mount, "40", "--", ctx.path("cohortrun"),
         "--nproc-per-node", "1", "--max-restarts", "0", "--term-timeout", "1", "--rdzv-id",
         ctx.tag, "--no-python", "/bin/sh", "-c", worker],
        ctx.env(HUNG_MOUNT=mount), 60)
    err = err.decode(errors="replace")
    if rc == 77:
        return row(None, "no FUSE mount here (root and /dev/fuse are needed)", "n/a", "nothing",
                   False, "needs a FUSE mount: " + err[-200:])
    held = re.search(r"hung_fuse: holding \w+ 'data' at ([0-9.]+) s", err)
    exited = re.search(r"hung_fuse: the command exited at ([0-9.]+) s with status 143\b", err)
    after = float(exited.group(1)) - float(held.group(1)) if held and exited else None
    left_behind = "after SIGKILL (stuck in the kernel" in err
    ok = after is not None and after < 1 + 5 + 8 and left_behind
    left = ctx.wait_clean()
    said = re.search(r"\] (worker process \d+ still there .*? after SIGKILL)", err)
    saw = (f"'{said.group(1)} ...'; exit {rc}, the mount still hung" if said
           else summary_line(err, r"hung_fuse: the command"))
    return row(after, saw, "n/a", left, ok and left == "nothing",
               "cohortrun exits 143 within --term-timeout (1 s), the 5 s it gives a worker after "
               "SIGKILL and its bounded cleanup, saying it leaves the worker behind (it waited for "
               "that worker's death without bound, and never exited while the mount hung)" +
               ("" if ok else f" (exit {rc} after {took:.1f} s): " + err[-300:]))


@scenario("a worker writes a 100 MB error file", "worker")
def error_file_huge(ctx):
    # Written in pieces, so that the worker stays small: the peak RSS is cohortrun's.
    script = ("import os, sys\n"
              "path = os.environ['TORCHELASTIC_ERROR_FILE']\n"
              "os.makedirs(os.path.dirname(path), exist_ok=True)\n"
              "line = 'x' * 99 + '\\\\n'\n"
              "with open(path, 'w') as f:\n"
              "    f.write('{\"message\": {\"message\": \"RuntimeError: big\", '\n"
              "            '\"extraInfo\": {\"timestamp\": \"0\", \"py_callstack\": \"')\n"
              "    for _ in range(1000):\n"
              "        f.write(line * 1000)\n"
              "    f.write('\"}}}')\n"
              "sys.exit(1)\n")
    p, took, rss = python_job(ctx, script)
    err = p.stderr_bytes
    ok = p.returncode == 1 and rss < 100 and len(err) < 256 * 1024 and b"Root Cause" in err
    left = ctx.wait_clean()
    return row(took, f"summary of {len(err) / 1024:.0f} KiB, cohortrun's peak RSS {rss:.0f} MiB",
               "n/a", left, ok and left == "nothing",
               "a bounded read and a bounded summary: peak RSS under 100 MiB and under 256 KiB "
               "printed (it took 909 MB and printed all 100 MB)" +
               ("" if ok else f": exit {p.returncode}, " + p.stderr_text[-300:]))


@scenario("terminal escapes in a worker's error file", "input")
def error_file_escapes(ctx):
    script = ("import os, sys, json\n"
              "path = os.environ['TORCHELASTIC_ERROR_FILE']\n"
              "os.makedirs(os.path.dirname(path), exist_ok=True)\n"
              "evil = '\\x1b]0;pwned\\x07\\x1b[2J\\x1b]52;c;ZXZpbA==\\x07'\n"
              "json.dump({'message': {'message': 'RuntimeError: ' + evil, 'extraInfo':\n"
              "           {'py_callstack': 'Traceback' + evil, 'timestamp': '0'}}},\n"
              "          open(path, 'w'))\n"
              "sys.exit(1)\n")
    p, took, _ = python_job(ctx, script)
    err = p.stderr_bytes
    ok = p.returncode == 1 and b"\x1b" not in err and b"\x07" not in err and b"\\x1b]0;pwned" in err
    left = ctx.wait_clean()
    return row(took, summary_line(p.stderr_text, "pwned"), "n/a", left, ok and left == "nothing",
               "escape sequences from the file (title, screen clear, clipboard write) are shown "
               "escaped, never sent to the terminal" +
               ("" if ok else ": " + repr(err[-300:])))


def tagged_leftovers(ctx, tag):
    """Processes whose command line carries `tag` (a descendant that cleared its environment
    carries no COHORT_FAULT_TAG)."""
    found = []
    for d in glob.glob("/proc/[0-9]*"):
        try:
            with open(d + "/cmdline", "rb") as f:
                if tag.encode() in f.read():
                    found.append(int(d.rsplit("/", 1)[1]))
        except OSError:
            pass
    return [p for p in found if p != os.getpid()]


ESCAPER = ("import os, subprocess, sys, time\n"
           "nap = [sys.executable, '-c', 'import time; time.sleep(120)', sys.argv[1]]\n"
           "subprocess.Popen(nap)  # a child in the worker's process group\n"
           "subprocess.Popen(['env', '-i', 'setsid'] + nap)  # out of the group, no environment\n"
           "open(sys.argv[2], 'w').close()\n"
           "time.sleep(120)\n")


@scenario("cohortrun's whole process group SIGKILLed", "launcher")
def group_kill(ctx):
    script = os.path.join(ctx.dir, "escaper.py")
    with open(script, "w") as f:
        f.write(ESCAPER)
    mark = os.path.join(ctx.dir, "started")
    tag = ctx.tag + "esc"
    # As `timeout -s KILL` and `kill -9 -<pgid>` do: cohortrun leads a group, and all of it dies.
    proc = subprocess.Popen([ctx.path("cohortrun"), "--nproc-per-node", "1", "--rdzv-id", ctx.tag,
                             script, tag, mark], env=ctx.env(), start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    # cohortrun, the worker and its two descendants carry the tag on their command lines.
    wait_until(lambda: os.path.exists(mark) and len(tagged_leftovers(ctx, tag)) >= 4)
    before = len(tagged_leftovers(ctx, tag))
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    t0 = time.monotonic()
    wait_until(lambda: not tagged_leftovers(ctx, tag), timeout=3)
    gone = time.monotonic() - t0
    stray = tagged_leftovers(ctx, tag)
    for pid in stray:  # ours: started by this scenario, named by its tag
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    left = ctx.wait_clean()
    left = left if not stray else f"{len(stray)} descendants" + ("" if left == "nothing" else ", " + left)
    ok = before >= 4 and not stray
    return row(gone if not stray else None,
               f"{len(stray)} of the worker's 2 descendants left (a child, a setsid'd one with no "
               "environment)",
               "n/a", left, ok and left == "nothing",
               "the worker's child and its setsid'd, environment-less descendant are gone within "
               "3 s (the reaper, outside cohortrun's group, or the workers' cgroup)")


@scenario("SIGTERM while the endpoint accepts and never answers", "launcher")
def sigterm_connecting(ctx):
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    port = listener.getsockname()[1]
    proc = subprocess.Popen([ctx.path("cohortrun"), "--nnodes", "1:2", "--rdzv-backend", "c10d",
                             "--rdzv-endpoint", f"127.0.0.1:{port}", "--local-addr", "127.0.0.1",
                             "--rdzv-id", ctx.tag, "--nproc-per-node", "1", "--no-python",
                             "/bin/true"], env=ctx.env(), stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    listener.settimeout(20)
    try:
        conn, _ = listener.accept()  # cohortrun is in its handshake now
    except OSError:
        conn = None
    time.sleep(0.3)  # well into the handshake's wait for the first answer
    t0 = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    try:
        rc = proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        rc = proc.wait()
    took = time.monotonic() - t0
    err = proc.stderr.read()
    if conn:
        conn.close()
    listener.close()
    ok = conn is not None and rc == 128 + signal.SIGTERM and took < 2
    left = ctx.wait_clean()
    return row(took, summary_line(err, "SIGTERM"), "n/a", left, ok and left == "nothing",
               "exit 143 within 2 s (it waited out the 10 s handshake timeout)" +
               ("" if ok else f": exit {rc} after {took:.1f} s: {err[-300:]}"))


@scenario("a client writes a malformed round outcome", "input")
def malformed_outcome(ctx):
    store, port = start_cohortd(ctx, stderr=subprocess.DEVNULL)
    agents = [elastic_agent(ctx, port, "2", ctx.tag, ctx.dir, 60) for _ in range(2)]
    wait_until(lambda: ctx.mtime(0, 0) and ctx.mtime(1, 0))
    c = current_dialect(port)
    key = f"cohort/{ctx.tag}/round/0/outcome".encode()
    t0 = time.monotonic()
    c.sendall(b"\x01" + wire_bytes(key) + wire_bytes(b"{garbage"))  # SET
    rcs = []
    for a in agents:
        try:
            rcs.append(a.wait(timeout=30))
        except subprocess.TimeoutExpired:
            a.kill()
            rcs.append(a.wait())
    took = time.monotonic() - t0
    errs = "".join(a.stderr.read() for a in agents)
    c.close()
    store.kill()
    store.wait()
    ok = (rcs == [1, 1] and "bad_function_call" not in errs and
          errs.count("malformed outcome") >= 2 and took < 20)
    left = ctx.wait_clean()
    return row(took, summary_line(errs, "malformed outcome"), "n/a (job stopped)", left,
               ok and left == "nothing",
               "every agent stops its workers and exits 1 naming the malformed record (each ended "
               "with `cohortrun: bad_function_call`)" + ("" if ok else f": {rcs} {errs[-300:]}"))


@scenario("cohortctl status over hostile records", "input")
def ctl_hostile_records(ctx):
    store, port = start_cohortd(ctx, "--max-value-bytes", str(64 << 20), stderr=subprocess.DEVNULL)
    c = current_dialect(port)
    escape = b"\x1b]0;pwned\x07\x1b[2J"
    job = b"cohort/" + escape + b"job/"
    big, medium = b"x" * (24 << 20), b"y" * (3 << 20)
    node = lambda rank: json_bytes({"node_rank": rank, "nproc": 2**31 - 1, "host": "h" + escape.decode()})
    for i in range(60):  # 432 MiB of status records: 12 of 24 MiB, 48 of 3 MiB
        value = big if i % 5 == 0 else medium
        c.sendall(b"\x01" + wire_bytes(job + f"status/{i}".encode()) + wire_bytes(value))
    for r in range(2):
        c.sendall(b"\x01" + wire_bytes(job + f"round/0/node/{r}".encode()) + wire_bytes(node(r)))
    c.sendall(b"\x03" + wire_bytes(job + b"round/0/node/1"))  # GET: every SET before it is done
    recv_exact(c, 8 + len(node(1)))
    rc, out, err, took, peak = run_measured(
        [ctx.path("cohortctl"), "status", "--store", f"127.0.0.1:{port}"], ctx.env())
    c.close()
    store.kill()
    store.wait()
    text = out + err
    ok = (rc == 0 and peak < 200 and b"\x1b" not in text and b"\x07" not in text and
          b"-2 worker" not in text and b"\\x1b]0;pwned" in text and b"not read" in text)
    left = ctx.wait_clean()
    return row(took, f"peak RSS {peak:.0f} MiB for 432 MiB of records; output escaped",
               "n/a", left, ok and left == "nothing",
               "cohortctl reads a value up to 4 MiB and a job's records up to 64 MiB, naming what "
               "it skips (it took 2.2 GB for 720 MB of records), refuses node records whose "
               "worker count would overflow (it showed \"-2 workers\"), and escapes what clients "
               "wrote: peak RSS under 200 MiB" +
               ("" if ok else f": exit {rc}, peak {peak:.0f} MiB: {text[-400:]!r}"))


def json_bytes(obj):
    import json
    return json.dumps(obj).encode()


@scenario("bad command line", "input")
def bad_cli(ctx):
    cases = [["--nproc-per-node", "zero", "x"], ["--nnodes", "3:1", "x"], ["--redirects", "9", "x"],
             ["--rdzv-backend", "c10d", "x"], []]
    outs = [ctx.run([ctx.path("cohortrun"), *c]) for c in cases]
    ok = all(p.returncode == 2 and "cohortrun:" in p.stderr for p, _ in outs)
    return row(max(t for _, t in outs), summary_line(outs[0][0].stderr, "cohortrun:"), "n/a",
               ctx.wait_clean(), ok, "exit 2 with a message naming the flag, for each case")


@scenario("malformed worker environment", "input")
def bad_env(ctx):
    worker = ctx.path("runtime_test_worker")
    if not os.path.exists(worker):
        return row(None, "runtime_test_worker not built", "n/a", "nothing", False, "")
    env = ctx.env(RANK="0", WORLD_SIZE="two", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1",
                  MASTER_PORT="1")
    p, took = ctx.run([worker, "collectives"], env=env, timeout=30)
    ok = p.returncode != 0 and "WORLD_SIZE" in p.stderr and "two" in p.stderr
    return row(took, summary_line(p.stderr, "WORLD_SIZE"), "n/a", ctx.wait_clean(), ok,
               "a clear error naming the variable and its value")


@scenario("corrupt data file (Fashion-MNIST)", "input")
def bad_data(ctx):
    trainer = ctx.path("cohort-train-fmnist")
    if not os.path.exists(trainer):
        return row(None, "cohort-train-fmnist not built", "n/a", "nothing", False, "")
    data = os.path.join(ctx.dir, "data")
    os.makedirs(data)
    src = "/usr/share/datasets/fashion-mnist"
    for f in os.listdir(src):
        shutil.copy(os.path.join(src, f), data)
    with open(os.path.join(data, "train-images-idx3-ubyte.gz"), "r+b") as f:
        f.seek(1000)
        f.write(b"\xde\xad\xbe\xef" * 256)
    p, took = ctx.run([ctx.path("cohortrun"), "--nproc-per-node", "1", "--rdzv-id", ctx.tag,
                       trainer, "--data", data, "--max-steps", "2"], timeout=120)
    ok = p.returncode == 1 and "train-images" in p.stderr
    return row(took, summary_line(p.stderr, "train-images|gzip|corrupt"), "n/a", ctx.wait_clean(),
               ok, "exit 1 naming the file, no crash")


@scenario("corrupt checkpoint", "input")
def bad_checkpoint(ctx):
    trainer = ctx.path("cohort-train-fmnist")
    if not os.path.exists(trainer):
        return row(None, "cohort-train-fmnist not built", "n/a", "nothing", False, "")
    ck = os.path.join(ctx.dir, "ckpt")
    args = [trainer, "--checkpoint-dir", ck, "--checkpoint-every", "5", "--max-steps", "10",
            "--train-limit", "1280", "--test-limit", "200", "--metrics", "-"]
    p1, _ = ctx.run([ctx.path("cohortrun"), "--nproc-per-node", "1", "--rdzv-id", ctx.tag, *args])
    for f in glob.glob(os.path.join(ck, "ckpt_*", "*")) + glob.glob(os.path.join(ck, "ckpt_*")):
        if os.path.isfile(f):
            with open(f, "r+b") as fh:
                fh.seek(max(0, os.path.getsize(f) // 2))
                fh.write(b"\x00garbage\x00" * 8)
    args[args.index("10")] = "15"
    p2, took = ctx.run([ctx.path("cohortrun"), "--nproc-per-node", "1", "--rdzv-id", ctx.tag, *args])
    ok = p1.returncode == 0 and p2.returncode == 0
    return row(took, summary_line(p2.stderr + p2.stdout, "checkpoint|resum|corrupt|ignor"),
               "yes" if ok else f"no ({p1.returncode}, {p2.returncode})", ctx.wait_clean(), ok,
               "a damaged checkpoint is skipped (older one, or a fresh start), never trusted")


# ---- driver ----------------------------------------------------------------------------------------

def fmt_s(v):
    return "-" if v is None else (f"{v * 1000:.0f} ms" if v < 1 else f"{v:.1f} s")


def published_rows():
    """The rows of the committed docs/RELIABILITY.md: {scenario: (left behind, result)}."""
    path = os.path.join(ROOT, "docs", "RELIABILITY.md")
    rows = {}
    if not os.path.exists(path):
        return rows
    for line in open(path):
        cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
        if len(cells) == 7 and cells[0] not in ("scenario", "---"):
            rows[cells[0]] = (cells[5], cells[6])
    return rows


def regressions(rows, only):
    """What got worse against the published table: a scenario that passed there and now fails, left
    something behind where it left nothing, or disappeared from the suite."""
    found = []
    now = {r["name"]: r for r in rows}
    for name, (left, result) in published_rows().items():
        if result != "pass":
            continue
        r = now.get(name)
        if r is None:
            if not only:
                found.append(f"{name}: in docs/RELIABILITY.md but no longer run")
            continue
        if not r["ok"]:
            found.append(f"{name}: passed in docs/RELIABILITY.md, fails now")
        elif left == "nothing" and r["left"] != "nothing":
            found.append(f"{name}: left nothing behind in docs/RELIABILITY.md, now: {r['left']}")
    return found


def table_row(r):
    saw = r["saw"].replace("|", "\\|")
    return (f"| {r['name']} | {r['category']} | {fmt_s(r['detected'])} | `{saw}` | "
            f"{r['recovered']} | {r['left']} | {'pass' if r['ok'] else 'FAIL'} |")


def merge_docs(rows):
    """docs/RELIABILITY.md with `rows` put in: a scenario's row and expectation replaced where the
    file has them, else inserted where the suite's order puts them; those of scenarios the suite no
    longer has are dropped."""
    path = os.path.join(ROOT, "docs", "RELIABILITY.md")
    lines = open(path).read().split("\n")
    order = [name for name, _, _ in SCENARIOS]
    new_rows = {r["name"]: table_row(r) for r in rows}
    new_why = {r["name"]: f"- **{r['name']}**: {r['why']}." for r in rows if r["why"]}

    def merged(kind, entries, name_of):
        """`entries` (lines of one kind, in the file's order) with the new ones merged by name."""
        by_name = {name_of(line): line for line in entries}
        by_name.update(entries_new[kind])
        # A row of a scenario the suite no longer has (renamed or removed) goes.
        names = sorted((n for n in by_name if n in order), key=order.index)
        return [by_name[n] for n in names]

    entries_new = {"row": new_rows, "why": new_why}
    row_name = lambda line: line.strip("|").split(" | ")[0].strip()
    why_name = lambda line: line[len("- **"):line.index("**:")]
    is_row = lambda line: line.startswith("| ") and not line.startswith("| scenario |")
    is_why = lambda line: line.startswith("- **") and "**:" in line
    out, i = [], 0
    while i < len(lines):
        for kind, test, name_of in (("row", is_row, row_name), ("why", is_why, why_name)):
            if test(lines[i]):
                block = []
                while i < len(lines) and test(lines[i]):
                    block.append(lines[i])
                    i += 1
                out += merged(kind, block, name_of)
                break
        else:
            out.append(lines[i])
            i += 1
    with open(path, "w") as f:
        f.write("\n".join(out))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--only", default="")
    ap.add_argument("--out", default=None)
    ap.add_argument("--update-docs", action="store_true")
    ap.add_argument("--merge-docs", action="store_true")
    args = ap.parse_args()
    ctx = Ctx(os.path.abspath(args.build))
    rows = []
    for i, (name, category, fn) in enumerate(SCENARIOS):
        if args.only and args.only not in name:
            continue
        ctx.tag = f"fault{os.getpid()}x{i}"
        ctx.dir = tempfile.mkdtemp(prefix="cohort_fault_")
        t0 = time.monotonic()
        try:
            r = fn(ctx)
        except Exception as e:  # a scenario that breaks is a failed row, with the reason
            r = row(None, f"scenario error: {type(e).__name__}: {e}"[:110], "?", ctx.wait_clean(),
                    False, "")
        finally:
            shutil.rmtree(ctx.dir, ignore_errors=True)
        r.update(name=name, category=category)
        rows.append(r)
        status = "ok  " if r["ok"] else "FAIL"
        print(f"{status} {name:48} detected {fmt_s(r['detected']):>9}  recovered {r['recovered']:24}"
              f" left {r['left']}  ({time.monotonic() - t0:.1f} s)", flush=True)
        if not r["ok"]:
            print(f"     expected: {r['why']}\n     saw: {r['saw']}", flush=True)
    table = ["| scenario | category | noticed after | what the user saw | recovered | left behind | result |",
             "|---|---|---|---|---|---|---|"]
    table += [table_row(r) for r in rows]
    doc = ("# What cohort survives\n\n"
           "Generated by `scripts/faults/run_faults.py` (CI runs it: `ctest -L faults`; a row that "
           "misses its expectation fails the build). Each scenario injects one fault into real "
           "processes on this machine (network scenarios: network namespaces, one per host) and "
           "records how long until cohort noticed (for restarts: from the fault to the restarted "
           "workers running), what the user saw, whether the job recovered, and what was left "
           "behind: live processes of the job, shared-memory segments, listening ports.\n\n"
           + "\n".join(table) + "\n\n"
           "Expectations, per scenario:\n\n" +
           "\n".join(f"- **{r['name']}**: {r['why']}." for r in rows if r["why"]) + "\n")
    out = args.out or os.path.join(os.path.abspath(args.build), "faults", "RELIABILITY.md")
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out, "w") as f:
        f.write(doc)
    if args.update_docs:
        with open(os.path.join(ROOT, "docs", "RELIABILITY.md"), "w") as f:
            f.write(doc)
    if args.merge_docs:
        merge_docs(rows)
    failed = [r["name"] for r in rows if not r["ok"]]
    print(f"{len(rows) - len(failed)}/{len(rows)} scenarios as expected; table in {out}")
    worse = [] if args.update_docs or args.merge_docs else regressions(rows, args.only)
    for w in worse:
        print(f"REGRESSION {w}")
    sys.exit(1 if failed or worse else 0)


if __name__ == "__main__":
    main()
