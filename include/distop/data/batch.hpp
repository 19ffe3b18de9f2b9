#pragma once
// Batches of an image data set as tensors. Images are host data: a batch is gathered into a host
// tensor (HostTensor) and copied once into the memory space the model computes in.

#include <cstdint>
#include <vector>

#include "distop/core/tensor.hpp"
#include "distop/data/idx.hpp"
#include "distop/dist/dist_tensor.hpp"

namespace distop::data {

// The images of `examples` (indices into d, in batch order), as a host tensor
// [examples.size(), d.channels, d.rows, d.cols]: row b is example examples[b]'s pixels(). Throws
// distop::Error (op "batch_images") for an index outside [0, d.size).
HostTensor<float> batch_images(const Dataset& d, const std::vector<std::int64_t>& examples);

// Overwrites this rank's box of x with its part of the batch of `examples`: x's global shape is
// [examples.size(), ...] with d.pixels() entries per row (for instance [n, channels, rows, cols],
// or [n, channels * rows * cols] flattened), row b being example examples[b]. The box, which may be
// split along any axes, is gathered into a host tensor and copied into x's memory space with one
// deep_copy. Not collective; ranks outside x's partition (an empty box) do nothing. Throws
// distop::Error (op "load_batch") when x's global shape does not fit the batch, or for an index
// outside [0, d.size) in the box. float and double tensors (the pixels converted).
template <class T>
void load_batch(const Dataset& d, const std::vector<std::int64_t>& examples, DistTensor<T>& x);

}  // namespace distop::data
