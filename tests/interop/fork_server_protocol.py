"""cohortrun's fork server (python/cohort/_forkserver.py), driven over its channel as cohortrun
drives it, with this generation's PyTorch: a forked worker is the process an exec'd one would be
(argv, environment, __main__, signals, descriptors, process group, parent), a changed module is
re-read, and the server refuses what it cannot do faithfully. Usage: fork_server_protocol.py"""
import ctypes
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
FORKSERVER = os.path.join(ROOT, "python", "cohort", "_forkserver.py")
PY = sys.executable
TIMEOUT = 120  # seconds; an import of torch on a loaded machine takes a few

libc = ctypes.CDLL(None, use_errno=True)
# This process plays cohortrun: the workers forked for it must become its children.
assert libc.prctl(36, 1, 0, 0, 0) == 0, "PR_SET_CHILD_SUBREAPER"


class Server:
    """A fork server for `argv` (the worker's command), started as cohortrun starts one."""

    def __init__(self, argv, env, preload=None, room=0):
        self.channel, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        cmd = [PY, "-u", FORKSERVER, "--channel=%d" % theirs.fileno()]
        cmd.append("--script=" + argv[2] if argv[2] != "-m" else "--module=" + argv[3])
        if preload is not None:
            cmd.append("--preload=" + ",".join(preload))
        # Room for the worker's command line (`room` more bytes than argv's): the worker shows
        # its own.
        pad = sum(len(a) + 1 for a in argv) + room - sum(len(a) + 1 for a in cmd) - 1
        if pad > 0:
            cmd.append("x" * pad)
        self.log = tempfile.TemporaryFile()
        self.env = dict(env)  # a request names what differs from it, as cohortrun does
        self.proc = subprocess.Popen(cmd, pass_fds=[theirs.fileno()], process_group=0,
                                     env=dict(env, COHORT_IN_FORK_SERVER="1"),
                                     stdout=self.log, stderr=self.log)
        theirs.close()
        self.channel.settimeout(TIMEOUT)
        self.hello = self.receive()

    def receive(self):
        data = self.channel.recv(1 << 20)
        if not data:
            self.log.seek(0)
            raise AssertionError("the server closed its channel: " + self.log.read().decode())
        return json.loads(data)

    def request(self, argv, env, fds, targets, agent=None, raw=None):
        message = raw if raw is not None else json.dumps({
            "argv": argv, "env_set": {k: v for k, v in env.items() if self.env.get(k) != v},
            "env_unset": [k for k in self.env if k not in env], "cwd": os.getcwd(),
            "fds": targets, "agent": agent if agent is not None else os.getpid()}).encode()
        socket.send_fds(self.channel, [message], fds)
        return self.receive()

    def close(self):
        self.channel.close()
        try:
            return self.proc.wait(timeout=TIMEOUT)
        finally:
            if self.proc.poll() is None:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
            self.log.close()


def wait_status(pid):
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


class Worker:
    """Files of one run of the probe: its stdout and stderr go to files of its own."""

    def __init__(self, folder, name):
        self.out_path = os.path.join(folder, name + ".json")
        self.stdout = open(os.path.join(folder, name + ".stdout"), "w+b")
        self.stderr = open(os.path.join(folder, name + ".stderr"), "w+b")
        self.beat_r, self.beat_w = os.pipe()  # stands for the heartbeat pipe

    def fds(self):
        # What cohortrun hands a worker: stdin, stdout, stderr and the heartbeat pipe's write end
        # at its own number (COHORT_HEARTBEAT_FD).
        return [0, self.stdout.fileno(), self.stderr.fileno(), self.beat_w], \
               [0, 1, 2, self.beat_w]

    def env(self, base):
        return dict(base, COHORT_HEARTBEAT_FD=str(self.beat_w))

    def record(self):
        with open(self.out_path) as f:
            return json.load(f)

    def err(self):
        self.stderr.seek(0)
        return self.stderr.read().decode()

    def close(self):
        self.stdout.close()
        self.stderr.close()
        for fd in (self.beat_r, self.beat_w):
            try:
                os.close(fd)
            except OSError:
                pass


def exec_worker(argv, env, w):
    fds, targets = w.fds()
    # As cohortrun starts a worker: its own group, and the parent-death signal SIGKILL.
    return subprocess.Popen(argv, env=env, stdin=0, stdout=fds[1], stderr=fds[2],
                            pass_fds=[w.beat_w], process_group=0,
                            preexec_fn=lambda: libc.prctl(1, signal.SIGKILL, 0, 0, 0))


class ForkServerTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="fork_server_test_")
        for name in ("fork_probe.py", "fork_probe_helper.py"):
            shutil.copy(os.path.join(HERE, name), cls.dir)
        cls.script = os.path.join(cls.dir, "fork_probe.py")
        cls.base_env = dict(os.environ, RANK="0", WORLD_SIZE="1", PYTHONFAULTHANDLER="1",
                            TORCHELASTIC_RESTART_COUNT="0")
        cls.base_env.pop("COHORT_IN_FORK_SERVER", None)
        cls.server = Server(cls.argv("OUT"), cls.base_env, room=512)

    @classmethod
    def tearDownClass(cls):
        cls.server.close()
        shutil.rmtree(cls.dir, ignore_errors=True)

    @classmethod
    def argv(cls, out, action="ok"):
        return [PY, "-u", cls.script, out, action]

    def fork(self, w, action="ok", env=None, server=None, **kw):
        server = server or self.server
        fds, targets = w.fds()
        reply = server.request(self.argv(w.out_path, action), w.env(env or self.base_env), fds,
                               targets, **kw)
        self.assertIn("pid", reply, reply)
        return reply["pid"]

    def worker(self, name):
        w = Worker(self.dir, name)
        self.addCleanup(w.close)
        return w

    def test_server_is_ready_with_torch_imported(self):
        self.assertTrue(self.server.hello["ready"], self.server.hello)
        self.assertEqual(self.server.hello["pid"], self.server.proc.pid)
        failed = self.server.hello["failed"]
        self.assertNotIn("torch", failed)
        self.assertNotIn("torch.distributed", failed)

    def test_forked_worker_is_the_exec_d_worker(self):
        a, b = self.worker("exec"), self.worker("fork")
        p = exec_worker(self.argv(a.out_path), a.env(self.base_env), a)
        self.assertEqual(p.wait(TIMEOUT), 0, a.err())
        pid = self.fork(b)
        self.assertEqual(wait_status(pid), 0, b.err())
        e, f = a.record(), b.record()
        self.assertFalse(e["forked"])
        self.assertTrue(f["forked"], "the worker did not come from the server")
        self.assertEqual(f["pid"], pid)
        self.assertEqual(f["ppid"], os.getpid(), "the forked worker is not the agent's child")
        # What must be the same, key by key (one message per difference).
        # The runs differ in their output file and their heartbeat descriptor's number.
        for r, w in ((e, a), (f, b)):
            r["argv"][1] = r["orig_argv"][3] = r["cmdline"][3] = "OUT"
            r["env"]["COHORT_HEARTBEAT_FD"] = "HB"
            r["fds"]["HB"] = r["fds"].pop(str(w.beat_w))
            name = "/" + os.path.basename(w.out_path)[:-len(".json")] + "."
            r["fds"] = {k: v.replace(name, "/W.") for k, v in r["fds"].items()}
        for key in sorted(e):
            if key not in ("forked", "pid", "random", "numpy_random"):
                self.assertEqual(f[key], e[key], key)
        self.assertEqual(f["c_env_differs"], [])
        self.assertFalse(f["c_env_has_fork_marker"])
        self.assertTrue(f["leads_group"])
        self.assertEqual(f["pdeathsig"], signal.SIGKILL)
        self.assertEqual(f["sigmask"], [])
        self.assertEqual(f["python_threads"], 1)
        self.assertEqual(f["main"]["file"], self.script)
        self.assertTrue(f["main"]["is_this_module"])
        # The interpreter's own shutdown ran: non-daemon threads joined, atexit handlers run.
        for what in (".thread", ".atexit"):
            self.assertTrue(os.path.exists(b.out_path + what), what)

    def test_any_descriptor_number_can_be_the_worker_s(self):
        # cohortrun's numbers, whatever the server holds at them (its channel, its pipe to the
        # intermediate): the worker gets its heartbeat pipe at each.
        for number in range(3, 13):
            with self.subTest(number=number):
                w = self.worker("number%d" % number)
                fds, targets = w.fds()
                targets[3] = number
                env = dict(self.base_env, COHORT_HEARTBEAT_FD=str(number))
                reply = self.server.request(self.argv(w.out_path), env, fds, targets)
                self.assertIn("pid", reply, reply)
                self.assertEqual(wait_status(reply["pid"]), 0, w.err())
                self.assertEqual(w.record()["fds"].get(str(number)), "pipe:")

    def test_two_forked_workers_draw_different_random_numbers(self):
        a, b = self.worker("r1"), self.worker("r2")
        for w in (a, b):
            self.assertEqual(wait_status(self.fork(w)), 0, w.err())
        self.assertNotEqual(a.record()["random"], b.record()["random"])
        if a.record()["numpy_random"] is not None:
            self.assertNotEqual(a.record()["numpy_random"], b.record()["numpy_random"])

    def test_a_changed_module_of_the_script_s_folder_is_re_read(self):
        helper = os.path.join(self.dir, "fork_probe_helper.py")
        with open(helper) as f:
            original = f.read()
        def restore():
            with open(helper, "w") as f:
                f.write(original)

        self.addCleanup(restore)
        a = self.worker("helper1")
        self.assertEqual(wait_status(self.fork(a)), 0, a.err())
        self.assertEqual(a.record()["helper"], "original")
        with open(helper, "w") as f:
            f.write('VALUE = "changed"\n')
        b = self.worker("helper2")
        self.assertEqual(wait_status(self.fork(b)), 0, b.err())
        self.assertEqual(b.record()["helper"], "changed")

    def test_endings_are_the_interpreter_s(self):
        for action, code in (("raise", 1), ("exit:7", 7), ("interrupt", -signal.SIGINT)):
            with self.subTest(action=action):
                a, b = self.worker("end_exec"), self.worker("end_fork")
                p = exec_worker(self.argv(a.out_path, action), a.env(self.base_env), a)
                self.assertEqual(p.wait(TIMEOUT), code, a.err())
                self.assertEqual(wait_status(self.fork(b, action)), code, b.err())
                # The same traceback, without a line of the server's.
                self.assertEqual(b.err(), a.err())
                self.assertNotIn("_forkserver", b.err())

    def test_the_worker_leads_a_group_the_agent_can_kill(self):
        w = self.worker("killed")
        pid = self.fork(w, "sleep")
        self.assertEqual(os.getpgid(pid), pid)  # already, when its pid is known
        pidfd = os.pidfd_open(pid)
        self.addCleanup(os.close, pidfd)
        os.killpg(pid, signal.SIGKILL)
        self.assertEqual(wait_status(pid), -signal.SIGKILL)

    def test_a_worker_whose_agent_is_not_its_parent_exits(self):
        # The agent named in the request is not this process: nobody would wait for the worker.
        w = self.worker("orphan")
        pid = self.fork(w, agent=1)
        self.assertEqual(wait_status(pid), 127)
        self.assertFalse(os.path.exists(w.out_path), "the script ran")

    def test_bad_requests_are_refused_and_the_server_goes_on(self):
        w = self.worker("bad")
        fds, targets = w.fds()
        for raw in (b"not json", b"[1]", json.dumps({"argv": "x"}).encode(),
                    json.dumps({"argv": [], "fds": [], "env_set": []}).encode()):
            reply = self.server.request(None, None, fds, targets, raw=raw)
            self.assertIn("error", reply)
            self.assertFalse(reply["stale"], reply)
        reply = self.server.request(self.argv(w.out_path), w.env(self.base_env), fds[:2],
                                    targets)
        self.assertIn("descriptors", reply["error"])
        other = [PY, "-u", os.path.join(self.dir, "other.py"), w.out_path]
        reply = self.server.request(other, w.env(self.base_env), fds, targets)
        self.assertTrue(reply["stale"], reply)
        self.assertEqual(wait_status(self.fork(w)), 0, w.err())  # and it still serves

    def test_the_worker_s_environment_is_the_server_s_with_the_request_s_changes(self):
        # The server's environment (as its start left it), with the request's changes.
        w = self.worker("env")
        env = dict(self.base_env, COHORT_TEST_VALUE="attempt 1")
        env.pop("WORLD_SIZE")
        self.assertEqual(wait_status(self.fork(w, env=env)), 0, w.err())
        got = w.record()["env"]
        self.assertEqual(got["COHORT_TEST_VALUE"], "attempt 1")
        self.assertNotIn("WORLD_SIZE", got)
        self.assertNotIn("COHORT_IN_FORK_SERVER", got)
        self.assertEqual(got["RANK"], "0")
        self.assertEqual(w.record()["c_env_differs"], [])


class RefusalTest(unittest.TestCase):
    """Servers with small pre-import lists of modules this test writes."""

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="fork_server_refusal_")
        self.addCleanup(shutil.rmtree, self.dir, True)
        self.script = os.path.join(self.dir, "job.py")
        with open(self.script, "w") as f:
            f.write("import sys, marked\nsys.exit(0 if marked.VALUE == 'new' else 5)\n")
        self.env = dict(os.environ, PYTHONPATH=self.dir)
        self.argv = [PY, "-u", self.script]

    def module(self, name, text):
        with open(os.path.join(self.dir, name + ".py"), "w") as f:
            f.write(text)

    def test_a_changed_pre_imported_module_makes_the_server_stale(self):
        self.module("marked", "VALUE = 'old'\n")
        server = Server(self.argv, self.env, preload=["marked"])
        self.addCleanup(server.close)
        self.assertTrue(server.hello["ready"], server.hello)
        self.module("marked", "VALUE = 'new'  # another size: seen even within one mtime tick\n")
        reply = server.request(self.argv, self.env, [0, 1, 2], [0, 1, 2])
        self.assertTrue(reply.get("stale"), reply)
        self.assertIn("marked.py", reply["error"])
        # What the agent does then: the ordinary exec, which reads the new module.
        self.assertEqual(subprocess.run(self.argv, env=self.env).returncode, 0)

    def test_cuda_initialised_in_the_server_is_refused(self):
        # No GPU here: the marked module says CUDA is initialised as torch itself would.
        self.module("marked", "import torch\ntorch.cuda._initialized = True\nVALUE = 'new'\n")
        server = Server(self.argv, self.env, preload=["marked"])
        self.addCleanup(server.close)
        self.assertFalse(server.hello["ready"], server.hello)
        self.assertIn("CUDA", server.hello["error"])
        self.assertEqual(server.close(), 0)

    def test_a_python_thread_in_the_server_is_refused(self):
        self.module("marked", "import threading, time\nthreading.Thread(target=time.sleep, "
                              "args=(60,), daemon=True).start()\n")
        server = Server(self.argv, self.env, preload=["marked"])
        self.addCleanup(server.close)
        self.assertFalse(server.hello["ready"], server.hello)
        self.assertIn("thread", server.hello["error"])

    def test_a_failed_pre_import_is_reported_and_the_server_serves(self):
        self.module("marked", "VALUE = 'new'\n")
        server = Server(self.argv, self.env, preload=["no_such_module_here"])
        self.addCleanup(server.close)
        self.assertTrue(server.hello["ready"], server.hello)
        self.assertIn("no_such_module_here", server.hello["failed"])
        reply = server.request(self.argv, self.env, [0, 1, 2], [0, 1, 2])
        self.assertEqual(wait_status(reply["pid"]), 0)

    def test_the_server_ends_when_the_agent_closes_the_channel(self):
        server = Server(self.argv, self.env, preload=[])
        self.assertEqual(server.close(), 0)


if __name__ == "__main__":
    unittest.main(verbosity=2)
