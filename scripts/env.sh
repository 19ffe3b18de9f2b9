# Sourced by the scripts: run-time settings for a fast distop.
#
# No BLAS kernel settings: libdistop chooses OpenBLAS's kernels itself when it loads (where
# Debian's OpenBLAS 0.3.21 does not recognise the CPU and falls back to its pre-AVX kernels), and
# OPENBLAS_CORETYPE, where the user sets it, still wins (docs/performance.md).
# Ranks are the parallelism: one BLAS thread per rank unless the user says otherwise.
export OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-1}
