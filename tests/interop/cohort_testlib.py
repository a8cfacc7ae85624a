"""Helpers for the interop tests: start cohortd and other real processes, wait with deadlines."""
import os
import signal
import subprocess
import tempfile
import time


class Cohortd:
    """A cohortd on 127.0.0.1 and a free port (or `port`), stopped by SIGTERM on exit."""

    def __init__(self, binary, *extra_args, port=0):
        self.log = tempfile.TemporaryFile(mode="w+")  # stderr, read back on failure
        self.proc = subprocess.Popen(
            [binary, "--host", "127.0.0.1", "--port", str(port), *extra_args],
            stdout=subprocess.PIPE, stderr=self.log, text=True)
        line = self.proc.stdout.readline().strip()
        if not line:
            self.log.seek(0)
            raise RuntimeError("cohortd printed no address: " + self.log.read())
        self.host, port = line.rsplit(":", 1)
        self.port = int(port)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc.stdout.close()
        self.log.close()
        return self.proc.returncode


def wait_until(pred, timeout=10.0, what="condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return
        time.sleep(0.01)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def env_with(**kw):
    env = dict(os.environ)
    env.update({k: str(v) for k, v in kw.items()})
    return env
