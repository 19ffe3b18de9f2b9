#!/usr/bin/env bash
# Builds distop with AddressSanitizer and UndefinedBehaviorSanitizer (-O1, line tables) in
# ${DISTOP_BUILD_DIR:-build-sanitize} and runs the test suite under them: any out-of-bounds access,
# use after free, misaligned or invalid allocation, or undefined arithmetic fails its test.
# Leak reports are off (MPICH's and hwloc's plugins keep allocations to exit). Not run: the install
# test (its consumer is built without the sanitizers) and, unless --all, the many-ranks tests, the
# blocking-mode repeats of the MPI tests (`*.blocking`) and the longest example tests: cnn_test,
# simclr_test, optimizers_test and mlp_errors_test (90, 70, 40 and 26 s under the sanitizers, a
# third of the stage). Their layers, losses, optimizers, checkpoints and the training driver they
# share run under the sanitizers in cnn_model_test, the contrastive, optimizer and checkpoint
# tests and the LeNet-5 and MLP example tests; the Release stage runs them all.
# Debug information is line tables only (-g1): the sanitizers' stack traces keep their files, lines
# and inlined frames, and the build takes about 40 % less time than with full -g.
# About 13 minutes to build and 6 to test on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
build=${DISTOP_BUILD_DIR:-build-sanitize}
exclude=(-LE 'many-ranks|install'
         -E '^(cnn_test|simclr_test|optimizers_test|mlp_errors_test)[.]|[.]blocking$')
if [ "${1:-}" = --all ]; then exclude=(-LE install); shift; fi
# Set before the build too: it runs the test programs to list their tests.
export ASAN_OPTIONS=detect_leaks=0${ASAN_OPTIONS:+:$ASAN_OPTIONS}
export UBSAN_OPTIONS=print_stacktrace=1${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}
flags="-O1 -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=undefined"
DISTOP_BUILD_DIR=$build bash scripts/build.sh -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG=-g1 \
  -DDISTOP_ENABLE_WERROR=ON -DDISTOP_ENABLE_BENCHMARKS=OFF "-DCMAKE_CXX_FLAGS=$flags" \
  "-DCMAKE_EXE_LINKER_FLAGS=-fsanitize=address,undefined" \
  "-DCMAKE_SHARED_LINKER_FLAGS=-fsanitize=address,undefined" "$@"
ctest --test-dir "$build" -j"$(nproc)" --output-on-failure --timeout 900 "${exclude[@]}"
