#pragma once
// Internal: the tuning settings of the portable kernels, chosen per execution space in this one
// place. They shape how a portable kernel divides its work (how many columns a work item sums, how
// many samples share one GEMM), not what it computes, so both settings give the same results. A
// CPU wants few, large work items whose inner loops run along memory and stay in its caches; a GPU
// wants one thread per entry and one large GEMM. They do not depend on the host fast paths
// (host/fast_path.hpp): the portable kernels take the host settings whenever they run on the host.

#include <Kokkos_Core.hpp>
#include <cstdint>
#include <type_traits>

#include "distop/core/tensor.hpp"

namespace distop::kernels {

struct KernelTuning {
  // Columns per work item of sum_rows (elementwise_rows.cpp): a tile of adjacent columns on a CPU,
  // whose inner loops then read contiguous entries into independent accumulators; one per thread on
  // a GPU, which keeps the reads coalesced across threads. At most 16.
  int sum_tile;
  // How many samples share one im2col matrix and one GEMM in the portable convolution
  // (conv_internal.hpp: chunk_samples): samples are grouped until the matrix has about
  // min_columns columns (a sample with few output positions makes a GEMM too narrow for a CPU's
  // BLAS), within max_scratch_bytes of scratch. A GPU wants the whole batch in one GEMM.
  std::int64_t min_columns;
  std::int64_t max_scratch_bytes;
};

// The settings for kernels running in ExecutionSpace.
template <class ExecutionSpace>
constexpr KernelTuning tuning_for() {
  if constexpr (std::is_same_v<typename ExecutionSpace::memory_space, Kokkos::HostSpace>)
    return {16, 1024, std::int64_t{64} << 20};
  else
    return {1, std::int64_t{1} << 40, std::int64_t{512} << 20};
}

// The settings of distop's kernels (they run in ExecSpace).
inline constexpr KernelTuning kTuning = tuning_for<ExecSpace>();

}  // namespace distop::kernels
