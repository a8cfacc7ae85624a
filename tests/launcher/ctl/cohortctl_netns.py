#!/usr/bin/env python3
"""`cohortctl status` against a live 2-node job on separate network hosts: three network
namespaces (scripts/cluster/netns_up.sh, prefix "cct", 10.82.0.0/24, with the root-namespace guard
route): nodes 1 and 2 run a cohortrun agent with 2 libcohort workers each (runtime_test_worker
steps, rank 3 slowed), node 3 runs cohortd with a token. cohortctl, run on node 3, lists the job
and shows both nodes, all four workers stepping, and rank 3 as a straggler; without the token it
fails, naming the token. Needs root (exit 77: skipped).

    cohortctl_netns.py <source dir> <cohortrun> <cohortd> <runtime_test_worker> <cohortctl>
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "common"))
from prometheus_harness import fail, start, stop, wait_for  # noqa: E402

SRC, COHORTRUN, COHORTD, WORKER, COHORTCTL = sys.argv[1:6]
NET = {"COHORT_NETNS_PREFIX": "cct", "COHORT_NETNS_SUBNET": "10.82.0", "COHORT_NETNS_NODES": "3"}
STORE = "10.82.0.3:29400"


def on(node, argv):
    return ["ip", "netns", "exec", f"cct-n{node}"] + argv


def ctl(args, token=None):
    argv = on(3, [COHORTCTL, "status", "--store", STORE] + args)
    if token:
        argv[argv.index("--store"):argv.index("--store")] = ["--token-file", token]
    return subprocess.run(argv, capture_output=True, text=True, timeout=30)


def main():
    if os.geteuid() != 0 or not shutil.which("ip"):
        print("SKIP: needs root and iproute2 (network namespaces)")
        sys.exit(77)
    env = dict(os.environ, **NET)
    subprocess.run([os.path.join(SRC, "scripts/cluster/netns_up.sh")], env=env, check=True,
                   stdout=subprocess.DEVNULL)
    tmp = tempfile.mkdtemp(prefix="cohort-ctl-netns-")
    procs = []
    try:
        token = os.path.join(tmp, "token")
        with open(token, "w") as f:
            f.write("netns-status-token-of-32-bytes-xx\n")
        os.chmod(token, 0o600)
        with open(os.path.join(tmp, "cohortd.log"), "w") as log:
            procs.append(start(on(3, [COHORTD, "--host", "10.82.0.3", "--port", "29400",
                                      "--auth-token-file", token]), log))
        job_env = dict(os.environ, COHORT_TEST_STEPS="400", COHORT_TEST_SLOW_RANK="3")
        for node in (1, 2):
            with open(os.path.join(tmp, f"node{node}.log"), "w") as log:
                procs.append(start(on(node, [
                    COHORTRUN, "--nnodes", "2", "--nproc-per-node", "2", "--rdzv-backend", "c10d",
                    "--rdzv-endpoint", STORE, "--rdzv-id", "netjob", "--auth-token-file", token,
                    "--straggler-window", "1.5", "--no-python", WORKER, "steps"]), log,
                    env=job_env, cwd=tmp))

        def detail():
            r = ctl(["--job", "netjob", "--json"], token)
            return json.loads(r.stdout) if r.returncode == 0 else None

        def complete(doc):
            text = json.dumps(doc)
            workers = [w for w in walk(doc) if isinstance(w, dict) and "step" in w and "rank" in w]
            ranks = {w["rank"] for w in workers if (w.get("step") or 0) > 0}
            return ranks == {0, 1, 2, 3} and 3 in stragglers(doc) and "netjob" in text

        doc = wait_for("cohortctl status shows 4 stepping ranks on 2 nodes and rank 3 slow",
                       lambda: (lambda d: d if d and complete(d) else None)(detail()), timeout=60)
        print("cohortctl status --json:", json.dumps(doc)[:600], flush=True)
        listing = ctl([], token)
        if listing.returncode != 0 or "netjob" not in listing.stdout:
            fail("cohortctl status without --job should list netjob:\n" + listing.stdout +
                 listing.stderr)
        text = ctl(["--job", "netjob"], token)
        if text.returncode != 0 or "straggler" not in text.stdout.lower():
            fail("the text view should show the straggler:\n" + text.stdout + text.stderr)
        refused = ctl(["--job", "netjob"])
        if refused.returncode == 0 or "token" not in (refused.stdout + refused.stderr).lower():
            fail("without the token cohortctl should fail, naming the token:\n" +
                 refused.stdout + refused.stderr)
        print("listing:\n" + listing.stdout + "\ndetail:\n" + text.stdout, flush=True)
    finally:
        for p in reversed(procs):
            stop(p)
        shutil.rmtree(tmp, ignore_errors=True)
        subprocess.run([os.path.join(SRC, "scripts/cluster/netns_down.sh")], env=env,
                       stdout=subprocess.DEVNULL)
    print("PASS")


def walk(doc):
    """Every dict and list in a JSON document, depth first."""
    yield doc
    if isinstance(doc, dict):
        for v in doc.values():
            yield from walk(v)
    elif isinstance(doc, list):
        for v in doc:
            yield from walk(v)


def stragglers(doc):
    found = set()
    for x in walk(doc):
        if isinstance(x, dict) and isinstance(x.get("stragglers"), list):
            found |= {g.get("rank") for g in x["stragglers"] if isinstance(g, dict)}
    return found


if __name__ == "__main__":
    main()
