#include "distop/data/batch.hpp"

#include <algorithm>

#include "distop/core/error.hpp"

namespace distop::data {

namespace {
const float* image_of(const Dataset& d, std::int64_t example, const char* op) {
  DISTOP_CHECK(example >= 0 && example < d.size, op, "example ", example,
               " is outside the data set of ", d.size, " examples");
  return d.image(example);
}
}  // namespace

HostTensor<float> batch_images(const Dataset& d, const std::vector<std::int64_t>& examples) {
  const auto n = static_cast<std::int64_t>(examples.size()), pixels = d.pixels();
  auto out = HostTensor<float>::uninitialized(Shape{n, d.channels, d.rows, d.cols});
  float* dst = out.data();
  for (std::int64_t b = 0; b < n; ++b) {
    const float* img = image_of(d, examples[static_cast<std::size_t>(b)], "batch_images");
    std::copy(img, img + pixels, dst + b * pixels);
  }
  return out;
}

template <class T>
void load_batch(const Dataset& d, const std::vector<std::int64_t>& examples, DistTensor<T>& x) {
  const TensorSpace& space = x.space();
  const Shape& global = space.global_shape();
  const auto n = static_cast<std::int64_t>(examples.size()), pixels = d.pixels();
  DISTOP_CHECK(global.rank() >= 1 && global[0] == n && n * pixels == global.numel(), "load_batch",
               "a batch of ", n, " examples of ", pixels,
               " values each does not fit a tensor of global shape ", global.str());
  if (space.local_shape().numel() == 0) return;
  auto box = HostTensor<T>::uninitialized(space.local_shape());
  T* dst = box.data();
  // Runs of consecutive global indices are copied whole (a row-major box's last axis, or more).
  const std::vector<std::int64_t> idx = space.global_indices();
  std::size_t i = 0;
  while (i < idx.size()) {
    const std::int64_t row = idx[i] / pixels, first = idx[i] % pixels;
    std::size_t run = 1;
    while (i + run < idx.size() && idx[i + run] == idx[i] + static_cast<std::int64_t>(run) &&
           first + static_cast<std::int64_t>(run) < pixels)
      ++run;
    const float* img = image_of(d, examples[static_cast<std::size_t>(row)], "load_batch");
    std::copy(img + first, img + first + static_cast<std::int64_t>(run), dst + i);
    i += run;
  }
  deep_copy(x.local(), box);  // the one copy into x's memory space
}

template void load_batch(const Dataset&, const std::vector<std::int64_t>&, DistTensor<float>&);
template void load_batch(const Dataset&, const std::vector<std::int64_t>&, DistTensor<double>&);

}  // namespace distop::data
