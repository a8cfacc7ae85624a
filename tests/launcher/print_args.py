"""A worker for the launcher tests: writes its arguments (one per line) to $COHORT_TEST_OUT/<RANK>.args."""
import os
import sys

with open(os.path.join(os.environ["COHORT_TEST_OUT"], os.environ["RANK"] + ".args"), "w") as f:
    f.write("\n".join(sys.argv[1:]) + "\n")
