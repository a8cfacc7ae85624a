"""`python -m cohort.run ...`: cohortrun, as `python -m torch.distributed.run` is torchrun.

Workers of Python entry points run under this interpreter (PYTHON_EXEC=sys.executable, unless
PYTHON_EXEC is set), as torchrun runs them with sys.executable: a virtual environment's workers
see that environment's packages. Every argument goes to cohortrun unchanged.
"""
import os
import shutil
import sys


def find_cohortrun():
    """The cohortrun binary: beside this interpreter (a virtual environment's bin, where the wheel
    installs it), inside this package (cohort/bin), or on PATH."""
    here = os.path.dirname(os.path.abspath(__file__))
    for candidate in (os.path.join(os.path.dirname(sys.executable), "cohortrun"),
                      os.path.join(here, "bin", "cohortrun")):
        if os.access(candidate, os.X_OK):
            return candidate
    return shutil.which("cohortrun")


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    binary = find_cohortrun()
    if binary is None:
        sys.stderr.write("cohort.run: no cohortrun binary beside %s, in the cohort package or on "
                         "PATH; install cohort (pip install cohort) or add its bin folder to "
                         "PATH\n" % sys.executable)
        return 2
    env = dict(os.environ)
    env.setdefault("PYTHON_EXEC", sys.executable)
    os.execve(binary, [binary, *argv], env)
    return 127  # not reached


if __name__ == "__main__":
    sys.exit(main())
