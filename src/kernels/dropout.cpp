#include "distop/kernels/dropout.hpp"

#include <Kokkos_Core.hpp>

#include "distop/core/random.hpp"

namespace distop::kernels {

namespace {

constexpr int kMaxRank = 8;

// Maps a box's row-major local index to the row-major global index. Trivially copyable, so
// kernels capture it.
struct BoxToGlobal {
  int rank;
  std::int64_t extent[kMaxRank];  // the box's extents
  std::int64_t offset[kMaxRank];
  std::int64_t stride[kMaxRank];  // the global tensor's row-major strides
  KOKKOS_INLINE_FUNCTION std::int64_t operator()(std::int64_t i) const {
    std::int64_t g = 0;
    for (int a = rank - 1; a >= 0; --a) {
      g += (offset[a] + i % extent[a]) * stride[a];
      i /= extent[a];
    }
    return g;
  }
};

}  // namespace

template <class T>
void dropout(const Tensor<T>& x, const Shape& global, const std::vector<std::int64_t>& offset,
             double p, std::uint64_t seed, T beta, Tensor<T>& y) {
  constexpr const char* op = "dropout";
  DISTOP_CHECK(p >= 0 && p <= 1, op, "the drop probability must lie in [0, 1], found ", p);
  const int rank = x.rank();
  DISTOP_CHECK(
      rank <= kMaxRank && global.rank() == rank && offset.size() == static_cast<std::size_t>(rank),
      op, "a box ", x.shape().str(), " at ", offset.size(), " offsets in a tensor ", global.str(),
      ": expected the same rank (at most ", kMaxRank, ") for all three");
  for (int a = 0; a < rank; ++a) {
    const auto o = offset[static_cast<std::size_t>(a)];
    DISTOP_CHECK(o >= 0 && o + x.extent(a) <= global[a], op, "the box ", x.shape().str(),
                 " at offset ", Shape(offset).str(), " does not fit in ", global.str());
  }
  DISTOP_CHECK(y.shape() == x.shape(), op, "y has shape ", y.shape().str(), ", expected ",
               x.shape().str());
  if (x.numel() == 0) return;
  BoxToGlobal map{};
  map.rank = rank;
  const auto strides = global.strides();
  for (int a = 0; a < rank; ++a) {
    const auto i = static_cast<std::size_t>(a);
    map.extent[a] = x.extent(a);
    map.offset[a] = offset[i];
    map.stride[a] = strides[i];
  }
  const T scale = p < 1 ? static_cast<T>(1.0 / (1.0 - p)) : T(0);
  auto xv = x.view();
  auto yv = y.view();
  Kokkos::parallel_for(
      "distop::dropout", Kokkos::RangePolicy<ExecSpace>(0, x.numel()),
      KOKKOS_LAMBDA(std::int64_t i) {
        const auto g = static_cast<std::uint64_t>(map(i));
        const T v = random::uniform(seed, g) >= p ? scale * xv(i) : T(0);
        yv(i) = beta == T(0) ? v : v + beta * yv(i);
      });
}

template void dropout(const Tensor<float>&, const Shape&, const std::vector<std::int64_t>&, double,
                      std::uint64_t, float, Tensor<float>&);
template void dropout(const Tensor<double>&, const Shape&, const std::vector<std::int64_t>&, double,
                      std::uint64_t, double, Tensor<double>&);

}  // namespace distop::kernels
