#!/usr/bin/env bash
# Sets up what is missing, builds (Release, tests on) and runs the whole test suite.
#   scripts/test.sh                 everything
#   scripts/test.sh -L store        only tests labelled "store" (any ctest arguments pass through)
# Exit status: the suite's. Build directory: $COHORT_BUILD_DIR (default build/).
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/setup.sh --check >/dev/null 2>&1 || scripts/setup.sh

BUILD=${COHORT_BUILD_DIR:-build}
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCOHORT_BUILD_TESTS=ON \
  -DCOHORT_BUILD_RUNTIME=ON -DCOHORT_BUILD_TRAINERS=ON -DCOHORT_BUILD_BENCH=ON
cmake --build "$BUILD" -j"$(nproc)"

cd "$BUILD"
ctest --output-on-failure --timeout 900 -j"$(nproc)" "$@"
