#pragma once
// Tensor<T, MemorySpace>: a dense, contiguous, row-major local tensor of any rank on a Kokkos View,
// in a chosen memory space (by default the one distop computes in), and the explicit copies
// between memory spaces.

#include <Kokkos_Core.hpp>
#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "distop/core/error.hpp"
#include "distop/core/shape.hpp"

namespace distop {

// Where distop's tensors live and its kernels run: Kokkos' default execution space (Serial or
// OpenMP on the host; Cuda where Kokkos was built with it) and that space's memory.
using ExecSpace = Kokkos::DefaultExecutionSpace;
using MemSpace = ExecSpace::memory_space;
// Host memory: where files are read and written and data sets are loaded.
using HostMemSpace = Kokkos::HostSpace;
inline constexpr bool kHostAccessible =
    Kokkos::SpaceAccessibility<Kokkos::HostSpace, MemSpace>::accessible;

// DISTOP_DEVICE_MEMORY_SPACE is 1 where Kokkos has a device backend, whose memory space is then
// the default one (MemSpace differs from HostMemSpace), and 0 in a host build (where they are one
// type). The library instantiates Tensor for MemSpace, and for HostMemSpace too where they differ.
#if defined(KOKKOS_ENABLE_CUDA) || defined(KOKKOS_ENABLE_HIP) || defined(KOKKOS_ENABLE_SYCL) || \
    defined(KOKKOS_ENABLE_OPENMPTARGET) || defined(KOKKOS_ENABLE_OPENACC)
#define DISTOP_DEVICE_MEMORY_SPACE 1
#else
#define DISTOP_DEVICE_MEMORY_SPACE 0
#endif
static_assert(DISTOP_DEVICE_MEMORY_SPACE == (std::is_same_v<MemSpace, HostMemSpace> ? 0 : 1),
              "distop: Kokkos has a device backend but its default memory space is the host's "
              "(or none and another default); distop expects the device's as the default");

// A local tensor in memory space MemorySpace. Copies share storage, as Kokkos Views do; clone()
// makes a deep copy. The storage is one contiguous 1-D View of shape().numel() elements in
// row-major order, so data() can be handed to BLAS and MPI directly. A default-constructed Tensor
// is empty, of shape [0].
//
// The memory space is part of the type: Tensor<T> (the default, MemSpace) is what layers, operators
// and communication take; HostTensor<T> (Tensor<T, HostMemSpace>) holds host data (data loading,
// files). In a host build the two are the same type; in a device build they are different types,
// and data moves between them only through the explicit copies below (deep_copy, to_host,
// to_device), never implicitly.
//
// Host storage comes from distop's pool of recycled blocks (DISTOP_HOST_CACHE_MB bounds what it
// keeps; see docs/performance.md): view() is then an unmanaged View over the block, valid while a
// Tensor sharing the storage lives. Storage in any other space is a managed Kokkos View.
template <class T, class MemorySpace = MemSpace>
class Tensor {
 public:
  using value_type = T;
  using memory_space = MemorySpace;
  using View = Kokkos::View<T*, MemorySpace>;
  // Whether host code may dereference data().
  static constexpr bool host_accessible =
      Kokkos::SpaceAccessibility<Kokkos::HostSpace, MemorySpace>::accessible;

  Tensor() : shape_{0} {}
  // A zero-filled tensor.
  explicit Tensor(Shape shape, const std::string& label = "distop::Tensor");
  // A tensor whose entries are left uninitialised, for outputs that are overwritten in full.
  static Tensor uninitialized(Shape shape, const std::string& label = "distop::Tensor");
  // A tensor holding a copy of host values (values.size() must equal shape.numel()), in this
  // tensor's memory space.
  static Tensor from_vector(Shape shape, const std::vector<T>& values);
  // A tensor over external memory, not copied: the shape.numel() entries at `data`, row-major, in
  // this tensor's memory space (writes through either side show in both). `owner` (a foreign
  // framework's tensor, say) is kept alive as long as any Tensor shares this storage, and must keep
  // the memory valid until then. data may be null only for an empty shape.
  static Tensor wrap(T* data, Shape shape, std::shared_ptr<void> owner) {
    for (auto e : shape)
      DISTOP_CHECK(e >= 0, "Tensor::wrap", "negative extent in shape ", shape.str());
    DISTOP_CHECK(data != nullptr || shape.numel() == 0, "Tensor::wrap",
                 "null data for a tensor of shape ", shape.str());
    const auto n = static_cast<std::size_t>(shape.numel());
    View v(n == 0 ? static_cast<T*>(nullptr) : data, n);  // unmanaged: owner holds the memory
    return Tensor(std::move(shape), std::move(v), std::move(owner));
  }

  const Shape& shape() const noexcept { return shape_; }
  int rank() const noexcept { return shape_.rank(); }
  std::int64_t numel() const noexcept { return shape_.numel(); }
  bool empty() const noexcept { return numel() == 0; }
  std::int64_t extent(int axis) const { return shape_[axis]; }
  T* data() const noexcept { return view_.data(); }
  const View& view() const noexcept { return view_; }

  // A deep copy.
  Tensor clone() const;
  // The same storage under another shape of the same number of elements.
  Tensor reshaped(Shape shape) const;
  // A tensor of `shape` on the entries [offset, offset + shape.numel()) of this one's storage
  // (shared: writes to either show in both), for views into a flat buffer.
  Tensor slice(std::int64_t offset, Shape shape) const;
  // Copies src's entries into this tensor's storage; the element counts must match. Both are in
  // the same memory space (distop::deep_copy copies across spaces).
  void copy_from(const Tensor& src);
  void fill(T value);
  // Whether another Tensor (a copy, or a reshaped or reinterpreted one) refers to this storage.
  bool shares_storage() const noexcept {
    return storage_ ? storage_.use_count() > 1 : view_.use_count() > 1;
  }
  // A host copy of the entries, in row-major order.
  std::vector<T> to_vector() const;

 private:
  Tensor(Shape shape, View view, std::shared_ptr<void> storage)
      : shape_(std::move(shape)), view_(std::move(view)), storage_(std::move(storage)) {}
  // Storage for numel() entries, left uninitialised.
  static Tensor allocate(Shape shape, const std::string& label);
  Shape shape_;
  View view_;
  std::shared_ptr<void> storage_;  // owns view_'s memory when it comes from the host pool
};

// A tensor in host memory: the same type as Tensor<T> in a host build.
template <class T>
using HostTensor = Tensor<T, HostMemSpace>;

// Copies src's entries into dst's storage, from any memory space to any other (or the same one):
// a Kokkos::deep_copy, which fences as Kokkos does for copies between host and device. The shapes
// must be equal; otherwise throws distop::Error (op "deep_copy") naming both. dst keeps its
// storage; src and dst must not overlap unless they are the same tensor.
template <class T, class DstSpace, class SrcSpace>
void deep_copy(const Tensor<T, DstSpace>& dst, const Tensor<T, SrcSpace>& src) {
  DISTOP_CHECK(dst.shape() == src.shape(), "deep_copy", "cannot copy a tensor of shape ",
               src.shape().str(), " into one of shape ", dst.shape().str());
  if constexpr (std::is_same_v<DstSpace, SrcSpace>) {
    if (dst.data() == src.data()) return;
  }
  if (dst.numel() > 0) Kokkos::deep_copy(dst.view(), src.view());
}

// A new tensor in memory space Space holding a copy of t (of t's shape). Always a copy, also where
// Space is t's own space (as clone()).
template <class Space, class T, class SrcSpace>
Tensor<T, Space> to_space(const Tensor<T, SrcSpace>& t) {
  auto out = Tensor<T, Space>::uninitialized(t.shape());
  deep_copy(out, t);
  return out;
}

// A host copy of t (to_space<HostMemSpace>): for writing files or inspecting values.
template <class T, class SrcSpace>
HostTensor<T> to_host(const Tensor<T, SrcSpace>& t) {
  return to_space<HostMemSpace>(t);
}

// A copy of t in the default memory space (to_space<MemSpace>), where layers and operators take
// it: for loaded data and read files. On a host build this is a host copy.
template <class T, class SrcSpace>
Tensor<T> to_device(const Tensor<T, SrcSpace>& t) {
  return to_space<MemSpace>(t);
}

extern template class Tensor<float, MemSpace>;
extern template class Tensor<double, MemSpace>;
#if DISTOP_DEVICE_MEMORY_SPACE
extern template class Tensor<float, HostMemSpace>;
extern template class Tensor<double, HostMemSpace>;
#endif

}  // namespace distop
