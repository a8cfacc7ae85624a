"""The heartbeat pipe cohortrun gives each worker (COHORT_HEARTBEAT_FD), written without blocking.

The bytes are the contract of base/include/cohort/base/heartbeat_line.h, which cohortrun parses
(libcohort writes the same, worker_runtime/heartbeat.cc); tests/base/python_heartbeat_test.cc
holds this writer to that parser:
  b                                          a beat by hand (any single byte outside a line)
  a                                          a beat this module made by itself (an optimizer
                                             step)
  S <step> <step_s> <items_per_s> <comm_s>\\n  a step report by hand, also a beat
  A <step> <step_s> <items_per_s> <comm_s>\\n  the same, made by this module by itself
  H <version> <pid> <features>\\n             hello: the process that holds the worker's
                                             descriptors, and what it offers ("probe": it
                                             answers on COHORT_CONTROL_FD); no beat
Each line goes out in one write() (under PIPE_BUF), so lines never interleave.

The script's own beats (beat(), report_step()) tell cohortrun that the script beats through every
phase, so that its silence may judge it; the module's own (auto_beat(), add_step()) say only that
an optimizer stepped.
"""
import os
import time

MIN_INTERVAL = 0.05  # seconds between two beats that are actually written
REPORT_INTERVAL = 0.25  # seconds between two step reports that are actually written
HELLO_VERSION = 1


class _Pipe:
    fd = -1
    last = 0.0  # the last beat or report written
    last_by_hand = 0.0  # the last beat by hand written
    # whether a step averaged into the next report was reported by hand
    by_hand = False
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
    pipe.last = pipe.last_report = pipe.last_by_hand = 0.0
    pipe.by_hand = False
    pipe.steps, pipe.step_s, pipe.items, pipe.comm_s = 0, 0.0, 0.0, 0.0


def _write(data):
    try:
        os.write(pipe.fd, data)
    except BlockingIOError:
        pass  # the pipe is full: cohortrun has beats to read already
    except OSError:
        pipe.fd = -1  # nobody listens any more (EPIPE, EBADF)


def beat():
    """Tells cohortrun this worker is alive, by hand. Cheap, never blocks, never raises."""
    if pipe.fd < 0:
        return
    now = time.monotonic()
    # Limited apart from the module's own beats: a script that beats right after each optimizer
    # step must still be seen beating by hand.
    if now - pipe.last_by_hand < MIN_INTERVAL:
        return
    pipe.last = pipe.last_by_hand = now
    _write(b"b")


def auto_beat():
    """A beat this module makes by itself (an optimizer step). Cheap, never blocks, never
    raises."""
    if pipe.fd < 0:
        return
    now = time.monotonic()
    if now - pipe.last < MIN_INTERVAL:
        return
    pipe.last = now
    _write(b"a")


def report_step(step, step_seconds, items_per_second=0.0, comm_seconds=0.0):
    """One step's figures, by hand; averaged over the steps since the last report, at most one
    line every 0.25 s. Also a beat. Cheap, never blocks, never raises."""
    if pipe.fd >= 0:
        pipe.by_hand = True
        add_step(time.monotonic(), int(step), float(step_seconds),
                 float(items_per_second) * float(step_seconds), float(comm_seconds))


def add_step(now, step, step_s, items, comm_s):
    """A step this module timed by itself (report_step() for callers that have the time,
    time.monotonic(), and floats at hand): the optimizer hook, once per step, where every
    microsecond counts. The report is the script's own when a step it averages was."""
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
                       p.comm_s / p.steps, b"S" if p.by_hand else b"A")
    p.steps, p.step_s, p.items, p.comm_s = 0, 0.0, 0.0, 0.0
    p.by_hand = False
    p.last_report = p.last = now
    _write(line)


def hello(pid, features):
    """Says which process holds the worker's descriptors and what it offers (no beat)."""
    if pipe.fd >= 0:
        _write(format_hello(pid, features))


def format_step(step, step_s, items_per_s, comm_s, kind=b"S"):
    return b"%s %d %.6g %.6g %.6g\n" % (kind, step, step_s, items_per_s, comm_s)


def format_hello(pid, features):
    return b"H %d %d %s\n" % (HELLO_VERSION, pid, ",".join(features).encode() or b"-")
