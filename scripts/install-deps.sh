#!/usr/bin/env bash
# Installs what distop needs from Debian bookworm's packages, skipping what is already there.
# Arguments name further packages to install alike. Run as root (or with sudo available). Set
# DISTOP_SKIP_APT=1 to skip the check entirely.
set -euo pipefail

packages=(
  build-essential cmake pkg-config
  mpich libmpich-dev                 # MPI: MPICH only (the build prefers the .mpich wrappers)
  libtrilinos-kokkos-dev             # Kokkos 3.4, Serial backend
  libopenblas-dev                    # cblas
  zlib1g-dev                         # gzip-compressed IDX data files
  libgtest-dev libgmock-dev          # tests
  libcli11-dev nlohmann-json3-dev    # example flags; safetensors headers
  dataset-fashion-mnist              # the examples' data set
  gnuplot-nox                        # learning-curve plots
)
packages+=("$@")                     # what a script needs beyond these (scripts/fuzz.sh: Clang)

[ "${DISTOP_SKIP_APT:-0}" = 1 ] && exit 0
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "distop: installing ${missing[*]}" >&2
sudo=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "distop: need root or sudo to install ${missing[*]}" >&2; exit 1; }
  sudo=sudo
fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
