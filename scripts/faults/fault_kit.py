"""What every row of the fault suite shares (scripts/faults/run_faults.py, store_hostile.py): the
registry of scenarios and their rows, a cohortd on a free port, and raw clients of its wire
protocol (the current dialect, the token handshake)."""
import hashlib
import hmac
import resource
import socket
import subprocess
import time

SCENARIOS = []


def scenario(name, category):
    def register(fn):
        SCENARIOS.append((name, category, fn))
        return fn
    return register


class Row(dict):
    pass


def row(detected=None, saw="", recovered="n/a", left="nothing", ok=True, why=""):
    return Row(detected=detected, saw=saw, recovered=recovered, left=left, ok=ok, why=why)


def start_cohortd(ctx, *flags, stderr=subprocess.PIPE):
    """A cohortd on a free port of 127.0.0.1; returns (process, port)."""
    s = subprocess.Popen([ctx.path("cohortd"), "--host", "127.0.0.1", "--port", "0", *flags],
                         stdout=subprocess.PIPE, stderr=stderr, env=ctx.env())
    return s, int(s.stdout.readline().decode().strip().rsplit(":", 1)[1])


def current_dialect(port):
    """A current-dialect client (VALIDATE done): a socket and set/get/timed helpers."""
    c = socket.create_connection(("127.0.0.1", port))
    c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    c.settimeout(10)
    c.sendall(b"\x00" + (0x3C85F7CE).to_bytes(4, "little"))
    return c


def recv_exact(c, n):
    out = b""
    while len(out) < n:
        got = c.recv(n - len(out))
        if not got:
            raise ConnectionError("closed")
        out += got
    return out


def wire_bytes(b):
    return len(b).to_bytes(8, "little") + b


def polite_set_get(c, i):
    """SET then GET of a small key on a current-dialect connection; seconds taken."""
    t0 = time.monotonic()
    v = str(i).encode()
    c.sendall(b"\x01" + wire_bytes(b"polite") + wire_bytes(v))  # SET (no reply)
    c.sendall(b"\x03" + wire_bytes(b"polite"))                  # GET
    n = int.from_bytes(recv_exact(c, 8), "little")
    if recv_exact(c, n) != v:
        raise RuntimeError("wrong value")
    return time.monotonic() - t0


def status_kib(pid, field):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return -1


def raise_nofile(need):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < need:
        unlimited = hard == resource.RLIM_INFINITY
        resource.setrlimit(resource.RLIMIT_NOFILE, (need if unlimited else min(need, hard), hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0] >= need


def authenticated(port, token):
    """A client that holds the token: the one-way handshake (see rendezvous/include/cohort/rdzv/
    auth.h), then VALIDATE, as current_dialect."""
    c = socket.create_connection(("127.0.0.1", port))
    c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    c.settimeout(10)
    c.sendall(b"\x41")  # AUTH_HELLO
    challenge = recv_exact(c, 32)
    c.sendall(b"\x42" + hmac.new(token, challenge + b"cohort-auth-v1", hashlib.sha256).digest())
    if recv_exact(c, 1) != b"\x01":
        raise RuntimeError("token refused")
    c.sendall(b"\x00" + (0x3C85F7CE).to_bytes(4, "little"))
    return c
