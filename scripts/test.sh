#!/usr/bin/env bash
# Sets up what is missing, builds and runs the test suite: what CI runs (.ci/run calls this).
#
#   scripts/test.sh               everything, in this order, each stage in its own build folder:
#                                   release  Release build, the whole suite (ctest)       build/
#                                   fuzz     each libFuzzer target for 20 s               build-fuzz/
#                                   asan     ASan + UBSan, the labels that reach cohort's   build-asan/
#                                            code (scripts/sanitize.sh says which, and why)
#                                   tsan     TSan, the store, launcher and runtime tests  build-tsan/
#   scripts/test.sh --quick       the release stage only
#   scripts/test.sh -L store      the release stage only, with these ctest arguments; -L LABEL
#                                 (or A|B) builds only what those labels' tests need
#   scripts/test.sh -L unit       every test that starts no process (under a minute once built);
#                                 installs only what builds cohort (setup.sh --build-only)
#   scripts/test.sh -L crashcheck the crash check of cohortd alone (60 s; the release stage runs it)
#
# Every stage runs even when an earlier one failed; a summary with each stage's time ends the
# output. Exit status: 0 when every stage passed, else 1 (2: a bad argument).
# Environment: COHORT_BUILD_DIR (release folder, default build), COHORT_FUZZ_SECONDS (per target,
# default 20), COHORT_TEST_STAGES (default "release fuzz asan tsan").
set -euo pipefail
cd "$(dirname "$0")/.."

STAGES=${COHORT_TEST_STAGES:-release fuzz asan tsan}
if [ "${1:-}" = "--quick" ]; then
  STAGES=release
  shift
elif [ $# -gt 0 ]; then
  STAGES=release
fi
for s in $STAGES; do
  case "$s" in release | fuzz | asan | tsan) ;; *)
    echo "test.sh: unknown stage '$s' in COHORT_TEST_STAGES (release, fuzz, asan, tsan)" >&2
    exit 2
    ;;
  esac
done

# The unit tests start no process: they need the build's packages only, not PyTorch, Slurm, etcd.
setup_args=()
if [ "$STAGES" = release ] && [ "$*" = "-L unit" ]; then setup_args=(--build-only); fi
scripts/setup.sh --check "${setup_args[@]+"${setup_args[@]}"}" >/dev/null 2>&1 ||
  scripts/setup.sh "${setup_args[@]+"${setup_args[@]}"}"

# The build targets for ctest's arguments: cohort_label_<l> for each l of a plain -L A|B, else
# everything.
targets_for() {
  local labels=""
  while [ $# -gt 0 ]; do
    case "$1" in
      -L | --label-regex) labels=${2:-}; shift ;;
      -L*) labels=${1#-L} ;;
      -R | -E | -I | --tests-regex | --exclude-regex) ;;
    esac
    shift
  done
  if [[ -z "$labels" || ! "$labels" =~ ^[a-z0-9_]+(\|[a-z0-9_]+)*$ ]]; then
    echo all
    return
  fi
  local t=()
  IFS='|' read -ra parts <<<"$labels"
  for l in "${parts[@]}"; do t+=("cohort_label_$l"); done
  echo "${t[@]}"
}

release() {
  local build=${COHORT_BUILD_DIR:-build}
  local targets launcher=()
  targets=$(targets_for "$@")
  # Through ccache (setup.sh installs it), the packaging test's own build of cohortrun and cohortd
  # (pip wheel, the same compiler flags) finds most objects made already: minutes saved on a fresh
  # machine. Paths relative to the checkout, so that another clone hits the same entries.
  if command -v ccache >/dev/null; then
    launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
    export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$PWD}
  fi
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCOHORT_BUILD_TESTS=ON \
    -DCOHORT_BUILD_RUNTIME=ON -DCOHORT_BUILD_TRAINERS=ON -DCOHORT_BUILD_BENCH=ON \
    "${launcher[@]}" &&
    # shellcheck disable=SC2086 # one word per target
    cmake --build "$build" -j"$(nproc)" --target $targets &&
    ctest --test-dir "$build" --output-on-failure --timeout 900 -j"$(nproc)" "$@"
}

summary=()
failed=0
for stage in $STAGES; do
  echo "==== test.sh: stage $stage ===================================================="
  start=$(date +%s)
  rc=0
  case "$stage" in
    release) release "$@" || rc=$? ;;
    fuzz) scripts/fuzz.sh "${COHORT_FUZZ_SECONDS:-20}" || rc=$? ;;
    asan) COHORT_JOBS=$(nproc) scripts/sanitize.sh asan || rc=$? ;;
    tsan) COHORT_JOBS=$(nproc) scripts/sanitize.sh tsan || rc=$? ;;
  esac
  secs=$(($(date +%s) - start))
  if [ "$rc" -eq 0 ]; then
    summary+=("$(printf '%-8s passed  %4d s' "$stage" "$secs")")
  else
    summary+=("$(printf '%-8s FAILED  %4d s  (exit %d)' "$stage" "$secs" "$rc")")
    failed=1
  fi
done

echo "==== test.sh summary ============================================================"
printf '%s\n' "${summary[@]}"
exit $failed
