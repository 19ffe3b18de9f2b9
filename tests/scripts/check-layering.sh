#!/usr/bin/env bash
# Fails when a header or source of a distop layer includes a header of a layer above it.
# Layers, lowest first (docs/architecture.md); the folders on one line are one layer and may
# include each other:
#   core; kernels; comm; dist; ops; autodiff; nn loss optim parallel; data io; testing; train
# Reads the #include "distop/<layer>/..." (or <distop/...>) lines of include/distop/<layer>/ and
# src/<layer>/ (no build). Usage: check-layering.sh [repository root]
set -euo pipefail
root="${1:-$(dirname "$0")/../..}"
cd "$root"

level() {
  case "$1" in
    core) echo 0 ;;
    kernels) echo 1 ;;
    comm) echo 2 ;;
    dist) echo 3 ;;
    ops) echo 4 ;;
    autodiff) echo 5 ;;
    nn | loss | optim | parallel) echo 6 ;;
    data | io) echo 7 ;;
    testing) echo 8 ;;
    train) echo 9 ;;
    *) echo -1 ;;
  esac
}

status=0
checked=0
for dir in include/distop/* src/*; do
  [ -d "$dir" ] || continue
  layer="${dir##*/}"
  from=$(level "$layer")
  if [ "$from" -lt 0 ]; then
    echo "check-layering: $dir is no known layer; add it to tests/scripts/check-layering.sh" >&2
    status=1
    continue
  fi
  while IFS= read -r hit; do
    [ -n "$hit" ] || continue
    file="${hit%%:*}"
    rest="${hit#*:}"
    line="${rest%%:*}"
    target="${rest#*:}"
    target="${target#*distop/}"
    target="${target%%[\">]*}"
    target_layer="${target%%/*}"
    [ "$target_layer" = "$target" ] && continue  # distop/distop.hpp is the umbrella
    checked=$((checked + 1))
    to=$(level "$target_layer")
    if [ "$to" -lt 0 ] || [ "$to" -gt "$from" ]; then
      echo "$file:$line: $layer includes distop/$target, a layer above it" >&2
      status=1
    fi
  done < <(grep -rnE '^[[:space:]]*#[[:space:]]*include[[:space:]]*["<]distop/' "$dir" || true)
done
if [ "$checked" -eq 0 ]; then
  echo "check-layering: no includes found under $(pwd); wrong root?" >&2
  exit 1
fi
if [ "$status" -eq 0 ]; then echo "check-layering: $checked includes point down or sideways"; fi
exit "$status"
