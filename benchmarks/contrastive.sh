#!/usr/bin/env bash
# Runs bench_contrastive one configuration per process (so that each peak-memory figure is that
# configuration's alone) and prints one CSV: the raw baseline row of each (B, D), then every loss x
# strategy.
#
#   bash benchmarks/contrastive.sh BUILD_DIR RANKS "B1 B2 ..." "D1 D2 ..." "LOSSES" "STRATEGIES" [REPS]
#
# e.g. bash benchmarks/contrastive.sh build 2 "256 1024 4096" "128" "ntxent clip siglip" \
#        "allgather-nograd gather allgather ring"
set -euo pipefail
[ $# -ge 6 ] || { echo "usage: $0 BUILD RANKS BATCHES DIMS LOSSES STRATEGIES [REPS]" >&2; exit 1; }
bench="$1/benchmarks/bench_contrastive"
ranks=$2
reps=${7:-3}
header=""
for d in $4; do
  for b in $3; do
    mpiexec.mpich -n "$ranks" "$bench" --csv $header --batch "$b" --dim "$d" --strategy ring \
      --loss clip --reps "$reps" --max-gib -1 | grep -v ",skipped,"
    header="--no-header"
    for l in $5; do
      for s in $6; do
        mpiexec.mpich -n "$ranks" "$bench" --csv --no-header --no-raw --batch "$b" --dim "$d" \
          --loss "$l" --strategy "$s" --reps "$reps" --max-gib "${MAX_GIB:-6}"
      done
    done
  done
done
