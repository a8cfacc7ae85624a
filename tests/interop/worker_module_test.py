"""cohortrun's worker module in real Python processes, as cohortrun starts them: the folder
python/_cohort_worker/boot first on PYTHONPATH, a heartbeat pipe and a control socket handed over as
COHORT_HEARTBEAT_FD and COHORT_CONTROL_FD. Runs under the interpreter that runs it (each PyTorch
generation, and a Python without torch: COHORT_TEST_PLAIN_PYTHON).

What it checks: the sitecustomize chain (the environment's own sitecustomize still runs, once; a
`cohort` package beside the script still wins), -S/-I/-E leave the worker alone, the hello and
step lines on the pipe, the answer to a probe while the main thread waits in a gloo collective
for a peer that never comes (Flight Recorder entry on 2.x, sequence numbers on both), and fork:
a forked or spawned child stays quiet, a fork server's child that is given the worker's
environment claims it."""
import fcntl
import json
import os
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
import unittest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
SITE = os.path.join(ROOT, "python", "_cohort_worker", "boot")
PYDIR = os.path.join(ROOT, "python")
PYTHON = sys.executable
PLAIN_PYTHON = os.environ.get("COHORT_TEST_PLAIN_PYTHON", "")


def has_torch(python):
    return subprocess.run([python, "-c", "import torch"], capture_output=True).returncode == 0


class Worker:
    """One Python process started as cohortrun starts a worker, with the pipe's read end and the
    socket's other end kept here."""

    def __init__(self, argv, cwd=None, env=None, extra_path="", inject=True):
        self.pipe_r, pipe_w = os.pipe()
        fcntl.fcntl(pipe_w, fcntl.F_SETFL, fcntl.fcntl(pipe_w, fcntl.F_GETFL) | os.O_NONBLOCK)
        fcntl.fcntl(self.pipe_r, fcntl.F_SETFL, os.O_NONBLOCK)
        self.control, theirs = socket.socketpair()
        e = dict(os.environ if env is None else env)
        e.pop("COHORT_WORKER_PID", None)
        e.update(COHORT_HEARTBEAT_FD=str(pipe_w), COHORT_CONTROL_FD=str(theirs.fileno()),
                 OMP_NUM_THREADS="1")
        if inject:
            e["PYTHONPATH"] = SITE + ":" + PYDIR + extra_path
        self.proc = subprocess.Popen(argv, cwd=cwd, env=e, pass_fds=(pipe_w, theirs.fileno()),
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        os.close(pipe_w)
        theirs.close()
        self.bytes = b""

    def read_pipe(self):
        if self.pipe_r < 0:
            return self.bytes
        try:
            while True:
                chunk = os.read(self.pipe_r, 65536)
                if not chunk:
                    break
                self.bytes += chunk
        except BlockingIOError:
            pass
        return self.bytes

    def lines(self, kind):
        return [ln for ln in self.read_pipe().split(b"\n") if ln.startswith(kind)]

    def wait_for(self, pred, timeout, what):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if pred():
                return
            if self.proc.poll() is not None and not pred():
                break
            time.sleep(0.02)
        raise AssertionError("timed out waiting for %s; stderr: %s" % (what, self.stderr()))

    def probe(self, probe_id, timeout=10):
        self.control.sendall(b"P %d\n" % probe_id)
        self.control.settimeout(timeout)
        buf = b""
        while not buf.endswith(b"\n"):
            chunk = self.control.recv(1 << 20)
            if not chunk:
                raise AssertionError("the control socket closed; stderr: " + self.stderr())
            buf += chunk
        return json.loads(buf)

    def finish(self, timeout=60):
        out, err = self.proc.communicate(timeout=timeout)
        self.read_pipe()
        os.close(self.pipe_r)
        self.pipe_r = -1
        self.control.close()
        return out, err

    def stderr(self):
        if self.proc.poll() is None:
            return "(still running)"
        return self.proc.stderr.read() if self.proc.stderr else ""

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
        if self.pipe_r >= 0:
            self.finish()


def script(text):
    f = tempfile.NamedTemporaryFile("w", suffix=".py", delete=False)
    f.write(textwrap.dedent(text))
    f.close()
    return f.name


REPORT = """
import os, sys
print(repr(dict(
    sitecustomize=getattr(sys.modules.get("sitecustomize"), "__file__", None),
    user_site=os.environ.get("USER_SITECUSTOMIZE_RAN"),
    claimed=os.environ.get("COHORT_WORKER_PID") == str(os.getpid()),
    module="_cohort_worker" in sys.modules)))
"""


class Injection(unittest.TestCase):
    def run_report(self, python, *flags, extra_path="", cwd=None, text=REPORT):
        w = Worker([python, *flags, script(text)], cwd=cwd, extra_path=extra_path)
        out, err = w.finish()
        self.assertEqual(w.proc.returncode, 0, err)
        return eval(out.strip().splitlines()[-1]), w  # noqa: S307 - our own repr

    def test_the_environments_sitecustomize_still_runs_once(self):
        d = tempfile.mkdtemp()
        with open(os.path.join(d, "sitecustomize.py"), "w") as f:
            f.write("import os\nos.environ['USER_SITECUSTOMIZE_RAN'] = "
                    "os.environ.get('USER_SITECUSTOMIZE_RAN', '') + 'x'\n")
        r, w = self.run_report(PYTHON, extra_path=":" + d)
        self.assertEqual(r["user_site"], "x")  # ran, and only once
        self.assertEqual(r["sitecustomize"], os.path.join(d, "sitecustomize.py"))
        self.assertTrue(r["claimed"] and r["module"])
        self.assertEqual(len(w.lines(b"H ")), 1, w.bytes)

    def test_a_system_sitecustomize_is_chained(self):
        system = subprocess.run([PYTHON, "-c", "import sitecustomize; print(sitecustomize.__file__)"],
                                capture_output=True, text=True).stdout.strip()
        r, _ = self.run_report(PYTHON)
        self.assertTrue(r["module"])
        if system:  # Debian's python3 has one; other interpreters may have none
            self.assertEqual(r["sitecustomize"], system)
        else:
            self.assertEqual(r["sitecustomize"], os.path.join(SITE, "sitecustomize.py"))

    def test_a_cohort_package_beside_the_script_still_wins(self):
        d = tempfile.mkdtemp()
        os.mkdir(os.path.join(d, "cohort"))
        with open(os.path.join(d, "cohort", "__init__.py"), "w") as f:
            f.write("WHO = 'the user'\n")
        main = os.path.join(d, "main.py")
        with open(main, "w") as f:
            f.write("import cohort\nprint(cohort.WHO)\n")
        w = Worker([PYTHON, main], cwd=d)
        out, err = w.finish()
        self.assertEqual((w.proc.returncode, out.strip()), (0, "the user"), err)
        self.assertEqual(len(w.lines(b"H ")), 1)  # and the worker module ran all the same

    def test_no_site_and_isolated_modes_leave_the_worker_alone(self):
        for flag in ("-S", "-I", "-E"):
            r, w = self.run_report(PYTHON, flag)
            self.assertFalse(r["module"] or r["claimed"], flag)
            self.assertEqual(w.bytes, b"", flag)

    def test_a_python_without_torch_says_hello_and_answers(self):
        python = PLAIN_PYTHON or PYTHON
        if has_torch(python):
            self.skipTest("no Python without torch given (COHORT_TEST_PLAIN_PYTHON)")
        w = Worker([python, script("""
            import time
            def waiting_for_nothing():
                time.sleep(60)
            waiting_for_nothing()
            """)])
        try:
            w.wait_for(lambda: w.lines(b"H "), 20, "the hello line")
            hello = w.lines(b"H ")[0].split()
            self.assertEqual(hello[0:3], [b"H", b"1", str(w.proc.pid).encode()])
            self.assertEqual(hello[3], b"probe")
            a = w.probe(4)
            self.assertEqual((a["id"], a["pid"]), (4, w.proc.pid))
            self.assertNotIn("torch", a)
            main = a["threads"][0]
            self.assertTrue(main["main"])
            self.assertEqual(main["frames"][-1][2], "waiting_for_nothing")
        finally:
            w.kill()


@unittest.skipUnless(has_torch(PYTHON), "needs torch")
class WithTorch(unittest.TestCase):
    def test_every_optimizer_step_beats_and_reports(self):
        w = Worker([PYTHON, script("""
            import time, torch
            m = torch.nn.Linear(4, 1)
            opt = torch.optim.SGD(m.parameters(), lr=0.1)
            for _ in range(40):
                opt.zero_grad(); m(torch.ones(2, 4)).sum().backward(); opt.step()
                time.sleep(0.02)
            """)])
        _, err = w.finish(timeout=120)
        self.assertEqual(w.proc.returncode, 0, err)
        # The module's own reports and beats ("A", "a"): the script beat nothing by hand.
        steps = w.lines(b"A ")
        self.assertGreaterEqual(len(steps), 2, w.bytes)
        self.assertEqual(w.lines(b"S "), [], w.bytes)
        self.assertNotIn(b"b", w.bytes.replace(b"probe", b""), w.bytes)  # no beat by hand
        _, step, step_s, items, comm_s = steps[-1].split()
        self.assertGreater(int(step), 10)
        self.assertGreater(float(step_s), 0.015)  # the 20 ms sleep is inside a step
        self.assertLess(float(comm_s), float(step_s))

    def test_a_rank_waiting_in_a_collective_answers_with_it(self):
        # Two ranks over a FileStore; rank 1 never calls the second allreduce.
        store = tempfile.mktemp()
        text = """
            import datetime, os, sys, time, torch, torch.distributed as dist
            rank = int(sys.argv[1])
            dist.init_process_group("gloo", init_method="file://" + sys.argv[2], rank=rank,
                                    world_size=2, timeout=datetime.timedelta(seconds=120))
            dist.all_reduce(torch.ones(3))
            print("first done", flush=True)
            def never_arrives():
                time.sleep(120)
            if rank == 1:
                never_arrives()
            dist.all_reduce(torch.ones(8))
            """
        path = script(text)
        ws = [Worker([PYTHON, "-u", path, str(r), store]) for r in (0, 1)]
        try:
            for w in ws:
                w.wait_for(lambda w=w: w.proc.stdout.readline().strip() == "first done", 120,
                           "the first allreduce")
            # Rank 0's second allreduce is issued once it is waiting; wait until it says so.
            deadline = time.monotonic() + 30
            while True:
                a0 = ws[0].probe(1)
                g0 = {g["name"]: g for g in a0.get("groups", [])}
                seq0 = g0.get("0", {}).get("seq")
                a1 = ws[1].probe(1)
                seq1 = {g["name"]: g for g in a1["groups"]}["0"]["seq"]
                # Rank 0 issued the allreduce and waits in it; rank 1 sleeps before it.
                if (seq0 is not None and seq0 == seq1 + 1
                        and a0["threads"][0]["frames"][-1][3] == "work.wait()"
                        and a1["threads"][0]["frames"][-1][2] == "never_arrives"):
                    break
                self.assertLess(time.monotonic(), deadline, (a0, a1))
                time.sleep(0.1)
            # It answered while its main thread waits in work.wait(): the GIL is free there.
            self.assertEqual(a0["groups"][0]["ranks"], [0, 1])
            if a0.get("fr"):  # PyTorch 2.x: the Flight Recorder names the collective
                pending = [c for c in a0["collectives"] if not c["done"]]
                self.assertEqual(len(pending), 1, a0["collectives"])
                self.assertEqual(pending[0]["seq"], seq0)
                self.assertTrue(pending[0]["op"].endswith("all_reduce"))
                self.assertEqual(pending[0]["in"], [[8]])
                self.assertLess(pending[0]["since"], a0["time"])
                self.assertFalse([c for c in a1["collectives"] if not c["done"]])
        finally:
            for w in ws:
                w.kill()

    def test_forked_and_spawned_children_stay_quiet(self):
        w = Worker([PYTHON, "-u", script("""
            import multiprocessing as mp, os, sys, torch
            from torch.utils.data import DataLoader, Dataset
            import _cohort_worker as cw
            class D(Dataset):
                def __len__(self): return 4
                def __getitem__(self, i):
                    return torch.tensor([int(cw.activate()), int(cw.probe.server.fd >= 0)])
            def child(q):
                import _cohort_worker as cw
                q.put((cw.activate(), os.environ["COHORT_WORKER_PID"]))
            if __name__ == "__main__":
                for b in DataLoader(D(), num_workers=2, batch_size=2,
                                    multiprocessing_context="fork"):
                    print("forked", b.sum().item(), flush=True)
                q = mp.get_context("spawn").Queue()
                p = mp.get_context("spawn").Process(target=child, args=(q,))
                p.start()
                print("spawned", q.get(timeout=60), flush=True)
                p.join()
            """)])
        out, err = w.finish(timeout=120)
        self.assertEqual(w.proc.returncode, 0, err)
        self.assertEqual(out.count("forked 0"), 2, out)
        self.assertIn("spawned (False, '%d')" % w.proc.pid, out)
        self.assertEqual(len(w.lines(b"H ")), 1, w.bytes)

    def test_a_fork_servers_child_claims_what_it_is_given(self):
        # The server starts with the module but without a worker's descriptors.
        srv = script("""
            import os, sys, torch, _cohort_worker as cw
            assert not cw.activate()
            pid = os.fork()
            if pid == 0:
                os.environ.update(COHORT_HEARTBEAT_FD=sys.argv[1], COHORT_CONTROL_FD=sys.argv[2])
                os.environ.pop("COHORT_WORKER_PID", None)
                ok = cw.activate()
                m = torch.nn.Linear(2, 1); opt = torch.optim.SGD(m.parameters(), lr=0.1)
                for _ in range(3):
                    opt.zero_grad(); m(torch.ones(1, 2)).sum().backward(); opt.step()
                print("child", os.getpid(), ok, flush=True)
                os._exit(0)
            os.waitpid(pid, 0)
            """)
        pipe_r, pipe_w = os.pipe()
        ours, theirs = socket.socketpair()
        env = dict(os.environ, PYTHONPATH=SITE + ":" + PYDIR)
        for k in ("COHORT_HEARTBEAT_FD", "COHORT_CONTROL_FD", "COHORT_WORKER_PID"):
            env.pop(k, None)
        p = subprocess.run([PYTHON, srv, str(pipe_w), str(theirs.fileno())], env=env,
                           pass_fds=(pipe_w, theirs.fileno()), capture_output=True, text=True,
                           timeout=120)
        os.close(pipe_w)
        ours.close()
        theirs.close()
        self.assertEqual(p.returncode, 0, p.stderr)
        _, child, ok = p.stdout.split()
        self.assertEqual(ok, "True")
        got = os.read(pipe_r, 65536)
        os.close(pipe_r)
        self.assertTrue(got.startswith(b"H 1 %s probe\n" % child.encode()), got)
        self.assertGreater(len(got), len("H 1 %s probe\n" % child), got)  # its steps beat


if __name__ == "__main__":
    unittest.main()
