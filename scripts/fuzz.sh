#!/usr/bin/env bash
# Fuzzes the readers of the files a user hands distop (safetensors, IDX, CIFAR-10, checkpoints) with
# libFuzzer under AddressSanitizer and UBSan: builds the library and the fuzz targets with Clang in
# ${DISTOP_BUILD_DIR:-build-fuzz} (or reuses a tree already built with DISTOP_ENABLE_FUZZERS, such
# as scripts/sanitize.sh's) and runs each target for DISTOP_FUZZ_SECONDS (default 60) from
# seeds written by distop's own writers. Inputs that reach new code are kept in
# <build>/tests/fuzz/corpus/ for the next run; an input that crashes is written to
# <build>/tests/fuzz/<reader>-crash-* and fails the run. Installs Clang and its runtime first.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
build=${DISTOP_BUILD_DIR:-build-fuzz}
seconds=${DISTOP_FUZZ_SECONDS:-60}
if grep -qs '^DISTOP_ENABLE_FUZZERS:BOOL=ON' "$build/CMakeCache.txt"; then
  # A tree built for the fuzzers already (scripts/sanitize.sh's): only the run time changes.
  cmake -S . -B "$build" "-DDISTOP_FUZZ_SECONDS=$seconds" >/dev/null
  cmake --build "$build" -j"$(nproc)"
else
  bash scripts/install-deps.sh clang libclang-rt-14-dev
  # Line tables only for debug information: crash reports keep their files and lines.
  DISTOP_BUILD_DIR=$build bash scripts/build.sh -DCMAKE_BUILD_TYPE=Debug \
    -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_CXX_FLAGS=-O1 -DCMAKE_CXX_FLAGS_DEBUG=-gline-tables-only \
    -DDISTOP_ENABLE_WERROR=ON -DDISTOP_ENABLE_TESTS=OFF -DDISTOP_ENABLE_EXAMPLES=OFF \
    -DDISTOP_ENABLE_BENCHMARKS=OFF -DDISTOP_ENABLE_FUZZERS=ON "-DDISTOP_FUZZ_SECONDS=$seconds" "$@"
fi
ctest --test-dir "$build" -L fuzz -j"$(nproc)" --output-on-failure
