#!/usr/bin/env bash
# Installs what is missing, builds, and trains the model-parallel MLP on Fashion-MNIST over 4 MPI
# ranks. Extra arguments go to the example (see --help); DISTOP_RANKS changes the rank count.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
build=${DISTOP_BUILD_DIR:-build}
bash scripts/build.sh >/dev/null
launcher=$(command -v mpiexec.mpich || command -v mpiexec)
exec "$launcher" -n "${DISTOP_RANKS:-4}" "$build/examples/mlp/mlp" "$@"
