#!/usr/bin/env bash
# Plots bench_contrastive's CSV (benchmarks/contrastive.sh) of one loss at one B over several D:
# the forward + backward time of each strategy against D, and the gather strategy's time over the
# all-gather strategy's, as a PNG with two panels.
#
#   bash scripts/plot-contrastive.sh results.csv LOSS B out.png
#
# Needs gnuplot (Debian's gnuplot-nox).
set -euo pipefail

die() { echo "plot-contrastive: $*" >&2; exit 1; }

[ $# -eq 4 ] || die "usage: bash scripts/plot-contrastive.sh RESULTS.csv LOSS B OUT.png"
csv=$1
loss=$2
batch=$3
png=$4
[ -f "$csv" ] && [ -r "$csv" ] || die "$csv is not a readable file"
[ "$(head -n 1 "$csv" | tr -d '\r')" = "P,B,D,loss,strategy,ms,peak_mib_max_rank,peak_mib_min_rank" ] ||
  die "$csv does not start with bench_contrastive's CSV header"
command -v gnuplot >/dev/null || die "gnuplot is not installed (apt-get install gnuplot-nox)"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# One file per strategy (D, ms), and the ratio gather / allgather per D.
for s in allgather-nograd gather allgather ring; do
  awk -F, -v l="$loss" -v b="$batch" -v s="$s" '$4 == l && $2 == b && $5 == s && $6 != "skipped" \
    { print $3, $6 }' "$csv" | sort -n > "$tmp/$s.dat"
done
join "$tmp/gather.dat" "$tmp/allgather.dat" | awk '{ print $1, $2 / $3 }' > "$tmp/ratio.dat"
[ -s "$tmp/ratio.dat" ] || die "no $loss rows at B = $batch with both gather and allgather in $csv"
procs=$(awk -F, -v l="$loss" -v b="$batch" '$4 == l && $2 == b { print $1; exit }' "$csv")

quote() { printf "'%s'" "${1//\'/\'\'}"; }
plots=""
for s in allgather-nograd gather allgather ring; do
  [ -s "$tmp/$s.dat" ] || continue
  plots+="${plots:+, }$(quote "$tmp/$s.dat") using 1:2 with linespoints lw 2 pt 7 title '$s'"
done

gnuplot <<EOF2
set terminal pngcairo size 900,900 enhanced font "sans,11"
set output $(quote "$png")
set grid
set logscale x 2
set xlabel "embedding dimension D"
set multiplot layout 2,1 title $(quote "$loss loss, B = $batch, P = $procs: forward + backward") noenhanced
set ylabel "time (ms)"
set logscale y
set key top left
plot $plots
unset logscale y
set ylabel "gather time / all-gather time"
set key top left
plot $(quote "$tmp/ratio.dat") using 1:2 with linespoints lw 2 pt 7 title "gather / allgather", \
     1 with lines dt 2 lc rgb "gray" notitle
unset multiplot
EOF2
echo "wrote $png"
