#!/usr/bin/env bash
# GPU check: on a machine with one CUDA GPU, build cohort's GPU targets from the bundle alone
# (scripts/gpu_bundle.sh made it; nothing is downloaded), run every GPU test and the trainers on
# the GPU, and end with ONE JSON line, whatever happens (a failed or timed-out step included):
#   {"gpu_check": "pass"|"fail"|"built", "gpu": .., "steps": [{"name", "ok", "seconds", ..}],
#    "tests": {..}, "layers": {..}, "fmnist": {..}, "gpt": {..}, "gpt_vs_cpu": {..},
#    "two_ranks_one_gpu": {..}, "gpt_mfu": {..}, "nvml": {..}, "total_s": ..}
#
#   scripts/gpu_check.sh                the whole check (3-5 minutes on a 16-core H200 machine)
#   scripts/gpu_check.sh --build-only   up to where a GPU is needed: find, configure, build, check
#                                       that every program loads, the tests are listed, the
#                                       trainers run on the CPU from the bundle's data, and a GPU
#                                       test fails without a GPU (scripts/gpu_bare_root.sh runs
#                                       this in a bare Debian root); status "built"
#   scripts/gpu_check.sh --locate-only  print where the toolkit, NCCL and cuBLAS were found
#
# What it reports: each CUDA layer against its CPU reference (test properties: the worst error as
# a share of the tolerance stated in tests/trainers/cuda_test.cc), Fashion-MNIST for one epoch on
# the GPU (>= 89%), the GPT for 300 steps on the GPU, the GPT's loss curve on the GPU against the
# CPU's (the same run on both), two ranks on the one GPU (they must agree on the CPU group) with
# the share of step time in the gradient allreduce, what cohort's NVML wrapper reads from the
# real driver (sane values for every GPU, the metrics text through promtool where the machine
# has it, cohortrun --gpu-preflight passing an idle GPU and refusing one another process holds),
# and a GPT-2-small-shaped GPT's throughput as
# model FLOPs utilisation of the GPU's fp32 peak (H200 SXM: 67 TFLOP/s FP32, non-tensor, NVIDIA's
# H200 datasheet; H200 NVL: 60).
#
# Exit status 0 iff every step passed (a machine without a GPU fails the full check: nothing was
# checked). Every step has a time limit, and all of them one budget (GPU_CHECK_BUDGET_S), so that
# the JSON line comes before an outer limit kills the script.
#
# Environment:
#   OUT                   when set, the whole log (gpu_check.log), the JSON (gpu_check.json) and
#                         the GPT loss curves are written there too
#   COHORT_GPU_BUNDLE     the bundle (default <repo>/gpu-bundle)
#   COHORT_GPU_BUILD_DIR  build folder (default <repo>/build-gpu)
#   GPU_CHECK_JOBS        build parallelism (default nproc)
#   GPU_CHECK_BUDGET_S    the whole check's deadline in seconds (default 420)
#   GPU_CHECK_BUILD_LIMIT_S  the build step's limit (default 300; a 2-core machine needs more)
#   COHORT_NCCL_HOME, COHORT_CUBLAS_HOME   where NCCL / cuBLAS are (include/ and lib/), when the
#                         search below does not find them
set -uo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
MODE=full
case "${1:-}" in
  "") ;;
  --build-only) MODE=build ;;
  --locate-only) MODE=locate ;;
  *)
    echo "usage: scripts/gpu_check.sh [--build-only | --locate-only]" >&2
    exit 2
    ;;
esac
ARCH=x86_64-linux-gnu
BUNDLE=${COHORT_GPU_BUNDLE:-$REPO/gpu-bundle}
BUILD=${COHORT_GPU_BUILD_DIR:-$REPO/build-gpu}
JOBS=${GPU_CHECK_JOBS:-$(nproc)}
BUDGET=${GPU_CHECK_BUDGET_S:-420}
DATA=$BUNDLE/data
BIN=$BUILD/bin
WORK=$BUILD/gpu_check
mkdir -p "$WORK"
LOG=${OUT:+$OUT/gpu_check.log}
LOG=${LOG:-$BUILD/gpu_check.log}
mkdir -p "$(dirname "$LOG")"
: >"$LOG"
STATE=$WORK/state.jsonl  # one JSON object per line, merged into the final line
: >"$STATE"
ORIG_LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}
T0=$(date +%s.%N)

now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }
remaining() { awk -v a="$T0" -v b="$(now)" -v B="$BUDGET" 'BEGIN { printf "%d", B - (b - a) }'; }
log() { echo "[gpu_check $(since "$T0")s] $*" | tee -a "$LOG"; }
# json_str TEXT: TEXT as a JSON string (quotes included).
json_str() { python3 -c 'import json,sys; print(json.dumps(sys.argv[1]))' "$1" 2>/dev/null || echo '""'; }
# record JSON: adds one object to the state ({"step": {...}} or {"key": value}).
record() { echo "$1" >>"$STATE"; }
FAILED=0
CHILD=""  # the step running now, ended by the INT/TERM trap

# record_step NAME RC SECONDS [WHY]: logs and records a step's outcome; returns RC's truth.
record_step() {
  local name=$1 rc=$2 secs=$3 why=${4:-}
  if [ "$rc" -eq 0 ]; then
    log "step $name: ok (${secs}s)"
    record "{\"step\": {\"name\": \"$name\", \"ok\": true, \"seconds\": $secs}}"
    return 0
  fi
  [ -n "$why" ] || why="exit status $rc"
  log "step $name: FAILED ($why, ${secs}s)"
  record "{\"step\": {\"name\": \"$name\", \"ok\": false, \"seconds\": $secs, \"error\": \"$why\"}}"
  FAILED=1
  return 1
}

# step NAME LIMIT_S CMD...: runs CMD (a program, or a function of this script) with its output
# in the log, within LIMIT_S and what is left of the budget (less a reserve for the report).
step() {
  local name=$1 limit=$2
  shift 2
  local left
  left=$(($(remaining) - 15))
  if [ "$left" -lt 10 ]; then
    log "step $name: skipped, the budget is spent"
    record "{\"step\": {\"name\": \"$name\", \"ok\": false, \"error\": \"no time left\"}}"
    FAILED=1
    return 1
  fi
  [ "$limit" -gt "$left" ] && limit=$left
  local cmd=("$@")
  # A function runs in a child bash (exported with export -f, as are the variables it reads).
  [ "$(type -t "$1")" = function ] && cmd=(bash -c '"$@"' _ "$@")
  local t rc=0 out=$WORK/step-$name.log
  t=$(now)
  echo "---- step $name (limit ${limit}s): $*" >>"$LOG"
  # In the background and waited for, so that a TERM from outside is handled at once.
  timeout --kill-after=5 "$limit" "${cmd[@]}" >"$out" 2>&1 &
  CHILD=$!
  wait "$CHILD" || rc=$?
  CHILD=""
  cat "$out" >>"$LOG"
  local why=""
  { [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; } && why="timed out after ${limit}s"
  record_step "$name" "$rc" "$(since "$t")" "$why" || {
    # The end of what failed, on stdout too: it may be all that comes back from the machine.
    tail -n 25 "$out" | sed "s/^/  [$name] /"
    return 1
  }
}

# fail_now WHY: records a failure that ends the check.
fail_now() {
  log "FAILED: $1"
  record "{\"error\": $(json_str "$1")}"
  FAILED=1
  exit 1
}

# The one JSON line, on every exit (the EXIT trap); also $OUT/gpu_check.json.
finish() {
  local rc=$?
  trap - EXIT
  local status=pass
  [ "$FAILED" = 0 ] && [ "$rc" = 0 ] || status=fail
  [ "$MODE" = build ] && [ "$status" = pass ] && status=built
  if [ "$MODE" = locate ]; then
    [ "$status" = pass ] && status=located
  fi
  local line
  line=$(python3 "$REPO/scripts/gpu_check_report.py" "$STATE" "$status" "$(since "$T0")" 2>>"$LOG") ||
    line="{\"gpu_check\": \"$status\", \"error\": \"the report could not be composed (see the log)\", \"total_s\": $(since "$T0")}"
  [ -n "${OUT:-}" ] && echo "$line" >"$OUT/gpu_check.json"
  echo "$line" >>"$LOG"
  echo "$line"
  [ "$status" = fail ] && exit 1
  exit 0
}
trap finish EXIT
trap 'log "interrupted"; [ -n "$CHILD" ] && kill -TERM "$CHILD" 2>/dev/null
  record "{\"error\": \"interrupted by a signal\"}"; FAILED=1; exit 1' INT TERM

command -v python3 >/dev/null || { echo '{"gpu_check": "fail", "error": "no python3"}'; exit 1; }
record "{\"mode\": \"$MODE\"}"

# ==== the machine ================================================================================
GPU=$(nvidia-smi --query-gpu=name,memory.total,driver_version,pci.bus_id,compute_cap \
  --format=csv,noheader 2>/dev/null | head -1)
GPU_NAME=${GPU%%,*}
record "{\"gpu\": $(json_str "$GPU")}"
record "{\"host\": {\"cpus\": $(nproc), \"kernel\": $(json_str "$(uname -r)"),
  \"cxx\": $(json_str "$(c++ --version 2>/dev/null | head -1)"),
  \"cmake\": $(json_str "$(cmake --version 2>/dev/null | head -1)"),
  \"python\": $(json_str "$(python3 --version 2>&1)")}}"
if [ "$MODE" = full ] && [ -z "$GPU" ]; then
  log "no GPU visible (nvidia-smi): the build runs, the GPU steps cannot"
  record '{"error": "no GPU visible (nvidia-smi)"}'
  FAILED=1
fi

# ==== the bundle =================================================================================
[ -f "$BUNDLE/deps.tar.xz" ] ||
  fail_now "no bundle in $BUNDLE (run scripts/gpu_bundle.sh on a machine with apt, then carry it)"
DEPS=$BUILD/deps
if ! cmp -s "$BUNDLE/MANIFEST.json" "$DEPS/MANIFEST.json" 2>/dev/null; then
  rm -rf "$DEPS"
  mkdir -p "$DEPS"
  python3 - "$BUNDLE/deps.tar.xz" "$DEPS" <<'PY' || fail_now "cannot unpack $BUNDLE/deps.tar.xz"
import sys, tarfile
with tarfile.open(sys.argv[1]) as tar:
    if hasattr(tarfile, "tar_filter"):
        tar.extractall(sys.argv[2], filter="tar")
    else:
        tar.extractall(sys.argv[2])
PY
  cp "$BUNDLE/MANIFEST.json" "$DEPS/MANIFEST.json"
fi

# ==== where the toolkit, NCCL and cuBLAS are =====================================================
# Each search returns the first candidate folder with the files; a wheel's lib/ holds only the
# versioned library (libnccl.so.2, libcublas.so.13), which CMake is given by its full path.
NVCC=$(command -v nvcc || true)
[ -z "$NVCC" ] && [ -x /usr/local/cuda/bin/nvcc ] && NVCC=/usr/local/cuda/bin/nvcc
[ -n "$NVCC" ] || fail_now "no nvcc (neither on PATH nor /usr/local/cuda/bin)"
TOOLKIT=$(cd "$(dirname "$(readlink -f "$NVCC")")/.." && pwd)
CUDA_LIBDIR=""
for d in "$TOOLKIT/lib64" "$TOOLKIT/lib" "$TOOLKIT/targets/x86_64-linux/lib"; do
  if ls "$d"/libcudart.so* >/dev/null 2>&1; then CUDA_LIBDIR=$d; break; fi
done
[ -n "$CUDA_LIBDIR" ] || fail_now "no libcudart.so in $TOOLKIT (lib64, lib)"

# Folders of Python packages where PyTorch's NVIDIA wheels may be: python3's own first.
python_nvidia_dirs() {
  python3 - <<'PY' 2>/dev/null
import importlib.util, sys
spec = importlib.util.find_spec("nvidia")
for p in (spec.submodule_search_locations or []) if spec else []:
    print(p)
PY
  for d in /opt/*/.venv/lib/python3*/site-packages/nvidia /opt/*/lib/python3*/site-packages/nvidia \
    /usr/local/lib/python3*/dist-packages/nvidia /usr/local/lib/python3*/site-packages/nvidia \
    /usr/lib/python3/dist-packages/nvidia "$HOME"/.local/lib/python3*/site-packages/nvidia; do
    [ -d "$d" ] && echo "$d"
  done
}
# first_lib DIR NAME...: the first DIR/NAME that exists.
first_lib() {
  local d=$1
  shift
  for n in "$@"; do
    [ -e "$d/$n" ] && { echo "$d/$n"; return 0; }
  done
  return 1
}
# find_lib LIBNAMES HEADER CANDIDATE_ROOTS...: sets FOUND_LIB and FOUND_INC (FOUND_INC may stay
# empty: the header is then taken from the bundle).
find_lib() {
  local names=$1 header=$2
  shift 2
  FOUND_LIB="" FOUND_INC="" FOUND_FROM=""
  for root in "$@"; do
    [ -n "$root" ] && [ -d "$root" ] || continue
    for sub in lib64 lib "lib/$ARCH" targets/x86_64-linux/lib; do
      # shellcheck disable=SC2086
      if FOUND_LIB=$(first_lib "$root/$sub" $names); then
        FOUND_FROM=$root
        for inc in include targets/x86_64-linux/include; do
          [ -f "$root/$inc/$header" ] && FOUND_INC=$root/$inc && break
        done
        return 0
      fi
    done
  done
  FOUND_LIB=""
  return 1
}
mapfile -t NV_DIRS < <(python_nvidia_dirs | awk '!seen[$0]++')
nccl_roots=("${COHORT_NCCL_HOME:-}" "$TOOLKIT")
cublas_roots=("${COHORT_CUBLAS_HOME:-}" "$TOOLKIT")
for d in "${NV_DIRS[@]}"; do
  nccl_roots+=("$d/nccl")
  cublas_roots+=("$d/cu13" "$d/cublas")
done
nccl_roots+=(/usr)
cublas_roots+=(/usr)
find_lib "libnccl.so libnccl.so.2" nccl.h "${nccl_roots[@]}" ||
  fail_now "no NCCL library (libnccl.so[.2]) in: ${nccl_roots[*]} (set COHORT_NCCL_HOME)"
NCCL_LIB=$FOUND_LIB NCCL_INC=$FOUND_INC NCCL_FROM=$FOUND_FROM
find_lib "libcublas.so libcublas.so.13 libcublas.so.12" cublas_v2.h "${cublas_roots[@]}" ||
  fail_now "no cuBLAS library (libcublas.so[.13]) in: ${cublas_roots[*]} (set COHORT_CUBLAS_HOME)"
CUBLAS_LIB=$FOUND_LIB CUBLAS_INC=$FOUND_INC CUBLAS_FROM=$FOUND_FROM
# The headers go into a folder of their own, so that a wheel's include/ (which may carry another
# CUDA runtime's headers) never comes before nvcc's own.
INC=$WORK/cuda-include
rm -rf "$INC"
mkdir -p "$INC"
HEADERS_FROM_BUNDLE=()
for h in nccl.h cublas_v2.h cublas_api.h cublas.h cublasLt.h; do
  case $h in nccl*) src=$NCCL_INC ;; *) src=$CUBLAS_INC ;; esac
  if [ -n "$src" ] && [ -f "$src/$h" ]; then
    ln -s "$src/$h" "$INC/$h"
  elif [ -f "$BUNDLE/cuda-include/$h" ]; then
    ln -s "$BUNDLE/cuda-include/$h" "$INC/$h"
    HEADERS_FROM_BUNDLE+=("$h")
  else
    fail_now "no $h (not beside the library, not in the bundle's cuda-include/)"
  fi
done
record "{\"found\": {\"nvcc\": $(json_str "$NVCC"), \"toolkit\": $(json_str "$TOOLKIT"),
  \"nvcc_version\": $(json_str "$("$NVCC" --version | tail -2 | head -1)"),
  \"cudart_dir\": $(json_str "$CUDA_LIBDIR"),
  \"nccl\": $(json_str "$NCCL_LIB"), \"nccl_from\": $(json_str "$NCCL_FROM"),
  \"cublas\": $(json_str "$CUBLAS_LIB"), \"cublas_from\": $(json_str "$CUBLAS_FROM"),
  \"headers_from_bundle\": $(json_str "${HEADERS_FROM_BUNDLE[*]:-}")}}"
log "nvcc $NVCC, NCCL $NCCL_LIB, cuBLAS $CUBLAS_LIB${HEADERS_FROM_BUNDLE:+ (bundle headers: ${HEADERS_FROM_BUNDLE[*]})}"
[ "$MODE" = locate ] && exit 0

# What the programs load at run time: the bundle's libraries, NCCL, cuBLAS, the CUDA runtime.
# Set before the build: test discovery runs the test binaries. Only our programs get it (torchrun
# and this script's Python run with the machine's own environment).
LDP=$DEPS/usr/lib/$ARCH:$DEPS/usr/lib/$ARCH/openblas-pthread:$(dirname "$NCCL_LIB")
LDP=$LDP:$(dirname "$CUBLAS_LIB"):$CUDA_LIBDIR${ORIG_LD_LIBRARY_PATH:+:$ORIG_LD_LIBRARY_PATH}
# A machine without libcrypto.so.3 or libz.so.1 of its own gets the bundle's link-time copies.
for so in libcrypto.so.3 libz.so.1; do
  if ! ldconfig -p 2>/dev/null | grep -q "$so "; then LDP=$LDP:$DEPS/lib/$ARCH; break; fi
done
RUN=(env "LD_LIBRARY_PATH=$LDP")
export LDP BIN WORK DATA

# ==== configure and build ========================================================================
GEN=()
command -v ninja >/dev/null && GEN=(-G Ninja)
LAUNCHER=()
if command -v ccache >/dev/null; then
  LAUNCHER=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache
    -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
fi
rm -f "$BUILD/CMakeCache.txt"
step configure 120 "${RUN[@]}" cmake -S "$REPO" -B "$BUILD" "${GEN[@]}" "${LAUNCHER[@]}" \
  -DCMAKE_BUILD_TYPE=Release -DCOHORT_CUDA=ON -DCOHORT_BUILD_BENCH=OFF -DCOHORT_INSTALL=OFF \
  -DCMAKE_POLICY_VERSION_MINIMUM=3.5 \
  -DCMAKE_CUDA_COMPILER="$NVCC" -DCUDAToolkit_ROOT="$TOOLKIT" -DCMAKE_CUDA_ARCHITECTURES=90 \
  -DNCCL_INCLUDE_DIR="$INC" -DNCCL_LIBRARY="$NCCL_LIB" \
  -DCOHORT_CUBLAS_INCLUDE_DIR="$INC" -DCOHORT_CUBLAS_LIBRARY="$CUBLAS_LIB" \
  -DCMAKE_PREFIX_PATH="$DEPS/usr" -DOPENSSL_ROOT_DIR="$DEPS/usr" -DZLIB_ROOT="$DEPS/usr" ||
  exit 1
step build "${GPU_CHECK_BUILD_LIMIT_S:-300}" "${RUN[@]}" cmake --build "$BUILD" -j "$JOBS" --target cohort_gpu || exit 1

PROGRAMS=("$BIN/cohort-train-fmnist" "$BIN/cohort-train-gpt" "$BIN/trainers_cuda_test"
  "$BIN/runtime_gpu_test")
# Every library of every program resolves (ldd prints "not found" otherwise).
loads() {
  local bad=0
  for p in "$@"; do
    if env "LD_LIBRARY_PATH=$LDP" ldd "$p" | grep "not found"; then
      echo "$p: libraries not found"
      bad=1
    fi
  done
  return $bad
}
export -f loads
step programs_load 30 loads "${PROGRAMS[@]}"
N_GPU_TESTS=$(cd "$BUILD" && ctest -N -L gpu 2>/dev/null | sed -n 's/^Total Tests: //p')
record "{\"gpu_tests_listed\": ${N_GPU_TESTS:-0}}"
[ "${N_GPU_TESTS:-0}" -gt 0 ] || fail_now "ctest lists no GPU tests (label gpu)"

if [ "$MODE" = build ]; then
  # Up to where a GPU is needed: the programs run on the CPU from the bundle's data, and a GPU
  # test fails (does not skip) under COHORT_REQUIRE_GPU=1.
  step fmnist_cpu_smoke 60 "${RUN[@]}" "$BIN/cohort-train-fmnist" --device cpu --threads 1 \
    --data "$DATA/fashion-mnist" --max-steps 5 --train-limit 640 --test-limit 200 --metrics - \
    --no-resume
  step gpt_cpu_smoke 60 "${RUN[@]}" "$BIN/cohort-train-gpt" --device cpu --threads 1 \
    --data "$DATA/fortunes" --max-steps 2 --n-layer 1 --n-head 2 --n-embd 32 --block-size 32 \
    --batch-size 4 --total-batch-tokens 128 --eval-batches 1 --metrics - --no-resume
  require_gpu_fails() {
    local out rc=0
    out=$(env "LD_LIBRARY_PATH=$LDP" COHORT_REQUIRE_GPU=1 "$BIN/trainers_cuda_test" \
      --gtest_filter=CudaVsCpu.Linear 2>&1) || rc=$?
    echo "$out"
    [ "$rc" -ne 0 ] && [[ $out == *"COHORT_REQUIRE_GPU=1 but no CUDA device"* ]]
  }
  export -f require_gpu_fails
  step gpu_test_fails_without_gpu 60 require_gpu_fails
  exit 0
fi
[ -n "$GPU" ] || exit 1

# ==== on the GPU =================================================================================
export COHORT_FMNIST_DIR=$DATA/fashion-mnist
CPU_THREADS=$(($(nproc) > 4 ? $(nproc) / 2 : 1))
# The GPT's loss curve on the CPU, in the background while the GPU tests run; its GPU twin below.
CURVE_ARGS=(--data "$DATA/fortunes" --max-steps 150 --total-batch-tokens 4096 --eval-interval 50
  --eval-batches 8 --no-resume)
t_cpu=$(now)
"${RUN[@]}" timeout "$(($(remaining) - 30))" "$BIN/cohort-train-gpt" --device cpu \
  --threads "$CPU_THREADS" "${CURVE_ARGS[@]}" --metrics "$WORK/gpt_cpu_metrics.jsonl" \
  --summary-json "$WORK/gpt_cpu.json" >"$WORK/gpt_cpu.log" 2>&1 &
CPU_PID=$!

# Every GPU test, serially; each writes its gtest JSON (with the layers' error shares).
rm -rf "$WORK/gtest"
mkdir -p "$WORK/gtest"
# (tests/launcher/gpu/nvml_gpu_test.cc among them: the real NVML through cohort's wrapper; what it
# read goes to nvml_report.json.)
rm -f "$WORK/nvml_report.json"
step gpu_tests 200 env "LD_LIBRARY_PATH=$LDP" COHORT_REQUIRE_GPU=1 \
  "GTEST_OUTPUT=json:$WORK/gtest/" "COHORT_NVML_REPORT=$WORK/nvml_report.json" \
  ctest --test-dir "$BUILD" -L gpu --output-on-failure --timeout 120
record "{\"gtest_dir\": $(json_str "$WORK/gtest"), \"nvml_report\": $(json_str "$WORK/nvml_report.json")}"

step fmnist_gpu_1epoch 150 "${RUN[@]}" "$BIN/cohort-train-fmnist" --device cuda \
  --data "$DATA/fashion-mnist" --min-test-accuracy 0.89 --metrics - --no-resume \
  --summary-json "$WORK/fmnist.json"
record "{\"fmnist_summary\": $(json_str "$WORK/fmnist.json")}"

# The default GPT (4 layers, 128 wide, 32,768 tokens a step) for 300 steps. The same run on a CPU
# (an AMD EPYC, one thread, 30 minutes) ended at a validation loss of 2.626 (train 2.698; a
# uniform guess over bytes is 5.55): the GPU run must come within 0.15 of it.
step gpt_gpu_300steps 150 "${RUN[@]}" "$BIN/cohort-train-gpt" --device cuda \
  --data "$DATA/fortunes" --max-steps 300 --eval-interval 50 --sample 200 --no-resume \
  --metrics "$WORK/gpt_gpu_metrics.jsonl" --summary-json "$WORK/gpt.json" --max-val-loss 2.78
record "{\"gpt_summary\": $(json_str "$WORK/gpt.json"), \"gpt_metrics\": $(json_str "$WORK/gpt_gpu_metrics.jsonl")}"

step gpt_gpu_curve 90 "${RUN[@]}" "$BIN/cohort-train-gpt" --device cuda "${CURVE_ARGS[@]}" \
  --metrics "$WORK/gpt_curve_gpu_metrics.jsonl" --summary-json "$WORK/gpt_curve_gpu.json"
# The CPU run has its own deadline (the budget's, less a reserve).
rc=0
wait "$CPU_PID" || rc=$?
cat "$WORK/gpt_cpu.log" >>"$LOG"
why=""
[ "$rc" -eq 124 ] && why="timed out: the budget was spent"
record_step gpt_cpu_curve "$rc" "$(since "$t_cpu")" "$why"
record "{\"curve\": {\"gpu\": $(json_str "$WORK/gpt_curve_gpu_metrics.jsonl"),
  \"cpu\": $(json_str "$WORK/gpt_cpu_metrics.jsonl"), \"cpu_threads\": $CPU_THREADS,
  \"cpu_seconds\": $(since "$t_cpu")}}"

# Two ranks on the one GPU under PyTorch's torchrun: they share a GPU, so they must agree on the
# CPU group (NCCL refuses two ranks on one GPU), and the gradients cross through host memory.
two_ranks() {
  python3 -m torch.distributed.run --standalone --nproc-per-node 2 --no-python \
    env "LD_LIBRARY_PATH=$LDP" "$BIN/cohort-train-gpt" --device cuda --data "$DATA/fortunes" \
    --max-steps 40 --eval-interval 0 --eval-batches 2 --metrics - --no-resume \
    --summary-json "$WORK/two_ranks.json" >"$WORK/two_ranks.log" 2>&1
  local rc=$?
  cat "$WORK/two_ranks.log"
  [ "$rc" = 0 ] && grep -q "gradients via CPU group, staged through host memory" "$WORK/two_ranks.log"
}
export -f two_ranks
step two_ranks_one_gpu 120 two_ranks
record "{\"two_ranks\": $(json_str "$WORK/two_ranks.json"), \"two_ranks_log\": $(json_str "$WORK/two_ranks.log")}"

# Throughput of a GPT-2-small-shaped model (12 layers, 12 heads, 768 wide, 256 tokens) for MFU.
step gpt_mfu 120 "${RUN[@]}" "$BIN/cohort-train-gpt" --device cuda --data "$DATA/fortunes" \
  --n-layer 12 --n-head 12 --n-embd 768 --block-size 256 --batch-size 16 \
  --total-batch-tokens 4096 --max-steps 40 --warmup-steps 5 --eval-interval 0 --eval-batches 1 \
  --no-resume --metrics "$WORK/gpt_mfu_metrics.jsonl" --summary-json "$WORK/gpt_mfu.json"
record "{\"mfu\": {\"summary\": $(json_str "$WORK/gpt_mfu.json"),
  \"metrics\": $(json_str "$WORK/gpt_mfu_metrics.jsonl"), \"gpu_name\": $(json_str "$GPU_NAME")}}"

# cohortrun --gpu-preflight on the real NVML: a GPU nobody uses must pass. Then a process holds
# memory on it (PyTorch, which the machine has) and the node should stay out with the GPU named;
# that half is reported, not required: inside a container NVML may not list the processes of
# other PID namespaces, and the report then says so.
step build_cohortrun 150 "${RUN[@]}" cmake --build "$BUILD" -j "$JOBS" --target cohortrun
nvml_preflight() {
  local out rc=0 holder
  out=$(env "LD_LIBRARY_PATH=$LDP" LOGLEVEL=INFO "$BIN/cohortrun" --gpu-preflight \
    --nproc-per-node gpu --no-python true 2>&1) || rc=$?
  echo "$out"
  if [ "$rc" -ne 0 ] || [[ $out != *"GPU pre-flight passed on "* ]]; then
    echo "nvml_preflight: an idle GPU did not pass (exit $rc)"
    return 1
  fi
  python3 -c 'import time, torch
x = torch.ones(1 << 20, device="cuda"); torch.cuda.synchronize()
print("holding", flush=True); time.sleep(60)' >"$WORK/gpu_holder.log" 2>&1 &
  holder=$!
  for _ in $(seq 1 300); do  # until it holds memory (30 s at most)
    grep -q holding "$WORK/gpu_holder.log" && break
    kill -0 "$holder" 2>/dev/null || break
    sleep 0.1
  done
  rc=0
  out=$(env "LD_LIBRARY_PATH=$LDP" "$BIN/cohortrun" --gpu-preflight --nproc-per-node gpu \
    --no-python true 2>&1) || rc=$?
  kill "$holder" 2>/dev/null
  wait "$holder" 2>/dev/null
  echo "$out"
  if ! grep -q holding "$WORK/gpu_holder.log"; then
    cat "$WORK/gpu_holder.log"
    echo "busy: not checked: PyTorch could not hold GPU memory" >"$WORK/nvml_busy.txt"
  elif [ "$rc" -eq 1 ] && [[ $out == *"held by another process"* ]]; then
    echo "busy: refused: $(echo "$out" | grep -m1 'held by another process' | sed 's/^ *//')" \
      >"$WORK/nvml_busy.txt"
  else
    echo "busy: NOT refused (exit $rc): NVML listed no process holding the GPU" \
      >"$WORK/nvml_busy.txt"
  fi
  cat "$WORK/nvml_busy.txt"
}
export -f nvml_preflight
rm -f "$WORK/nvml_busy.txt"
step nvml_preflight 90 nvml_preflight
P=$WORK/step-nvml_preflight.log
record "{\"nvml_preflight\": {\"idle\": $(json_str "$(grep -m1 -o 'GPU pre-flight passed.*' "$P" 2>/dev/null)"),
  \"busy\": $(json_str "$(sed 's/^busy: //' "$WORK/nvml_busy.txt" 2>/dev/null)"),
  \"nvml\": $(json_str "$(grep -m1 -o 'GPU health: NVML.*' "$P" 2>/dev/null)")}}"

if [ -n "${OUT:-}" ]; then
  for f in gpt_gpu_metrics.jsonl gpt_cpu_metrics.jsonl; do
    [ -f "$WORK/$f" ] && cp "$WORK/$f" "$OUT/"
  done
fi
exit 0
