"""The worker side of cohortrun, in every Python worker it starts (loaded by
boot/sitecustomize.py, or by `import cohort`): beats on every optimizer step, step times, and a
helper thread that answers cohortrun's questions when it suspects a hang (probe.py).

Which process is the worker, and fork
-------------------------------------
cohortrun hands each worker two descriptors, named in its environment: the write end of the
heartbeat pipe (COHORT_HEARTBEAT_FD) and one end of a control socket (COHORT_CONTROL_FD). The
first Python process that finds them claims them: it sets COHORT_WORKER_PID to its pid, says
hello on the pipe ("H", heartbeat.py) and starts the helper thread. Any process that finds
COHORT_WORKER_PID naming another process stays quiet: a DataLoader worker forked from the
worker, a subprocess or multiprocessing child started from it (they inherit the environment,
and the descriptor numbers may mean other files there).

Nothing is carried across fork (os.register_at_fork): a forked child starts with no claim, no
helper thread and a fresh heartbeat state, and tries to claim once, lazily, at its first
optimizer step, or when it calls activate(). A fork server that starts workers by forking
(cohortrun's, or anyone's) must therefore, in each child, before the script runs: put the
worker's environment in os.environ (its own COHORT_HEARTBEAT_FD and COHORT_CONTROL_FD, and no
COHORT_WORKER_PID), make those descriptors refer to the worker's pipe and socket, then call
_cohort_worker.activate(). The server itself must not hold a worker's environment (it would
claim the descriptors for itself).

Nothing here may break or noticeably slow a worker: every failure leaves the worker running as
it would without cohortrun.
"""
import os
import stat

from . import heartbeat, probe, torch_hooks

# PyTorch 2.x records every collective in its Flight Recorder (gloo and NCCL in 2.15): a small
# buffer is enough to name the collective a hang is in. The worker's own setting wins.
FLIGHT_RECORDER_ENTRIES = "200"
FLIGHT_RECORDER_SETTINGS = ("TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE")


class _Claim:
    pid = None  # the process that tried to claim the descriptors (None: not tried here yet)
    active = False


claim = _Claim()


def _descriptor(name, is_kind):
    """The descriptor named by $name, when it is open and of the kind cohortrun hands over."""
    try:
        fd = int(os.environ.get(name, "-1"))
        return fd if fd >= 0 and is_kind(os.fstat(fd).st_mode) else -1
    except (ValueError, OSError):
        return -1


def activate():
    """Claims the worker's descriptors for this process, if they are its to claim (see above).
    Returns True when this process is the worker. Cheap after the first call in a process."""
    pid = os.getpid()
    if claim.pid == pid:
        return claim.active
    claim.pid, claim.active = pid, False
    owner = os.environ.get("COHORT_WORKER_PID", "")
    if owner and owner != str(pid):
        return False
    pipe = _descriptor("COHORT_HEARTBEAT_FD", stat.S_ISFIFO)
    if pipe < 0:
        return False
    os.environ["COHORT_WORKER_PID"] = str(pid)
    # Read when the process's first group is made: a fork server's child still gets it here.
    # TORCH_NCCL_TRACE_BUFFER_SIZE is the older name of the same setting (2.x reads both).
    if not any(os.environ.get(n) for n in FLIGHT_RECORDER_SETTINGS):
        os.environ["TORCH_FR_BUFFER_SIZE"] = FLIGHT_RECORDER_ENTRIES
    heartbeat.attach(pipe)
    control = _descriptor("COHORT_CONTROL_FD", stat.S_ISSOCK)
    features = []
    if control >= 0:
        probe.serve(control)
        features.append("probe")
    heartbeat.hello(pid, features)
    claim.active = True
    return True


def _after_fork_in_child():
    claim.pid, claim.active = None, False
    heartbeat.detach()
    probe.forget()
    torch_hooks.steps.__init__()


def _on_step(optimizer):
    if claim.pid is None:
        activate()
    torch_hooks.after_step(optimizer)


_started = False


def start():
    """Sets everything up in this process (once): the claim, the fork handler, the torch hook."""
    global _started
    if _started:
        return
    _started = True
    os.register_at_fork(after_in_child=_after_fork_in_child)
    activate()
    torch_hooks.AfterImport("torch",
                            lambda torch: torch_hooks.on_torch_imported(torch, _on_step)).install()


def beat():
    if claim.pid is None:
        activate()
    heartbeat.beat()


def report_step(step, step_seconds, items_per_second=0.0, comm_seconds=0.0):
    if claim.pid is None:
        activate()
    heartbeat.report_step(step, step_seconds, items_per_second, comm_seconds)
