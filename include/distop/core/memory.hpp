#pragma once
// How much memory this process's tensors hold: the bytes of host tensor storage in use now and at
// most since the last reset, for reporting a model's activation memory per rank.

#include <cstddef>

namespace distop {

// Host tensor storage of this process, counted as allocated: each tensor's block rounded up to its
// size class (at most a quarter more than asked for). Blocks the pool keeps cached for reuse are
// not in use. Device memory (a CUDA build's tensors in device space) and memory outside tensors
// (MPI's buffers, the data set, the program) are not counted.
struct TensorMemory {
  std::size_t in_use_bytes = 0;  // held by live tensors now
  std::size_t peak_bytes = 0;  // the most held at once since the start or reset_peak_tensor_memory
};

// This process's figures (thread-safe, not collective).
TensorMemory tensor_memory() noexcept;
// Starts a new peak from what is in use now.
void reset_peak_tensor_memory() noexcept;

}  // namespace distop
