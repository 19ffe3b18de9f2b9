#pragma once
// Tensor<T>: a dense, contiguous, row-major local tensor of any rank on a Kokkos View.

#include <Kokkos_Core.hpp>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "distop/core/error.hpp"
#include "distop/core/shape.hpp"

namespace distop {

// Where distop's tensors live and its kernels run: Kokkos' default execution space (Serial or
// OpenMP on the host; Cuda where Kokkos was built with it) and that space's memory.
using ExecSpace = Kokkos::DefaultExecutionSpace;
using MemSpace = ExecSpace::memory_space;
inline constexpr bool kHostAccessible =
    Kokkos::SpaceAccessibility<Kokkos::HostSpace, MemSpace>::accessible;

// A local tensor. Copies share storage, as Kokkos Views do; clone() makes a deep copy. The storage
// is one contiguous 1-D View of shape().numel() elements in row-major order, so data() can be
// handed to BLAS and MPI directly. A default-constructed Tensor is empty, of shape [0].
//
// Host storage comes from distop's pool of recycled blocks (DISTOP_HOST_CACHE_MB bounds what it
// keeps; see docs/performance.md): view() is then an unmanaged View over the block, valid while a
// Tensor sharing the storage lives. Device storage is a managed Kokkos View.
template <class T>
class Tensor {
 public:
  using value_type = T;
  using View = Kokkos::View<T*, MemSpace>;

  Tensor() : shape_{0} {}
  // A zero-filled tensor.
  explicit Tensor(Shape shape, const std::string& label = "distop::Tensor");
  // A tensor whose entries are left uninitialised, for outputs that are overwritten in full.
  static Tensor uninitialized(Shape shape, const std::string& label = "distop::Tensor");
  // A tensor holding a copy of host values (values.size() must equal shape.numel()).
  static Tensor from_vector(Shape shape, const std::vector<T>& values);

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
  // Copies src's entries into this tensor's storage; the element counts must match.
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

extern template class Tensor<float>;
extern template class Tensor<double>;

}  // namespace distop
