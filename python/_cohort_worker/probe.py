"""The helper thread: answers cohortrun's questions on the control descriptor (COHORT_CONTROL_FD).

cohortrun asks when it suspects a hang (a worker silent for --worker-hang-timeout, or one that
never beats), on every rank of the job at once, and names the culprit from the answers. The
thread sleeps in read() until then: it costs the worker nothing while it trains. It answers
while the main thread is blocked inside a collective, since PyTorch releases the GIL while it
waits (ProcessGroup work.wait(), autograd's backward); a main thread that holds the GIL in native
code leaves the question unanswered, and cohortrun says so.

Protocol (one socket, lines; launcher/observe's reader is the other side):
  cohortrun -> worker:  "P <id>\\n"           (probe <id>)
  worker -> cohortrun:  "<json>\\n"            one line, keys:
    v        1
    id       the probe's id
    pid      this process
    time     when it answered (Unix seconds)
    threads  [{"name", "main": bool, "frames": [[file, line, function, source], ...]}]: every
             thread but this one, the main thread first, innermost frame last
    torch    torch.__version__ (absent: torch not imported)
    groups   [{"name", "backend", "ranks": [global ranks], "seq": collectives issued}]: every
             process group (empty before init_process_group)
    fr       true when PyTorch's Flight Recorder answered (2.x); then
    collectives [{"pg", "seq", "p2p_seq", "op", "in", "out", "dtypes", "state", "done", "since",
                  "timeout_s", "p2p"}]: per process group, the Flight Recorder's entries that are
                 not retired (issued, not complete), and the last retired one
    errors   what could not be read, in words (absent: nothing)
"""
import _thread
import os
import sys
import time

# json and traceback are imported when the first question comes: a worker that is never asked
# does not pay for them at start-up. threading is never imported here (see thread_stacks()).

MAX_FRAMES = 40  # innermost frames kept per thread
MAX_THREADS = 32


class _Server:
    fd = -1
    thread = None
    main = None  # the main thread's ident


server = _Server()


def serve(fd):
    """Answers on `fd` from a thread of this process. Call it from the main thread."""
    server.fd = fd
    server.main = _thread.get_ident()
    server.thread = _thread.start_new_thread(_loop, (fd,))


def forget():
    """After fork: the thread did not come along; the descriptor belongs to the parent."""
    server.fd = -1
    server.thread = None
    server.main = None


def _loop(fd):
    pending = b""
    while server.fd == fd:
        try:
            chunk = os.read(fd, 4096)
        except InterruptedError:
            continue
        except OSError:
            return
        if not chunk:
            return  # cohortrun closed its end
        pending += chunk
        while b"\n" in pending:
            line, pending = pending.split(b"\n", 1)
            parts = line.split()
            if len(parts) == 2 and parts[0] == b"P":
                import json
                try:
                    reply = answer(int(parts[1]))
                except Exception as e:  # noqa: BLE001 - say what failed rather than go quiet
                    reply = {"v": 1, "id": int(parts[1]) if parts[1].isdigit() else 0,
                             "pid": os.getpid(), "time": time.time(),
                             "errors": ["the answer failed: %r" % (e,)]}
                if not _send(fd, (json.dumps(reply, separators=(",", ":")) + "\n").encode()):
                    return


def _send(fd, data):
    view = memoryview(data)
    while view:
        try:
            n = os.write(fd, view)
        except InterruptedError:
            continue
        except OSError:
            return False
        view = view[n:]
    return True


def answer(probe_id):
    errors = []
    out = {"v": 1, "id": probe_id, "pid": os.getpid(), "time": time.time(),
           "threads": thread_stacks()}
    torch = sys.modules.get("torch")
    if torch is not None:
        out["torch"] = str(getattr(torch, "__version__", "?"))
        groups = process_groups(errors)
        out["groups"] = groups
        collectives = flight_recorder({g["backend"] for g in groups}, errors)
        out["fr"] = collectives is not None
        if collectives is not None:
            out["collectives"] = collectives
    if errors:
        out["errors"] = errors
    return out


def thread_stacks():
    import traceback
    me = _thread.get_ident()
    main = server.main
    names = {}
    # Never imported here: the module would take this thread for the main one, for good.
    threading = sys.modules.get("threading")
    if threading is not None:
        names = {t.ident: t.name for t in threading.enumerate()}
        main = threading.main_thread().ident
    names.setdefault(main, "MainThread")
    frames = sys._current_frames()
    order = sorted((i for i in frames if i != me), key=lambda i: (i != main, i))[:MAX_THREADS]
    out = []
    for ident in order:
        stack = traceback.extract_stack(frames[ident])[-MAX_FRAMES:]
        out.append({"name": names.get(ident, "thread %d" % ident), "main": ident == main,
                    "frames": [[f.filename, f.lineno or 0, f.name, (f.line or "").strip()]
                               for f in stack]})
    return out


def process_groups(errors):
    """Every process group this process belongs to, with the number of collectives it issued
    (ProcessGroup._get_sequence_number_for_group(): the same count on every member while they
    agree; 1.13 and 2.x)."""
    dist = sys.modules.get("torch.distributed")
    if dist is None:
        return []
    try:
        if not (dist.is_available() and dist.is_initialized()):
            return []
        c10d = dist.distributed_c10d
        names = dict(c10d._pg_names)
        group_ranks = dict(c10d._pg_group_ranks)
    except Exception as e:  # noqa: BLE001
        errors.append("process groups: %r" % (e,))
        return []
    out = []
    for pg, name in names.items():
        g = {"name": str(name), "ranks": sorted(int(r) for r in group_ranks.get(pg, {}))}
        try:
            g["backend"] = str(dist.get_backend(pg))
        except Exception:  # noqa: BLE001
            g["backend"] = "?"
        try:
            g["seq"] = int(pg._get_sequence_number_for_group())
        except Exception as e:  # noqa: BLE001
            errors.append("sequence number of group %s: %r" % (name, e))
        out.append(g)
    return out


def flight_recorder(backends, errors):
    """The Flight Recorder's entries worth reporting, or None where there is no Flight Recorder
    (PyTorch 1.13; a 2.x without it, or with TORCH_FR_BUFFER_SIZE=0)."""
    import json
    c = getattr(getattr(sys.modules.get("torch"), "_C", None), "_distributed_c10d", None)
    dump = getattr(c, "_dump_fr_trace_json", None)
    if dump is None:
        return None
    out = []
    answered = False
    for backend in sorted(b for b in backends if b in ("gloo", "nccl")):
        try:
            d = json.loads(dump(includeCollectives=True, onlyActive=False, backend=backend))
        except Exception as e:  # noqa: BLE001
            errors.append("flight recorder (%s): %r" % (backend, e))
            continue
        answered = True
        last_retired = {}
        for e in d.get("entries", []):
            pg = e.get("process_group") or ["?", "?"]
            item = {"pg": str(pg[0]), "seq": e.get("collective_seq_id", 0),
                    "p2p_seq": e.get("p2p_seq_id", 0), "op": e.get("profiling_name", "?"),
                    "in": e.get("input_sizes", []), "out": e.get("output_sizes", []),
                    "dtypes": e.get("input_dtypes", []), "state": e.get("state", "?"),
                    "done": bool(e.get("retired", False)),
                    "since": e.get("time_created_ns", 0) / 1e9,
                    "timeout_s": e.get("timeout_ms", 0) / 1000.0, "p2p": bool(e.get("is_p2p"))}
            if item["done"]:
                last_retired[item["pg"]] = item
            else:
                out.append(item)
        out.extend(last_retired.values())
    return out if answered else None
