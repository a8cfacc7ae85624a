"""torchrun's own agents (this interpreter's PyTorch, 1.13 or 2.x) with cohortd as their c10d
rendezvous store, outside every node's failure domain: two agents of one node each form a round
and run a gloo job; a third agent with another --rdzv-id in the same store forms its own job; and
of two nodes running, one is killed: the survivor re-forms alone through cohortd and finishes.
And cohortd restarted (SIGKILL, then the same --data-dir) under a running job: torchrun's c10d
agents end (PyTorch's TCPStore client never reconnects), agents with cohort's backend
(`--rdzv-backend cohort`, torchrun 2.x) carry on and finish without a restart.
Usage: torchrun_on_cohortd.py COHORTD_BINARY"""
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

import torch

from cohort_testlib import Cohortd, env_with, wait_until

COHORTD = sys.argv.pop(1) if len(sys.argv) > 1 else "build/bin/cohortd"
HERE = os.path.dirname(os.path.abspath(__file__))
PYTHON_DIR = os.path.join(HERE, "..", "..", "python")
TORCH2 = int(torch.__version__.split(".")[0]) >= 2
TORCHRUN = os.path.join(os.path.dirname(sys.executable), "torchrun")
if not os.access(TORCHRUN, os.X_OK):
    TORCHRUN = "/usr/bin/torchrun"


def agent(port, run_id, nnodes):
    # -r 1 -t 1: Debian's torchrun 1.13 on Python 3.11 crashes with the default -r 0
    # (docs/TORCHRUN.md §3.1); 2.x takes them too.
    return subprocess.Popen(
        [TORCHRUN, f"--nnodes={nnodes}", "--nproc_per_node=1", "--rdzv_backend=c10d",
         f"--rdzv_endpoint=127.0.0.1:{port}", f"--rdzv_id={run_id}", "--max_restarts=0",
         "-r", "1", "-t", "1", os.path.join(HERE, "gloo_worker.py")],
        env=env_with(OMP_NUM_THREADS=1, LOGLEVEL="WARNING"), stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True)


def elastic_agent(port, run_id, mark_dir):
    # Fast keep-alives and last call, so that a lost node is dropped within seconds.
    conf = "keep_alive_interval=1,keep_alive_max_attempt=2,last_call_timeout=1"
    return subprocess.Popen(
        [TORCHRUN, "--nnodes=1:2", "--nproc_per_node=1", "--rdzv_backend=c10d",
         f"--rdzv_endpoint=127.0.0.1:{port}", f"--rdzv_id={run_id}", f"--rdzv_conf={conf}",
         "--max_restarts=2", "--monitor_interval=0.2", "-r", "1", "-t", "1",
         os.path.join(HERE, "steps_worker.py")],
        env=env_with(OMP_NUM_THREADS=1, LOGLEVEL="WARNING", MARK_DIR=mark_dir, STEPS=60),
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)


def with_cohort_backend():
    """A PYTHONPATH on which torchrun finds cohort's rendezvous backend as an installed wheel
    declares it: the package, and distribution metadata with its `torchrun.handlers` entry point
    (importlib.metadata reads *.dist-info folders on the path)."""
    meta = tempfile.mkdtemp(prefix="cohort_dist_")
    info = os.path.join(meta, "cohort-0.1.0.dist-info")
    os.makedirs(info)
    with open(os.path.join(info, "METADATA"), "w") as f:
        f.write("Metadata-Version: 2.1\nName: cohort\nVersion: 0.1.0\n")
    with open(os.path.join(info, "entry_points.txt"), "w") as f:
        f.write("[torchrun.handlers]\ncohort = cohort.torchrun_backend:handler\n")
    return meta, os.pathsep.join([os.path.abspath(PYTHON_DIR), meta])


def restart_agent(port, run_id, mark_dir, backend, pythonpath=""):
    return subprocess.Popen(
        [TORCHRUN, "--nnodes=2", "--nproc_per_node=1", f"--rdzv_backend={backend}",
         f"--rdzv_endpoint=127.0.0.1:{port}", f"--rdzv_id={run_id}", "--max_restarts=0",
         "--monitor_interval=0.2", "-r", "1", "-t", "1", os.path.join(HERE, "steps_worker.py")],
        env=env_with(OMP_NUM_THREADS=1, LOGLEVEL="WARNING", MARK_DIR=mark_dir, STEPS=100,
                     PYTHONPATH=pythonpath, TORCH_CPP_LOG_LEVEL="ERROR"),
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)


class TorchrunOnCohortd(unittest.TestCase):
    def run_through_a_cohortd_restart(self, backend, pythonpath=""):
        """Two agents on one cohortd --data-dir; once both workers run, cohortd is SIGKILLed and
        started again on the same port and directory. Returns the agents' exit codes and output."""
        mark = tempfile.mkdtemp(prefix="cohort_torchrun_")
        data = tempfile.mkdtemp(prefix="cohort_data_")
        self.addCleanup(shutil.rmtree, mark, True)
        self.addCleanup(shutil.rmtree, data, True)
        server = Cohortd(COHORTD, "--data-dir", data)
        port = server.port
        agents = [restart_agent(port, backend, mark, backend, pythonpath) for _ in range(2)]
        try:
            wait_until(lambda: {f"{backend}.0.0", f"{backend}.1.0"} <= set(os.listdir(mark)), 120,
                       "both nodes' workers running")
            server.proc.kill()
            server.stop()
            server = Cohortd(COHORTD, "--data-dir", data, port=port)
            outs = [a.communicate(timeout=180)[0] for a in agents]
            return [a.returncode for a in agents], outs, sorted(os.listdir(mark))
        finally:
            for a in agents:
                if a.poll() is None:
                    os.killpg(a.pid, signal.SIGKILL)
                    a.wait()
            server.stop()

    def test_c10d_agents_end_when_cohortd_restarts(self):
        # PyTorch's limitation, kept true here: README says so and offers the cohort backend.
        rcs, outs, _ = self.run_through_a_cohortd_restart("c10d")
        self.assertTrue(any(rc != 0 for rc in rcs), outs)
        print(f"torch {torch.__version__}: c10d agents ended on a cohortd restart ({rcs}), "
              "as PyTorch's client does not reconnect")

    @unittest.skipUnless(TORCH2, "torchrun 1.13 loads no out-of-tree rendezvous backend")
    def test_cohort_backend_agents_carry_on_through_a_cohortd_restart(self):
        meta, path = with_cohort_backend()
        self.addCleanup(shutil.rmtree, meta, True)
        rcs, outs, marks = self.run_through_a_cohortd_restart("cohort", path)
        self.assertEqual(rcs, [0, 0], outs)
        joined = "".join(outs)
        self.assertIn("rank 0/2: steps ok after restart 0", joined)
        self.assertIn("rank 1/2: steps ok after restart 0", joined)
        self.assertEqual(marks, ["cohort.0.0", "cohort.1.0"], "the workers were restarted")
        print(f"torch {torch.__version__}: cohort-backend agents finished through a cohortd "
              "restart, no worker restarted")

    def test_agents_form_rounds_through_cohortd(self):
        with Cohortd(COHORTD) as server:
            nodes = [agent(server.port, "job-a", 2) for _ in range(2)]
            other = agent(server.port, "job-b", 1)
            outs = [p.communicate(timeout=240)[0] for p in nodes + [other]]
            for p, out in zip(nodes + [other], outs):
                self.assertEqual(p.returncode, 0, out)
            joined = "".join(outs[:2])
            self.assertIn("rank 0/2: allreduce ok", joined)
            self.assertIn("rank 1/2: allreduce ok", joined)
            self.assertIn("rank 0/1: allreduce ok", outs[2])
            print(f"torch {torch.__version__}: two 2-node rounds on cohortd, ok")

    def test_the_survivor_of_a_lost_node_finishes_through_cohortd(self):
        mark = tempfile.mkdtemp(prefix="cohort_torchrun_")
        with Cohortd(COHORTD) as server:
            a = elastic_agent(server.port, "lossy", mark)
            b = elastic_agent(server.port, "lossy", mark)
            marks = lambda: sorted(os.listdir(mark))
            wait_until(lambda: {"lossy.0.0", "lossy.1.0"} <= set(marks()), 120,
                       "both nodes' workers running")
            # The node of rank 1 is lost: its agent (the worker's parent) and its worker killed.
            with open(os.path.join(mark, "lossy.1.0")) as f:
                worker = int(f.read())
            with open(f"/proc/{worker}/stat") as f:
                parent = int(f.read().rsplit(")", 1)[1].split()[1])
            victim, survivor = (a, b) if parent == a.pid else (b, a)
            self.assertEqual(parent, victim.pid, "rank 1's worker is not a child of an agent")
            os.killpg(victim.pid, signal.SIGKILL)
            try:
                os.kill(worker, signal.SIGKILL)  # in a session of its own, under some PyTorch
            except ProcessLookupError:
                pass
            out = survivor.communicate(timeout=180)[0]
            victim.communicate()
            self.assertEqual(survivor.returncode, 0, out)
            self.assertRegex(out, r"rank 0/1: steps ok after restart [12]")
            print(f"torch {torch.__version__}: the survivor re-formed alone on cohortd, ok")


if __name__ == "__main__":
    unittest.main(verbosity=2)
