#!/usr/bin/env bash
# Builds the suite with sanitizers and runs it.
#
#   scripts/sanitize.sh asan [ctest args]   AddressSanitizer + UndefinedBehaviorSanitizer (and
#                                           LeakSanitizer), build-asan/, labels
#                                           unit|store|launcher|runtime|trainers (ASAN_LABELS)
#   scripts/sanitize.sh tsan [ctest args]   ThreadSanitizer, build-tsan/, labels store|launcher|runtime
# Without ctest arguments only what those labels' tests need is built.
#
# CUDA is off (sanitizers and the CUDA runtime do not mix; GPU tests run in scripts/gpu_check.sh).
# Every report is an error: UBSan is compiled with -fno-sanitize-recover, and the *SAN_OPTIONS
# below halt (abort) at the first report with a stack trace. Extra arguments go to ctest, e.g.
#   scripts/sanitize.sh asan -L store          scripts/sanitize.sh tsan -R Codec
#
# Exit status: ctest's (0 when every selected test passed), 2 when configure or build failed.
# Time on 2 idle cores, from a clean build folder and an empty ccache (2026-12-05): asan build 553 s,
# tests 121 s; tsan build 242 s, tests 93 s.
#
# Environment:
#   COHORT_SAN_CXX   compiler (default: g++ for asan, clang++ for tsan; see below why)
#   COHORT_JOBS      build and ctest parallelism (default 2)
#   COHORT_SAN_BUILD_DIR  build folder (default build-asan / build-tsan)
set -euo pipefail
cd "$(dirname "$0")/.."

usage() {
  echo "usage: scripts/sanitize.sh asan|tsan [ctest args]" >&2
  exit 2
}
[ $# -ge 1 ] || usage
MODE=$1
shift
JOBS=${COHORT_JOBS:-2}

# Tests excluded per mode: a ctest -E regex each, with the reason. Keep this list short and
# explained; an entry here is a test the sanitizer cannot judge, not a failure to hide.
# Under ASan, the labels whose tests run cohort's own code in ways the release stage's tests do
# not already repeat: the pure parts (unit), cohortd under its clients (store), cohortrun on
# real processes (launcher), libcohort's collectives (runtime) and the trainers' layers
# (trainers). Left out: labels whose time is PyTorch's, Slurm's, etcd's or a network namespace's
# (interop, elastic, netns, etcd, slurm, faults), the crash check's minute of SIGKILLs, the
# packages and the bare GPU root (they build and install what ships, never the sanitized build),
# and the GPU (none here). The release stage runs every one of them; cohortd's side of PyTorch's
# requests still runs here through the store label's own clients.
ASAN_LABELS='unit|store|launcher|runtime|trainers'
ASAN_EXCLUDE_LABELS='^(interop|elastic|netns|etcd|slurm|faults|crashcheck|packaging|bareroot|gpu)$'
ASAN_EXCLUDE_LABELS_REASON="their time is PyTorch's, Slurm's, etcd's, the network namespaces' or
   a package build's, and the release stage runs them; the code of cohort they reach runs here
   under the labels above"
ASAN_EXCLUDE=(
  '^ErrorFile\.FatalSignalIsWrittenInTorchrunFormat$'
  '^Training\.(Fmnist(OneEpoch|Average|Evaluates|InBf16|Resume|ResumesAt|ResumesExactly)|Gpt|Plain|Plot)'
  '^Launch\.'
  '^(CohortdLogTest|StoreRelay)\.OutOfDescriptors'
  '^ForkServerTest\.AServerThatCannotStartIsGoneAndSaysWhy$'
)
ASAN_REASONS=(
  "the worker segfaults on purpose to check the runtime's fatal-signal handler; ASan takes the
   SIGSEGV first, reports it and aborts, so the handler sees SIGABRT (run it in scripts/test.sh)"
  "whole training runs repeat the layers, optimizer, loader and allreduce that
   Training.FmnistLearnsInTwoHundredSteps runs here, many times longer (minutes each under ASan);
   their numbers are the release stage's to judge"
  "the trainers under cohortrun: cohortrun runs here under the launcher label, the trainer's
   steps in Training.FmnistLearnsInTwoHundredSteps"
  "cohortd and the relay with every descriptor in use: UBSan's vptr check tests whether memory
   is readable by writing it to a pipe, which it cannot open then, and reports a valid object
   (asio's error_category) as one with an invalid vptr"
  "the reason a fork server gives is the last line its child wrote, and under ASan that child
   (started on a stack of its own) adds ASan's 'ignoring __asan_handle_no_return' warning after
   the exec error the test looks for"
)
TSAN_EXCLUDE=()
TSAN_REASONS=()

case "$MODE" in
  asan)
    EXTRA_CFG=(-DCOHORT_BUILD_TRAINERS=ON)
    # g++, the compiler of the normal build (so its target_clones kernels are covered too).
    DEFAULT_CXX=g++
    BUILD=${COHORT_SAN_BUILD_DIR:-build-asan}
    SANITIZE=address,undefined
    LABELS=$ASAN_LABELS
    EXCLUDE=("${ASAN_EXCLUDE[@]}")
    REASONS=("${ASAN_REASONS[@]}")
    EXCLUDE_LABELS=$ASAN_EXCLUDE_LABELS
    EXCLUDE_LABELS_REASON=$ASAN_EXCLUDE_LABELS_REASON
    ;;
  tsan)
    # clang++: with g++, the target_clones kernels (worker_runtime/cpu/reduce_kernels.cc,
    # trainers/vec_math.h) get ifunc resolvers that TSan instruments, and they run at load time,
    # before the TSan runtime is up: every runtime binary dies with SIGSEGV before main(). The
    # kernels build without clones under clang. See the report of issue 8 for the fix.
    DEFAULT_CXX=clang++
    BUILD=${COHORT_SAN_BUILD_DIR:-build-tsan}
    # The trainers are not in this mode's labels (and pass a GCC-only flag, so clang cannot
    # build them): leave them out.
    EXTRA_CFG=(-DCOHORT_BUILD_TRAINERS=OFF)
    SANITIZE=thread
    LABELS="store|launcher|runtime"
    EXCLUDE=("${TSAN_EXCLUDE[@]}")
    REASONS=("${TSAN_REASONS[@]}")
    EXCLUDE_LABELS=""
    ;;
  *) usage ;;
esac

CXX_BIN=${COHORT_SAN_CXX:-$DEFAULT_CXX}
case "$CXX_BIN" in
  *clang++*) CC_BIN=${CXX_BIN/clang++/clang} ;;
  *g++*) CC_BIN=${CXX_BIN/g++/gcc} ;;
  *) CC_BIN=cc ;;
esac

# ---- configure and build -------------------------------------------------------------------------
if [ -f "$BUILD/CMakeCache.txt" ]; then
  cached=$(sed -n 's/^CMAKE_CXX_COMPILER:[A-Z]*=//p' "$BUILD/CMakeCache.txt")
  if [ "$(readlink -f "$cached")" != "$(readlink -f "$(command -v "$CXX_BIN")")" ]; then
    echo "sanitize: $BUILD was configured with $cached, not $CXX_BIN; remove it first" >&2
    exit 2
  fi
fi
start=$(date +%s)
cfg=(-S . -B "$BUILD" -G Ninja
     -DCMAKE_BUILD_TYPE=RelWithDebInfo
     # -O1, as the ASan and TSan manuals advise; the root CMakeLists.txt adds line tables only.
     # Together they halve the ASan build (the CI budget) and change nothing a report shows.
     "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -DNDEBUG" "-DCMAKE_C_FLAGS_RELWITHDEBINFO=-O1 -DNDEBUG"
     -DCOHORT_SANITIZE="$SANITIZE"
     -DCOHORT_CUDA=OFF -DCOHORT_BUILD_TESTS=ON -DCOHORT_BUILD_BENCH=OFF -DCOHORT_FUZZ=OFF
     "${EXTRA_CFG[@]}")
flags=""
[ "$MODE" = asan ] && flags="-fno-sanitize-recover=undefined"
cfg+=("-DCMAKE_CXX_FLAGS=$flags")
[ -f "$BUILD/CMakeCache.txt" ] || cfg+=(-DCMAKE_C_COMPILER="$CC_BIN" -DCMAKE_CXX_COMPILER="$CXX_BIN")
# Through ccache when there is one (setup.sh installs it): a second run rebuilds in seconds.
if command -v ccache >/dev/null; then
  cfg+=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
  export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$PWD}
fi
mkdir -p "$BUILD"
if ! cmake "${cfg[@]}" >"$BUILD/configure.log" 2>&1; then
  cat "$BUILD/configure.log" >&2
  echo "sanitize: configure failed" >&2
  exit 2
fi
# Only what the mode's labels' tests need (the label's build target), unless ctest arguments were
# given (then everything). gtest_discover_tests runs the sanitized test binaries during the build
# to list their tests.
targets=(all)
if [ -n "$LABELS" ] && [ $# -eq 0 ]; then
  targets=()
  IFS='|' read -ra parts <<<"$LABELS"
  for l in "${parts[@]}"; do targets+=("cohort_label_$l"); done
fi
if ! ASAN_OPTIONS=detect_leaks=0 cmake --build "$BUILD" -j"$JOBS" --target "${targets[@]}"; then
  echo "sanitize: build failed" >&2
  exit 2
fi
built=$(date +%s)

# ---- run -----------------------------------------------------------------------------------------
# halt_on_error + abort_on_error: the first report ends the process with SIGABRT, which no test
# can mistake for success, in the test binary and in every process it starts (cohortrun, workers,
# cohortd inherit the environment).
export ASAN_OPTIONS=halt_on_error=1:abort_on_error=1:print_stacktrace=1:detect_leaks=1:check_initialization_order=1:strict_init_order=1:detect_stack_use_after_return=1
export UBSAN_OPTIONS=halt_on_error=1:abort_on_error=1:print_stacktrace=1
export LSAN_OPTIONS=print_suppressions=0
export TSAN_OPTIONS=halt_on_error=1:abort_on_error=1:second_deadlock_stack=1
# Tests that cannot run under a sanitizer ask this (the fault suite's ulimit -v scenario).
export COHORT_SANITIZER=$MODE

ctest_args=(--test-dir "$BUILD" --output-on-failure --timeout 900 -j"$JOBS")
[ -n "$LABELS" ] && ctest_args+=(-L "$LABELS")
if [ ${#EXCLUDE[@]} -gt 0 ]; then
  regex=$(IFS='|'; echo "${EXCLUDE[*]}")
  ctest_args+=(-E "$regex")
  echo "sanitize: excluded under $MODE:"
  for i in "${!EXCLUDE[@]}"; do echo "  ${EXCLUDE[$i]}: ${REASONS[$i]}"; done
fi
if [ -n "$EXCLUDE_LABELS" ]; then
  ctest_args+=(-LE "$EXCLUDE_LABELS")
  echo "sanitize: labels excluded under $MODE: $EXCLUDE_LABELS: $EXCLUDE_LABELS_REASON"
fi
rc=0
ctest "${ctest_args[@]}" "$@" || rc=$?
end=$(date +%s)
echo "sanitize $MODE: build $((built - start)) s, tests $((end - built)) s, ctest exit $rc"
exit $rc
