"""worker_module_bench's second micro-measure: the CPU time one collective gains from PyTorch's
Flight Recorder, which cohortrun's worker module turns on for PyTorch 2.x workers
(TORCH_FR_BUFFER_SIZE=200 unless the worker sets it). One process, a gloo group of one rank, an
allreduce of FR_COST_NUMEL floats (the size of the DDP bucket of step_worker.py's model at its
default width is far larger; a small tensor makes the recorder's share as large as it can be).
The buffer size is read when the group is made, so each run measures one setting; the caller runs
it with and without, in alternation. Prints one JSON line: the least disturbed block's CPU time
per collective, and how many entries the recorder holds (0 without it)."""
import json
import os
import sys
import tempfile
import time

import torch
import torch.distributed as dist

torch.set_num_threads(1)


def block(x, n=2000):
    t = time.process_time()
    for _ in range(n):
        dist.all_reduce(x)
    return (time.process_time() - t) / n


with tempfile.TemporaryDirectory() as d:  # the FileStore removes its file at the end
    dist.init_process_group("gloo", init_method="file://" + os.path.join(d, "store"),
                            world_size=1, rank=0)
    x = torch.ones(int(os.environ.get("FR_COST_NUMEL", "1024")))
    block(x)
    best = min(block(x) for _ in range(int(os.environ.get("BLOCKS", "8"))))
    entries = 0
    c10d = getattr(torch._C, "_distributed_c10d", None)
    if hasattr(c10d, "_dump_fr_trace_json"):
        entries = len(json.loads(c10d._dump_fr_trace_json(backend="gloo")).get("entries", []))
    dist.destroy_process_group()
print(json.dumps({"collective_s": best, "fr_entries": entries, "torch": torch.__version__}))
sys.stdout.flush()
