#!/usr/bin/env bash
# The main job: installs what is missing, builds, and trains the Fashion-MNIST CNN for one epoch
# with two data-parallel workers under cohortrun (about a minute on two cores). Extra arguments go
# to the trainer, e.g. scripts/demo.sh --epochs 2.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --no-torch2 --check >/dev/null 2>&1 || scripts/setup.sh --no-torch2
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$(nproc)" --target cohortrun cohortd cohort-train-fmnist cohort-train-gpt
echo
echo "== build/bin/cohortrun --nproc-per-node 2 build/bin/cohort-train-fmnist --epochs 1 $*"
exec build/bin/cohortrun --nproc-per-node 2 build/bin/cohort-train-fmnist --epochs 1 \
  --metrics build/fmnist-metrics.jsonl "$@"
