#!/usr/bin/env bash
# Installs what is missing, builds, and runs the whole test suite (serial and MPI tests at 1-4
# ranks). Tests needing more than 4 ranks carry the label many-ranks and run with --all.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
build=${DISTOP_BUILD_DIR:-build}
exclude=(-LE many-ranks)
if [ "${1:-}" = --all ]; then exclude=(); shift; fi
bash scripts/build.sh -DDISTOP_ENABLE_WERROR=ON "$@"
ctest --test-dir "$build" -j"$(nproc)" --output-on-failure --timeout 600 "${exclude[@]}"
