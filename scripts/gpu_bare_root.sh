#!/usr/bin/env bash
# The GPU machine without its GPU: runs scripts/gpu_check.sh --build-only in a bare Debian 12 root
# (debootstrap: a compiler, CMake, ninja, Python, and none of cohort's -dev packages), with the
# CUDA toolkit bind-mounted minus NCCL, NCCL where PyTorch's wheel puts it (lib/ holds only
# libnccl.so.2), the working tree read-only, and no network (a network namespace of its own):
# the build must come from the bundle alone. Then gpu_check --locate-only in the same root with
# cuBLAS, too, only in a wheel's folder, and with a NCCL that has no header beside it. The bundle
# is mounted from the cache (COHORT_GPU_BUNDLE), the tree is never written.
#
#   scripts/gpu_bare_root.sh           all of the above; the last line is gpu_check's JSON
#   scripts/gpu_bare_root.sh --shell   a shell in the root instead, set up the same way
#
# Exit status: 0 when every run passed; 77 when this machine cannot do it (not root, no
# debootstrap or unshare, no CUDA toolkit): ctest counts that as skipped. Needs the network only
# to make the root and the bundle the first time.
#
# Cached under ~/.cache/cohort/bare-root (one lock, so concurrent runs wait for each other):
#   root-bookworm-<hash>/   the debootstrap root, per package list (scripts/debian_root.sh: a
#                           compiler, CMake, ninja, Python and ccache, as a CUDA image has)
#   cuda-<version>/         the toolkit without NCCL, hard links where the file system allows
#   cuda-<version>-nocublas/  the same without cuBLAS
#   wheels/                 NCCL and cuBLAS laid out as PyTorch's wheels lay them out
#   gpu-bundle-<hash>/      the bundle scripts/gpu_bundle.sh makes, per version of that script
#   ccache/                 the compiler cache of the builds inside (a repeated run takes ~20 s)
# Environment: CUDA_HOME (default /usr/local/cuda), COHORT_NCCL_LIBRARY and
# COHORT_NCCL_INCLUDE_DIR (the NCCL to lay out as a wheel; default the toolkit's; the ctest sets
# the one CMake found), COHORT_DEBIAN_MIRROR (default http://deb.debian.org/debian),
# GPU_CHECK_JOBS.
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CACHE=${XDG_CACHE_HOME:-$HOME/.cache}/cohort/bare-root
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
# Present in the root means the simulation is wrong.
FORBIDDEN='libspdlog|libfmt-dev|libopenblas|libgtest|libssl-dev|zlib1g-dev|nlohmann|libasio|libcli11|libcurl.*-dev|libnccl'
SHELL_MODE=false
[ "${1:-}" = --shell ] && SHELL_MODE=true

skip() {
  echo "gpu_bare_root: skipped: $*" >&2
  exit 77
}
die() {
  echo "gpu_bare_root: $*" >&2
  exit 1
}
[ "$(id -u)" = 0 ] || skip "needs root (chroot, mounts, namespaces)"
command -v debootstrap >/dev/null || skip "no debootstrap (scripts/setup.sh installs it)"
command -v unshare >/dev/null || skip "no unshare (util-linux)"
[ -x "$CUDA_HOME/bin/nvcc" ] || skip "no CUDA toolkit at $CUDA_HOME"
unshare --mount --net true 2>/dev/null || skip "cannot make mount and network namespaces here"

# ---- the root ------------------------------------------------------------------------------------
# scripts/debian_root.sh makes it once (debootstrap) and caches it beside this script's files,
# under the same lock, so it runs before this script takes that lock for the rest.
ROOT=$("$REPO/scripts/debian_root.sh") || {
  rc=$?
  [ "$rc" = 77 ] && skip "no Debian root (above)"
  die "cannot make the Debian root (exit $rc)"
}
mkdir -p "$CACHE"
exec 9>"$CACHE/lock"
flock 9

if chroot "$ROOT" dpkg-query -W -f '${Package}\n' | grep -E "^($FORBIDDEN)"; then
  die "the root has packages the GPU machine lacks (above)"
fi

# ---- the toolkit without NCCL (and without cuBLAS), and the wheels' layout ------------------------
CUDA_REAL=$(readlink -f "$CUDA_HOME")
CUDA_VER=$("$CUDA_REAL/bin/nvcc" --version | sed -n 's/.*release \([0-9.]*\),.*/\1/p')
[ -n "$CUDA_VER" ] || die "cannot read nvcc's version"
# copy_tree SRC DST EXCLUDE_REGEX: hard links when on one file system, else a copy (without the
# large libraries cohort does not use).
copy_tree() {
  local src=$1 dst=$2 exclude=$3
  rm -rf "$dst.tmp"
  if ! cp -al "$src" "$dst.tmp" 2>/dev/null; then
    rm -rf "$dst.tmp"
    mkdir -p "$dst.tmp"
    tar -C "$src" --exclude='libcudnn*' --exclude='libcufft*' --exclude='libcusolver*' \
      --exclude='libcusparse*' --exclude='libcurand*' --exclude='libnvjpeg*' --exclude='libnpp*' \
      -cf - . | tar -C "$dst.tmp" -xf -
  fi
  find "$dst.tmp" -regextype egrep -regex "$exclude" -prune -exec rm -rf {} +
  mv "$dst.tmp" "$dst"
}
VIEW=$CACHE/cuda-$CUDA_VER
VIEW_NOCUBLAS=$CACHE/cuda-$CUDA_VER-nocublas
stamp=$(stat -c %Y "$CUDA_REAL/bin/nvcc")
if [ "$(cat "$VIEW/.cohort-stamp" 2>/dev/null)" != "$stamp" ]; then
  rm -rf "$VIEW" "$VIEW_NOCUBLAS" "$CACHE/wheels"
  copy_tree "$CUDA_REAL" "$VIEW" '.*/(nccl[^/]*|libnccl[^/]*)'
  copy_tree "$VIEW" "$VIEW_NOCUBLAS" '.*/(cublas[^/]*\.h|libcublas[^/]*)'
  # PyTorch's NCCL wheel (nvidia-nccl-cu13): nvidia/nccl/{include/nccl.h, lib/libnccl.so.2}; its
  # cuBLAS wheel (nvidia-cublas): nvidia/cu13/{include, lib/libcublas.so.13}.
  W=$CACHE/wheels/nvidia
  mkdir -p "$W/nccl/include" "$W/nccl/lib" "$W/cu13/include" "$W/cu13/lib" "$W/nccl-noheader/lib"
  libdir=$(readlink -f "$CUDA_REAL/lib64")
  [ -d "$libdir" ] || libdir=$CUDA_REAL/lib
  nccl_so=$(readlink -f "${COHORT_NCCL_LIBRARY:-$libdir/libnccl.so.2}")
  nccl_h=${COHORT_NCCL_INCLUDE_DIR:-$CUDA_REAL/include}/nccl.h
  [ -f "$nccl_so" ] && [ -f "$nccl_h" ] ||
    skip "no NCCL to lay out as a wheel ($nccl_so, $nccl_h; set COHORT_NCCL_LIBRARY and _INCLUDE_DIR)"
  ln "$nccl_so" "$W/nccl/lib/libnccl.so.2" 2>/dev/null || cp "$nccl_so" "$W/nccl/lib/libnccl.so.2"
  ln "$nccl_so" "$W/nccl-noheader/lib/libnccl.so.2" 2>/dev/null ||
    cp "$nccl_so" "$W/nccl-noheader/lib/libnccl.so.2"
  cp "$nccl_h" "$W/nccl/include/"
  for f in "$libdir"/libcublas.so.1[0-9] "$libdir"/libcublasLt.so.1[0-9]; do
    real=$(readlink -f "$f")
    ln "$real" "$W/cu13/lib/$(basename "$f")" 2>/dev/null || cp "$real" "$W/cu13/lib/$(basename "$f")"
  done
  cp "$CUDA_REAL"/include/cublas*.h "$W/cu13/include/"
  echo "$stamp" >"$VIEW/.cohort-stamp"
fi

# ---- the bundle ----------------------------------------------------------------------------------
# Made by this tree's gpu_bundle.sh and kept per version of that script (the tree's own
# gpu-bundle/, for a GPU machine, is left alone).
BUNDLE=$CACHE/gpu-bundle-$(sha256sum "$REPO/scripts/gpu_bundle.sh" | cut -c1-12)
if [ ! -f "$BUNDLE/MANIFEST.json" ]; then
  rm -rf "$CACHE"/gpu-bundle-*
  "$REPO/scripts/gpu_bundle.sh" "$BUNDLE" >&2
fi
mkdir -p "$CACHE/ccache"

# ---- inside --------------------------------------------------------------------------------------
# Mount points, made in the root once (mkdir -p is idempotent).
SITE=opt/torch/.venv/lib/python3.12/site-packages/nvidia
mkdir -p "$ROOT/src" "$ROOT/bundle" "$ROOT/ccache" "$ROOT/usr/local/cuda-$CUDA_VER" "$ROOT/$SITE/nccl" \
  "$ROOT/$SITE/cu13" "$ROOT/opt/nccl-noheader"
ln -sfn "cuda-$CUDA_VER" "$ROOT/usr/local/cuda"

# run_inside SETUP COMMAND: in new mount and network namespaces, mounts the tree (read-only),
# the toolkit view given by SETUP ("full" or "nocublas"), the wheels, /proc, /dev and a /tmp,
# then runs COMMAND in the root with a clean environment.
run_inside() {
  local view=$VIEW
  [ "$1" = nocublas ] && view=$VIEW_NOCUBLAS
  unshare --mount --net --propagation private -- bash -euc '
    R=$1 repo=$2 view=$3 cache=$4 site=$5 ver=$6 jobs=$7 bundle=$8
    shift 8
    mount --bind "$repo" "$R/src"
    mount -o remount,bind,ro "$R/src"
    mount --bind "$bundle" "$R/bundle"
    mount -o remount,bind,ro "$R/bundle"
    mount --bind "$view" "$R/usr/local/cuda-$ver"
    mount -o remount,bind,ro "$R/usr/local/cuda-$ver"
    mount --bind "$cache/wheels/nvidia/nccl" "$R/$site/nccl"
    mount --bind "$cache/wheels/nvidia/cu13" "$R/$site/cu13"
    mount --bind "$cache/wheels/nvidia/nccl-noheader" "$R/opt/nccl-noheader"
    mount --bind "$cache/ccache" "$R/ccache"
    mount -t proc proc "$R/proc"
    mount --rbind /dev "$R/dev"
    mount -t tmpfs -o size=8g tmpfs "$R/tmp"
    command -v ip >/dev/null && ip link set lo up
    exec chroot "$R" /usr/bin/env -i PATH=/usr/bin:/bin HOME=/root TERM=dumb \
      CCACHE_DIR=/ccache COHORT_GPU_BUILD_DIR=/tmp/build-gpu COHORT_GPU_BUNDLE=/bundle \
      GPU_CHECK_JOBS="$jobs" "$@"
  ' _ "$ROOT" "$REPO" "$view" "$CACHE" "$SITE" "$CUDA_VER" "${GPU_CHECK_JOBS:-$(nproc)}" \
    "$BUNDLE" "${@:2}"
}

if $SHELL_MODE; then
  run_inside full /bin/bash -i
  exit $?
fi

# The build, from the bundle alone: no network, no -dev packages, NCCL only in the wheel layout.
# Two shared cores build it in about ten minutes with a cold compiler cache.
out=$(run_inside full env GPU_CHECK_BUDGET_S=3000 GPU_CHECK_BUILD_LIMIT_S=2700 \
  /src/scripts/gpu_check.sh --build-only 2>&1) && rc=0 || rc=$?
echo "$out" | tail -40
last=$(echo "$out" | tail -1)
[ "$rc" = 0 ] || die "gpu_check --build-only failed in the bare root (exit $rc)"
python3 - "$last" <<'PY' || die "the build-only run's report is not what was expected"
import json, sys
r = json.loads(sys.argv[1])
assert r["gpu_check"] == "built", r["gpu_check"]
f = r["found"]
assert "/nvidia/nccl/" in f["nccl"] and f["nccl"].endswith("libnccl.so.2"), f["nccl"]
assert f["headers_from_bundle"] == "", f["headers_from_bundle"]
assert r["gpu_tests_listed"] >= 15, r["gpu_tests_listed"]
names = {s["name"]: s["ok"] for s in r["steps"]}
for n in ("configure", "build", "programs_load", "scripts_check", "fmnist_cpu_smoke",
          "gpt_cpu_smoke", "gpu_test_fails_without_gpu"):
    assert names.get(n) is True, (n, names)
PY

# cuBLAS only in its wheel's folder; NCCL without a header beside it (the bundle's is used).
out=$(run_inside nocublas env COHORT_NCCL_HOME=/opt/nccl-noheader \
  /src/scripts/gpu_check.sh --locate-only 2>&1) && rc=0 || rc=$?
last=$(echo "$out" | tail -1)
echo "$last"
[ "$rc" = 0 ] || die "gpu_check --locate-only failed in the bare root without cuBLAS (exit $rc)"
python3 - "$last" <<'PY' || die "the locate-only run found the wrong things"
import json, sys
f = json.loads(sys.argv[1])["found"]
assert "/nvidia/cu13/lib/libcublas.so.1" in f["cublas"], f["cublas"]
assert f["nccl"] == "/opt/nccl-noheader/lib/libnccl.so.2", f["nccl"]
assert f["headers_from_bundle"] == "nccl.h", f["headers_from_bundle"]
PY
echo "gpu_bare_root: passed" >&2
