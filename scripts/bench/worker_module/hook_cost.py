"""worker_module_bench's micro-measure: the CPU time one optimizer step gains from cohortrun's
worker module, measured inside one process (a tiny step whose cost is mostly PyTorch's Python
overhead, so the module's share is as large as it can be). Blocks of steps alternate between the
hooks installed and a plain optimizer of the same kind; the minimum block of each is kept (the
least disturbed by the rest of the machine). Prints one JSON line."""
import json
import os
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "python"))
from _cohort_worker import heartbeat, torch_hooks  # noqa: E402

torch.set_num_threads(1)
# The pipe the module writes to, drained by nobody: writes fail fast with EAGAIN once it is full.
r, w = os.pipe()
os.set_blocking(w, False)
heartbeat.attach(w)
optimizer_module = sys.modules["torch.optim.optimizer"]
Optimizer = torch.optim.Optimizer
plain_step_code = getattr(Optimizer, "_optimizer_step_code", None)
plain_backward = torch.autograd.backward
timed_backward = torch_hooks._timed_backward(plain_backward)
handle = None


def install(on):
    """The module's hooks (as torch_hooks.on_torch_imported installs them), or none at all."""
    global handle
    if handle is not None:
        handle.remove()
        handle = None
    if hasattr(optimizer_module, "register_optimizer_step_post_hook"):  # 2.x
        if on:
            handle = optimizer_module.register_optimizer_step_post_hook(
                lambda opt, *_: torch_hooks.after_step(opt))
    else:  # 1.13: the no-op its step wrapper calls, or ours
        Optimizer._optimizer_step_code = (
            (lambda self: torch_hooks.after_step(self)) if on else plain_step_code)
    torch.autograd.backward = timed_backward if on else plain_backward


m = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(m.parameters(), lr=0.01)
x = torch.ones(2, 4)


def block(on, n=2000):
    install(on)
    t = time.process_time()
    for _ in range(n):
        opt.zero_grad()
        m(x).sum().backward()
        opt.step()
    return (time.process_time() - t) / n


for _ in range(2):
    block(True), block(False)
with_s, without_s = [], []
for _ in range(int(os.environ.get("BLOCKS", "15"))):
    with_s.append(block(True))
    without_s.append(block(False))
print(json.dumps({"step_s_with": min(with_s), "step_s_without": min(without_s),
                  "cost_us": 1e6 * (min(with_s) - min(without_s)),
                  "torch": torch.__version__}))
