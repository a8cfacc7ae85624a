#!/usr/bin/python3
"""rdzv_bench: the elastic rendezvous on network-namespace hosts (needs root).

Hosts: nodes 1..8 run agents, node 9 runs the store (cohortd, or etcd). Measures
  1. round formation: N agents (--nnodes N) started at once; time until every worker runs;
  2. node loss: 3 agents (--nnodes 2:3); SIGKILL one agent; time until the survivors' workers of
     the next round run;
with cohortd and with etcd, at torchrun's defaults (keep_alive_interval=5, keep_alive_max_attempt=3,
last_call_timeout=30) and at keep_alive_interval=0.5,keep_alive_max_attempt=3,last_call_timeout=0.5;
and torchrun's c10d (its store: the same cohortd, which speaks both PyTorch protocols). torchrun
1.13 (the default) has no keep-alive settings, always 5 s x 3, and whole-second timeouts: its
"fast" row uses a 1 s last call; --torchrun names another, e.g. 2.15's
(~/.cache/cohort/torch-2.15.0/bin/torchrun), which takes the keep-alive settings in whole seconds:
its "fast" row uses keep_alive_interval=1, keep_alive_max_attempt=3, last_call_timeout=1.
Prints a table and one JSON line.
"""
import argparse
import glob
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

PREFIX, SUBNET, NODES = "crb", "10.76.0", 9
STORE = f"{SUBNET}.9"
FAST = "keep_alive_interval=0.5,keep_alive_max_attempt=3,last_call_timeout=0.5"
DEFAULT = "keep_alive_interval=5,keep_alive_max_attempt=3,last_call_timeout=30"


def now_ns():
    return time.clock_gettime_ns(time.CLOCK_REALTIME)


def ns(i):
    return f"{PREFIX}-n{i}"


class Bench:
    def __init__(self, root, build):
        self.root, self.bin = root, os.path.join(build, "bin")
        self.env = dict(os.environ, COHORT_NETNS_PREFIX=PREFIX, COHORT_NETNS_SUBNET=SUBNET,
                        COHORT_NETNS_NODES=str(NODES), LOGLEVEL="ERROR", OMP_NUM_THREADS="1")
        self.store = None

    def netns(self, what):
        subprocess.run([os.path.join(self.root, "scripts/cluster", f"netns_{what}.sh")],
                       env=self.env, check=True, stdout=subprocess.DEVNULL)

    def start_store(self, kind, workdir):
        if kind == "etcd":
            c, p = f"http://{STORE}:2379", f"http://{STORE}:2380"
            self.store = subprocess.Popen(
                ["ip", "netns", "exec", ns(9), "etcd", "--name", "b", "--data-dir",
                 os.path.join(workdir, "etcd"), "--listen-client-urls", c, "--advertise-client-urls",
                 c, "--listen-peer-urls", p, "--initial-advertise-peer-urls", p,
                 "--initial-cluster", f"b={p}", "--logger", "zap", "--log-outputs", "stderr"],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            return f"{STORE}:2379"
        self.store = subprocess.Popen(
            ["ip", "netns", "exec", ns(9), os.path.join(self.bin, "cohortd"), "--host", STORE,
             "--port", "29400"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        self.store.stdout.readline()
        return f"{STORE}:29400"

    def stop_store(self):
        if self.store:
            self.store.send_signal(signal.SIGTERM)
            try:
                self.store.wait(10)
            except subprocess.TimeoutExpired:
                self.store.kill()
            self.store = None

    def agent(self, launcher, node, nnodes, endpoint, job, conf, out, seconds):
        worker = [os.path.join(self.bin, "rdzv_bench_worker"), out, str(seconds)]
        if launcher == "torchrun":
            # torchrun takes whole seconds; 1.13 has no keep-alive settings (fixed at 5 s x 3):
            # only its last call carries over.
            kv = dict(item.split("=") for item in conf.split(","))
            whole = {k: max(1, round(float(v))) for k, v in kv.items()}
            rdzv_conf = f"last_call_timeout={whole['last_call_timeout']},is_host=0"
            if self.torchrun != "/usr/bin/torchrun":
                rdzv_conf += (f",keep_alive_interval={whole['keep_alive_interval']}"
                              f",keep_alive_max_attempt={whole['keep_alive_max_attempt']}")
            cmd = [self.torchrun, "--nnodes", nnodes, "--nproc_per_node", "1",
                   "--rdzv_backend", "c10d", "--rdzv_endpoint", endpoint, "--rdzv_id", job,
                   "--rdzv_conf", rdzv_conf, "--max_restarts", "3",
                   "--no_python",
                   "-r", "1", "-t", "1", *worker]
        else:
            cmd = [os.path.join(self.bin, "cohortrun"), "--nnodes", nnodes, "--nproc-per-node", "1",
                   "--rdzv-backend", "etcd" if launcher == "cohortrun+etcd" else "c10d",
                   "--rdzv-endpoint", endpoint, "--rdzv-id", job, "--rdzv-conf", conf,
                   "--max-restarts", "3", "--no-python", *worker]
        return subprocess.Popen(["ip", "netns", "exec", ns(node), *cmd], env=self.env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                start_new_session=True)

    @staticmethod
    def wait_files(pattern, count, timeout):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            files = glob.glob(pattern)
            if len(files) >= count:
                return [int(open(f).read() or 0) for f in files]
            time.sleep(0.01)
        return None

    @staticmethod
    def stop(agents):
        for a in agents:
            try:
                os.killpg(a.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        for a in agents:
            try:
                a.wait(40)
            except subprocess.TimeoutExpired:
                os.killpg(a.pid, signal.SIGKILL)
                a.wait()

    def formation(self, launcher, endpoint, n, conf):
        out = tempfile.mkdtemp(prefix="rdzvb_")
        job = f"form{n}_{time.monotonic_ns()}"
        t0 = now_ns()
        agents = [self.agent(launcher, i + 1, str(n), endpoint, job, conf, out, 0) for i in range(n)]
        starts = self.wait_files(f"{out}/start.0.*", n, 300)
        self.stop(agents)
        shutil.rmtree(out, ignore_errors=True)
        return None if starts is None else (max(starts) - t0) / 1e9

    def node_loss(self, launcher, endpoint, conf):
        out = tempfile.mkdtemp(prefix="rdzvb_")
        job = f"loss_{time.monotonic_ns()}"
        agents = [self.agent(launcher, i + 1, "2:3", endpoint, job, conf, out, 0) for i in range(3)]
        result = None
        if self.wait_files(f"{out}/start.0.*", 3, 300) is not None:
            time.sleep(1)  # let the round settle into its keep-alives
            t0 = now_ns()
            os.killpg(agents[2].pid, signal.SIGKILL)
            starts = self.wait_files(f"{out}/start.1.*", 2, 180)
            if starts is not None:
                result = (max(starts) - t0) / 1e9
        self.stop(agents)
        shutil.rmtree(out, ignore_errors=True)
        return result


def fmt(v):
    return "   timeout" if v is None else f"{v:9.2f}s"


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.abspath(os.path.join(here, "..", "..", ".."))
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(root, "build"))
    ap.add_argument("--sizes", default="2,3,8")
    ap.add_argument("--no-torchrun", action="store_true")
    ap.add_argument("--torchrun", default="/usr/bin/torchrun", help="the torchrun to compare with")
    ap.add_argument("--no-defaults", action="store_true", help="skip the slow default-settings runs")
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("rdzv_bench needs root (network namespaces)")
    b = Bench(root, os.path.abspath(args.build))
    b.torchrun = args.torchrun
    b.netns("up")
    results, rows = {}, []
    work = tempfile.mkdtemp(prefix="rdzvb_store_")
    try:
        launchers = [("cohortrun", "cohortd"), ("cohortrun+etcd", "etcd")]
        if not args.no_torchrun:
            launchers.append(("torchrun", "cohortd"))
        settings = [("fast", FAST)] + ([] if args.no_defaults else [("default", DEFAULT)])
        for launcher, store in launchers:
            endpoint = b.start_store(store, work)
            try:
                for n in [int(x) for x in args.sizes.split(",")]:
                    key = f"form{n}_{launcher}"
                    results[key + "_s"] = b.formation(launcher, endpoint, n, FAST)
                for name, conf in settings:
                    results[f"loss_{name}_{launcher}_s"] = b.node_loss(launcher, endpoint, conf)
            finally:
                b.stop_store()
                shutil.rmtree(os.path.join(work, "etcd"), ignore_errors=True)
    finally:
        b.netns("down")
        shutil.rmtree(work, ignore_errors=True)
    names = [l for l, _ in launchers]
    print(f"{'measure':44}" + "".join(f"{n:>16}" for n in names))
    for n in [int(x) for x in args.sizes.split(",")]:
        print(f"{f'form a round of {n} nodes':44}" + "".join(f"{fmt(results.get(f'form{n}_{l}_s')):>16}" for l in names))
    for name in ["fast"] + ([] if args.no_defaults else ["default"]):
        label = f"node loss -> workers again ({name} keep-alive)"
        print(f"{label:44}" + "".join(f"{fmt(results.get(f'loss_{name}_{l}_s')):>16}" for l in names))
    fast = results.get("loss_fast_cohortrun_s")
    results["target_loss_fast_under_3s"] = fast is not None and fast < 3
    print(json.dumps({"bench": "rdzv", "fast_conf": FAST, "default_conf": DEFAULT,
                      "torchrun": args.torchrun, **results}))


if __name__ == "__main__":
    main()
