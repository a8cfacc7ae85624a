"""torchrun's own agents (this interpreter's PyTorch, 1.13 or 2.x) with cohortd as their c10d
rendezvous store, outside every node's failure domain: two agents of one node each form a round
and run a gloo job; a third agent with another --rdzv-id in the same store forms its own job.
Usage: torchrun_on_cohortd.py COHORTD_BINARY"""
import os
import subprocess
import sys
import unittest

import torch

from cohort_testlib import Cohortd, env_with

COHORTD = sys.argv.pop(1) if len(sys.argv) > 1 else "build/bin/cohortd"
HERE = os.path.dirname(os.path.abspath(__file__))
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


class TorchrunOnCohortd(unittest.TestCase):
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


if __name__ == "__main__":
    unittest.main(verbosity=2)
