#!/usr/bin/env bash
# Installs every Debian package cohort, its tests and its benchmarks need. Idempotent: when all
# packages are present it changes nothing and returns at once.
#   scripts/setup.sh           install what is missing (runs apt-get update once first)
#   scripts/setup.sh --check   exit 0 if nothing is missing, 1 otherwise; installs nothing
set -euo pipefail

PACKAGES=(
  # build
  g++ cmake ninja-build pkg-config git
  libasio-dev libspdlog-dev nlohmann-json3-dev libcli11-dev libgtest-dev libgmock-dev
  libopenblas-dev zlib1g-dev libssl-dev libcurl4-openssl-dev
  # data for the bundled trainers
  dataset-fashion-mnist fortunes
  # interop tests and benchmark baselines: real PyTorch 1.13 (/usr/bin/python3)
  python3 python3-torch
  # multi-node, Slurm and etcd tests, fault injection
  iproute2 nftables procps psmisc curl
  slurm-wlm slurmctld slurmd slurm-client munge
  etcd-server etcd-client
  # fuzzing and sanitizers
  clang libclang-rt-14-dev
  # scripts/plot_metrics
  gnuplot-nox
)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
    missing+=("$p")
  fi
done

if [ "${1:-}" = "--check" ]; then
  if [ ${#missing[@]} -eq 0 ]; then exit 0; fi
  echo "setup: missing packages: ${missing[*]}" >&2
  exit 1
fi
if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#PACKAGES[@]} packages present"
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
echo "setup: done"
