"""Beats and step times from PyTorch's optimizers, installed the moment torch is imported.

A script that never imports torch pays nothing: until then the only trace of cohortrun is one
finder on sys.meta_path, which looks at the name of each top-level import and steps aside. When
`import torch` has finished, it registers:
  - torch 2.x: PyTorch's global optimizer step post-hook (torch/optim/optimizer.py,
    register_optimizer_step_post_hook);
  - torch 1.13: Optimizer._optimizer_step_code, the no-op that 1.13's step wrapper calls after
    every step of every optimizer ("a workaround due to lack of a proper step hook").
Every step is a beat; the steps of the first optimizer that steps are timed (the time between
the ends of two steps) and reported (heartbeat.report_step), with the time spent in backward()
as the step's communication estimate: DistributedDataParallel waits for its gradient allreduce
inside backward(), so a rank that waits there is not the slow one (launcher/straggler_check.h).
"""
import sys
import time

from . import heartbeat


class _Steps:
    __slots__ = ("optimizer", "count", "last_end", "backward_s")

    def __init__(self):
        self.optimizer = None  # id() of the optimizer whose steps are timed
        self.count = 0
        self.last_end = None  # time.monotonic() at the end of its last step
        self.backward_s = 0.0  # time in backward() since then


steps = _Steps()
_now = time.monotonic


def after_step(optimizer, *_):
    now = _now()
    s = steps
    if s.optimizer != id(optimizer):
        if s.optimizer is not None:
            heartbeat.auto_beat()  # another optimizer's step: a beat, not timed
            return
        s.optimizer = id(optimizer)
    s.count += 1
    if s.last_end is None:
        heartbeat.auto_beat()
    else:
        step_s = now - s.last_end
        b = s.backward_s
        heartbeat.add_step(now, s.count, step_s, 0.0, b if b < step_s else step_s)
    s.backward_s = 0.0
    s.last_end = now


def _timed_backward(backward):
    def backward_timed(*args, **kwargs):
        t0 = _now()
        try:
            return backward(*args, **kwargs)
        finally:
            steps.backward_s += _now() - t0
    backward_timed.__wrapped__ = backward
    backward_timed.__doc__ = backward.__doc__
    backward_timed.__name__ = backward.__name__
    backward_timed.__module__ = backward.__module__
    backward_timed._cohort_timed = True
    return backward_timed


def on_torch_imported(torch, on_step):
    """Hooks `torch`'s optimizers (once per process): `on_step(optimizer)` after every step."""
    optim = getattr(torch, "optim", None)
    optimizer_module = sys.modules.get("torch.optim.optimizer")  # torch.optim deletes the name
    if optim is None or optimizer_module is None or getattr(optimizer_module, "_cohort_hooked", False):
        return
    if hasattr(optimizer_module, "register_optimizer_step_post_hook"):  # torch 2.x
        optimizer_module.register_optimizer_step_post_hook(lambda opt, *_: on_step(opt))
    elif hasattr(optim.Optimizer, "_optimizer_step_code"):  # torch 1.13
        def _optimizer_step_code(self):
            on_step(self)
        optim.Optimizer._optimizer_step_code = _optimizer_step_code
    else:
        return
    autograd = getattr(torch, "autograd", None)
    backward = getattr(autograd, "backward", None)
    if backward is not None and not getattr(backward, "_cohort_timed", False):
        autograd.backward = _timed_backward(backward)
    optimizer_module._cohort_hooked = True


class AfterImport:
    """A sys.meta_path finder that runs `callback(module)` once `import <name>` has finished.

    It finds the module's spec with the finders after it and wraps that spec's loader's
    exec_module; everything else about the import is untouched, errors included."""

    def __init__(self, name, callback):
        self.name = name
        self.callback = callback

    def find_spec(self, fullname, path=None, target=None):
        if fullname != self.name:
            return None
        spec = None
        for finder in sys.meta_path:  # the finders after this one, as the import system asks them
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                break
        loader = getattr(spec, "loader", None)
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        exec_module = loader.exec_module
        finder, callback = self, self.callback

        def exec_then_call(module):
            exec_module(module)
            finder.remove()
            try:
                callback(module)
            except Exception as e:  # noqa: BLE001 - cohortrun's part must never break the import
                sys.stderr.write("cohortrun's worker module: no beats from %s (%r)\n"
                                 % (finder.name, e))

        loader.exec_module = exec_then_call
        return spec

    def install(self):
        if self.name in sys.modules:
            self.callback(sys.modules[self.name])
        elif self not in sys.meta_path:
            sys.meta_path.insert(0, self)

    def remove(self):
        try:
            sys.meta_path.remove(self)
        except ValueError:
            pass
