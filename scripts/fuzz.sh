#!/usr/bin/env bash
# Builds the libFuzzer targets (clang, ASan + UBSan + libFuzzer coverage on the libraries too) in
# build-fuzz/ and runs each one for a bounded time.
#
#   scripts/fuzz.sh [SECONDS]      SECONDS per target, default 60
#
# Each target fuzzes a copy of its seed corpus (tests/fuzz/corpus/<name>/ plus the reproducers in
# tests/fuzz/regressions/<name>/) in a temporary folder: the committed corpus never grows by
# itself. New interesting inputs are thrown away; to keep one, copy it in by hand.
#
# Exit status: 0 when every target ran its time with no crash, leak, timeout, out-of-memory or
# sanitizer report; 1 when one had a finding (the reproducer's path and the command that replays it
# are printed; reproducers are kept under $BUILD/fuzz-findings/<name>/); 2 when the build failed.
#
# Time: the build (first time: the store and launcher libraries with sanitizers, a few minutes on 2
# cores; then seconds) + (number of targets / COHORT_JOBS, rounded up) x SECONDS: the targets run
# COHORT_JOBS at a time, each a one-threaded libFuzzer process. A hard limit of
# SECONDS + 120 s per target stops a hung run (reported as a finding).
#
# Environment:
#   COHORT_FUZZ_BUILD_DIR  build folder (default build-fuzz)
#   COHORT_FUZZ_TARGETS    space-separated names to run (default: every fuzz_* target built)
#   COHORT_JOBS            build parallelism, and targets run at once (default 2)
#   COHORT_FUZZ_ARGS       extra libFuzzer flags, e.g. "-jobs=2 -workers=2" or "-seed=1"
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)

SECS=${1:-60}
if ! [[ $SECS =~ ^[0-9]+$ ]] || [ "$SECS" -lt 1 ]; then
  echo "usage: scripts/fuzz.sh [SECONDS per target, default 60]" >&2
  exit 2
fi
BUILD=${COHORT_FUZZ_BUILD_DIR:-build-fuzz}
JOBS=${COHORT_JOBS:-2}

# ---- build ---------------------------------------------------------------------------------------
# -fsanitize=fuzzer-no-link gives the libraries libFuzzer's coverage hooks; the targets add
# -fsanitize=fuzzer.
build_start=$(date +%s)
cfg=(-S . -B "$BUILD" -G Ninja
     -DCOHORT_FUZZ=ON -DCOHORT_BUILD_TESTS=ON
     -DCOHORT_SANITIZE=address,undefined
     "-DCMAKE_CXX_FLAGS=-fsanitize=fuzzer-no-link -fno-sanitize-recover=undefined"
     -DCOHORT_CUDA=OFF -DCOHORT_BUILD_RUNTIME=OFF -DCOHORT_BUILD_BENCH=OFF
     -DCMAKE_BUILD_TYPE=RelWithDebInfo
     # libFuzzer's manual: -O1 with line tables (the root CMakeLists.txt adds those).
     "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -DNDEBUG" "-DCMAKE_C_FLAGS_RELWITHDEBINFO=-O1 -DNDEBUG")
if [ ! -f "$BUILD/CMakeCache.txt" ]; then
  command -v clang++ >/dev/null || { echo "fuzz: clang++ not found (scripts/setup.sh installs it)" >&2; exit 2; }
  cfg+=(-DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++)
elif ! grep -q '^CMAKE_CXX_COMPILER_ID:.*Clang\|^CMAKE_CXX_COMPILER:.*clang' "$BUILD/CMakeCache.txt"; then
  echo "fuzz: $BUILD was configured with another compiler; remove it or set COHORT_FUZZ_BUILD_DIR" >&2
  exit 2
fi
mkdir -p "$BUILD"
if ! cmake "${cfg[@]}" >"$BUILD/configure.log" 2>&1; then
  cat "$BUILD/configure.log" >&2
  echo "fuzz: configure failed" >&2
  exit 2
fi
# Test discovery (gtest_discover_tests) runs sanitized binaries during the build.
export ASAN_OPTIONS=detect_leaks=0
if ! cmake --build "$BUILD" -j"$JOBS" --target cohort_fuzz_targets; then
  echo "fuzz: build failed" >&2
  exit 2
fi
build_secs=$(( $(date +%s) - build_start ))

# ---- run -----------------------------------------------------------------------------------------
if [ -n "${COHORT_FUZZ_TARGETS:-}" ]; then
  read -r -a names <<<"$COHORT_FUZZ_TARGETS"
else
  names=()
  for bin in "$BUILD"/bin/fuzz_*; do
    [ -x "$bin" ] && names+=("$(basename "$bin" | sed 's/^fuzz_//')")
  done
fi
[ ${#names[@]} -gt 0 ] || { echo "fuzz: no fuzz targets in $BUILD/bin" >&2; exit 2; }

work=$(mktemp -d "${TMPDIR:-/tmp}/cohort-fuzz.XXXXXX")
trap 'rm -rf "$work"' EXIT
findings_dir="$ROOT/$BUILD/fuzz-findings"

export ASAN_OPTIONS=detect_leaks=1:print_stacktrace=1:abort_on_error=1:allocator_may_return_null=0
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
echo "fuzz: ${#names[@]} targets x ${SECS} s (build took ${build_secs} s)"
# fuzz_one NAME: runs one target for SECS seconds; writes its summary line to $work/NAME/summary
# and its report (a finding's stack, reproducers) to $work/NAME/report; exits 1 on a finding.
fuzz_one() {
  local name=$1
  local bin="$ROOT/$BUILD/bin/fuzz_$name"
  local dir="$work/$name"
  mkdir -p "$dir/corpus" "$dir/artifacts"
  for src in "tests/fuzz/corpus/$name" "tests/fuzz/regressions/$name"; do
    [ -d "$src" ] && cp -r "$src/." "$dir/corpus/"
  done
  local args=(-max_total_time="$SECS" -detect_leaks=1 -rss_limit_mb=2048 -timeout=25
        -print_final_stats=1 -artifact_prefix="$dir/artifacts/")
  [ -f "tests/fuzz/dict/$name.dict" ] && args+=(-dict="$ROOT/tests/fuzz/dict/$name.dict")
  # shellcheck disable=SC2206
  [ -n "${COHORT_FUZZ_ARGS:-}" ] && args+=($COHORT_FUZZ_ARGS)
  local start rc=0 secs execs units found
  start=$(date +%s)
  timeout -k 10 $((SECS + 120)) "$bin" "${args[@]}" "$dir/corpus" >"$dir/log" 2>&1 || rc=$?
  secs=$(( $(date +%s) - start ))
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$dir/log" | tail -1)
  units=$(find "$dir/corpus" -type f | wc -l)
  shopt -s nullglob
  found=("$dir"/artifacts/*)
  shopt -u nullglob
  # libFuzzer exits non-zero on every finding; a sanitizer report with exit 0 would still be one.
  if [ "$rc" -ne 0 ] || [ ${#found[@]} -gt 0 ] ||
     grep -q -E '^(==[0-9]+==ERROR|SUMMARY: (Address|Leak|UndefinedBehavior)Sanitizer)|runtime error:' "$dir/log"; then
    printf '%-12s FAILED (exit %s) after %ss, %s execs\n' "$name" "$rc" "$secs" "${execs:-?}" >"$dir/summary"
    mkdir -p "$findings_dir/$name"
    cp "$dir/log" "$findings_dir/$name/log"
    {
      echo "==== fuzz_$name: finding (exit $rc) ================================================"
      grep -E 'ERROR:|SUMMARY:|runtime error:|invariant failed|deadly signal|out-of-memory' "$dir/log" | head -20 || true
      if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
        echo "(the run did not end by itself: killed after $((SECS + 120)) s)"
      fi
      local a kept
      for a in "${found[@]}"; do
        cp "$a" "$findings_dir/$name/"
        kept="$findings_dir/$name/$(basename "$a")"
        echo "reproducer: $kept"
        echo "  replay:   $BUILD/bin/fuzz_$name $kept"
        echo "  keep it:  cp $kept tests/fuzz/regressions/$name/"
      done
      echo "full log:   $findings_dir/$name/log"
    } >"$dir/report"
    return 1
  fi
  printf '%-12s ok      %ss, %s execs, corpus %s inputs\n' "$name" "$secs" "${execs:-?}" "$units" >"$dir/summary"
}

# The targets run $JOBS at a time (each libFuzzer process is one thread): the stage's time is the
# targets' time divided by the cores, not their sum.
for name in "${names[@]}"; do
  [ -x "$ROOT/$BUILD/bin/fuzz_$name" ] || { echo "fuzz: no target fuzz_$name" >&2; exit 2; }
done
status=0
for name in "${names[@]}"; do
  while [ "$(jobs -rp | wc -l)" -ge "$JOBS" ]; do wait -n || true; done
  fuzz_one "$name" &
done
wait
# Each target's files say how it ended (wait -n above has already taken some exit statuses).
summary=()
for name in "${names[@]}"; do
  [ -f "$work/$name/report" ] && cat "$work/$name/report"
  if [ -f "$work/$name/summary" ]; then
    summary+=("$(cat "$work/$name/summary")")
    grep -q "FAILED" "$work/$name/summary" && status=1
  else
    summary+=("$(printf '%-12s FAILED: no result (the run ended before it wrote one)' "$name")")
    status=1
  fi
done

echo "==== fuzz summary (${SECS} s per target) ========================================"
printf '%s\n' "${summary[@]}"
exit $status
