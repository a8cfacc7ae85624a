"""cohort for Python workers: what cohortrun gives every Python worker, and a few calls for
scripts that want to say more.

Under cohortrun nothing needs importing: cohortrun loads its worker module into every Python
worker (python/_cohort_worker/boot/sitecustomize.py; `cohortrun --no-cohort-module` turns that
off), so that every optimizer step beats and reports its time, and a hang is explained with
every rank's collectives and stacks. Importing this module does the same where that was turned
off:

    import cohort   # every optimizer step now beats

Long phases without optimizer steps (evaluation, checkpoints) need nothing either: cohortrun
judges a group hung only when some ranks wait in a collective that another rank has not
entered. A worker may still beat by hand:

    cohort.beat()

Beats by hand are a promise to beat in every phase: a worker in no process group (a one-GPU
script) that beat by hand and then stays silent for --worker-hang-timeout is judged hung, where
the beats the module makes on optimizer steps alone promise nothing of a phase without steps.

A training loop can also say how far it is and how long its steps take, for cohortrun's metrics,
`cohortctl status` and its straggler check (comm_seconds: the step's time in communication):

    cohort.report_step(step, step_seconds, samples_per_second, comm_seconds)

Without cohortrun (no COHORT_HEARTBEAT_FD) all of these do nothing.
"""
import _cohort_worker
from _cohort_worker import beat, report_step

__all__ = ["beat", "report_step"]

_cohort_worker.start()
