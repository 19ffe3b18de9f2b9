#!/usr/bin/env bash
# The Python measurements of docs/results.md ("Python: operator overhead and the LeNet-5 step"),
# printed as one Markdown table with the machine, the commit, the load average and the commands.
#
#   bash benchmarks/python/run.sh            (after scripts/python-test.sh and a Release build)
#
# 1. Per operator call on 8 B at ${RANKS_OPS:-2} ranks: distop.torch's module, the bare distop
#    operator from Python and raw mpi4py (op_overhead.py), beside the C++ operator and raw MPI from
#    C++ (bench_collectives, bench_movement at --max-bytes 8).
# 2. One LeNet-5 training step at batch ${BATCH:-64} and ${RANKS_LENET:-1 2} ranks: distop.torch
#    (lenet5_step.py --impl distop), DistDL (--impl distdl, when its venv exists) and the C++
#    example's model (bench_lenet5); and the single-process torch model (--impl torch, 1 rank).
#
# Where things are: the C++ benchmarks in ${DISTOP_BUILD_DIR:-build}; the package's venv (with
# mpi4py) in ${DISTOP_PY_BUILD_DIR:-build-python}/venv; DistDL's in ${DISTDL_VENV:-<that
# folder>/venv-distdl}. DISTDL_SETUP=1 makes that venv first: python3 -m venv
# --system-site-packages, mpi4py's binary wheel (as scripts/python-test.sh), and DistDL from its
# git mirror (${DISTDL_MIRROR:-/work/.mirror/distdl+distdl/repo} at ${DISTDL_COMMIT:-a641638},
# exported outside the repository) with pip --no-deps --no-build-isolation, so that it runs on
# Debian's torch; its C++ interpolation extension needs libtorch-dev and pybind11-dev. None of
# DistDL's code enters the repository.
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/env.sh >/dev/null
build=${DISTOP_BUILD_DIR:-build}
pybuild=$(realpath -m "${DISTOP_PY_BUILD_DIR:-build-python}")
venv=$pybuild/venv
distdl_venv=${DISTDL_VENV:-$pybuild/venv-distdl}
batch=${BATCH:-64}
export LD_LIBRARY_PATH=$venv/lib/mpich${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 PYTHONDONTWRITEBYTECODE=1
for f in "$venv/bin/python" "$build/benchmarks/bench_collectives" "$build/benchmarks/bench_movement" \
         "$build/benchmarks/bench_lenet5"; do
  [ -x "$f" ] || { echo "run.sh: $f is missing (scripts/python-test.sh, scripts/build.sh)" >&2; exit 2; }
done

if [ "${DISTDL_SETUP:-0}" = 1 ]; then
  bash scripts/install-deps.sh libtorch-dev pybind11-dev
  src=$(mktemp -d /tmp/distdl-src.XXXXXX)
  git -C "${DISTDL_MIRROR:-/work/.mirror/distdl+distdl/repo}" archive "${DISTDL_COMMIT:-a641638}" |
    tar -x -C "$src"
  [ -x "$distdl_venv/bin/python" ] || /usr/bin/python3 -m venv --system-site-packages "$distdl_venv"
  "$distdl_venv/bin/python" -m pip install -q --only-binary=mpi4py mpi4py
  mkdir -p "$distdl_venv/lib/mpich"
  ln -sf "$(ldconfig -p | awk '/libmpich\.so\.12 /{p = $NF} END {print p}')" \
    "$distdl_venv/lib/mpich/libmpi.so.12"
  MAX_JOBS=2 "$distdl_venv/bin/python" -m pip install -q --no-deps --no-build-isolation "$src"
  rm -rf "$src"
fi

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
mpi() { timeout 600 mpiexec.mpich -n "$@"; }
cmds=()
run() {  # run NAME CMD...: stdout to $out/NAME, the command kept for the table's footer
  local name=$1; shift
  local c="$*"
  cmds+=("${c/#mpi /mpiexec.mpich -n }")
  "$@" > "$out/$name"
}
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
ro=${RANKS_OPS:-2}
run ops mpi "$ro" "$venv/bin/python" benchmarks/python/op_overhead.py --csv
run coll mpi "$ro" "$build/benchmarks/bench_collectives" --max-bytes 8 --csv
run move mpi "$ro" "$build/benchmarks/bench_movement" --max-bytes 8 --only HaloExchange --csv
have_distdl=0
if [ -x "$distdl_venv/bin/python" ] && "$distdl_venv/bin/python" -c \
    "import importlib.util, sys; sys.exit(importlib.util.find_spec('distdl') is None)"; then
  have_distdl=1
fi
run lenet_torch mpi 1 "$venv/bin/python" benchmarks/python/lenet5_step.py --impl torch --batch "$batch" \
  --csv
for n in ${RANKS_LENET:-1 2}; do
  run "lenet_distop_$n" mpi "$n" "$venv/bin/python" benchmarks/python/lenet5_step.py --impl distop \
    --batch "$batch" --csv
  if [ $have_distdl = 1 ]; then
    LD_LIBRARY_PATH=$distdl_venv/lib/mpich:$LD_LIBRARY_PATH run "lenet_distdl_$n" mpi "$n" \
      "$distdl_venv/bin/python" -W ignore benchmarks/python/lenet5_step.py --impl distdl --batch "$batch" \
      --csv
  fi
  run "lenet_cpp_$n" mpi "$n" "$build/benchmarks/bench_lenet5" --batch "$batch" --steps 100 --csv
done
load_after=$(cut -d' ' -f1-3 /proc/loadavg)

python3 - "$out" "$ro" "${RANKS_LENET:-1 2}" "$batch" "$have_distdl" <<'EOF'
import csv, os, sys
out, ro, lenet_ranks, batch, have_distdl = sys.argv[1:]

def rows(name):
    with open(os.path.join(out, name)) as f:
        return list(csv.DictReader(l for l in f if "," in l))

py = {(r["op"], r["direction"], r["kind"]): float(r["median_us"]) for r in rows("ops")}
cpp = {}
for r in rows("coll") + rows("move"):
    d = "backward" if r["direction"] == "adjoint" else "forward"
    cpp[(r["op"], d)] = (float(r["distop_us"]), float(r["mpi_us"]))
print(f"Per operator call, 8 B float32, {ro} ranks, median of the slowest rank (us):\n")
print("| operator | direction | distop.torch | distop operator from Python | mpi4py | "
      "distop C++ | MPI from C++ |")
print("|---|---|---:|---:|---:|---:|---:|")
for (op, d, kind), v in py.items():
    if kind != "torch":
        continue
    c = cpp.get((op, d))
    f = lambda k: f"{py[(op, d, k)]:.1f}" if (op, d, k) in py else "-"
    cc = f"{c[0]:.1f} | {c[1]:.1f}" if c else "- | -"
    print(f"| {op} | {d} | {v:.1f} | {f('op')} | {f('mpi4py')} | {cc} |")
print(f"\nLeNet-5 training step, batch {batch}, median of the slowest rank (ms):\n")
torch_ms = float(rows("lenet_torch")[0]["median_ms"])
print(f"(the single-process torch model, the local compute alone: {torch_ms:.2f} ms)\n")
print("| ranks | distop.torch (Python) | DistDL (Python) | distop C++ (bench_lenet5) |")
print("|---:|---:|---:|---:|")
for n in lenet_ranks.split():
    d = float(rows(f"lenet_distop_{n}")[0]["median_ms"])
    dd = f"{float(rows(f'lenet_distdl_{n}')[0]['median_ms']):.2f}" if have_distdl == "1" \
        else "not installed"
    c = float(rows(f"lenet_cpp_{n}")[0]["median_ms"])
    print(f"| {n} | {d:.2f} | {dd} | {c:.2f} |")
EOF
echo
echo "machine: $(uname -srm), $(getconf _NPROCESSORS_ONLN) CPUs ($(awk -F': ' '/model name/{print $2; exit}' /proc/cpuinfo)), $(mpichversion 2>/dev/null | sed -n 's/^MPICH Version:[[:space:]]*/MPICH /p'), torch $("$venv/bin/python" -c 'import torch; print(torch.__version__)')"
echo "commit: $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- src include python benchmarks || echo ' (with local changes)')"
echo "load average (1, 5, 15 min): before $load_before, after $load_after"
echo "commands:"
for c in "${cmds[@]}"; do echo "  $c"; done
