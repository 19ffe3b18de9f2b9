#include "distop/kernels/box.hpp"

#include <Kokkos_Core.hpp>
#include <algorithm>
#include <cstring>

#include "distop/core/error.hpp"

namespace distop {

std::int64_t Box::numel() const noexcept {
  std::int64_t n = 1;
  for (auto e : extent) n *= e;
  return n;
}

Box Box::intersect(const Box& other) const {
  Box b{offset, extent};
  for (int a = 0; a < rank(); ++a) {
    const auto lo = std::max(offset[a], other.offset[a]);
    const auto hi = std::min(offset[a] + extent[a], other.offset[a] + other.extent[a]);
    b.offset[a] = lo;
    b.extent[a] = std::max<std::int64_t>(0, hi - lo);
  }
  return b;
}

Box Box::relative_to(const std::vector<std::int64_t>& origin) const {
  Box b{offset, extent};
  for (int a = 0; a < rank(); ++a) b.offset[a] -= origin[a];
  return b;
}

std::string Box::str() const {
  std::string s = "[";
  for (int a = 0; a < rank(); ++a) {
    if (a) s += ", ";
    s += std::to_string(offset[a]) + ":" + std::to_string(offset[a] + extent[a]);
  }
  return s + "]";
}

Box whole(const Shape& shape) {
  return Box{std::vector<std::int64_t>(static_cast<std::size_t>(shape.rank()), 0), shape.extents()};
}

namespace kernels {

namespace {

// A box seen as `rows` runs of `run` contiguous elements: the trailing axes the box covers whole
// merge into one run. row_start(i) is the tensor offset of run i.
struct Runs {
  std::int64_t rows = 0;
  std::int64_t run = 0;
  std::int64_t base = 0;                 // offset of the box's first element
  std::vector<std::int64_t> row_extent;  // extents of the axes iterated over (outer)
  std::vector<std::int64_t> row_stride;  // their strides in the tensor
};

Runs runs_of(const Shape& shape, const Box& box, const char* op) {
  DISTOP_CHECK(box.rank() == shape.rank(), op, "box ", box.str(), " of rank ", box.rank(),
               " in a tensor of rank ", shape.rank());
  for (int a = 0; a < shape.rank(); ++a)
    DISTOP_CHECK(box.offset[a] >= 0 && box.extent[a] >= 0 &&
                     box.offset[a] + box.extent[a] <= shape[a],
                 op, "box ", box.str(), " does not lie inside a tensor of shape ", shape.str());
  const auto strides = shape.strides();
  Runs r;
  r.base = 0;
  for (int a = 0; a < shape.rank(); ++a) r.base += box.offset[a] * strides[a];
  if (box.numel() == 0) return r;
  // Merge trailing axes while the box spans them whole.
  int inner = shape.rank();
  r.run = 1;
  while (inner > 0) {
    const int a = inner - 1;
    r.run *= box.extent[a];
    --inner;
    if (box.extent[a] != shape[a]) break;
  }
  r.rows = 1;
  for (int a = 0; a < inner; ++a) {
    r.row_extent.push_back(box.extent[a]);
    r.row_stride.push_back(strides[a]);
    r.rows *= box.extent[a];
  }
  return r;
}

// The tensor offset of run i.
inline std::int64_t row_start(const Runs& r, std::int64_t i) {
  std::int64_t off = r.base;
  for (int a = static_cast<int>(r.row_extent.size()) - 1; a >= 0; --a) {
    off += (i % r.row_extent[a]) * r.row_stride[a];
    i /= r.row_extent[a];
  }
  return off;
}

template <class T, class F>
void for_each_run(const Runs& r, F&& f) {
  // Walk the runs with an odometer instead of dividing per run.
  const int n = static_cast<int>(r.row_extent.size());
  std::vector<std::int64_t> idx(static_cast<std::size_t>(n), 0);
  std::int64_t off = r.base;
  for (std::int64_t i = 0; i < r.rows; ++i) {
    f(off, i * r.run);
    for (int a = n - 1; a >= 0; --a) {
      off += r.row_stride[a];
      if (++idx[a] < r.row_extent[a]) break;
      off -= r.row_stride[a] * r.row_extent[a];
      idx[a] = 0;
    }
  }
}

}  // namespace

template <class T>
void pack(const Tensor<T>& src, const Box& box, T* out) {
  const auto r = runs_of(src.shape(), box, "pack");
  if (box.empty()) return;
  const T* s = src.data();
  if constexpr (kHostAccessible) {
    for_each_run<T>(r, [&](std::int64_t off, std::int64_t pos) {
      std::memcpy(out + pos, s + off, static_cast<std::size_t>(r.run) * sizeof(T));
    });
  } else {
    const std::int64_t run = r.run;
    const Runs rr = r;
    Kokkos::View<std::int64_t*, MemSpace> starts("distop::pack::starts", static_cast<std::size_t>(r.rows));
    auto h = Kokkos::create_mirror_view(starts);
    for (std::int64_t i = 0; i < r.rows; ++i) h(i) = row_start(rr, i);
    Kokkos::deep_copy(starts, h);
    Kokkos::parallel_for(
        "distop::pack", Kokkos::RangePolicy<ExecSpace>(0, r.rows * run), KOKKOS_LAMBDA(std::int64_t k) {
          out[k] = s[starts(k / run) + k % run];
        });
  }
}

template <class T>
void unpack(const T* in, const Box& box, Tensor<T>& dst, bool accumulate) {
  const auto r = runs_of(dst.shape(), box, "unpack");
  if (box.empty()) return;
  T* d = dst.data();
  if constexpr (kHostAccessible) {
    for_each_run<T>(r, [&](std::int64_t off, std::int64_t pos) {
      if (accumulate) {
        for (std::int64_t j = 0; j < r.run; ++j) d[off + j] += in[pos + j];
      } else {
        std::memcpy(d + off, in + pos, static_cast<std::size_t>(r.run) * sizeof(T));
      }
    });
  } else {
    const std::int64_t run = r.run;
    Kokkos::View<std::int64_t*, MemSpace> starts("distop::unpack::starts", static_cast<std::size_t>(r.rows));
    auto h = Kokkos::create_mirror_view(starts);
    for (std::int64_t i = 0; i < r.rows; ++i) h(i) = row_start(r, i);
    Kokkos::deep_copy(starts, h);
    Kokkos::parallel_for(
        "distop::unpack", Kokkos::RangePolicy<ExecSpace>(0, r.rows * run), KOKKOS_LAMBDA(std::int64_t k) {
          const auto o = starts(k / run) + k % run;
          d[o] = accumulate ? d[o] + in[k] : in[k];
        });
  }
}

template <class T>
void copy_box(const Tensor<T>& src, const Box& src_box, Tensor<T>& dst, const Box& dst_box,
              bool accumulate) {
  DISTOP_CHECK(src_box.extent == dst_box.extent, "copy_box", "boxes ", src_box.str(), " and ",
               dst_box.str(), " differ in extent");
  if (src_box.empty()) return;
  auto tmp = Tensor<T>::uninitialized(Shape{src_box.numel()});
  pack(src, src_box, tmp.data());
  unpack(tmp.data(), dst_box, dst, accumulate);
}

template <class T>
void fill_box(Tensor<T>& t, const Box& box, T value) {
  const auto r = runs_of(t.shape(), box, "fill_box");
  if (box.empty()) return;
  T* d = t.data();
  if constexpr (kHostAccessible) {
    for_each_run<T>(r, [&](std::int64_t off, std::int64_t) { std::fill(d + off, d + off + r.run, value); });
  } else {
    auto buf = Tensor<T>::uninitialized(Shape{box.numel()});
    buf.fill(value);
    unpack(buf.data(), box, t, false);
  }
}

#define DISTOP_INSTANTIATE(T)                                                              \
  template void pack(const Tensor<T>&, const Box&, T*);                                    \
  template void unpack(const T*, const Box&, Tensor<T>&, bool);                            \
  template void copy_box(const Tensor<T>&, const Box&, Tensor<T>&, const Box&, bool);      \
  template void fill_box(Tensor<T>&, const Box&, T);
DISTOP_INSTANTIATE(float)
DISTOP_INSTANTIATE(double)
#undef DISTOP_INSTANTIATE

}  // namespace kernels
}  // namespace distop
