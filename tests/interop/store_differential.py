"""One long sequence of TCPStore operations, run by this interpreter's PyTorch client against
PyTorch's own servers and against cohortd; every result must be identical.

With PyTorch 2.x the servers are the libuv one (2.x's default) and the classic one
(use_libuv=False); with 1.13, its only server. The sequence uses every operation the client has
(set, get, add, compare_set, check, wait with and without a timeout, delete_key, num_keys, and on
2.x append, multi_get, multi_set, queue_push/pop/len, list_keys, barrier), with values holding NUL
bytes, a 1 MB value of every byte, missing keys, timeouts, and waiters woken by set, add,
compare_set, append and multi_set. A result is a value, or the exception's type when the client
raises (messages name the server's own code paths and differ by design).

Where PyTorch's own servers disagree with each other, cohortd answers as the newest (libuv) one;
KNOWN_DIFFERENCES lists each step where a PyTorch server answers otherwise than cohortd, with the
reason; the test fails on any other difference, and when a listed one disappears (so the list
stays true).

Usage: store_differential.py COHORTD_BINARY"""
import datetime
import os
import sys
import threading
import time

os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")  # the servers' warnings on closed clients
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

from cohort_testlib import Cohortd  # noqa: E402

COHORTD = sys.argv[1] if len(sys.argv) > 1 else "build/bin/cohortd"
TORCH2 = int(torch.__version__.split(".")[0]) >= 2
TIMEOUT = datetime.timedelta(seconds=10)
SHORT = datetime.timedelta(milliseconds=300)

# (server, step) -> why PyTorch's server answers otherwise than cohortd and the libuv server.
KNOWN_DIFFERENCES = {
    ("classic", "waiter woken by compare_set"):
        "the classic server's COMPARE_SET creates the key without waking its waiters (they time "
        "out); the libuv server and cohortd wake them",
    ("1.13", "waiter woken by compare_set"):
        "1.13's server's COMPARE_SET creates the key without waking its waiters (they time out); "
        "cohortd wakes them, as PyTorch's newest server does",
}
# PyTorch 2.15's classic server (TCPStoreBackend.cpp) has no QUEUE_* commands: only its libuv
# server does. It closes the connection on them. (A blocking pop that times out raises the same
# error on both: the client waits for the queue's key before it pops.)
CLASSIC_LACKS = ["queue_len empty", "queue_push", "queue_push again", "queue_len", "queue_pop",
                 "queue_pop non-blocking", "queue_pop empty non-blocking"]
for _step in CLASSIC_LACKS:
    KNOWN_DIFFERENCES[("classic", _step)] = (
        "the classic server has no QUEUE_* commands (only 2.x's libuv server has)")


def outcome(fn):
    try:
        r = fn()
    except Exception as e:  # the type is the result; the message is the server's own wording
        return "raises " + type(e).__name__
    if isinstance(r, bytes) and len(r) > 64:
        return f"{len(r)} bytes, sum {sum(r)}, first {r[:8]!r}, last {r[-8:]!r}"
    return repr(r)


def woken(client_factory, keys, wake, timeout=TIMEOUT):
    """Parks a waiter on `keys` on its own connection, runs `wake`, and says whether the waiter
    was released (and how), without relying on the order of the two beyond "parked first"."""
    waiter = client_factory()
    done = {}

    def wait():
        done["r"] = outcome(lambda: waiter.wait(keys, timeout))

    t = threading.Thread(target=wait)
    t.start()
    # The waiter's WAIT must reach the server before the write: there is no way to observe that
    # from outside, so give it the time a loopback round trip takes many times over. A late
    # arrival makes no difference to the result (the key exists by then and WAIT returns), so
    # this wait cannot make the test pass wrongly.
    time.sleep(0.2)
    w = wake()
    t.join(timeout.total_seconds() + 5)
    return f"wake {w}; waiter {done.get('r', 'still waiting')}"


def sequence(connect):
    """Runs the sequence against the server `connect()` reaches; returns [(step, result)]."""
    s = connect()
    out = []

    def step(name, fn):
        out.append((name, outcome(fn) if callable(fn) else fn))

    every_byte = bytes(range(256)) * 4096  # 1 MiB
    step("set with NUL bytes", lambda: s.set("nul", b"a\0b\0\0c"))
    step("get with NUL bytes", lambda: s.get("nul"))
    step("set 1 MiB", lambda: s.set("big", every_byte))
    step("get 1 MiB", lambda: s.get("big"))
    step("set empty", lambda: s.set("empty", b""))
    step("get empty", lambda: s.get("empty"))
    step("overwrite", lambda: s.set("nul", "second"))
    step("get overwritten", lambda: s.get("nul"))
    step("add new", lambda: s.add("cnt", 5))
    step("add negative", lambda: s.add("cnt", -7))
    step("add zero", lambda: s.add("cnt", 0))
    step("get counter", lambda: s.get("cnt"))
    step("add to a non-number", lambda: connect().add("nul", 1))
    step("compare_set missing, expected empty", lambda: s.compare_set("cs1", "", "desired"))
    step("compare_set missing, expected other", lambda: s.compare_set("cs2", "exp", "desired"))
    if hasattr(s, "check"):  # not in 1.13's Python binding
        step("check after compare_set on missing", lambda: s.check(["cs2"]))
    step("compare_set match", lambda: s.compare_set("cs1", "desired", "next"))
    step("compare_set mismatch", lambda: s.compare_set("cs1", "wrong", "never"))
    step("get after compare_sets", lambda: s.get("cs1"))
    if hasattr(s, "check"):
        step("check present", lambda: s.check(["nul", "cnt"]))
        step("check one missing", lambda: s.check(["nul", "missing"]))
    step("num_keys", lambda: s.num_keys())
    step("wait present", lambda: s.wait(["nul", "big"]))
    step("wait present, timeout", lambda: s.wait(["nul"], SHORT))
    step("wait missing, timeout", lambda: s.wait(["missing"], SHORT))
    step("delete present", lambda: s.delete_key("nul"))
    step("delete again", lambda: s.delete_key("nul"))
    step("num_keys after delete", lambda: s.num_keys())

    short = connect(SHORT)
    step("get missing (waits, times out)", lambda: short.get("missing"))
    step("same connection after the timeout", lambda: short.get("cnt"))

    step("waiter woken by set", woken(connect, ["w-set"], lambda: outcome(lambda: s.set("w-set", "x"))))
    step("waiter woken by add", woken(connect, ["w-add"], lambda: outcome(lambda: s.add("w-add", 3))))
    step("waiter woken by compare_set",
         woken(connect, ["w-cas"], lambda: outcome(lambda: s.compare_set("w-cas", "", "x")),
               SHORT * 3))
    step("two keys, one set", woken(connect, ["cnt", "w-two"], lambda: outcome(lambda: s.set("w-two", "1"))))

    if TORCH2:
        step("append new", lambda: s.append("app", b"ab\0"))
        step("append more", lambda: s.append("app", "cd"))
        step("get appended", lambda: s.get("app"))
        step("waiter woken by append",
             woken(connect, ["w-app"], lambda: outcome(lambda: s.append("w-app", "z"))))
        step("multi_set", lambda: s.multi_set(["m1", "m2", "m3"], [b"1", b"\0", b""]))
        step("multi_get", lambda: s.multi_get(["m1", "m2", "m3", "cnt"]))
        step("multi_get with a missing key", lambda: connect(SHORT).multi_get(["m1", "nope"]))
        step("waiter woken by multi_set",
             woken(connect, ["w-ms"], lambda: outcome(lambda: s.multi_set(["x", "w-ms"], ["1", "2"]))))
        # Each group on a connection of its own: a server without these commands drops it.
        s = connect()
        step("queue_len empty", lambda: s.queue_len("q"))
        step("queue_push", lambda: s.queue_push("q", b"first\0"))
        step("queue_push again", lambda: s.queue_push("q", "second"))
        step("queue_len", lambda: s.queue_len("q"))
        step("queue_pop", lambda: s.queue_pop("q"))
        step("queue_pop non-blocking", lambda: s.queue_pop("q", False))
        step("queue_pop empty non-blocking", lambda: s.queue_pop("q", False))
        step("queue_pop empty blocking, times out", lambda: connect(SHORT).queue_pop("q"))
        s = connect()
        step("list_keys", lambda: sorted(s.list_keys()))
        s = connect()
        step("barrier of one", lambda: s.barrier("b1", 1))
        step("barrier of two, alone, times out", lambda: connect().barrier("b2", 2, SHORT))

        def two_at_a_barrier():
            other = connect()
            r = {}
            t = threading.Thread(target=lambda: r.update(a=outcome(lambda: other.barrier("b3", 2))))
            t.start()
            b = outcome(lambda: s.barrier("b3", 2))
            t.join(15)
            return f"{r.get('a', 'still waiting')} / {b}"

        step("barrier of two", two_at_a_barrier())
        s = connect()
        step("num_keys after barriers", lambda: s.num_keys())
    step("final num_keys", lambda: connect().num_keys())
    return out


def torch_server(use_libuv):
    kw = {"use_libuv": use_libuv} if TORCH2 else {}
    return dist.TCPStore("127.0.0.1", 0, None, True, TIMEOUT, wait_for_workers=False, **kw)


def run_against(port):
    def connect(timeout=TIMEOUT):
        c = dist.TCPStore("127.0.0.1", port, None, False, TIMEOUT)
        c.set_timeout(timeout)  # not at construction: that timeout bounds the connect too
        return c

    return sequence(connect)


def main():
    results = {}
    servers = [("libuv", True), ("classic", False)] if TORCH2 else [("1.13", None)]
    for name, libuv in servers:
        server = torch_server(libuv)
        results[name] = run_against(server.port)
        del server
    with Cohortd(COHORTD) as d:
        results["cohortd"] = run_against(d.port)

    failures = []
    width = max(len(step) for step, _ in results["cohortd"])
    print(f"PyTorch {torch.__version__}: {len(results['cohortd'])} steps")
    for i, (step, ours) in enumerate(results["cohortd"]):
        for name, _ in servers:
            assert results[name][i][0] == step
            theirs = results[name][i][1]
            known = KNOWN_DIFFERENCES.get((name, step))
            if theirs != ours and not known:
                failures.append(f"{step}: cohortd {ours!r}, {name} {theirs!r}")
            elif theirs == ours and known:
                failures.append(f"{step}: {name} now answers as cohortd ({ours!r}): a known "
                                "difference is gone, update KNOWN_DIFFERENCES")
        print(f"  {step:<{width}}  {ours}")
    for why in sorted(set(w for (name, _), w in KNOWN_DIFFERENCES.items() if name in results)):
        steps = [step for (name, step), w in KNOWN_DIFFERENCES.items() if w == why]
        print(f"known difference ({', '.join(steps)}): {why}")
    if failures:
        print("DIFFERENCES:\n  " + "\n  ".join(failures))
        return 1
    print("identical on " + ", ".join(["cohortd"] + [n for n, _ in servers]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
