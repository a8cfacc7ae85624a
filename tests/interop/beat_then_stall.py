"""A Python worker without torch that beats by hand (cohort.beat()) and then stalls in
stuck_without_torch(): nothing tells a quiet phase from a hang here, so cohortrun judges it by its
beats alone, as before hang probes (tests/launcher/hang_torch_test.cc)."""
import time

import cohort

for _ in range(5):
    cohort.beat()
    time.sleep(0.05)


def stuck_without_torch():
    time.sleep(600)


stuck_without_torch()
