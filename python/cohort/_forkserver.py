"""cohortrun's fork server: restarted Python workers that start with their heavy modules imported.

A Python worker spends most of its start in `import torch` (seconds). cohortrun starts one fork
server per local rank, `python -u _forkserver.py ...` with that worker's interpreter, flags and
environment; the server imports the modules every attempt would import (torch and
torch.distributed, when the interpreter has torch; COHORT_FORK_PRELOAD adds more), and then, for
each attempt, forks a worker that runs the entry point as `python -u script.py args` would, without
starting an interpreter or importing torch again. The multiprocessing module's forkserver does the
same for its children.

This file imports nothing but the standard library and never imports the `cohort` package (a
worker's `import cohort` must find its own environment). It runs as the server's __main__.

The channel: a SOCK_SEQPACKET Unix socket whose descriptor number is --channel; one JSON message
per packet, descriptors as SCM_RIGHTS beside a request.
  server -> agent, once:  {"ready": true, "pid": P, "seconds": S, "modules": N, "failed": {...}}
                      or  {"ready": false, "error": "..."} (and the server exits)
  agent -> server:        {"argv": [...], "env_set": {"K": "V", ...}, "env_unset": ["K", ...],
                           "cwd": "/..", "fds": [targets], "agent": <the agent's pid>,
                           "cgroup": true|false}
                          + one descriptor per target, then with "cgroup" the workers' cgroup's
                          cgroup.procs, which the worker is moved into before it runs
  server -> agent:        {"pid": W}  or  {"error": "...", "stale": true|false}
The environment of a request is what differs from the one the agent started the server with: the
variables it sets per attempt (RANK, MASTER_PORT, COHORT_HEARTBEAT_FD, ...). The worker gets the
server's environment as it is after the interpreter's start and the pre-imports (Python's locale
coercion sets LC_CTYPE, a pyenv shim sets its variables, torch sets TORCHINDUCTOR_CACHE_DIR, just as
in an exec'd worker), with those changes. The agent decides that a worker's environment differs too
much for its server (a variable other than the per-attempt ones), and replaces the server.
"stale": this server can no longer start this worker faithfully (a pre-imported module changed on
disk); the agent starts the worker the ordinary way and replaces the server. An agent that closes
the channel ends the server.

Who is the worker's parent. cohortrun waits for, signals and reaps its workers as its children. The
server forks an intermediate process, the intermediate forks the worker and exits, and the worker,
orphaned, is adopted by the nearest child subreaper above it: cohortrun, which sets
PR_SET_CHILD_SUBREAPER (the server does not). The server replies only once the intermediate has
been reaped, so the worker is cohortrun's child by the time cohortrun learns its pid. The worker
then sets its parent-death signal (it must not be set before: it fires when the intermediate
exits) and checks that its parent is the agent.

The worker gets, as an exec'd worker would: the request's argv (sys.argv, sys.orig_argv, and the
process title /proc/<pid>/cmdline), environment (os.environ and the C environment), working
directory, descriptors (exactly the request's, at the request's numbers; every other descriptor
the server holds is closed, except those the pre-imported modules opened), a fresh __main__ module
run from the file (never pre-imported: a changed script is always re-read), an empty signal mask,
its own process group, reseeded random generators. Signal dispositions are the server's, which
never changes them: a fresh interpreter's after the pre-imports, as in an exec'd worker that
imported the same modules. What differs: /proc/<pid>/environ shows the environment the server
started with (libraries may hold pointers into it, so it is left alone), and str hashes share the
server's seed.

Per-process state of modules (threads, descriptors) must be made again in the worker. The server
runs with COHORT_IN_FORK_SERVER=1 and without any worker's descriptors in its environment (no
COHORT_HEARTBEAT_FD): a module imported at interpreter start (cohortrun's worker module,
_cohort_worker) claims nothing and starts no thread there. The worker's environment and
descriptors are in place before the worker is forked, so os.register_at_fork(after_in_child=...)
hooks see them in the worker (the intermediate runs the same hooks with the server's environment);
once the worker is set up, _cohort_worker.activate() claims its descriptors, when that module is
loaded.

The server refuses to start (ready: false) or to fork (error) when forking would not be safe: CUDA
initialised in the server (torch.cuda.is_initialized()), or a Python thread other than the main one
alive (a pre-import started one).
"""
import json
import os
import signal
import socket
import sys
import time

MAX_MESSAGE = 4 << 20
MAX_FDS = 64


class Refused(Exception):
    """This worker cannot be forked; `stale`: nor can any later one from this server."""

    def __init__(self, why, stale=False):
        super().__init__(why)
        self.stale = stale


def send(channel, message):
    channel.send(json.dumps(message).encode())


# --- the server ---------------------------------------------------------------------------------

class Server:
    def __init__(self, channel, entry, preload):
        self.channel = channel
        self.entry = entry  # ("script", path) or ("module", name)
        self.preload = preload
        self.cwd = os.getcwd()
        self.files = {}  # module file -> (mtime_ns, size) when imported
        self.keep_fds = set()  # descriptors the pre-imported modules opened
        # The environment after the start and the pre-imports, which workers start from: in
        # os.environ, and what C code set behind its back (name -> value, bytes).
        self.env = {}
        self.c_only_env = {}

    def start(self):
        t0 = time.monotonic()
        # File times come from a coarse clock (a jiffy behind): a margin covers it.
        began = time.time_ns() - 20_000_000
        before = open_fds()
        failed = {}
        for name in self.preload:
            try:
                __import__(name)
            except (Exception, SystemExit) as e:  # it is only not preloaded
                failed[name] = "%s: %s" % (type(e).__name__, e)
        self.check_safe()
        self.keep_fds = open_fds() - before
        self.env = {k: v for k, v in os.environ.items() if k != "COHORT_IN_FORK_SERVER"}
        self.c_only_env = {k: v for k, v in c_environ().items()
                           if os.fsdecode(k) not in os.environ}
        self.files = module_files(since=began)
        sys.stdout.flush()
        sys.stderr.flush()
        return {"ready": True, "pid": os.getpid(), "seconds": round(time.monotonic() - t0, 3),
                "modules": len(sys.modules), "failed": failed}

    def check_safe(self):
        torch = sys.modules.get("torch")
        cuda = getattr(torch, "cuda", None)
        if cuda is not None and getattr(cuda, "is_initialized", lambda: False)():
            raise Refused("CUDA is initialised in the fork server (a pre-imported module did it); "
                          "a forked worker could not use the GPU", stale=True)
        threading = sys.modules.get("threading")
        if threading is not None and threading.active_count() > 1:
            names = ", ".join(t.name for t in threading.enumerate()
                              if t is not threading.main_thread())
            raise Refused("the fork server has Python threads besides its main one (%s); "
                          "forking could leave their locks held in the worker" % names, stale=True)

    def check_request(self, req, nfds):
        argv, fds = req.get("argv"), req.get("fds")
        env_set, env_unset = req.get("env_set", {}), req.get("env_unset", [])
        if not isinstance(argv, list) or not isinstance(fds, list) or \
                not isinstance(env_set, dict) or not isinstance(env_unset, list):
            raise Refused("malformed request (argv, fds and env_unset must be lists, env_set an "
                          "object)")
        if len(fds) != nfds:
            raise Refused("the request names %d descriptors and carries %d" % (len(fds), nfds))
        if entry_of(argv) != self.entry:
            raise Refused("this server runs %s %s, not %s" % (self.entry + (argv,)), stale=True)
        if req.get("cwd", self.cwd) != self.cwd:
            raise Refused("the working directory changed", stale=True)
        env = dict(self.env)
        env.update({str(k): str(v) for k, v in env_set.items()})
        for k in env_unset:
            env.pop(str(k), None)
        changed = changed_files(self.files)
        if changed:
            raise Refused("%d pre-imported module file(s) changed on disk (%s)"
                          % (len(changed), changed[0]), stale=True)
        self.check_safe()
        return env

    def serve(self):
        """Answers requests until the agent closes the channel. Returns in a forked worker only:
        with the function that runs its entry point."""
        while True:
            try:
                data, fds, flags, _ = socket.recv_fds(self.channel, MAX_MESSAGE, MAX_FDS)
            except InterruptedError:
                continue
            if not data:
                return None  # the agent is gone
            run = None
            try:
                if flags & (socket.MSG_TRUNC | socket.MSG_CTRUNC):
                    raise Refused("request too large")
                try:
                    req = json.loads(data)
                except ValueError as e:
                    raise Refused("malformed request (%s)" % e)
                if not isinstance(req, dict):
                    raise Refused("malformed request (not a JSON object)")
                # The workers' cgroup (its cgroup.procs), when the agent has one: last.
                cgroup = fds[-1] if req.get("cgroup") and fds else None
                env = self.check_request(req, len(fds) - (cgroup is not None))
                run = self.fork_worker(req, env, fds[:len(fds) - (cgroup is not None)], cgroup)
            except Refused as e:
                send(self.channel, {"error": str(e), "stale": e.stale})
            except Exception as e:  # a bug here must not end the server silently
                send(self.channel, {"error": "%s: %s" % (type(e).__name__, e), "stale": True})
            if run is not None:
                return run  # in the worker, whose descriptors are in place
            for fd in fds:
                os.close(fd)

    def fork_worker(self, req, env, fds, cgroup):
        """Forks the intermediate, which forks the worker. Returns None in the server (after
        replying) and in the worker the function that runs its entry point."""
        r, w = os.pipe()
        intermediate = os.fork()
        if intermediate == 0:
            os.close(r)
            me = os.getpid()
            worker = intermediate_main(self, req, env, fds, cgroup, w)
            if worker is None:
                os._exit(1)
            if worker > 0:
                os._exit(0)
            # (Not getppid(): the intermediate may have exited already.)
            return adopted_worker(req, self.entry, intermediate_pid=me)
        os.close(w)
        answer = b""
        while True:
            chunk = os.read(r, 4096)
            if not chunk:
                break
            answer += chunk
        os.close(r)
        os.waitpid(intermediate, 0)
        if not answer[:1].isdigit():
            raise Refused("could not start the worker: " + answer[1:].decode(errors="replace"))
        send(self.channel, {"pid": int(answer)})
        return None


def intermediate_main(server, req, env, fds, cgroup, report):
    """The intermediate: takes on the worker's state and forks it. Returns the worker's pid (after
    writing it to `report`), 0 in the worker, None when it failed (reported)."""
    try:
        # What the intermediate still needs goes above every number the worker is given.
        floor = max([2, *req["fds"], *fds]) + 1
        report = move_above(report, floor)
        if cgroup is not None:
            cgroup = move_above(cgroup, floor)
        prepare_worker(server, req, env, fds, keep={report} | ({cgroup} - {None}))
        worker = os.fork()
        if worker == 0:
            os.close(report)
            if cgroup is not None:
                os.close(cgroup)
            return 0
        # Its group exists, and it is in the workers' cgroup (whatever it starts is, too), before
        # the agent learns its pid (the worker sets its group too).
        try:
            os.setpgid(worker, worker)
        except OSError:
            pass
        if cgroup is not None:
            try:
                os.write(cgroup, b"%d" % worker)
            except OSError:
                pass  # as for an exec'd worker: its process group remains
        os.write(report, b"%d" % worker)
        return worker
    except BaseException as e:
        os.write(report, ("!%s: %s" % (type(e).__name__, e)).encode())
        return None


def entry_of(argv):
    """("script", path) for [python, -u, path, ...], ("module", name) for [python, -u, -m, name,
    ...], else None."""
    if len(argv) >= 3 and argv[1] == "-u":
        if argv[2] == "-m" and len(argv) >= 4:
            return ("module", argv[3])
        if not argv[2].startswith("-"):
            return ("script", argv[2])
    return None


def open_fds():
    return {int(fd) for fd in os.listdir("/proc/self/fd")} - {-1}


def module_files(since):
    """Every loaded module's file -> (mtime, size). A file changed after `since` (when the server
    began to import) may have been read before the change: it counts as changed already."""
    files = {}
    for m in list(sys.modules.values()):
        path = getattr(m, "__file__", None)
        if isinstance(path, str) and path not in files:
            try:
                st = os.stat(path)
                files[path] = (st.st_mtime_ns, st.st_size) if st.st_mtime_ns < since else (0, -1)
            except OSError:
                pass
    return files


def c_environ():
    """The C library's environment (os.environ does not see what C code set)."""
    import ctypes
    env = ctypes.POINTER(ctypes.c_char_p).in_dll(libc(), "environ")
    out = {}
    i = 0
    while env and env[i] is not None:
        key, _, value = env[i].partition(b"=")
        out[key] = value
        i += 1
    return out


def changed_files(files):
    changed = []
    for path, seen in files.items():
        try:
            st = os.stat(path)
            if (st.st_mtime_ns, st.st_size) != seen:
                changed.append(path)
        except OSError:
            changed.append(path)
    return changed


# --- the intermediate: the worker's process state, before it is forked ---------------------------

def prepare_worker(server, req, env, fds, keep):
    """Environment, directory, descriptors and interpreter state of the worker, set in the
    intermediate so that the worker's own at-fork hooks already see them."""
    os.chdir(req.get("cwd", server.cwd))
    os.environ.clear()  # unsetenv() each
    libc().clearenv()  # and whatever C code set behind os.environ's back
    os.environ.update(env)  # putenv() each
    touched = set(req.get("env_set", {})) | set(req.get("env_unset", []))
    for key, value in server.c_only_env.items():
        if os.fsdecode(key) not in touched:
            libc().setenv(key, value, 1)
    server.channel.close()  # the intermediate's copy: its number may be the worker's
    install_fds(fds, req["fds"], keep | server.keep_fds)
    for fd in open_fds() - set(req["fds"]) - server.keep_fds - keep:
        try:
            os.close(fd)
        except OSError:
            pass
    sys.argv = list(req["argv"][2:]) if server.entry[0] == "script" else list(req["argv"][3:])
    sys.orig_argv = list(req["argv"])
    # New modules in the folders of sys.path (the entry point's own, above all) must be found:
    # their finders forget what they listed. (importlib.invalidate_caches() would also clear
    # the finder of every package folder torch has, ~20 ms, for folders the stat check covers.)
    for path in sys.path:
        finder = sys.path_importer_cache.get(path)
        if finder is not None and hasattr(finder, "invalidate_caches"):
            finder.invalidate_caches()
    import linecache
    linecache.clearcache()


def install_fds(fds, targets, reserved):
    """Puts received descriptor fds[i] at number targets[i], inheritable. A target may be taken by
    another received descriptor: every one is first moved above all the numbers involved. A target
    held by one of `reserved` cannot be given."""
    taken = set(targets) & set(reserved)
    if taken:
        raise Refused("descriptor %d is needed by the worker and held by the server" % min(taken))
    floor = max([2, *targets, *fds, *reserved]) + 1
    high = [_dup_at_least(fd, floor) for fd in fds]
    for fd in fds:
        os.close(fd)
    for fd, target in zip(high, targets):
        os.dup2(fd, target, inheritable=True)
    for fd in high:
        os.close(fd)


def move_above(fd, floor):
    """`fd` moved to a number of at least `floor` (the old one closed)."""
    if fd >= floor:
        return fd
    moved = _dup_at_least(fd, floor)
    os.close(fd)
    return moved


def _dup_at_least(fd, floor):
    import fcntl
    return fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, floor)


_libc = None


def libc():
    global _libc
    if _libc is None:
        import ctypes
        _libc = ctypes.CDLL(None, use_errno=True)
    return _libc


# --- the worker ----------------------------------------------------------------------------------

def adopted_worker(req, entry, intermediate_pid):
    """Runs in the worker right after the fork: becomes a process cohortrun owns; returns the
    function that runs the entry point."""
    os.setpgid(0, 0)
    # The intermediate exits as soon as it has written our pid; then we are the agent's child.
    deadline = time.monotonic() + 10
    while os.getppid() == intermediate_pid:
        if time.monotonic() > deadline:
            give_up("the intermediate process did not exit")
        time.sleep(0.0002)
    PR_SET_PDEATHSIG = 1
    libc().prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != req.get("agent"):
        # The agent died, or is no child subreaper: nobody would wait for this worker.
        give_up("the worker's parent is pid %d, not the agent (%s)" % (os.getppid(),
                                                                      req.get("agent")))
    signal.pthread_sigmask(signal.SIG_SETMASK, set())
    set_process_title(req["argv"])
    reseed()
    activate = getattr(sys.modules.get("_cohort_worker"), "activate", None)
    if activate is not None:
        try:
            activate()
        except Exception:  # cohortrun's part never stops a worker
            pass
    return lambda: run_entry(entry)


def give_up(why):
    """Ends a worker that must not run, as a spawner's child that cannot exec does."""
    try:
        os.write(2, ("cohortrun fork server: %s\n" % why).encode())
    finally:
        os._exit(127)


def set_process_title(argv):
    """Writes argv over the server's own command line, so that ps and /proc/<pid>/cmdline show the
    worker's (the agent gives the server a command line long enough)."""
    try:
        with open("/proc/self/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        start, end = int(fields[48 - 3]), int(fields[49 - 3])
    except (OSError, IndexError, ValueError):
        return
    title = b"\0".join(os.fsencode(a) for a in argv) + b"\0"
    room = end - start
    if len(title) > room:
        return  # it does not fit: the server's command line stays
    import ctypes
    # The agent sizes the server's command line to the worker's; where the worker's is shorter,
    # the rest reads as empty arguments.
    ctypes.memmove(start, title + b"\0" * (room - len(title)), room)


def reseed():
    """Random generators seeded when the server imported them would repeat in every worker."""
    np_random = sys.modules.get("numpy.random")
    if np_random is not None:
        try:
            np_random.seed()
        except Exception:
            pass


def run_entry(entry):
    """Runs the entry point as __main__, as `python -u script.py` or `python -u -m module` would.
    An exception that escapes it leaves the interpreter as it would have: printed by
    sys.excepthook (without this file's frames, which an exec'd worker does not have), then the
    interpreter's own ending (status 1, or death by SIGINT for a KeyboardInterrupt, after the
    usual shutdown); SystemExit as always."""
    kind, target = entry
    try:
        if kind == "script":
            run_script(target)
        else:
            import runpy
            runpy._run_module_as_main(target, alter_argv=True)
    except SystemExit:
        raise
    except BaseException as e:
        tb = e.__traceback__
        while tb is not None and tb.tb_frame.f_code.co_filename == __file__:
            tb = tb.tb_next
        hook = sys.excepthook
        hook(type(e), e.with_traceback(tb), tb)  # the default hook prints e.__traceback__
        # The interpreter prints it once more on its way out: it has just been printed.
        def printed_already(t, v, tb, e=e, hook=hook):
            if v is not e:
                hook(t, v, tb)
        sys.excepthook = printed_already
        raise


def run_script(path):
    import builtins
    import importlib.machinery
    import types
    filename = os.path.abspath(path)
    main = types.ModuleType("__main__")
    main.__annotations__ = {}
    main.__builtins__ = builtins
    main.__file__ = filename
    main.__cached__ = None
    main.__loader__ = importlib.machinery.SourceFileLoader("__main__", filename)
    sys.modules["__main__"] = main
    with open(filename, "rb") as f:
        source = f.read()
    code = compile(source, filename, "exec", dont_inherit=True)
    del source
    exec(code, main.__dict__)


# --- start ---------------------------------------------------------------------------------------

def sys_path0(entry):
    """What `python script.py` (the script's folder, symlinks resolved) or `python -m` (the working
    directory) puts first on sys.path; None under -P / PYTHONSAFEPATH."""
    if getattr(sys.flags, "safe_path", False):
        return None
    if entry[0] == "script":
        return os.path.dirname(os.path.realpath(entry[1]))
    return os.getcwd()


def default_preload():
    mods = ["torch", "torch.distributed", "torch.nn.parallel", "torch.optim"]
    # torch 2.x's DistributedDataParallel imports torch._dynamo (and sympy) when it is built.
    mods.append("torch._dynamo")
    extra = os.environ.get("COHORT_FORK_PRELOAD", "")
    mods += [m.strip() for m in extra.split(",") if m.strip()]
    return mods


def main(argv):
    import argparse
    p = argparse.ArgumentParser(prog="_forkserver.py")
    p.add_argument("--channel", type=int, required=True)
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--script")
    g.add_argument("--module")
    p.add_argument("--preload", help="comma-separated modules (default: torch and more)")
    p.add_argument("room", nargs="*", help="padding: room for the workers' command lines")
    a = p.parse_args(argv)
    entry = ("script", a.script) if a.script else ("module", a.module)
    channel = socket.socket(fileno=a.channel)
    channel.setblocking(True)
    # Our own folder is no worker's sys.path[0]: the worker's is.
    path0 = sys_path0(entry)
    if sys.path and os.path.realpath(sys.path[0]) == os.path.dirname(os.path.realpath(__file__)):
        if path0 is None:
            del sys.path[0]
        else:
            sys.path[0] = path0
    preload = default_preload() if a.preload is None else \
        [m for m in a.preload.split(",") if m]
    server = Server(channel, entry, preload)
    try:
        send(channel, server.start())
    except Refused as e:
        send(channel, {"ready": False, "error": str(e)})
        return None
    return server.serve()


if __name__ == "__main__":
    sys.modules.setdefault("_cohort_forkserver", sys.modules["__main__"])
    _run = main(sys.argv[1:])
    if _run is not None:
        _run()
