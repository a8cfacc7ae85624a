#!/usr/bin/env bash
# ctest wheel.venv (label packaging): `pip wheel .` (scikit-build-core; pyproject.toml), the wheel
# installed into a fresh virtual environment, and `python -m cohort.run` from it, then the venv's
# cohortrun without activating the venv, each running a PyTorch gloo job with 2 workers. The trap it guards against: a python3 on PATH without torch (here the
# first python3 on PATH that is not the venv's, e.g. pyenv's) must not be the workers'
# interpreter; the venv's must.
#   wheel_test.sh <source dir> <work dir> <python with PyTorch 2.x (a venv's)> [<wheel build dir>]
# The fresh venv is made by the PyTorch venv's base interpreter, without system site-packages
# (Debian's /usr/lib/python3/dist-packages has PyTorch 1.13), and sees the PyTorch venv's
# site-packages through a .pth file: torch 2.x, nothing else from outside.
# scikit-build-core comes from the package index once, into ~/.cache/cohort/wheel-build.
set -euo pipefail
src=$1 work=$2 torch_python=$3 wheel_build=${4:-$2.build}
rm -rf "$work"
mkdir -p "$work"
fail() { echo "wheel_test: $*" >&2; exit 1; }

builder=${COHORT_WHEEL_BUILDER:-$HOME/.cache/cohort/wheel-build}
if [[ ! -x $builder/bin/python ]] || ! "$builder/bin/python" -c 'import scikit_build_core' 2>/dev/null; then
  rm -rf "$builder"
  python3 -m venv "$builder"
  "$builder/bin/pip" install -q 'scikit-build-core>=0.10' || fail "cannot install scikit-build-core"
fi
# ccache (scripts/setup.sh installs it) makes a rebuild of unchanged sources cheap: the wheel's
# CMake build of cohortrun and cohortd is most of this test (about 3.5 CPU minutes cold). With the
# source folder as CCACHE_BASEDIR, its paths are relative in ccache's eyes, so another clone of the
# same sources (a CI run in a fresh folder) hits the same entries.
launcher=""
if command -v ccache >/dev/null; then
  launcher="-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache"
  export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$src}
fi
# cc and c++, as a plain CMake configure picks (the Release build's): scikit-build-core would take
# Python's gcc and g++, and ccache keys on the compiler's name, so nothing would hit.
# The build folder is kept (pyproject.toml names none, so that `pip install .` leaves nothing in
# the clone). ctest puts it beside the test suite's own build folder (build/ -> build-wheel/): ccache
# keys on the compiler's command line, with paths relative to its working folder, so a build
# folder as deep as the suite's reuses the objects the suite's build has just made (the same
# sources, the same Release flags): a CI run from a cold cache compiles them once, not twice.
(cd "$src" && CC=${CC:-cc} CXX=${CXX:-c++} CMAKE_ARGS="$launcher" CMAKE_BUILD_PARALLEL_LEVEL=$(nproc) \
   "$builder/bin/pip" wheel -v --no-build-isolation --no-deps -C build-dir="$wheel_build" \
   -w "$work/dist" .) >"$work/wheel.log" 2>&1 || fail "pip wheel failed: $(tail -30 "$work/wheel.log")"
# -v shows what the build does (pip otherwise says only "still running"): CMake's progress.
grep -qE '^ *\[[0-9]+/[0-9]+\] ' "$work/wheel.log" || grep -q 'ninja: no work to do' "$work/wheel.log" ||
  fail "pip wheel -v showed no build progress: $(tail -30 "$work/wheel.log")"
[[ -f $wheel_build/CMakeCache.txt ]] || fail "the wheel was not built in $wheel_build"
# A build-dir in pyproject.toml would make every user's `pip install .` leave it in the clone.
! grep -q '^build-dir' "$src/pyproject.toml" || fail "pyproject.toml sets a build-dir"
wheel=$(ls "$work"/dist/cohort-*.whl)

base=$("$torch_python" -c 'import sys; print(sys._base_executable)')
"$base" -m venv "$work/venv"
site=$("$work/venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
"$torch_python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])' >"$site/torch-from-venv.pth"
"$work/venv/bin/pip" install -q --no-index --no-deps "$wheel" || fail "pip install $wheel failed"
# torchrun 2.x finds --rdzv-backend cohort through the wheel's entry point.
"$work/venv/bin/python" - <<'PYEOF' || fail "the wheel declares no torchrun.handlers entry point 'cohort'"
from importlib.metadata import entry_points
(ep,) = [e for e in entry_points(group="torchrun.handlers") if e.name == "cohort"]
assert callable(ep.load()()), ep
PYEOF
for b in cohortrun cohortd cohortctl; do
  [[ -x $work/venv/bin/$b ]] || fail "the wheel put no $b in the venv's bin"
  "$work/venv/bin/$b" --version | grep -q "^$b 0" || fail "$b --version from the venv"
done

# A PATH whose first python3 is another interpreter without torch, when this machine has one.
path=$work/venv-not-on-path-bin:$PATH
for p in $(type -ap python3); do
  if ! "$p" -c 'import torch' 2>/dev/null; then
    path=$(dirname "$p"):$PATH
    break
  fi
done
out=$(cd "$work" && env -u PYTHON_EXEC PATH="$path" "$work/venv/bin/python" -m cohort.run \
        --nproc-per-node 2 "$src/tests/install/wheel/gloo_allreduce.py" 2>&1) ||
  fail "python -m cohort.run failed: $out"
want_version=$("$torch_python" -c 'import torch; print(torch.__version__)')
for r in 0 1; do
  grep -qF "wheel worker rank $r of 2: sum 3 torch $want_version python $work/venv/bin/python" <<<"$out" ||
    fail "rank $r did not run with $work/venv/bin/python and torch $want_version: $out"
done
# The venv's cohortrun itself, the venv not activated: the python3 beside it, not PATH's.
out=$(cd "$work" && env -u PYTHON_EXEC PATH="$path" "$work/venv/bin/cohortrun" \
        --nproc-per-node 2 "$src/tests/install/wheel/gloo_allreduce.py" 2>&1) ||
  fail "$work/venv/bin/cohortrun failed: $out"
for r in 0 1; do
  grep -qF "wheel worker rank $r of 2: sum 3 torch $want_version python $work/venv/bin/python3" <<<"$out" ||
    fail "venv cohortrun: rank $r did not run with $work/venv/bin/python3: $out"
done
echo "wheel_test: passed ($wheel)"
