#pragma once
// Internal to distop: the definitions of Tensor<T, MemorySpace>'s members, for the explicit
// instantiations in tensor.cpp (and a test that instantiates them for a memory space of its own).

#include <cmath>
#include <cstring>
#include <type_traits>

#include "distop/core/tensor.hpp"
#include "storage.hpp"

namespace distop {

namespace detail {
inline void check_extents(const Shape& shape, const char* op) {
  for (auto e : shape) DISTOP_CHECK(e >= 0, op, "negative extent in shape ", shape.str());
}
}  // namespace detail

template <class T, class S>
Tensor<T, S> Tensor<T, S>::allocate(Shape shape, const std::string& label) {
  const auto n = static_cast<std::size_t>(shape.numel());
  if constexpr (std::is_same_v<S, Kokkos::HostSpace>) {
    if (n == 0) return Tensor(std::move(shape), View(static_cast<T*>(nullptr), 0), nullptr);
    auto storage = detail::allocate_host_storage(n * sizeof(T));
    View v(static_cast<T*>(storage.get()), n);
    return Tensor(std::move(shape), std::move(v), std::move(storage));
  } else {
    View v(Kokkos::view_alloc(Kokkos::WithoutInitializing, label), n);
    return Tensor(std::move(shape), std::move(v), nullptr);
  }
}

template <class T, class S>
Tensor<T, S>::Tensor(Shape shape, const std::string& label) {
  detail::check_extents(shape, "Tensor");
  *this = allocate(std::move(shape), label);
  fill(T(0));
}

template <class T, class S>
Tensor<T, S> Tensor<T, S>::uninitialized(Shape shape, const std::string& label) {
  detail::check_extents(shape, "Tensor::uninitialized");
  return allocate(std::move(shape), label);
}

template <class T, class S>
Tensor<T, S> Tensor<T, S>::from_vector(Shape shape, const std::vector<T>& values) {
  DISTOP_CHECK(static_cast<std::int64_t>(values.size()) == shape.numel(), "Tensor::from_vector",
               "expected ", shape.numel(), " values for shape ", shape.str(), ", found ",
               values.size());
  Tensor t = uninitialized(std::move(shape));
  // Read only; not a View of const T, which some Kokkos 3 DeepCopy specialisations (their
  // LogicalMemorySpace's) cannot take as a source.
  Kokkos::View<T*, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>> src(
      const_cast<T*>(values.data()), values.size());
  Kokkos::deep_copy(t.view_, src);
  return t;
}

template <class T, class S>
Tensor<T, S> Tensor<T, S>::clone() const {
  Tensor t = uninitialized(shape_);
  Kokkos::deep_copy(t.view_, view_);
  return t;
}

template <class T, class S>
Tensor<T, S> Tensor<T, S>::reshaped(Shape shape) const {
  DISTOP_CHECK(shape.numel() == numel(), "Tensor::reshaped", "cannot view ", shape_.str(), " (",
               numel(), " elements) as ", shape.str());
  return Tensor(std::move(shape), view_, storage_);
}

template <class T, class S>
Tensor<T, S> Tensor<T, S>::slice(std::int64_t offset, Shape shape) const {
  const std::int64_t n = shape.numel();
  DISTOP_CHECK(offset >= 0 && n >= 0 && offset + n <= numel(), "Tensor::slice", "entries [", offset,
               ", ", offset + n, ") do not lie within the ", numel(), " of ", shape_.str());
  View v = Kokkos::subview(view_, Kokkos::make_pair(offset, offset + n));
  return Tensor(std::move(shape), std::move(v), storage_);
}

template <class T, class S>
void Tensor<T, S>::copy_from(const Tensor& src) {
  DISTOP_CHECK(src.numel() == numel(), "Tensor::copy_from", "expected ", numel(), " elements (",
               shape_.str(), "), found ", src.numel(), " (", src.shape().str(), ")");
  if (src.data() != data()) Kokkos::deep_copy(view_, src.view_);
}

template <class T, class S>
void Tensor<T, S>::fill(T value) {
  if constexpr (std::is_same_v<S, Kokkos::HostSpace>) {
    if (value == T(0) && !std::signbit(value)) {  // +0.0 is all-zero bits in IEEE 754
      if (numel() > 0)
        std::memset(static_cast<void*>(data()), 0, static_cast<std::size_t>(numel()) * sizeof(T));
      return;
    }
  }
  Kokkos::deep_copy(view_, value);
}

template <class T, class S>
std::vector<T> Tensor<T, S>::to_vector() const {
  std::vector<T> out(static_cast<std::size_t>(numel()));
  Kokkos::View<T*, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>> dst(out.data(),
                                                                                   out.size());
  Kokkos::deep_copy(dst, view_);
  return out;
}

}  // namespace distop
