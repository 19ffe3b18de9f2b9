#!/usr/bin/env bash
# Builds distop with Clang, AddressSanitizer and UndefinedBehaviorSanitizer (-O1, line tables;
# the test programs' own code at -O0) in ${DISTOP_BUILD_DIR:-build-sanitize} and runs the test
# suite under them: any out-of-bounds access, use after free, misaligned or invalid allocation, or
# undefined arithmetic fails its test.
# The tree is also the fuzzers' (DISTOP_ENABLE_FUZZERS: everything instrumented for libFuzzer as
# well), so that `DISTOP_BUILD_DIR=build-sanitize scripts/fuzz.sh` fuzzes without a second build.
# Leak reports are off (MPICH's and hwloc's plugins keep allocations to exit). Not run: the install
# test (its consumer is built without the sanitizers), the fuzz tests (scripts/fuzz.sh) and, unless
# --all, the many-ranks tests, the 3- and 4-rank runs of the MPI tests (their 1- and 2-rank runs
# remain, every message path between two ranks among them), the blocking-mode repeats
# (`*.blocking`) and the comparisons of the examples' losses across rank counts (*_agreement_test,
# which need the 4-rank runs; the runs at 1 and 2 ranks still run under the sanitizers). It is configured with DISTOP_LONG_EXAMPLE_TESTS=OFF: the longest example tests
# (cnn_test, simclr_test, optimizers_test and mlp_errors_test: 90, 70, 40 and 26 s under the
# sanitizers; ResNet-18's and the U-Net's) and the programs only they run (cnn, simclr, resnet,
# unet3d) are neither built nor run. Their layers, losses, optimizers, checkpoints and the
# training driver they share run under the sanitizers in cnn_model_test, the layers', contrastive,
# optimizer and checkpoint tests and the LeNet-5 and MLP example tests. The Release stage builds
# and runs everything at every rank count.
# Installs Clang and its runtime first.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
build=${DISTOP_BUILD_DIR:-build-sanitize}
exclude=(-LE 'many-ranks|install|fuzz' -E '[.]np[34]([.a-z0-9]*|$)|[.]blocking$|_agreement_test[.]')
long=OFF
if [ "${1:-}" = --all ]; then exclude=(-LE 'install|fuzz'); long=ON; shift; fi
bash scripts/install-deps.sh clang libclang-rt-14-dev
# Set before the build too: it runs the test programs to list their tests.
export ASAN_OPTIONS=detect_leaks=0${ASAN_OPTIONS:+:$ASAN_OPTIONS}
export UBSAN_OPTIONS=print_stacktrace=1${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}
DISTOP_BUILD_DIR=$build bash scripts/build.sh -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_COMPILER=clang++ \
  -DCMAKE_CXX_FLAGS=-O1 -DCMAKE_CXX_FLAGS_DEBUG=-gline-tables-only -DDISTOP_ENABLE_WERROR=ON \
  -DDISTOP_ENABLE_BENCHMARKS=OFF -DDISTOP_ENABLE_FUZZERS=ON \
  -DDISTOP_TEST_PROGRAM_FLAGS=-O0 -DDISTOP_LONG_EXAMPLE_TESTS=$long "$@"
ctest --test-dir "$build" -j"$(nproc)" --output-on-failure --timeout 900 "${exclude[@]}"
