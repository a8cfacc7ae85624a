#!/usr/bin/env bash
# Gathers what scripts/gpu_check.sh needs on a bare GPU machine into ONE folder that travels with
# the working tree (git ignores it): the GPU build's libraries and headers that such a machine
# lacks (Debian 12 packages, fetched with `apt-get download` and unpacked with `dpkg -x`), the
# Fashion-MNIST files, the GPT's text, and fallback CUDA library headers.
#
#   scripts/gpu_bundle.sh [DIR]     build the bundle in DIR (default: <repo>/gpu-bundle)
#
# DIR holds:
#   deps.tar.xz         the unpacked packages, as a tree of usr/ and lib/ (gpu_check unpacks it
#                       and points CMAKE_PREFIX_PATH at usr/). usr/lib/<arch> and its
#                       openblas-pthread/ hold what the programs load at run time (spdlog, fmt,
#                       OpenBLAS, gfortran, quadmath); lib/<arch> holds libraries needed only to
#                       link (zlib, OpenSSL's libcrypto, libcurl for configure): every machine
#                       has its own zlib and libcrypto, and putting ours on LD_LIBRARY_PATH
#                       would override them for every program, Python too.
#   data/fashion-mnist  the four IDX files of dataset-fashion-mnist
#   data/fortunes       the fortunes package's texts (the GPT's default data)
#   cuda-include/       nccl.h and cuBLAS's (and cuBLASLt's) headers from this machine's CUDA
#                       toolkit, used only where the GPU machine has the libraries but not their
#                       headers
#   MANIFEST.json       packages and versions, files, sizes
# Packages come from this machine's apt sources (Debian 12); the .deb files are cached in
# ~/.cache/cohort/gpu-bundle-debs. Needs apt-get, dpkg-deb and python3 (setup.sh's packages),
# and dataset-fashion-mnist and fortunes installed.
#
# Traps this script handles (each would break the build there): Debian's OpenBLAS names
# (libopenblas.so, cblas.h) are update-alternatives links that `dpkg -x` does not create, and its
# CMake config names absolute /usr paths (removed: CMake searches the variant folder instead);
# zlib's libz.so is an absolute link (made relative); OpenSSL's opensslconf.h lives in the
# multiarch include folder, which is only searched under /usr (moved next to the other headers).
# A link that leads outside the tree fails the script.
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUT=${1:-$REPO/gpu-bundle}
ARCH=x86_64-linux-gnu
CACHE=${XDG_CACHE_HOME:-$HOME/.cache}/cohort/gpu-bundle-debs
FMNIST=/usr/share/datasets/fashion-mnist
FORTUNES=/usr/share/games/fortunes
CUDA_INCLUDE=${CUDA_HOME:-/usr/local/cuda}/include
# The whole working tree travels in 64 MiB; the bundle gets what the tracked files leave, less a
# margin for untracked files.
LIMIT_BYTES=$((64 * 1024 * 1024 - 4 * 1024 * 1024))

# What the GPU targets need beyond a compiler, CMake and the CUDA toolkit: headers-only libraries,
# libraries with their run-time packages, and test framework. The dependencies of each -dev
# package that a bare machine lacks are listed too (dpkg -x resolves nothing).
PACKAGES=(
  libasio-dev libcli11-dev nlohmann-json3-dev     # headers only
  libspdlog-dev libspdlog1.10 libfmt-dev libfmt9  # logging (spdlog uses the external fmt)
  libopenblas-pthread-dev libopenblas0-pthread libgfortran5 libquadmath0  # CPU reference GEMMs
  zlib1g-dev zlib1g                               # IDX .gz reading
  libssl-dev libssl3                              # the store client's token handshake (HMAC)
  libcurl4-openssl-dev libcurl4                   # only for configure: rendezvous/ asks for curl
  libgtest-dev                                    # the GPU tests
)

die() {
  echo "gpu_bundle: $*" >&2
  exit 1
}
for tool in apt-get dpkg-deb python3; do
  command -v "$tool" >/dev/null || die "$tool is missing (scripts/setup.sh installs what is needed)"
done
[ -f "$FMNIST/train-images-idx3-ubyte.gz" ] ||
  die "no Fashion-MNIST in $FMNIST (apt-get install dataset-fashion-mnist)"
[ -f "$FORTUNES/fortunes" ] || die "no $FORTUNES/fortunes (apt-get install fortunes)"

# ---- fetch ---------------------------------------------------------------------------------------
mkdir -p "$CACHE"
# As root, apt downloads as user _apt, who cannot write under root's home: download as root.
APT_OPTS=()
[ "$(id -u)" = 0 ] && APT_OPTS=(-o APT::Sandbox::User=root)
versions=()
missing=()
for p in "${PACKAGES[@]}"; do
  v=$(apt-cache policy "$p" 2>/dev/null | sed -n 's/^  Candidate: //p')
  [ -n "$v" ] && [ "$v" != "(none)" ] || die "apt knows no package $p (apt-get update first?)"
  versions+=("$p=$v")
  # apt-get download names files <name>_<version with : as %3a>_<arch>.deb
  f=$(ls "$CACHE/${p}_${v/:/%3a}_"*.deb 2>/dev/null | head -1 || true)
  [ -n "$f" ] || missing+=("$p=$v")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "gpu_bundle: downloading ${#missing[@]} packages into $CACHE" >&2
  (cd "$CACHE" && apt-get "${APT_OPTS[@]}" download -q "${missing[@]}" >&2) ||
    die "apt-get download failed"
fi

# ---- unpack and repair ---------------------------------------------------------------------------
WORK=$(mktemp -d "${TMPDIR:-/tmp}/cohort-gpu-bundle.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
TREE=$WORK/tree
mkdir -p "$TREE"
for pv in "${versions[@]}"; do
  p=${pv%%=*}
  v=${pv#*=}
  dpkg-deb -x "$(ls "$CACHE/${p}_${v/:/%3a}_"*.deb | head -1)" "$TREE"
done
L=$TREE/usr/lib/$ARCH
RUNTIME_ONLY_LINK=$TREE/lib/$ARCH
mkdir -p "$RUNTIME_ONLY_LINK"
# Documentation, manuals, sources, and static libraries nothing here links (gtest's are the only
# ones the tests use); LAPACK and the reference-BLAS names of OpenBLAS; OpenBLAS's CMake and
# pkg-config files with absolute paths.
rm -rf "$TREE/usr/share/doc" "$TREE/usr/share/man" "$TREE/usr/share/lintian" "$TREE/usr/src" \
  "$TREE/usr/bin" "$L/openblas-pthread/cmake" "$L/openblas-pthread/pkgconfig" "$L/cmake/openblas"
find "$TREE" \( -name '*.a' ! -name 'libgtest*.a' \) -delete
rm -f "$L"/openblas-pthread/liblapack.* "$L"/openblas-pthread/libblas.*
# zlib's development link is absolute (/lib/<arch>/libz.so.1.2.13): point it into the tree.
zlib_target=$(readlink "$L/libz.so")
ln -sfn "../../../lib/$ARCH/$(basename "$zlib_target")" "$L/libz.so"
# OpenSSL and libcurl: link-time only (the machine's own libcrypto.so.3 and libz.so.1 load).
for lib in libcrypto.so.3 libssl.so.3 libcurl.so.4 libcurl.so.4.*; do
  for f in "$L"/$lib; do [ -e "$f" ] && mv "$f" "$RUNTIME_ONLY_LINK/"; done
done
for dev in libcrypto libssl libcurl; do
  target=$(readlink "$L/$dev.so")
  ln -sfn "../../../lib/$ARCH/$(basename "$target")" "$L/$dev.so"
done
rm -rf "$L/engines-3" "$L/ossl-modules"
# opensslconf.h and configuration.h live in the multiarch include folder.
cp -a "$TREE/usr/include/$ARCH/openssl/." "$TREE/usr/include/openssl/"
rm -rf "$TREE/usr/include/$ARCH/openssl"

# Every link must resolve inside the tree.
bad=$(cd "$TREE" && find . -type l | while read -r link; do
  target=$(readlink -f "$link" || true)
  case "$target" in "$TREE"/*) [ -e "$target" ] || echo "$link" ;; *) echo "$link -> $(readlink "$link")" ;; esac
done)
[ -z "$bad" ] || die "links that would dangle on the GPU machine:"$'\n'"$bad"

# ---- assemble ------------------------------------------------------------------------------------
STAGE=$WORK/bundle
mkdir -p "$STAGE/data/fashion-mnist" "$STAGE/data/fortunes" "$STAGE/cuda-include"
# With Python's tarfile: xz(1) need not be installed, here or there.
python3 - "$TREE" "$STAGE/deps.tar.xz" <<'PY'
import sys, tarfile
def owner(info):
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    return info
with tarfile.open(sys.argv[2], "w:xz", preset=6) as tar:
    for top in ("usr", "lib"):
        tar.add(f"{sys.argv[1]}/{top}", arcname=top, filter=owner)
PY
cp "$FMNIST"/*-idx?-ubyte.gz "$STAGE/data/fashion-mnist/"
# The texts the GPT's loader reads from the fortunes folder: regular files without extension.
find "$FORTUNES" -maxdepth 1 -type f ! -name '*.*' -exec cp {} "$STAGE/data/fortunes/" \;
for h in nccl.h cublas_v2.h cublas_api.h cublas.h cublasLt.h; do
  if [ -f "$CUDA_INCLUDE/$h" ]; then cp "$CUDA_INCLUDE/$h" "$STAGE/cuda-include/"; fi
done
python3 - "$STAGE" "${versions[@]}" <<'PY'
import json, os, sys, time
stage, versions = sys.argv[1], sys.argv[2:]
files = {}
for root, _, names in os.walk(stage):
    for n in names:
        p = os.path.join(root, n)
        files[os.path.relpath(p, stage)] = os.path.getsize(p)
json.dump({"made": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
           "by": "scripts/gpu_bundle.sh",
           "packages": dict(v.split("=", 1) for v in versions),
           "files": dict(sorted(files.items())),
           "bytes": sum(files.values())},
          open(os.path.join(stage, "MANIFEST.json"), "w"), indent=1)
PY

bundle_bytes=$(du -sb "$STAGE" | cut -f1)
tracked_bytes=$(cd "$REPO" && git ls-files -z | xargs -0 du -cb 2>/dev/null | tail -1 | cut -f1)
total=$((bundle_bytes + tracked_bytes))
if [ "$total" -gt "$LIMIT_BYTES" ]; then
  die "the bundle ($bundle_bytes bytes) and the tracked files ($tracked_bytes) come to $total" \
    "bytes, above the $LIMIT_BYTES that may travel"
fi
rm -rf "$OUT.old"
[ -e "$OUT" ] && mv "$OUT" "$OUT.old"
mkdir -p "$(dirname "$OUT")"
mv "$STAGE" "$OUT"
rm -rf "$OUT.old"
awk -v o="$OUT" -v b="$bundle_bytes" -v t="$tracked_bytes" 'BEGIN {
  printf "gpu_bundle: %s: %.1f MiB (tracked files %.1f MiB, together %.1f of the 64 MiB that travel)\n",
         o, b / 1048576, t / 1048576, (b + t) / 1048576 }'
