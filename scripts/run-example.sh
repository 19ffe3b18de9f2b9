#!/usr/bin/env bash
# Installs what is missing, builds, and trains LeNet-5 on Fashion-MNIST over 4 MPI ranks, its
# convolutions spatially partitioned 2 x 2. Extra arguments go to the example (see --help);
# DISTOP_RANKS changes the rank count (1, 2, 4 or 8), DISTOP_EXAMPLE=mlp runs the model-parallel
# MLP instead, DISTOP_EXAMPLE=cnn the data-parallel CNN (one replica per rank; 2 ranks by
# default), DISTOP_EXAMPLE=resnet the spatially partitioned ResNet-18 and DISTOP_EXAMPLE=unet3d the
# 3-D U-Net (4 ranks by default), DISTOP_EXAMPLE=vit the Vision Transformer (4 ranks by default,
# run as --tensor-parallel 2 --replicas 2 unless the arguments name --tensor-parallel,
# --sequence-parallel or --replicas). Relative paths in the arguments (--checkpoint-dir, --data, --save, ...) are taken from
# the directory the script is run in.
set -euo pipefail
caller=$PWD
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
source scripts/env.sh
build=${DISTOP_BUILD_DIR:-build}
[[ "$build" = /* ]] || build="$root/$build"
example=${DISTOP_EXAMPLE:-lenet5}
case "$example" in
  lenet5|mlp|resnet|unet3d|vit) ranks=${DISTOP_RANKS:-4} ;;
  cnn) ranks=${DISTOP_RANKS:-2} ;;
  *) echo "run-example.sh: DISTOP_EXAMPLE must be lenet5, mlp, cnn, resnet, unet3d or vit, not '$example'" >&2; exit 2 ;;
esac
bash scripts/build.sh >/dev/null
cd "$caller"
launcher=$(command -v mpiexec.mpich || command -v mpiexec)
if [[ "$example" = vit && ! " $* " =~ \ --(tensor-parallel|sequence-parallel|replicas)[\ =] ]]; then
  # T x S x R must equal the ranks: tensor parallelism in pairs, the pairs data parallel.
  if (( ranks % 2 == 0 )); then
    set -- --tensor-parallel 2 --replicas $((ranks / 2)) "$@"
  else
    set -- --replicas "$ranks" "$@"
  fi
fi
exec "$launcher" -n "$ranks" "$build/examples/$example/$example" "$@"
