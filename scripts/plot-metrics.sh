#!/usr/bin/env bash
# Plots the learning curves of a metrics CSV (examples/common/metrics.hpp: a header
# epoch,train_loss,train_accuracy,test_accuracy,seconds and one row per epoch) as a PNG with two
# panels: the training loss, and the training and test accuracies, against the epoch.
#
#   bash scripts/plot-metrics.sh metrics.csv curves.png
#
# Needs gnuplot (Debian's gnuplot-nox; scripts/install-deps.sh installs it).
set -euo pipefail

die() { echo "plot-metrics: $*" >&2; exit 1; }

[ $# -eq 2 ] || die "usage: bash scripts/plot-metrics.sh METRICS.csv OUT.png"
csv=$1
png=$2
header="epoch,train_loss,train_accuracy,test_accuracy,seconds"

[ -e "$csv" ] || die "$csv does not exist"
[ -f "$csv" ] && [ -r "$csv" ] || die "$csv is not a readable file"
[ -s "$csv" ] || die "$csv is empty"
[ "$(head -n 1 "$csv" | tr -d '\r')" = "$header" ] ||
  die "$csv does not start with the header '$header'"
rows=$(tail -n +2 "$csv" | grep -c . || true)
[ "$rows" -ge 1 ] || die "$csv has a header but no epochs yet"
command -v gnuplot >/dev/null ||
  die "gnuplot is not installed (apt-get install gnuplot-nox, or bash scripts/install-deps.sh)"

# gnuplot takes the file names as strings: quote them for its syntax.
quote() { printf "'%s'" "${1//\'/\'\'}"; }

gnuplot <<EOF
set terminal pngcairo size 900,900 enhanced font "sans,11"
set output $(quote "$png")
set datafile separator comma
set key autotitle columnheader
set grid
set xlabel "epoch"
$([ "$rows" -le 20 ] && echo "set xtics 1")
set multiplot layout 2,1 title $(quote "learning curves: $(basename "$csv")") noenhanced
set ylabel "training loss"
set key top right
plot $(quote "$csv") using 1:2 with linespoints lw 2 pt 7 title "train loss"
set ylabel "accuracy"
set yrange [*:1]
set key bottom right
plot $(quote "$csv") using 1:3 with linespoints lw 2 pt 7 title "train accuracy", \
     '' using 1:4 with linespoints lw 2 pt 5 title "test accuracy"
unset multiplot
EOF

[ -s "$png" ] || die "gnuplot wrote no image to $png"
echo "plot-metrics: wrote $png ($rows epoch$([ "$rows" -eq 1 ] || echo s))"
