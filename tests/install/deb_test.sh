#!/usr/bin/env bash
# ctest deb.bookworm (label packaging): the Debian packages (cmake/package.cmake) built from the
# release build with `cpack -G DEB`, judged by lintian (any error or warning that the packages do
# not override fails), then installed with apt into a bare Debian 12 root (scripts/debian_root.sh:
# debootstrap's minbase plus a compiler, CMake and Python, cached; used here under an overlay, so
# it is never written) that has none of their dependencies, and used there:
#   cohortrun, cohortd and the trainers --version; nothing their Depends left out (ldd);
#   a 2-worker job of the installed trainer, and of a Python script that imports the installed
#   `cohort` module, under the installed cohortrun (in a network namespace of its own);
#   tests/install/consumer built against libcohort-dev with find_package (static) and pkg-config
#   (shared), each run as a 2-rank allreduce under the installed cohortrun;
#   cohortd.service installed, neither enabled nor started (no systemd in a chroot);
#   a purge that removes the service's state.
#   deb_test.sh <build dir> <source dir> <work dir>
# Exit 77 (skipped) when this machine cannot make the root (not root, no debootstrap). apt's lists
# and the dependencies' .deb files are cached in ~/.cache/cohort/bare-root/apt: the network is
# needed only when the packages' dependencies change.
set -euo pipefail
build=$(realpath "$1") src=$(realpath "$2") work=$3
fail() { echo "deb_test: $*" >&2; exit 1; }
skip() { echo "deb_test: skipped: $*" >&2; exit 77; }
# An earlier run killed mid-way may have left its overlay mounted (in its own namespace, gone with
# it); nothing under $work is mounted in ours.
rm -rf --one-file-system "$work"
mkdir -p "$work"
work=$(realpath "$work")
t0=$SECONDS
say() { echo "deb_test: [$((SECONDS - t0)) s] $*"; }

command -v lintian >/dev/null || fail "no lintian (scripts/setup.sh installs it)"
command -v unshare >/dev/null || skip "no unshare (util-linux)"

# ---- the packages --------------------------------------------------------------------------------
# A CUDA build's libcohort and trainers need libcudart, libnccl and libcublas from the CUDA toolkit,
# which no Debian package provides: installed on a machine without the toolkit they would not even
# start. The packages are the CPU build, so a CUDA build is rebuilt without CUDA beside it
# (<build>-deb: the same depth as <build>, so ccache finds every object that does not see CUDA).
needs_cuda() {
  local f
  for f in "$1"/libcohort.so.*.* "$1"/bin/cohort-train-*; do
    [[ -f $f ]] || continue
    if objdump -p "$f" | grep -Eq 'NEEDED +lib(cudart|nccl|cublas)'; then return 0; fi
  done
  return 1
}
if needs_cuda "$build"; then
  cpu=$build-deb
  launcher=()
  if command -v ccache >/dev/null; then
    launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
    export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$src}
  fi
  say "the build links CUDA: the packages come from a CPU build in $cpu"
  { cmake -S "$src" -B "$cpu" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCOHORT_CUDA=OFF \
      -DCOHORT_BUILD_RUNTIME=ON -DCOHORT_BUILD_TRAINERS=ON -DCOHORT_BUILD_TESTS=OFF \
      -DCOHORT_BUILD_BENCH=OFF "${launcher[@]}" && cmake --build "$cpu"; } >"$work/cpu-build.log" 2>&1 ||
    fail "the CPU build for the packages failed: $(tail -30 "$work/cpu-build.log")"
  needs_cuda "$cpu" && fail "the CPU build in $cpu still links CUDA"
  build=$cpu
  say "CPU build done"
fi
# gzip instead of the packages' xz: half the time here (11 s against 25 s on 2 busy cores); the
# contents and the control files are the same.
cpack --config "$build/CPackConfig.cmake" -B "$work/cpack" -D CPACK_DEBIAN_COMPRESSION_TYPE=gzip \
  >"$work/cpack.log" 2>&1 ||
  fail "cpack failed: $(tail -30 "$work/cpack.log")"
version=$(sed -n 's/^set(CPACK_PACKAGE_VERSION "\(.*\)")$/\1/p' "$build/CPackConfig.cmake")
arch=$(dpkg --print-architecture)
soversion=${version%.*}
debs=()
for p in cohort "libcohort$soversion" libcohort-dev; do
  f=$work/cpack/${p}_${version}_$arch.deb
  [[ -f $f ]] || fail "cpack made no $f: $(ls "$work/cpack")"
  debs+=("$f")
done
say "cpack: ${debs[*]##*/}"

# What each package must hold (a few files per kind) and depend on.
contents() { dpkg-deb -c "$1" | awk '{ print $6 }' | sed 's|^\./|/|; s|/$||'; }
contents "${debs[0]}" >"$work/cohort.files"
for f in /usr/bin/cohortrun /usr/bin/cohortd /usr/bin/cohortctl /usr/bin/cohort-train-fmnist /usr/bin/cohort-train-gpt \
         /usr/share/man/man1/cohortrun.1.gz /usr/share/man/man1/cohortd.1.gz \
         /usr/share/bash-completion/completions/cohortrun /lib/systemd/system/cohortd.service \
         /usr/lib/cohort/python/cohort/__init__.py /usr/share/doc/cohort/copyright \
         /usr/share/doc/cohort/changelog.gz; do
  grep -qx -- "$f" "$work/cohort.files" || fail "cohort lacks $f"
done
if grep -E '\.(so|a|h)$|__pycache__|/include/' "$work/cohort.files"; then
  fail "cohort holds the library's files (above)"
fi
contents "${debs[1]}" >"$work/lib.files"
grep -qx "/usr/lib/$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || gcc -print-multiarch)/libcohort.so.$soversion" "$work/lib.files" ||
  fail "libcohort$soversion lacks libcohort.so.$soversion: $(cat "$work/lib.files")"
contents "${debs[2]}" >"$work/dev.files"
for f in /include/cohort/context.h /libcohort.a /libcohort.so /pkgconfig/cohort.pc \
         /cmake/cohort/cohortConfig.cmake; do
  grep -q -- "$f\$" "$work/dev.files" || fail "libcohort-dev lacks *$f"
done
depends=$(dpkg-deb -f "${debs[0]}" Depends)
for d in libc6 libstdc++6 libopenblas0; do  # the trainers link OpenBLAS (dpkg-shlibdeps)
  [[ $depends == *"$d"* ]] || fail "cohort does not depend on $d: $depends"
done
[[ $(dpkg-deb -f "${debs[1]}" Package) == "libcohort$soversion" ]] || fail "the library's package name"
shlibs=$(dpkg-deb --ctrl-tarfile "${debs[1]}" | tar -xOf - ./shlibs)
[[ $shlibs == "libcohort $soversion libcohort$soversion (>= $version)" ]] ||
  fail "libcohort$soversion's shlibs file holds '$shlibs'"

# ---- lintian (in the background, while the root is used) ------------------------------------------
# Errors and warnings fail; informational tags and overridden ones (the packages' own overrides in
# /usr/share/lintian/overrides, each with its reason) do not.
lintian --fail-on error,warning "${debs[@]}" >"$work/lintian.log" 2>&1 &
lintian_pid=$!
trap '[[ -n $lintian_pid ]] && kill "$lintian_pid" 2>/dev/null; true' EXIT
lintian_verdict() {
  local rc=0
  wait "$lintian_pid" || rc=$?
  lintian_pid=""
  if ((rc)); then
    cat "$work/lintian.log" >&2
    fail "lintian found errors or warnings (above)"
  fi
  say "lintian: no errors or warnings"
}

# ---- a bare Debian 12 root -----------------------------------------------------------------------
root=$("$src/scripts/debian_root.sh") || {
  rc=$?
  lintian_verdict
  [[ $rc == 77 ]] && skip "no Debian root (above)"
  fail "cannot make the Debian root (exit $rc)"
}
cache=$(dirname "$root")/apt
mkdir -p "$cache/lists/partial" "$cache/archives/partial"
mkdir -p "$work/debs"
cp "${debs[@]}" "$work/debs/"
cp "$src/tests/install/consumer/main.cc" "$src/tests/install/consumer/CMakeLists.txt" "$work/debs/"
cp "$src/tests/install/deb_inside.sh" "$work/debs/"
say "root: $root"

# In a mount namespace of our own: the root read-only under an overlay whose upper layer is a
# tmpfs, apt's cache from $cache. The install may use the network (only apt does, and only when
# the cache lacks something); the checks run in a network namespace of their own.
unshare --mount --propagation private -- bash -euc '
  root=$1 work=$2 cache=$3
  m=$work/merged
  mkdir -p "$work/layers" "$m"
  mount -t tmpfs -o size=4g tmpfs "$work/layers"
  mkdir -p "$work/layers/upper" "$work/layers/work"
  mount -t overlay overlay -o "lowerdir=$root,upperdir=$work/layers/upper,workdir=$work/layers/work" "$m"
  mount -t proc proc "$m/proc"
  mount --rbind /dev "$m/dev"
  mount -t tmpfs tmpfs "$m/tmp"
  mount --bind "$cache/lists" "$m/var/lib/apt/lists"
  mount --bind "$cache/archives" "$m/var/cache/apt/archives"
  mkdir -p "$m/debs"
  mount --bind "$work/debs" "$m/debs"
  cp /etc/resolv.conf "$m/etc/resolv.conf" 2>/dev/null || true
  in_root() { chroot "$m" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root \
                DEBIAN_FRONTEND=noninteractive LC_ALL=C.UTF-8 "$@"; }
  debs=()
  for f in "$m"/debs/*.deb; do debs+=("/debs/${f##*/}"); done
  # dpkg unpacks the packages and stops at their missing dependencies; apt then installs exactly
  # those (and pkgconf: the test builds with pkg-config, which no -dev package depends on). apt
  # takes local .deb files only when it may download (2.6 with --no-download: "Pathname to
  # install is not absolute"), hence dpkg first.
  install_all() {  # install_all [--no-download]
    in_root apt-get install -y -q --no-install-recommends "$@" pkgconf &&
      { in_root dpkg -i "${debs[@]}" || true; } &&
      in_root apt-get install -f -y -q --no-install-recommends "$@"
  }
  # From the cache alone when it has everything; else fetch the lists and what is missing. One
  # test at a time uses the cache (apt would refuse a second one its lock instead of waiting).
  exec 8>>"$cache/test.lock"
  flock 8
  if ! install_all --no-download >"$work/apt.log" 2>&1; then
    in_root apt-get update -q >>"$work/apt.log" 2>&1 || { tail -20 "$work/apt.log" >&2; exit 3; }
    install_all >>"$work/apt.log" 2>&1 || { tail -30 "$work/apt.log" >&2; exit 3; }
  fi
  flock -u 8
  for p in cohort libcohort-dev; do
    in_root dpkg-query -W -f "\${Status}" "$p" | grep -qx "install ok installed" ||
      { echo "$p is not installed: $(tail -30 "$work/apt.log")" >&2; exit 3; }
  done
  # The checks, without network: a loopback of their own for the jobs.
  unshare --net -- bash -euc "
    ip link set lo up 2>/dev/null || true
    exec chroot \"\$1\" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root \
      LC_ALL=C.UTF-8 /bin/bash /debs/deb_inside.sh" _ "$m"
' _ "$root" "$work" "$cache" || {
  rc=$?
  lintian_verdict
  [[ $rc == 3 ]] && fail "apt could not install the packages into the root (above; $work/apt.log)"
  fail "the checks in the root failed (exit $rc)"
}
lintian_verdict
say "all passed"
