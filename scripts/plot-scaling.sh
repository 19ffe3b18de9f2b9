#!/usr/bin/env bash
# Plots the tables that scripts/simulate.sh prints (one or more runs, concatenated into one file):
# top, the weak-scaling efficiency of the training steps (lenet5, data_parallel) against the rank
# count, simulated (solid) beside the cost model's projection (dashed); bottom, the primitives'
# simulated times (solid) and predicted times (dashed). Writes a PNG.
#
#   bash scripts/plot-scaling.sh TABLE.txt OUT.png [TITLE]
#
# Needs gnuplot (Debian's gnuplot-nox).
set -euo pipefail
die() { echo "plot-scaling: $*" >&2; exit 1; }
[ $# -ge 2 ] || die "usage: bash scripts/plot-scaling.sh TABLE.txt OUT.png [TITLE]"
table=$1
png=$2
title=${3:-weak scaling, simulated (SimGrid SMPI) and cost model}
[ -r "$table" ] || die "$table is not a readable file"
grep -q '^program *case *ranks *step_ms' "$table" || die "$table holds no simulate.sh table"
command -v gnuplot >/dev/null || die "gnuplot is not installed (apt-get install gnuplot-nox)"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# program case ranks step_ms eff model_ms m_eff wall_s; one file per program/case.
awk -v dir="$tmp" '$1 ~ /^(primitives|lenet5|data_parallel)$/ && $3 ~ /^[0-9]+$/ {
    f = dir "/" $1 "-" $2 ".dat"; print $3, $4, $5, $6, $7 >> f; files[f] = 1 }
  END { for (f in files) system("sort -n -o \"" f "\" \"" f "\"") }' "$table"

quote() { printf "'%s'" "${1//\'/\'\'}"; }
top=""
for c in data_parallel-step data_parallel-step-256KiB lenet5-step; do
  f=$tmp/$c.dat
  [ -s "$f" ] || continue
  name=${c/-step/}
  top+="${top:+, }$(quote "$f") using 1:3 with linespoints lw 2 pt 7 title '$name, simulated'"
  if awk '$5 != "-" { found = 1 } END { exit !found }' "$f"; then
    top+=", $(quote "$f") using 1:5 with linespoints dt 2 lw 2 pt 6 \
title '$name, cost model'"
  fi
done
f=$tmp/data_parallel-model-no-overlap.dat
if [ -s "$f" ]; then
  top+="${top:+, }$(quote "$f") using 1:5 with linespoints dt 3 lw 2 pt 4 \
title 'data_parallel, cost model, no overlap'"
fi
bottom=""
for c in AllSumReduce Broadcast Broadcast.adjoint HaloExchange; do
  f=$tmp/primitives-$c.dat
  [ -s "$f" ] || continue
  bottom+="${bottom:+, }$(quote "$f") using 1:2 with linespoints lw 2 pt 7 title '$c, simulated'"
  bottom+=", $(quote "$f") using 1:4 with linespoints dt 2 lw 2 pt 6 title '$c, cost model'"
done
[ -n "$top$bottom" ] || die "no rows of lenet5, data_parallel or primitives in $table"

{
  echo "set terminal pngcairo size 900,$([ -n "$top" ] && [ -n "$bottom" ] && echo 1000 || echo 520) enhanced font 'sans,11'"
  echo "set output $(quote "$png")"
  echo "set grid; set logscale x 2; set xlabel 'ranks'"
  [ -n "$top" ] && [ -n "$bottom" ] && echo "set multiplot layout 2,1 title $(quote "$title") noenhanced"
  if [ -n "$top" ]; then
    [ -n "$bottom" ] || echo "set title $(quote "$title") noenhanced"
    echo "set ylabel 'weak-scaling efficiency'; set yrange [0:1.1]; set key bottom left noenhanced"
    echo "plot $top, 0.9 with lines lc rgb 'black' dt 4 lw 1.5 title 'target 0.9'"
  fi
  if [ -n "$bottom" ]; then
    echo "set title 'primitives, fixed bytes per rank' noenhanced"
    echo "set ylabel 'time (ms)'; set autoscale y; set logscale y; set key top left noenhanced"
    echo "plot $bottom"
  fi
  [ -n "$top" ] && [ -n "$bottom" ] && echo "unset multiplot"
} | gnuplot
echo "plot-scaling: wrote $png"
