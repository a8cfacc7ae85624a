"""The heartbeat pipe cohortrun gives each worker (COHORT_HEARTBEAT_FD), written without blocking.

The bytes are the contract in base/include/cohort/base/heartbeat_line.h (a beat: one byte b; a step
report: one line "S <step> <step_s> <items_per_s> <comm_s>"), which cohortrun parses;
tests/base/python_heartbeat_test.cc holds this writer to that parser."""
import os
import time

_MIN_INTERVAL = 0.05  # seconds between two beats that are actually written


def _fd():
    try:
        return int(os.environ.get("COHORT_HEARTBEAT_FD", "-1"))
    except ValueError:
        return -1


_state = {"fd": _fd(), "last": 0.0}


def beat():
    """Tells cohortrun this worker is alive. Cheap, never blocks, never raises."""
    fd = _state["fd"]
    if fd < 0:
        return
    now = time.monotonic()
    if now - _state["last"] < _MIN_INTERVAL:
        return
    _state["last"] = now
    try:
        os.write(fd, b"b")
    except BlockingIOError:
        pass  # the pipe is full: cohortrun has beats to read already
    except OSError:
        _state["fd"] = -1  # nobody listens any more (EPIPE, EBADF)


_REPORT_INTERVAL = 0.25  # seconds between two step reports that are actually written
_window = {"last": 0.0, "steps": 0, "step_s": 0.0, "items": 0.0, "comm_s": 0.0}


def report_step(step, step_seconds, items_per_second=0.0, comm_seconds=0.0):
    """Tells cohortrun how far this worker is and how long its steps take (its metrics,
    `cohortctl status` and the straggler check). Averages the steps since the last report; at
    most one line every 0.25 s ("S <step> <step_s> <items_per_s> <comm_s>", as libcohort writes
    it). Also a beat. Cheap, never blocks, never raises."""
    fd = _state["fd"]
    if fd < 0:
        return
    w = _window
    w["steps"] += 1
    w["step_s"] += float(step_seconds)
    w["items"] += float(items_per_second) * float(step_seconds)
    w["comm_s"] += float(comm_seconds)
    now = time.monotonic()
    if now - w["last"] < _REPORT_INTERVAL:
        return
    n, total = w["steps"], w["step_s"]
    line = "S %d %.6g %.6g %.6g\n" % (int(step), total / n, w["items"] / total if total > 0 else 0.0,
                                      w["comm_s"] / n)
    _window.update(last=now, steps=0, step_s=0.0, items=0.0, comm_s=0.0)
    _state["last"] = now
    try:
        os.write(fd, line.encode())
    except BlockingIOError:
        pass
    except OSError:
        _state["fd"] = -1


def install_torch_hook():
    """Beats on every optimizer step, when torch can be imported. Returns True when installed."""
    if _state["fd"] < 0:
        return False
    try:
        import torch.optim
        import torch.optim.optimizer as optimizer
    except Exception:
        return False
    if getattr(optimizer, "_cohort_hooked", False):
        return True
    if hasattr(optimizer, "register_optimizer_step_post_hook"):  # torch 2.x
        optimizer.register_optimizer_step_post_hook(lambda *_: beat())
    else:  # torch 1.13: every loop calls zero_grad() once per step
        original = torch.optim.Optimizer.zero_grad

        def zero_grad(self, *args, **kwargs):
            beat()
            return original(self, *args, **kwargs)

        torch.optim.Optimizer.zero_grad = zero_grad
    optimizer._cohort_hooked = True
    return True
