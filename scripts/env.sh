# Sourced by the scripts: run-time settings for a fast distop.
#
# Debian bookworm's OpenBLAS (0.3.21) does not recognise some newer x86 CPUs and falls back to its
# slowest (Prescott) kernels, about 4x slower. Name the kernel family from the CPU's flags unless
# the user already chose one.
if [ -z "${OPENBLAS_CORETYPE:-}" ] && [ -r /proc/cpuinfo ]; then
  if grep -qw avx512f /proc/cpuinfo; then
    export OPENBLAS_CORETYPE=SkylakeX
  elif grep -qw avx2 /proc/cpuinfo; then
    export OPENBLAS_CORETYPE=Haswell
  fi
fi
# Ranks are the parallelism: one BLAS thread per rank unless the user says otherwise.
export OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-1}
