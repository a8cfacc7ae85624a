"""A PyTorch worker that guards a step with torch.distributed.elastic's file-based timer (the
FileTimerClient that torchrun 2.x serves when TORCHELASTIC_ENABLE_FILE_TIMER=1). Rank 1 overruns
its 1 s deadline; rank 0 releases its timer in time and would sleep long after."""
import os
import sys
import time

import torch.distributed.elastic.timer as timer

timer.configure(timer.FileTimerClient(os.environ["TORCHELASTIC_TIMER_FILE"]))
rank = int(os.environ["RANK"])
# Rank 1 starts its step only once rank 0's is done: on a loaded machine rank 0 may reach its
# timer more than a second after rank 1, and rank 1's expiry would stop it first.
marker = os.environ["TORCHELASTIC_TIMER_FILE"] + ".rank0-done"
if rank == 1:
    deadline = time.monotonic() + 60
    while not os.path.exists(marker) and time.monotonic() < deadline:
        time.sleep(0.02)
with timer.expires(after=1, scope="data_step"):
    time.sleep(0.1 if rank == 0 else 120)  # rank 1: stuck past the deadline
print(f"rank {rank}: step done", flush=True)
sys.stdout.flush()
if rank == 0:
    open(marker, "w").close()
time.sleep(120 if rank == 0 else 0)  # rank 0 stays until the group is stopped
