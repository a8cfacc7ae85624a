#!/usr/bin/env bash
# Installs PyTorch 2.x from the Python package index into a virtual environment of its own, beside
# Debian's PyTorch 1.13 (/usr/bin/python3), for the interop tests and the benchmarks' baselines.
#
#   scripts/torch2.sh            install when missing (idempotent), then print the interpreter
#   scripts/torch2.sh --python   print the interpreter's path only (installs nothing)
#   scripts/torch2.sh --check    exit 0 when the environment imports torch, else 1
#
# The version is pinned here, in TORCH2_VERSION, and nowhere else (CMake asks this script).
# The environment lives in $COHORT_TORCH2_VENV, default ~/.cache/cohort/torch-<version>, so that
# several clones share one.
#
# A plain `pip install torch` brings several GB of CUDA wheels. Where the machine already has the
# CUDA toolkit on its library path (ldconfig), only the libraries it lacks are added: torch
# without its dependencies, its pure-Python dependencies, and the NVIDIA wheels torch pins that a
# toolkit does not ship (NCCL, cuFile, cuSPARSELt, NVSHMEM), at exactly the pinned versions, and
# numpy (torch.distributed's object collectives need it). If
# `import torch` then fails, the full `pip install torch` follows. Either way the torch is
# PyTorch's own wheel.
set -euo pipefail

TORCH2_VERSION=2.15.0
VENV=${COHORT_TORCH2_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/cohort/torch-$TORCH2_VERSION}
PY=$VENV/bin/python

works() {
  [ -x "$PY" ] && "$PY" - "$TORCH2_VERSION" >/dev/null 2>&1 <<'PYEOF'
import sys
import numpy  # object collectives (broadcast_object_list, ...) need it
import torch, torch.distributed as dist
assert torch.__version__.split("+")[0] == sys.argv[1], torch.__version__
assert dist.is_gloo_available()
PYEOF
}

case "${1:-}" in
  --python) echo "$PY"; exit 0 ;;
  --check) works && exit 0 || exit 1 ;;
  "") ;;
  *) echo "torch2.sh: unknown argument '$1' (--python, --check)" >&2; exit 2 ;;
esac

if works; then
  echo "$PY"
  exit 0
fi

echo "torch2.sh: installing PyTorch $TORCH2_VERSION into $VENV" >&2
rm -rf "$VENV"
mkdir -p "$(dirname "$VENV")"
/usr/bin/python3 -m venv "$VENV"
pip() { "$PY" -m pip --disable-pip-version-check -q "$@"; }
pip install --no-deps "torch==$TORCH2_VERSION"
# torch's own requirements, as its metadata states them (markers evaluated for this machine).
mapfile -t reqs < <("$PY" - <<'PYEOF'
from importlib.metadata import requires
from pip._vendor.packaging.requirements import Requirement
for text in requires("torch") or []:
    r = Requirement(text)
    if r.marker is not None and not r.marker.evaluate({"extra": ""}):
        continue
    print(text.split(";")[0].strip())
PYEOF
)
pure=() nvidia=()
for r in "${reqs[@]}"; do
  case "$r" in
    "") ;;
    nvidia-nccl* | nvidia-cusparselt* | nvidia-nvshmem*) nvidia+=("$r") ;;
    cuda-toolkit*) nvidia+=("cuda-toolkit[cufile]==${r##*==}") ;;
    nvidia-* | cuda-* | triton*) ;;  # provided by the toolkit, or not needed on a CPU
    *) pure+=("$r") ;;
  esac
done
# (pip then warns that torch's CUDA requirements are missing: expected, they come next or from
# the toolkit.)
# numpy: not a requirement of torch's, but torch.distributed's object collectives need it.
pip install "${pure[@]}" numpy
libs=$(ldconfig -p 2>/dev/null || true)  # (not piped into grep -q: pipefail and SIGPIPE)
if [[ $libs == *libcudart.so.13* && $libs == *libcudnn.so.9* ]]; then
  # The toolkit is on the library path: add only what it lacks.
  pip install "${nvidia[@]}"
fi
if ! works; then
  echo "torch2.sh: the light install does not import; installing torch with all its CUDA wheels" >&2
  pip install "torch==$TORCH2_VERSION"
fi
works || { echo "torch2.sh: $PY cannot import torch $TORCH2_VERSION" >&2; exit 1; }
echo "$PY"
