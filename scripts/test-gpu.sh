#!/usr/bin/env bash
# Runs the tests labelled gpu (the kernels, layers and optimizers, the operators' adjoint tests,
# the distributed layers' equivalence tests and the example programs, at 1-4 ranks) in a CUDA
# build of distop, one test at a time, so that at most 4 ranks share the one GPU. docs/gpu.md says
# how to build that: a CUDA Kokkos outside the repository, then distop against it.
#   scripts/test-gpu.sh [build directory, default build-cuda] [more ctest arguments]
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
build=${1:-build-cuda}
[ $# -gt 0 ] && shift
cache="$build/CMakeCache.txt"
if [ ! -f "$cache" ]; then
  echo "test-gpu.sh: no CMake build in $build (docs/gpu.md builds one)" >&2
  exit 2
fi
if ! grep -q '^DISTOP_ENABLE_CUDA:BOOL=ON' "$cache"; then
  echo "test-gpu.sh: $build is not a CUDA build (DISTOP_ENABLE_CUDA is not ON); the gpu label" \
    "would run on the host" >&2
  exit 2
fi
if command -v nvidia-smi >/dev/null; then nvidia-smi -L; fi
ctest --test-dir "$build" -L gpu -LE many-ranks -j1 --output-on-failure --timeout 900 "$@"
