#!/usr/bin/env bash
# Fails when a header or source of a distop layer includes a header of a layer above it.
# Layers, lowest first (docs/architecture.md); the folders on one line are one layer and may
# include each other:
#   core; kernels; comm; dist; ops; autodiff; nn loss optim parallel; data io; testing; train
# Reads the #include lines of include/distop/<layer>/ and src/<layer>/ (no build):
# "distop/<layer>/..." (or <distop/...>) by its layer, and a relative "file" ("spaces.hpp",
# "../comm/foo.hpp") by the folder of the file it names beside the including one; one that names
# no file there fails.
# Usage: check-layering.sh [repository root]
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
    target="${rest#*include}"
    target="${target#*[\"<]}"
    target="${target%%[\">]*}"
    case "$target" in
      distop/*/*) named="$target" target_layer="${target#distop/}" ;;
      distop/*) continue ;;  # distop/distop.hpp is the umbrella
      *)
        [[ "$rest" =~ \" ]] || continue  # <system header>
        # A relative include: the layer of the folder the named file is in.
        named=$(realpath -m --relative-to=. "$(dirname "$file")/$target")
        if [ ! -f "$named" ]; then
          echo "$file:$line: includes \"$target\", which names no file beside it" >&2
          status=1
          continue
        fi
        case "$named" in
          src/*/*) target_layer="${named#src/}" ;;
          include/distop/*/*) target_layer="${named#include/distop/}" ;;
          *) continue ;;  # not a layer's file
        esac
        ;;
    esac
    target_layer="${target_layer%%/*}"
    checked=$((checked + 1))
    to=$(level "$target_layer")
    if [ "$to" -lt 0 ] || [ "$to" -gt "$from" ]; then
      echo "$file:$line: $layer includes $named, a layer above it" >&2
      status=1
    fi
  done < <(grep -rnE '^[[:space:]]*#[[:space:]]*include[[:space:]]*["<]' "$dir" || true)
done
if [ "$checked" -eq 0 ]; then
  echo "check-layering: no includes found under $(pwd); wrong root?" >&2
  exit 1
fi
if [ "$status" -eq 0 ]; then echo "check-layering: $checked includes point down or sideways"; fi
exit "$status"
