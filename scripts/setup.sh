#!/usr/bin/env bash
# Installs every Debian package cohort, its tests and its benchmarks need, then PyTorch 2.x from
# the Python package index into a virtual environment of its own (scripts/torch2.sh). Idempotent:
# when everything is present it changes nothing and returns at once.
#   scripts/setup.sh           install what is missing (runs apt-get update once first)
#   scripts/setup.sh --check   exit 0 if nothing is missing, 1 otherwise; installs nothing
#   --no-torch2 (before or after --check) leaves PyTorch 2.x out (the demo does not need it)
#   --build-only (likewise) only what builds cohort and runs the tests that start no process
#                (scripts/test.sh -L unit): compilers, libraries, GoogleTest, ccache
set -euo pipefail

torch2=yes
build_only=no
args=()
for a in "$@"; do
  case "$a" in
    --no-torch2) torch2=no ;;
    --build-only) build_only=yes torch2=no ;;
    *) args+=("$a") ;;
  esac
done
set -- "${args[@]+"${args[@]}"}"

BUILD_PACKAGES=(
  g++ cmake ninja-build pkg-config git
  libasio-dev libspdlog-dev nlohmann-json3-dev libcli11-dev libgtest-dev libgmock-dev
  libopenblas-dev zlib1g-dev libssl-dev libcurl4-openssl-dev
  # the build folder's objects, cached across builds and clones
  ccache
)
PACKAGES=(
  "${BUILD_PACKAGES[@]}"
  # data for the bundled trainers
  dataset-fashion-mnist fortunes
  # interop tests and benchmark baselines: real PyTorch 1.13 (/usr/bin/python3), and a virtual
  # environment for PyTorch 2.x (scripts/torch2.sh)
  python3 python3-torch python3-venv
  # multi-node, Slurm and etcd tests, fault injection
  iproute2 nftables procps psmisc curl
  slurm-wlm slurmctld slurmd slurm-client munge
  etcd-server etcd-client
  # fuzzing and sanitizers
  clang libclang-rt-14-dev
  # scripts/plot_metrics
  gnuplot-nox
  # scripts/gpu_bare_root.sh: the bare GPU machine, simulated in a Debian root
  debootstrap
  # installing (tests/install): man pages (help2man), the unit's check (systemd-analyze); the
  # Debian packages (cmake/package.cmake): CPack's dependency list (dpkg-shlibdeps from dpkg-dev,
  # file) and their check (lintian)
  help2man systemd dpkg-dev file lintian
  # promtool, which checks cohort's Prometheus text (tests/launcher/gpu/gpu_metrics_test.cc)
  prometheus
)

[ $build_only = yes ] && PACKAGES=("${BUILD_PACKAGES[@]}")
missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
    missing+=("$p")
  fi
done

here=$(dirname "$0")
if [ "${1:-}" = "--check" ]; then
  rc=0
  if [ ${#missing[@]} -gt 0 ]; then
    echo "setup: missing packages: ${missing[*]}" >&2
    rc=1
  fi
  if [ $torch2 = yes ] && ! "$here/torch2.sh" --check; then
    echo "setup: PyTorch 2.x is missing ($("$here/torch2.sh" --python))" >&2
    rc=1
  fi
  exit $rc
fi
if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#PACKAGES[@]} packages present"
  if [ $torch2 = yes ]; then "$here/torch2.sh" >/dev/null; fi
  exit 0
fi

SUDO=()
if [ "$(id -u)" != 0 ]; then
  command -v sudo >/dev/null || { echo "setup: run as root or install sudo" >&2; exit 1; }
  SUDO=(sudo)
fi
echo "setup: installing ${missing[*]}"
"${SUDO[@]}" apt-get update -qq
# Daemons (slurm, munge, etcd) are started by the tests themselves, never by the packages.
"${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
if [ $torch2 = yes ]; then "$here/torch2.sh" >/dev/null; fi
echo "setup: done"
