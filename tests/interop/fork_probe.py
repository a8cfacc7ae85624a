"""A worker that writes down everything of its process a fork server could get wrong, as JSON.

Run it exec'd (`python -u fork_probe.py OUT [action]`; OUT may say %(rank)s and %(attempt)s) and forked from cohortrun's fork server
with the same argv, environment and descriptors: the two records must agree (fork_server_protocol.py
and the cohortrun tests compare them). OUT gets the record; `action` then decides how it ends:
  ok (default)   exit 0, after a non-daemon thread and an atexit handler have written OUT.thread
                 and OUT.atexit (the interpreter's own shutdown ran)
  raise          an uncaught ValueError (exit 1, the traceback on stderr)
  exit:N         sys.exit(N)
  interrupt      an uncaught KeyboardInterrupt (the interpreter ends by SIGINT)
  sleep          sleep a minute (to be signalled)
  family         start a child (sleep 600), write OUT.family with this pid and the child's, and
                 sleep a minute
  crash-once     exit 3 when TORCHELASTIC_RESTART_COUNT is 0 and RANK is 1 (once rank 0 has
                 written its record), else ok
  crash-once-then:ACTION   the same crash, then ACTION in every later attempt
The record is written after the modules a fork server pre-imports are imported, so that an exec'd
worker and a forked one are compared in the same state.
"""
import sys

FORKED = "torch" in sys.modules  # nothing below has imported it yet

import atexit  # noqa: E402
import builtins  # noqa: E402
import ctypes  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import random  # noqa: E402
import signal  # noqa: E402
import threading  # noqa: E402

import torch  # noqa: E402,F401
import torch.distributed  # noqa: E402,F401
import torch.nn.parallel  # noqa: E402,F401
import torch.optim  # noqa: E402,F401

try:
    import torch._dynamo  # noqa: F401  (torch 2.x: what DistributedDataParallel imports)
except ImportError:
    pass

import fork_probe_helper  # noqa: E402  (a module of the script's own folder)

libc = ctypes.CDLL(None, use_errno=True)
libc.getenv.restype = ctypes.c_char_p


def handler_name(h):
    if h is signal.SIG_DFL:
        return "SIG_DFL"
    if h is signal.SIG_IGN:
        return "SIG_IGN"
    if h is None:
        return "None"
    return getattr(h, "__qualname__", repr(h))


def fd_kind(fd):
    try:
        target = os.readlink("/proc/self/fd/%d" % fd)
    except OSError:
        return None
    for kind in ("pipe", "socket", "anon_inode"):
        if target.startswith(kind + ":"):
            return target.split("[")[0] if kind != "anon_inode" else target
    if target.startswith("/dev/pts/"):
        return "pty"
    return target


def status_fields(*names):
    out = {}
    with open("/proc/self/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in names:
                out[key] = value.strip()
    return out


def pdeathsig():
    sig = ctypes.c_int(0)
    libc.prctl(2, ctypes.byref(sig), 0, 0, 0)  # PR_GET_PDEATHSIG
    return sig.value


def record():
    main = sys.modules["__main__"]
    fds = {}
    for name in os.listdir("/proc/self/fd"):
        kind = fd_kind(int(name))
        if kind is not None:
            fds[name] = kind
    loader = getattr(main, "__loader__", None)
    with open("/proc/self/cmdline", "rb") as f:
        cmdline = [a.decode() for a in f.read().split(b"\0")]
    while cmdline and cmdline[-1] == "":
        cmdline.pop()
    numpy_random = None
    if "numpy" in sys.modules:
        numpy_random = float(sys.modules["numpy"].random.random())
    return {
        "forked": FORKED,
        "argv": sys.argv,
        "orig_argv": getattr(sys, "orig_argv", None),
        "cmdline": cmdline,
        "executable": sys.executable,
        "flags": list(sys.flags),
        "env": dict(os.environ),
        # The C library's environment must be os.environ's, and nothing more.
        "c_env_differs": sorted(k for k, v in os.environ.items()
                                if (libc.getenv(k.encode()) or b"").decode() != v),
        "c_env_has_fork_marker": libc.getenv(b"COHORT_IN_FORK_SERVER") is not None,
        "cwd": os.getcwd(),
        "path": sys.path,
        "main": {
            "name": main.__name__,
            "file": main.__file__,
            "spec": repr(main.__spec__),
            "package": repr(main.__package__),
            "cached": repr(main.__cached__),
            "doc": main.__doc__ is not None,
            "annotations": repr(getattr(main, "__annotations__", "missing")),
            "loader": [type(loader).__name__, getattr(loader, "name", None),
                       getattr(loader, "path", None)],
            "builtins_is_module": main.__builtins__ is builtins,
            "is_this_module": main.__dict__ is globals(),
        },
        "helper": fork_probe_helper.VALUE,
        "signals": {str(int(s)): handler_name(signal.getsignal(s))
                    for s in signal.valid_signals() if s not in (signal.SIGKILL, signal.SIGSTOP)
                    and int(s) < signal.SIGRTMIN},
        "sigmask": sorted(int(s) for s in signal.pthread_sigmask(signal.SIG_BLOCK, [])),
        "status": status_fields("SigBlk", "SigIgn", "SigCgt"),
        "fds": fds,
        "pid": os.getpid(),
        "ppid": os.getppid(),
        "leads_group": os.getpgid(0) == os.getpid(),
        "sid": os.getsid(0),
        "pdeathsig": pdeathsig(),
        "python_threads": threading.active_count(),
        "random": random.random(),
        "numpy_random": numpy_random,
        "stdout": [sys.stdout.line_buffering, sys.stdout.write_through, sys.stdout.isatty()],
        "stderr_isatty": sys.stderr.isatty(),
    }


def main():
    out = sys.argv[1] % {"rank": os.environ.get("RANK", "0"),
                         "attempt": os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")}
    action = sys.argv[2] if len(sys.argv) > 2 else "ok"
    with open(out + ".tmp", "w") as f:
        json.dump(record(), f, indent=1, sort_keys=True)
    os.rename(out + ".tmp", out)
    if action == "crash-once" or action.startswith("crash-once-then:"):
        first = os.environ.get("TORCHELASTIC_RESTART_COUNT") == "0"
        if first and os.environ.get("RANK") == "1":
            # Not before rank 0 has written its record: the crash stops it.
            import time
            rank0 = sys.argv[1] % {"rank": "0", "attempt": "0"}
            deadline = time.monotonic() + 120
            while not os.path.exists(rank0) and time.monotonic() < deadline:
                time.sleep(0.05)
            os._exit(3)
        action = "ok" if first or action == "crash-once" else action.split(":", 1)[1]
    if action == "raise":
        raise ValueError("the probe raised on purpose")
    if action.startswith("exit:"):
        sys.exit(int(action[5:]))
    if action == "interrupt":
        raise KeyboardInterrupt
    if action == "family":
        import subprocess
        child = subprocess.Popen(["sleep", "600"])
        with open(out + ".family.tmp", "w") as f:
            f.write("%d %d\n" % (os.getpid(), child.pid))
        os.rename(out + ".family.tmp", out + ".family")
        action = "sleep"
    if action == "sleep":
        import time
        time.sleep(60)
    atexit.register(lambda: open(out + ".atexit", "w").close())

    def late():
        import time
        time.sleep(0.2)
        open(out + ".thread", "w").close()

    threading.Thread(target=late).start()  # not a daemon: the interpreter waits for it


if __name__ == "__main__":
    main()
