#!/usr/bin/env bash
# A bare Debian 12 root (debootstrap --variant=minbase, plus a compiler, CMake, ninja, Python and
# ccache: what a CUDA image or a build host has, and none of cohort's -dev packages), made once and
# cached; prints its path. Shared by scripts/gpu_bare_root.sh (the GPU machine without its GPU)
# and tests/install/deb_test.sh (the Debian packages installed into it), which never write into
# it: they mount it read-only or under an overlay.
#
#   scripts/debian_root.sh      prints the root's path, making it first when it is not cached
#
# Exit status: 0 with the path on stdout; 77 when this machine cannot make it (not root, no
# debootstrap), which ctest counts as skipped; 1 when debootstrap failed. Needs the network only
# the first time (COHORT_DEBIAN_MIRROR, default http://deb.debian.org/debian).
# Cached as ~/.cache/cohort/bare-root/root-bookworm-<hash of the package list>/. The lock is
# that folder's `lock`, the one scripts/gpu_bare_root.sh holds for its whole run (it calls this
# first), so that concurrent callers, from any checkout, wait for one debootstrap instead of
# removing each other's half-made root.
set -euo pipefail
CACHE=${XDG_CACHE_HOME:-$HOME/.cache}/cohort/bare-root
MIRROR=${COHORT_DEBIAN_MIRROR:-http://deb.debian.org/debian}
SUITE=bookworm
ROOT_PACKAGES=(g++ make cmake ninja-build python3 ccache)

skip() {
  echo "debian_root: skipped: $*" >&2
  exit 77
}
[ "$(id -u)" = 0 ] || skip "needs root (debootstrap, chroot)"
command -v debootstrap >/dev/null || skip "no debootstrap (scripts/setup.sh installs it)"

mkdir -p "$CACHE"
exec 9>>"$CACHE/lock"
flock 9

key=$(echo "$SUITE ${ROOT_PACKAGES[*]}" | sha256sum | cut -c1-12)
ROOT=$CACHE/root-$SUITE-$key
if [ ! -f "$ROOT/.cohort-root-complete" ]; then
  echo "debian_root: making the root in $ROOT (debootstrap, a few minutes)" >&2
  # An interrupted debootstrap leaves its /proc mounted in the half-made root: unmount it, and
  # never remove across a file system boundary.
  awk -v p="$ROOT.tmp/" 'index($2, p) == 1 { print $2 }' /proc/mounts | sort -r |
    while read -r m; do umount -l "$m"; done
  rm -rf --one-file-system "$ROOT.tmp" "$ROOT"
  debootstrap --variant=minbase --include="$(IFS=,; echo "${ROOT_PACKAGES[*]}")" "$SUITE" \
    "$ROOT.tmp" "$MIRROR" >"$CACHE/debootstrap.log" 2>&1 || {
    echo "debian_root: debootstrap failed (see $CACHE/debootstrap.log)" >&2
    exit 1
  }
  chroot "$ROOT.tmp" apt-get clean
  touch "$ROOT.tmp/.cohort-root-complete"
  mv "$ROOT.tmp" "$ROOT"
fi
echo "$ROOT"
