#include "distop/core/tensor.hpp"

namespace distop {

namespace {
void check_extents(const Shape& shape, const char* op) {
  for (auto e : shape) DISTOP_CHECK(e >= 0, op, "negative extent in shape ", shape.str());
}
}  // namespace

template <class T>
Tensor<T>::Tensor(Shape shape, const std::string& label) : shape_(std::move(shape)) {
  check_extents(shape_, "Tensor");
  view_ = View(label, static_cast<std::size_t>(shape_.numel()));
}

template <class T>
Tensor<T> Tensor<T>::uninitialized(Shape shape, const std::string& label) {
  check_extents(shape, "Tensor::uninitialized");
  View v(Kokkos::view_alloc(Kokkos::WithoutInitializing, label),
         static_cast<std::size_t>(shape.numel()));
  return Tensor(std::move(shape), std::move(v));
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
  return Tensor(std::move(shape), view_);
}

template <class T>
void Tensor<T>::copy_from(const Tensor& src) {
  DISTOP_CHECK(src.numel() == numel(), "Tensor::copy_from", "expected ", numel(),
               " elements (", shape_.str(), "), found ", src.numel(), " (", src.shape().str(), ")");
  if (src.data() != data()) Kokkos::deep_copy(view_, src.view_);
}

template <class T>
void Tensor<T>::fill(T value) {
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
