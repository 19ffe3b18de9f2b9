#pragma once
// AxisValues: a per-axis option of a convolution or pooling layer (stride, padding, dilation),
// given as one value for every axis or one value per axis.

#include <cstdint>
#include <initializer_list>
#include <vector>

namespace distop::nn {

// `{.stride = 2}` means 2 along every spatial axis; `{.padding = {1, 2}}` one value per axis.
// Empty (the default of PoolOptions::stride) means the layer's own default.
struct AxisValues {
  std::vector<std::int64_t> values;

  AxisValues() = default;
  AxisValues(std::int64_t v) : values{v} {}  // NOLINT: implicit, for {.stride = 2}
  AxisValues(std::initializer_list<std::int64_t> v) : values(v) {}
  AxisValues(std::vector<std::int64_t> v) : values(std::move(v)) {}  // NOLINT: implicit

  bool empty() const noexcept { return values.empty(); }
  std::size_t size() const noexcept { return values.size(); }
};

}  // namespace distop::nn
