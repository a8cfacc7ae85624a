"""A rendezvous backend for torchrun 2.x, `--rdzv-backend cohort`: torchrun's own c10d
rendezvous over a store connection that survives a restart of cohortd.

torchrun's c10d backend talks to its store through PyTorch's TCPStore client, which never
reconnects: when cohortd restarts (with --data-dir, so that nothing is lost), every agent's next
store call fails with "Broken pipe" and the job ends. This backend is the same rendezvous
(torch.distributed.elastic's DynamicRendezvousHandler and C10dRendezvousBackend), over a store
that reconnects and retries the call when the connection breaks, for up to `store_loss_grace`
seconds (60 by default):

    torchrun --rdzv-backend cohort --rdzv-endpoint cohortd-host:29400 \\
             --rdzv-conf store_loss_grace=120 ... train.py

torchrun finds it through the `torchrun.handlers` entry point that the cohort wheel declares
(torchrun 2.x's torch/distributed/elastic/rendezvous/registry.py loads those); torchrun 1.13
loads no out-of-tree backend. Keys, waits and the workers' own store are torchrun's: the workers
still meet in the TCPStore that rank 0's agent serves, so a cohortd restart does not touch them.

A retried write that had reached cohortd before the connection broke is applied again. The
rendezvous state itself is written with compare_set, which a retry cannot apply twice; an ADD
(torchrun's exit barrier counts with it) could count twice if cohortd restarts in the middle of
one.
"""
import datetime
import time

import torch.distributed as dist
from torch.distributed.elastic.rendezvous.c10d_rendezvous_backend import C10dRendezvousBackend
from torch.distributed.elastic.rendezvous.dynamic_rendezvous import create_handler
from torch.distributed.elastic.rendezvous.utils import parse_rendezvous_endpoint

__all__ = ["ReconnectingStore", "CohortRendezvousBackend", "create", "handler"]

_DEFAULT_PORT = 29400


class ReconnectingStore(dist.Store):
    """A TCPStore client that, when its connection breaks, connects again (for up to `grace`)
    and repeats the call that broke. Every other failure (a timeout, a missing key) passes."""

    def __init__(self, host, port, timeout, grace):
        super().__init__()
        self._host, self._port = host, port
        self._timeout, self._grace = timeout, grace
        self._client = self._connect()

    def _connect(self):
        deadline = time.monotonic() + self._grace.total_seconds()
        delay = 0.05
        while True:
            try:
                return dist.TCPStore(self._host, self._port, None, False, self._timeout,
                                     wait_for_workers=False)
            except (dist.DistNetworkError, RuntimeError, TimeoutError):
                if time.monotonic() >= deadline:
                    raise
                time.sleep(delay)
                delay = min(delay * 2, 1.0)

    def _call(self, name, *args):
        try:
            return getattr(self._client, name)(*args)
        except dist.DistNetworkError:
            # The connection broke (cohortd restarted, or a network blip): a new one, once.
            self._client = self._connect()
            return getattr(self._client, name)(*args)

    def set(self, key, value):
        return self._call("set", key, value)

    def get(self, key):
        return self._call("get", key)

    def add(self, key, amount):
        return self._call("add", key, amount)

    def compare_set(self, key, expected, desired):
        return self._call("compare_set", key, expected, desired)

    def delete_key(self, key):
        return self._call("delete_key", key)

    def num_keys(self):
        return self._call("num_keys")

    def check(self, keys):
        return self._call("check", keys)

    def wait(self, keys, timeout=None):
        return self._call("wait", keys) if timeout is None else self._call("wait", keys, timeout)

    def set_timeout(self, timeout):
        self._timeout = timeout
        self._client.set_timeout(timeout)

    def append(self, key, value):
        return self._call("append", key, value)

    def multi_get(self, keys):
        return self._call("multi_get", keys)

    def multi_set(self, keys, values):
        return self._call("multi_set", keys, values)


class CohortRendezvousBackend(C10dRendezvousBackend):
    """torchrun's c10d rendezvous state, under the backend name torchrun was asked for."""

    @property
    def name(self):
        return "cohort"


def _seconds(params, key, default):
    value = params.get(key, default)
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"--rdzv-conf {key}={value!r}: a number of seconds, please") from None
    if seconds <= 0:
        raise ValueError(f"--rdzv-conf {key}={value!r}: must be positive")
    return datetime.timedelta(seconds=seconds)


def create(params):
    """torchrun's RendezvousParameters -> a rendezvous handler over a reconnecting store."""
    host, port = parse_rendezvous_endpoint(params.endpoint, default_port=_DEFAULT_PORT)
    store = ReconnectingStore(host, port, _seconds(params, "read_timeout", 60),
                              _seconds(params, "store_loss_grace", 60))
    backend = CohortRendezvousBackend(store, params.run_id)
    return create_handler(store, backend, params)


def handler():
    """The `torchrun.handlers` entry point: torchrun registers what it returns as "cohort"."""
    return create
