"""cohortrun's hook into its Python workers, loaded before the script runs.

cohortrun puts this folder first on each Python worker's PYTHONPATH (unless it runs with
--no-cohort-module). Python's site module imports the first `sitecustomize` it finds on sys.path
(Lib/site.py, execsitecustomize()), which is this one: it starts the worker side of cohortrun
(the private `_cohort_worker` package: beats on every optimizer step, and a helper thread that
answers cohortrun's questions about a hang), then runs the sitecustomize the environment would
have run without cohortrun (the next one on sys.path: Debian's /usr/lib/python3.X, a virtual
environment's, one of the user's own on PYTHONPATH), as if this one were not there.

Nothing here may break or slow a worker: failures of cohortrun's part are swallowed (the worker
then runs as it would without cohortrun); the chained sitecustomize's errors surface exactly as
site.py would show them. `python -S` (no site), `-I` and `-E` (PYTHONPATH ignored) load none of
this.
"""
import os
import sys


def _start_cohort():
    try:
        if "_cohort_worker" not in sys.modules:
            # The package's parent folder, on sys.path only for this import (the package's own
            # imports are of the standard library, which is loaded already).
            parent = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
            sys.path.insert(0, parent)
            try:
                import _cohort_worker  # noqa: F401
            finally:
                sys.path.remove(parent)
        sys.modules["_cohort_worker"].start()
    except Exception:  # noqa: BLE001 - cohortrun's part must never stop the worker
        pass


def _run_the_next_sitecustomize():
    # Imported by name with this folder out of sys.path, as ddtrace's bootstrap does: the import
    # system finds what `import sitecustomize` would have found without cohortrun.
    here = os.path.dirname(os.path.abspath(__file__))
    at = [i for i, p in enumerate(sys.path) if os.path.abspath(p or os.curdir) == here]
    for i in reversed(at):
        del sys.path[i]
    ours = sys.modules.pop("sitecustomize", None)
    try:
        __import__("sitecustomize")
    except ImportError as e:
        if e.name != "sitecustomize":
            raise  # its own error: site.py reports it, as it would have without cohortrun
        sys.modules["sitecustomize"] = ours  # there is none: this one stays
    finally:
        for i in at:
            sys.path.insert(i, here)


_start_cohort()
_run_the_next_sitecustomize()
