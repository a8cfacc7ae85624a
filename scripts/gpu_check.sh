#!/usr/bin/env bash
# GPU check: on a machine with a CUDA GPU, build cohort with CUDA into its own build directory,
# run every GPU test (ctest -L gpu: the NCCL backend with one rank, the CUDA kernels against their
# CPU references), then the GPU runs registered below, and print ONE JSON line:
#   {"gpu_check": "pass"|"fail", "gpu": "...", "build_s": .., "ctest": {"passed": .., "failed": ..,
#    "skipped": .., "total": .., "seconds": ..}, "checks": [{"name": .., "ok": .., "seconds": ..}],
#    "total_s": ..}
# Budget: under 8 minutes on a 16-core machine (override the parallelism with GPU_CHECK_JOBS).
# Env: COHORT_GPU_BUILD_DIR (default <repo>/build-gpu), GPU_CHECK_JOBS (default nproc),
#      GPU_CHECK_TEST_TIMEOUT (per test, default 300 s). Logs go to $COHORT_GPU_BUILD_DIR/gpu_check.log.
# Exit status 0 iff everything passed (a machine without a GPU is a failure: nothing was checked).
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=${COHORT_GPU_BUILD_DIR:-$ROOT/build-gpu}
JOBS=${GPU_CHECK_JOBS:-$(nproc)}
TEST_TIMEOUT=${GPU_CHECK_TEST_TIMEOUT:-300}
mkdir -p "$BUILD"
LOG=$BUILD/gpu_check.log
: >"$LOG"
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN{printf "%.1f", b-a}'; }
json_str() { printf '%s' "$1" | sed 's/\\/\\\\/g; s/"/\\"/g' | tr -d '\n'; }
T0=$(now)

GPU=$(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null \
      | head -1)
if [ -z "$GPU" ]; then
  echo "{\"gpu_check\": \"fail\", \"error\": \"no GPU visible (nvidia-smi)\", \"total_s\": $(since "$T0")}"
  exit 1
fi

# ---- build ---------------------------------------------------------------------------------
GEN=()
command -v ninja >/dev/null && GEN=(-G Ninja)
TB=$(now)
BUILD_OK=true
if ! cmake -S "$ROOT" -B "$BUILD" "${GEN[@]}" -DCMAKE_BUILD_TYPE=Release -DCOHORT_CUDA=ON \
       -DCOHORT_BUILD_BENCH=OFF >>"$LOG" 2>&1 \
   || ! cmake --build "$BUILD" -j "$JOBS" >>"$LOG" 2>&1; then
  BUILD_OK=false
fi
BUILD_S=$(since "$TB")
if [ "$BUILD_OK" != true ]; then
  TAIL=$(tail -5 "$LOG")
  echo "{\"gpu_check\": \"fail\", \"gpu\": \"$(json_str "$GPU")\", \"error\": \"build failed\"," \
       "\"log_tail\": \"$(json_str "$TAIL")\", \"build_s\": $BUILD_S, \"total_s\": $(since "$T0")}"
  exit 1
fi

# ---- ctest -L gpu ----------------------------------------------------------------------------
TC=$(now)
CTEST_OUT=$(cd "$BUILD" && ctest -L gpu --output-on-failure --timeout "$TEST_TIMEOUT" 2>&1)
echo "$CTEST_OUT" >>"$LOG"
CTEST_S=$(since "$TC")
TOTAL=$(echo "$CTEST_OUT" | sed -n 's/.*tests passed, \([0-9]*\) tests failed out of \([0-9]*\).*/\2/p')
FAILED=$(echo "$CTEST_OUT" | sed -n 's/.*tests passed, \([0-9]*\) tests failed out of.*/\1/p')
SKIPPED=$(echo "$CTEST_OUT" | grep -c '(Skipped)' || true)
TOTAL=${TOTAL:-0}
FAILED=${FAILED:-0}
if echo "$CTEST_OUT" | grep -q "No tests were found"; then TOTAL=0; FAILED=0; fi
PASSED=$((TOTAL - FAILED - SKIPPED))

# ---- GPU runs beyond ctest -------------------------------------------------------------------
CHECKS=()
ALL_OK=true
# run_check NAME TIMEOUT_S CMD...: runs CMD (output to the log), records ok/seconds.
run_check() {
  local name=$1 limit=$2
  shift 2
  local t ok=true
  t=$(now)
  echo "---- check $name: $*" >>"$LOG"
  timeout "$limit" "$@" >>"$LOG" 2>&1 || ok=false
  [ "$ok" = true ] || ALL_OK=false
  CHECKS+=("{\"name\": \"$name\", \"ok\": $ok, \"seconds\": $(since "$t")}")
}

# ==== trainer runs on the GPU ==================================================================
# One process each (NCCL refuses two ranks on one device, and this check has one GPU). The data
# come from Debian packages; where a package is missing the run is recorded as not ok, with why.
FMNIST_DIR=${COHORT_FMNIST_DIR:-/usr/share/datasets/fashion-mnist}
GPT_TEXT=${COHORT_GPT_TEXT:-}
if [ -z "$GPT_TEXT" ]; then
  for f in /usr/share/games/fortunes/fortunes /usr/share/games/fortunes/literature; do
    [ -f "$f" ] && GPT_TEXT=$f && break
  done
fi
if [ -d "$FMNIST_DIR" ]; then
  # One epoch at batch 64 on one GPU, held to issue 5's 89% (the same run on the CPU, one
  # worker: 89.94%).
  run_check trainers_fmnist_cuda_1epoch 240 "$BUILD/bin/cohort-train-fmnist" --device cuda \
    --data "$FMNIST_DIR" --metrics - --min-test-accuracy 0.89
else
  echo "---- check trainers_fmnist_cuda_1epoch: no $FMNIST_DIR (apt-get install dataset-fashion-mnist)" >>"$LOG"
  ALL_OK=false
  CHECKS+=("{\"name\": \"trainers_fmnist_cuda_1epoch\", \"ok\": false, \"error\": \"no data\"}")
fi
if [ -n "$GPT_TEXT" ]; then
  run_check trainers_gpt_cuda_300steps 300 "$BUILD/bin/cohort-train-gpt" --device cuda \
    --data "$GPT_TEXT" --max-steps 300 --eval-interval 100 --metrics - --max-val-loss 3.2 \
    --sample 200
else
  echo "---- check trainers_gpt_cuda_300steps: no text (apt-get install fortunes)" >>"$LOG"
  ALL_OK=false
  CHECKS+=("{\"name\": \"trainers_gpt_cuda_300steps\", \"ok\": false, \"error\": \"no data\"}")
fi
# ==== end of trainer runs =====================================================================

STATUS=pass
# A GPU machine on which every GPU test skipped has checked nothing: that fails too.
if [ "$FAILED" != 0 ] || [ "$PASSED" -le 0 ] || [ "$ALL_OK" != true ]; then STATUS=fail; fi
CHECKS_JSON=$(IFS=,; echo "${CHECKS[*]:-}")
echo "{\"gpu_check\": \"$STATUS\", \"gpu\": \"$(json_str "$GPU")\", \"build_s\": $BUILD_S," \
     "\"ctest\": {\"passed\": $PASSED, \"failed\": $FAILED, \"skipped\": $SKIPPED," \
     "\"total\": $TOTAL, \"seconds\": $CTEST_S}, \"checks\": [${CHECKS_JSON}]," \
     "\"total_s\": $(since "$T0")}"
[ "$STATUS" = pass ]
