#!/usr/bin/env bash
# Runs distop's programs on a simulated cluster with SimGrid's SMPI (docs/scaling.md).
#
#   scripts/simulate.sh RANKS [PROGRAM...]
#
# RANKS: rank counts, comma-separated (e.g. 2,64,1024). PROGRAM: primitives, lenet5, data_parallel
# (default: these three), round_trip or unet3d; each is a mode of benchmarks/simulated_step.cpp
# (bench_simulated). attention is nn::SequenceParallelAttention's forward and backward, ring and
# all-to-all (the latter while the heads are at least the ranks), each rank a block of 256 tokens
# (--tokens-per-rank B; 16 heads of 64), so the sequence grows with the ranks; its efficiency
# column is against the ideal P times the one-rank step. With DISTOP_SIM_COMPUTE=injected each ring
# block's compute is charged where the ring computes it (after posting the next transfer, before
# waiting for it) and the all-to-all's per operation, from profiles measured on one rank before
# each run, every message real. unet3d is examples/unet3d's step with every layer on a spatial grid of all the
# ranks (one replica; DISTOP_SIM_ARGS="--model-ranks M" for replicas of M ranks), each rank a
# 16^3 block of every volume (--volume-per-rank S), so the volume grows with the ranks (weak
# scaling); with DISTOP_SIM_COMPUTE=injected each of its operations' compute is charged from a
# profile of one rank's block, every message real (below). Builds the SMPI variant (DISTOP_ENABLE_SMPI, compiler smpicxx) in
# ${DISTOP_BUILD_DIR:-build-smpi} if needed (the library and bench_simulated only), then runs each
# program under smpirun at each rank count and at its base count (1 rank for data_parallel and attention, one
# replica of --model-ranks 2 for lenet5, 2 ranks for the primitives, whose 1-rank times are local
# copies, 1 rank for unet3d), and prints per program and case the simulated step time, the weak-scaling efficiency
# (base time / time) and the cost model's time and efficiency.
#
# Environment:
#   DISTOP_SIM_PLATFORM  ib (platforms/ib-fat-tree-1024.xml, default), this-machine
#                        (platforms/this-machine.xml, calibrated to the machine the fit ran on:
#                        2 hosts), or a platform file made of <cluster> elements
#   DISTOP_SIM_STEPS     timed steps per run (default 3; one untimed step first)
#   DISTOP_SIM_ARGS      further arguments to bench_simulated (e.g. "--batch 32")
#   DISTOP_SIM_CSV       also append the raw rows (with platform and wall seconds) to this file
#   DISTOP_SIM_SMPI_ARGS further smpirun arguments (e.g. --cfg=smpi/allreduce:rdb)
#   DISTOP_SIM_COMPUTE   data_parallel's, unet3d's and attention's compute: measured (default: every rank
#                        computes for real and SMPI charges its host time) or injected.
#                        data_parallel: rank 0 of the base run measures the forward and backward
#                        pass once, every rank of every run replays them as simulated compute (the
#                        communication, loss seed and optimizer step stay real). unet3d: rank 0 of
#                        the base run measures each operation's compute (forward and backward) on
#                        one rank's block, and every rank of every run charges it as simulated
#                        compute where the operation ends, while the step runs as before (every
#                        halo exchange, broadcast, GroupNorm and loss collective and the replicas'
#                        reduction real); the host time is not charged (as uncharged below), so
#                        the kernels run on the host but cost no simulated time. attention: a
#                        one-rank run before each run measures the ring's block (once per series)
#                        and the all-to-all's operations at that rank count (without shared malloc);
#                        the ring's blocks are then not computed but charged, the all-to-all's
#                        kernels run uncharged; host time uncharged
#   DISTOP_SIM_HOST_TIME data_parallel's host time (unet3d injected: always uncharged): charged (default): SMPI charges each rank the
#                        host (CPU) time it spends between MPI calls; uncharged (only with
#                        DISTOP_SIM_COMPUTE=injected): it does not (smpi/simulate-computation:no),
#                        so a step is the injected compute plus the network's time. Host time
#                        measured with many ranks in one process is several microseconds per MPI
#                        call more than one rank alone spends (round_trip shows it; docs/scaling.md)
#   DISTOP_SIM_SHARED_BYTES  tensors of this many bytes and more live in SMPI's shared malloc,
#                        one physical copy for all ranks (contents meaningless; timing only).
#                        Default with DISTOP_SIM_COMPUTE=injected 65536 (unet3d, attention 262144), else 0
#   DISTOP_SIM_EXCHANGE  lenet5 and data_parallel: how the gradient reducer moves its chunks,
#                        automatic (default: pairwise rounds once replicas - 1 exceed the window),
#                        collective (MPI_Ialltoallv/Iallgatherv) or pairwise
#   DISTOP_SIM_EXCHANGE_WINDOW  the reducer's pairwise rounds in flight (default 32)
#   DISTOP_SIM_BUILD     1 (default): build bench_simulated first; 0: run the build as it is
#   DISTOP_SIM_OPTIMIZE  the optimisation flags of a new build-smpi (default -O3; CI's check that
#                        the variant builds and runs uses -O1, which compiles faster and computes
#                        more slowly, so its simulated times are not the ones to record)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
if [ $# -lt 1 ]; then
  sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2
  exit 2
fi
IFS=, read -r -a rank_list <<<"$1"
shift
programs=("$@")
[ ${#programs[@]} -gt 0 ] || programs=(primitives lenet5 data_parallel)
for p in "${programs[@]}"; do
  case $p in primitives | lenet5 | data_parallel | round_trip | unet3d | attention) ;; *) echo "simulate.sh: unknown program '$p'" >&2; exit 2 ;; esac
done

source scripts/env.sh
build=${DISTOP_BUILD_DIR:-build-smpi}
bash scripts/install-deps.sh libsimgrid-dev
if [ ! -f "$build/CMakeCache.txt" ]; then
  launcher=()
  command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
  cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release \
    "-DCMAKE_CXX_FLAGS_RELEASE=${DISTOP_SIM_OPTIMIZE:--O3} -DNDEBUG" -DCMAKE_CXX_COMPILER=smpicxx \
    -DDISTOP_ENABLE_SMPI=ON -DDISTOP_ENABLE_EXAMPLES=OFF "${launcher[@]}" >/dev/null
fi
[ "${DISTOP_SIM_BUILD:-1}" = 0 ] || cmake --build "$build" -j"$(nproc)" --target bench_simulated >/dev/null
program=$root/$build/benchmarks/bench_simulated
libdistop=$(readlink -f "$build/src/libdistop.so")
soname=$(basename "$(ls "$build"/src/libdistop.so.[0-9]* | head -n1)")
kokkos=$(ldd "$libdistop" | awk '/libtrilinos_kokkoscore|libkokkoscore/ {print $1; exit}')

case ${DISTOP_SIM_PLATFORM:-ib} in
  ib) platform=$root/platforms/ib-fat-tree-1024.xml ;;
  this-machine) platform=$root/platforms/this-machine.xml ;;
  *) platform=$(readlink -f "$DISTOP_SIM_PLATFORM") ;;
esac
# The hosts of the platform's clusters, in order (prefix, radical a-b, suffix).
hostfile=$(mktemp)
tmpdir=$(mktemp -d)
trap 'rm -rf "$hostfile" "$tmpdir"' EXIT
tr '\n' ' ' <"$platform" | grep -o '<cluster[^>]*>' | while read -r c; do
  prefix=$(sed -n 's/.*prefix="\([^"]*\)".*/\1/p' <<<"$c")
  suffix=$(sed -n 's/.*suffix="\([^"]*\)".*/\1/p' <<<"$c")
  radical=$(sed -n 's/.*radical="\([0-9]*\)-\([0-9]*\)".*/\1 \2/p' <<<"$c")
  for i in $(seq $radical); do echo "$prefix$i$suffix"; done
done >"$hostfile"
hosts=$(wc -l <"$hostfile")

# Privatisation: every simulated rank gets its own copy of the program (SMPI's default, dlopen),
# of Kokkos (by its versioned file name) and of libdistop (by full path), so that their globals
# (Kokkos' state, distop's environment, timers, pools) are per rank. Collectives pinned: SMPI's
# default selector with MPICH's long-message all-reduce (Rabenseifner: reduce-scatter +
# recursive-doubling all-gather) and long-message reduce (reduce-scatter + gather; SMPI's default
# reduce is linear); other selectors take minutes per all-reduce at 1,024 ranks. Broadcast is
# binomial and all-gather(v) recursive doubling (MPICH's algorithms for distop's sizes; SMPI's
# "mpich" selector would first run a ring all-gather over each new communicator, P^2 messages):
# the SMPI build of distop calls the blocking MPI_Bcast and MPI_Allgatherv where a real build
# posts MPI_Ibcast and MPI_Iallgatherv, which SMPI runs flat (the root sending to each rank in
# turn; every pair at once).
# An MPI_Test or MPI_Iprobe costs 100 ns of simulated time (SMPI's default, 100 us, made the
# gradient reducer's progress calls the largest part of a LeNet-5 step at 64 ranks). distop waits
# inside MPI (DISTOP_YIELD_WHEN_IDLE=0: every rank of the simulation is in one
# process, which would otherwise look oversubscribed) and its watchdog is off (a wall-clock
# thread; DISTOP_SMPI compiles it out too).
smpi_args=(
  -platform "$platform" -hostfile "$hostfile"
  "--cfg=smpi/privatize-libs:$kokkos;$(dirname "$libdistop")/$soname"
  --cfg=smpi/allreduce:rab_rdb --cfg=smpi/reduce:scatter_gather
  --cfg=smpi/bcast:binomial_tree --cfg=smpi/allgatherv:mpich_rdb
  --cfg=smpi/test:1e-7 --cfg=smpi/iprobe:1e-7 --cfg=smpi/shared-malloc:global
  --cfg=smpi/display-timing:yes
  --log=root.thres:warning --log=smpi_config.thres:error --log=xbt_cfg.thres:warning
)
# shellcheck disable=SC2206
smpi_args+=(${DISTOP_SIM_SMPI_ARGS:-})
steps=${DISTOP_SIM_STEPS:-3}
compute=${DISTOP_SIM_COMPUTE:-measured}
case $compute in
  measured) shared_bytes=${DISTOP_SIM_SHARED_BYTES:-0} ;;
  injected) shared_bytes=${DISTOP_SIM_SHARED_BYTES:-65536} ;;
  *) echo "simulate.sh: DISTOP_SIM_COMPUTE must be measured or injected" >&2; exit 2 ;;
esac
host_time=${DISTOP_SIM_HOST_TIME:-charged}
case $host_time in
  charged) ;;
  uncharged)
    if [ "$compute" != injected ]; then
      echo "simulate.sh: DISTOP_SIM_HOST_TIME=uncharged needs DISTOP_SIM_COMPUTE=injected (else no compute is simulated)" >&2
      exit 2
    fi
    ;;
  *) echo "simulate.sh: DISTOP_SIM_HOST_TIME must be charged or uncharged" >&2; exit 2 ;;
esac
# shellcheck disable=SC2206
extra=(${DISTOP_SIM_ARGS:-})
extra+=(--exchange "${DISTOP_SIM_EXCHANGE:-automatic}" --exchange-window "${DISTOP_SIM_EXCHANGE_WINDOW:-32}")

rows=$(mktemp)
trap 'rm -rf "$hostfile" "$tmpdir" "$rows"' EXIT
run() {  # program ranks
  local n=$2 log=$tmpdir/log.$1.$2 t0=$SECONDS args=()
  case $1 in data_parallel | unet3d | attention) args=(--compute "$compute") ;; esac
  # Injected: the first run (the base count) measures the compute profile, every later run of the
  # series replays that same profile.
  [ "${args[*]}" != "--compute injected" ] || args+=(--compute-profile "$tmpdir/compute-profile.$1")
  # unet3d's profile is measured without shared malloc (each shared block is a fresh mapping of
  # SMPI's file, whose page faults would count as the kernels' time: 31 ms of thread CPU time per
  # step instead of 21); the base run needs none.
  local shared=$shared_bytes
  # unet3d injected: from 256 KiB by default (every shared block is a mapping of SMPI's file; from
  # 64 KiB, 1,024 ranks' blocks exceed the kernel's vm.max_map_count of 65,530 mappings).
  [ "$1" != unet3d ] || [ "$compute" != injected ] || shared=${DISTOP_SIM_SHARED_BYTES:-262144}
  [ "${args[*]}" != "--compute injected --compute-profile $tmpdir/compute-profile.unet3d" ] ||
    [ -f "$tmpdir/compute-profile.unet3d" ] || shared=0
  local host=()
  [ "$1" != data_parallel ] || [ "$host_time" != uncharged ] || host=(--cfg=smpi/simulate-computation:no)
  [ "$1" != unet3d ] || [ "$compute" != injected ] || host=(--cfg=smpi/simulate-computation:no)
  if [ "$1" = attention ] && [ "$compute" = injected ]; then
    host=(--cfg=smpi/simulate-computation:no)
    shared=${DISTOP_SIM_SHARED_BYTES:-262144}
    # The profiles, measured on one rank without shared malloc (its fresh mappings' page faults
    # would count as the kernels' time): the ring's block once, the all-to-all's share at n ranks.
    if ! TMPDIR=$tmpdir DISTOP_SMPI_SHARED_BYTES=0 OPENBLAS_NUM_THREADS=1 DISTOP_YIELD_WHEN_IDLE=0 DISTOP_WATCHDOG_SECONDS=0 \
      smpirun -np 1 "${smpi_args[@]}" "${host[@]}" "$program" --program attention "${args[@]}" "${extra[@]}" \
      --profile-ranks "$n" >"$log.profile" 2>&1; then
      echo "simulate.sh: attention's profile for $n ranks failed:" >&2
      tail -n 30 "$log.profile" >&2
      exit 1
    fi
  fi
  if [ "$n" -gt "$hosts" ]; then
    echo "simulate.sh: $n ranks, but $platform has $hosts hosts" >&2
    exit 1
  fi
  # smpirun 3.32 takes -tmpdir's value for the program: the per-rank copies go to TMPDIR instead.
  if ! TMPDIR=$tmpdir DISTOP_SMPI_SHARED_BYTES=$shared OPENBLAS_NUM_THREADS=1 DISTOP_YIELD_WHEN_IDLE=0 DISTOP_WATCHDOG_SECONDS=0 \
    smpirun -np "$n" "${smpi_args[@]}" "${host[@]}" "$program" --program "$1" --steps "$steps" "${args[@]}" "${extra[@]}" \
    >"$log" 2>&1; then
    echo "simulate.sh: $1 at $n ranks failed:" >&2
    tail -n 30 "$log" >&2
    exit 1
  fi
  local wall=$((SECONDS - t0))
  grep "^$1," "$log" | sed "s/\$/,$n,$wall/" >>"$rows"
  [ -z "${DISTOP_SIM_CSV:-}" ] ||
    grep "^$1," "$log" | sed "s|\$|,$(basename "$platform"),$wall|" >>"$DISTOP_SIM_CSV"
}

printf '# platform %s, %s steps per run (median), compute %s, host time %s, shared from %s B, bench_simulated %s\n' \
  "$(basename "$platform")" "$steps" "$compute" "$host_time$([ "$compute" != injected ] || echo ", unet3d and attention uncharged")" "$shared_bytes" "${extra[*]}"
printf '%-14s %-21s %6s %11s %6s %11s %6s %7s\n' program case ranks step_ms eff model_ms \
  m_eff wall_s
for p in "${programs[@]}"; do
  case $p in data_parallel | unet3d | attention) base=1 ;; *) base=2 ;; esac
  : >"$rows"
  run "$p" "$base"
  for n in "${rank_list[@]}"; do [ "$n" = "$base" ] || run "$p" "$n"; done
  # program,case,ranks,step_ms,model_ms,detail...,np,wall
  awk -F, -v base="$base" '
    # attention scales weakly in tokens: its ideal step grows as the ranks (P times the base).
    { key = $2; r = $3; step[key, r] = $4; model[key, r] = $5; wall[key, r] = $NF
      if (!(key in seen)) { seen[key] = 1; order[++k] = key }
      if (!((key, r) in have)) { have[key, r] = 1; ranks[key] = ranks[key] " " r } }
    END {
      for (i = 1; i <= k; ++i) {
        key = order[i]; n = split(ranks[key], rs, " ")
        for (j = 1; j <= n; ++j) {
          r = rs[j]; s = step[key, r]; m = model[key, r]
          ss = "-"; eff = "-"
          if (s != "") ss = sprintf("%.3f", s)
          w = prog == "attention" ? r / base : 1
          if (s != "" && s > 0 && step[key, base] != "") eff = sprintf("%.3f", w * step[key, base] / s)
          meff = "-"; ms = "-"
          if (m != "") ms = sprintf("%.3f", m)
          if (m != "" && m > 0 && model[key, base] != "") meff = sprintf("%.3f", w * model[key, base] / m)
          printf "%-14s %-21s %6d %11s %6s %11s %6s %7d\n", prog, key, r, ss, eff, ms, meff, wall[key, r]
        }
      }
    }' prog="$p" "$rows"
done
