"""The heartbeat pipe cohortrun gives each worker (COHORT_HEARTBEAT_FD), written without blocking.

The bytes are the contract of base/include/cohort/base/heartbeat_line.h, which cohortrun parses
(libcohort writes the same, worker_runtime/heartbeat.cc); tests/base/python_heartbeat_test.cc
holds this writer to that parser:
  b                                          a beat (any single byte outside a line)
  S <step> <step_s> <items_per_s> <comm_s>\\n  a step report, also a beat
  H <version> <pid> <features>\\n             hello: the process that holds the worker's
                                             descriptors, and what it offers ("probe": it
                                             answers on COHORT_CONTROL_FD); no beat
Each line goes out in one write() (under PIPE_BUF), so lines never interleave.
"""
import os
import time

MIN_INTERVAL = 0.05  # seconds between two beats that are actually written
REPORT_INTERVAL = 0.25  # seconds between two step reports that are actually written
HELLO_VERSION = 1


class _Pipe:
    fd = -1
    last = 0.0
    # the steps since the last report, averaged into the next one
    steps = 0
    step_s = 0.0
    items = 0.0
    comm_s = 0.0
    last_report = 0.0


pipe = _Pipe()


def attach(fd):
    """Writes to `fd` from now on (a fresh state: nothing written yet)."""
    detach()
    pipe.fd = fd


def detach():
    pipe.fd = -1
    pipe.last = pipe.last_report = 0.0
    pipe.steps, pipe.step_s, pipe.items, pipe.comm_s = 0, 0.0, 0.0, 0.0


def _write(data):
    try:
        os.write(pipe.fd, data)
    except BlockingIOError:
        pass  # the pipe is full: cohortrun has beats to read already
    except OSError:
        pipe.fd = -1  # nobody listens any more (EPIPE, EBADF)


def beat():
    """Tells cohortrun this worker is alive. Cheap, never blocks, never raises."""
    if pipe.fd < 0:
        return
    now = time.monotonic()
    if now - pipe.last < MIN_INTERVAL:
        return
    pipe.last = now
    _write(b"b")


def report_step(step, step_seconds, items_per_second=0.0, comm_seconds=0.0):
    """One step's figures; averaged over the steps since the last report, at most one line every
    0.25 s. Also a beat. Cheap, never blocks, never raises."""
    if pipe.fd >= 0:
        add_step(time.monotonic(), int(step), float(step_seconds),
                 float(items_per_second) * float(step_seconds), float(comm_seconds))


def add_step(now, step, step_s, items, comm_s):
    """report_step() for callers that have the time (time.monotonic()) and floats at hand: the
    optimizer hook, once per step, where every microsecond counts."""
    p = pipe
    if p.fd < 0:
        return
    p.steps += 1
    p.step_s += step_s
    p.items += items
    p.comm_s += comm_s
    if now - p.last_report < REPORT_INTERVAL:
        return
    line = format_step(step, p.step_s / p.steps, p.items / p.step_s if p.step_s > 0 else 0.0,
                       p.comm_s / p.steps)
    p.steps, p.step_s, p.items, p.comm_s = 0, 0.0, 0.0, 0.0
    p.last_report = p.last = now
    _write(line)


def hello(pid, features):
    """Says which process holds the worker's descriptors and what it offers (no beat)."""
    if pipe.fd >= 0:
        _write(format_hello(pid, features))


def format_step(step, step_s, items_per_s, comm_s):
    return b"S %d %.6g %.6g %.6g\n" % (step, step_s, items_per_s, comm_s)


def format_hello(pid, features):
    return b"H %d %d %s\n" % (HELLO_VERSION, pid, ",".join(features).encode() or b"-")
