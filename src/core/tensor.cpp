#include "distop/core/tensor.hpp"

#include <cmath>
#include <cstring>
#include <type_traits>

#include "storage.hpp"

namespace distop {

namespace {
void check_extents(const Shape& shape, const char* op) {
  for (auto e : shape) DISTOP_CHECK(e >= 0, op, "negative extent in shape ", shape.str());
}
}  // namespace

template <class T>
Tensor<T> Tensor<T>::allocate(Shape shape, const std::string& label) {
  const auto n = static_cast<std::size_t>(shape.numel());
  if constexpr (std::is_same_v<MemSpace, Kokkos::HostSpace>) {
    if (n == 0) return Tensor(std::move(shape), View(static_cast<T*>(nullptr), 0), nullptr);
    auto storage = detail::allocate_host_storage(n * sizeof(T));
    View v(static_cast<T*>(storage.get()), n);
    return Tensor(std::move(shape), std::move(v), std::move(storage));
  } else {
    View v(Kokkos::view_alloc(Kokkos::WithoutInitializing, label), n);
    return Tensor(std::move(shape), std::move(v), nullptr);
  }
}

template <class T>
Tensor<T>::Tensor(Shape shape, const std::string& label) {
  check_extents(shape, "Tensor");
  *this = allocate(std::move(shape), label);
  fill(T(0));
}

template <class T>
Tensor<T> Tensor<T>::uninitialized(Shape shape, const std::string& label) {
  check_extents(shape, "Tensor::uninitialized");
  return allocate(std::move(shape), label);
}

template <class T>
Tensor<T> Tensor<T>::from_vector(Shape shape, const std::vector<T>& values) {
  DISTOP_CHECK(static_cast<std::int64_t>(values.size()) == shape.numel(), "Tensor::from_vector",
               "expected ", shape.numel(), " values for shape ", shape.str(), ", found ",
               values.size());
  Tensor t = uninitialized(std::move(shape));
  Kokkos::View<const T*, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>> src(
      values.data(), values.size());
  Kokkos::deep_copy(t.view_, src);
  return t;
}

template <class T>
Tensor<T> Tensor<T>::clone() const {
  Tensor t = uninitialized(shape_);
  Kokkos::deep_copy(t.view_, view_);
  return t;
}

template <class T>
Tensor<T> Tensor<T>::reshaped(Shape shape) const {
  DISTOP_CHECK(shape.numel() == numel(), "Tensor::reshaped", "cannot view ", shape_.str(), " (",
               numel(), " elements) as ", shape.str());
  return Tensor(std::move(shape), view_, storage_);
}

template <class T>
Tensor<T> Tensor<T>::slice(std::int64_t offset, Shape shape) const {
  const std::int64_t n = shape.numel();
  DISTOP_CHECK(offset >= 0 && n >= 0 && offset + n <= numel(), "Tensor::slice", "entries [", offset,
               ", ", offset + n, ") do not lie within the ", numel(), " of ", shape_.str());
  View v = Kokkos::subview(view_, Kokkos::make_pair(offset, offset + n));
  return Tensor(std::move(shape), std::move(v), storage_);
}

template <class T>
void Tensor<T>::copy_from(const Tensor& src) {
  DISTOP_CHECK(src.numel() == numel(), "Tensor::copy_from", "expected ", numel(), " elements (",
               shape_.str(), "), found ", src.numel(), " (", src.shape().str(), ")");
  if (src.data() != data()) Kokkos::deep_copy(view_, src.view_);
}

template <class T>
void Tensor<T>::fill(T value) {
  if constexpr (std::is_same_v<MemSpace, Kokkos::HostSpace>) {
    if (value == T(0) && !std::signbit(value)) {  // +0.0 is all-zero bits in IEEE 754
      if (numel() > 0)
        std::memset(static_cast<void*>(data()), 0, static_cast<std::size_t>(numel()) * sizeof(T));
      return;
    }
  }
  Kokkos::deep_copy(view_, value);
}

template <class T>
std::vector<T> Tensor<T>::to_vector() const {
  std::vector<T> out(static_cast<std::size_t>(numel()));
  Kokkos::View<T*, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>> dst(out.data(),
                                                                                   out.size());
  Kokkos::deep_copy(dst, view_);
  return out;
}

template class Tensor<float>;
template class Tensor<double>;

}  // namespace distop
