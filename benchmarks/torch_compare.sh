#!/usr/bin/env bash
# distop's training steps beside their PyTorch twins (benchmarks/torch_step.py), in one session:
#   cnn     examples/cnn data parallel, 2 replicas of batch 64 (bench_data_parallel's `overlap`
#           mode, DataParallel's defaults) against PyTorch DDP (gloo) with the same model and batch;
#           target: distop's step at most 0.5 of PyTorch's
#   lenet5  LeNet-5 at a global batch of 64 on 2 ranks (bench_lenet5: distop's model-parallel
#           example) against PyTorch DDP with 32 per replica (no target)
# and the compute-only steps (distop's `compute` mode, DDP under no_sync()).
#
#   bash benchmarks/torch_compare.sh [BUILD_DIR (build)] [ROUNDS (3)] [--csv]
#
# distop and PyTorch take turns, ROUNDS times; each figure is the median over the rounds of each
# run's median step (the slowest rank's or process's). Run in the caller's environment as it is:
# scripts/env.sh is not sourced, so that the figures are what the README's direct commands get.
# PyTorch is looked for in DISTOP_TORCH_PYTHON, python3 and /usr/bin/python3 (Debian's
# python3-torch); without it the twin is skipped, saying so, and distop's figures are printed alone.
set -euo pipefail
cd "$(dirname "$0")/.."
build=build
rounds=3
csv=0
positional=()
for a in "$@"; do
  case $a in
    --csv) csv=1 ;;
    *) positional+=("$a") ;;
  esac
done
[ ${#positional[@]} -ge 1 ] && build=${positional[0]}
[ ${#positional[@]} -ge 2 ] && rounds=${positional[1]}
mpiexec=${MPIEXEC:-mpiexec.mpich}
for b in bench_data_parallel bench_lenet5; do
  if [ ! -x "$build/benchmarks/$b" ]; then
    echo "torch_compare.sh: $build/benchmarks/$b is missing (build it first)" >&2
    exit 1
  fi
done

python=
for p in ${DISTOP_TORCH_PYTHON:-} python3 /usr/bin/python3; do
  if command -v "$p" >/dev/null 2>&1 && "$p" -c "import torch" >/dev/null 2>&1; then
    python=$p
    break
  fi
done
if [ -z "$python" ]; then
  echo "torch_compare.sh: PyTorch is not installed (python3 and /usr/bin/python3 cannot import" \
    "torch; Debian: apt-get install python3-torch); the PyTorch twin is skipped" >&2
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# Column `col` (a header name) of the row whose first field is `row`, from CSV file $1.
field() {
  awk -F, -v row="$2" -v col="$3" 'NR == 1 { for (i = 1; i <= NF; ++i) if ($i == col) c = i }
    NR > 1 && ($1 == row || row == "*") { print $c; exit }' "$1"
}
median() { sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) print "nan";
  else if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

for ((r = 1; r <= rounds; ++r)); do
  "$mpiexec" -n 2 "$build/benchmarks/bench_data_parallel" --batch 64 --steps 20 --csv \
    >"$tmp/dp.csv"
  field "$tmp/dp.csv" overlap step_ms >>"$tmp/distop_cnn"
  field "$tmp/dp.csv" compute step_ms >>"$tmp/distop_cnn_compute"
  "$mpiexec" -n 2 "$build/benchmarks/bench_lenet5" --batch 64 --steps 200 --csv >"$tmp/l5.csv"
  field "$tmp/l5.csv" "*" median_ms >>"$tmp/distop_lenet5"
  if [ -n "$python" ]; then
    "$python" benchmarks/torch_step.py --model cnn --batch 64 --steps 20 --csv >"$tmp/tc.csv"
    awk -F, '$5 == "ddp" { print $6 }' "$tmp/tc.csv" >>"$tmp/torch_cnn"
    awk -F, '$5 == "compute" { print $6 }' "$tmp/tc.csv" >>"$tmp/torch_cnn_compute"
    "$python" benchmarks/torch_step.py --model lenet5 --batch 32 --steps 200 --csv >"$tmp/tl.csv"
    awk -F, '$5 == "ddp" { print $6 }' "$tmp/tl.csv" >>"$tmp/torch_lenet5"
    torch_version=$(awk -F, 'NR == 2 { print $1 }' "$tmp/tc.csv")
  fi
done

m() { if [ -f "$tmp/$1" ]; then median <"$tmp/$1"; else echo nan; fi; }
row() {  # name, distop file, torch file, target
  local d t ratio pass
  d=$(m "$2")
  t=$(m "$3")
  ratio=$(awk -v d="$d" -v t="$t" 'BEGIN { if (t == "nan" || t == 0) print "nan";
    else printf "%.3f", d / t }')
  pass=-
  if [ "$4" != - ] && [ "$ratio" != nan ]; then
    pass=$(awk -v r="$ratio" -v g="$4" 'BEGIN { print (r <= g) ? "yes" : "no" }')
  fi
  if [ $csv = 1 ]; then
    echo "$1,$d,$t,$ratio,$4,$pass"
  else
    printf "%-22s %10s %10s %7s %7s %5s\n" "$1" "$d" "$t" "$ratio" "$4" "$pass"
  fi
}
cpu=$(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo 2>/dev/null || true)
if [ $csv = 1 ]; then
  echo "step,distop_ms,torch_ms,ratio,target,pass"
else
  echo "# distop against ${torch_version:-PyTorch (not installed)} DDP, 2 ranks on $(nproc) cores" \
    "($cpu), median of $rounds rounds; OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-(unset)}"
  printf "%-22s %10s %10s %7s %7s %5s\n" step distop_ms torch_ms ratio target pass
fi
row "cnn (64 per replica)" distop_cnn torch_cnn 0.5
row "cnn compute only" distop_cnn_compute torch_cnn_compute -
row "lenet5 (global 64)" distop_lenet5 torch_lenet5 -
