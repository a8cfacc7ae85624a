"""cohort for Python workers: heartbeats that let cohortrun see a hung worker.

Under cohortrun, every worker has a heartbeat pipe (COHORT_HEARTBEAT_FD); with
`cohortrun --worker-hang-timeout S`, a worker that has beaten once and then stays silent for S
seconds is declared hung: cohortrun asks it for its stack (SIGABRT, with Python's faulthandler on)
and the failure summary shows where every thread was. Importing this module is all a PyTorch
script needs:

    import cohort   # every optimizer step now beats

It registers PyTorch's global optimizer-step hook (torch 2.x; on 1.13, each zero_grad() beats).
Code without an optimizer, or long phases without steps (evaluation, checkpoints), can beat by
hand:

    cohort.beat()

A training loop can also say how far it is and how long its steps take, for cohortrun's metrics,
`cohortctl status` and its straggler check (comm_seconds: the step's time in communication):

    cohort.report_step(step, step_seconds, samples_per_second, comm_seconds)

Without cohortrun (no COHORT_HEARTBEAT_FD) all of these do nothing.
"""
from ._heartbeat import beat, install_torch_hook, report_step

__all__ = ["beat", "install_torch_hook", "report_step"]

install_torch_hook()
