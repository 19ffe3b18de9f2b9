#pragma once
// DistTensor<T>: this rank's box of a tensor in a TensorSpace.

#include <cstdint>
#include <string>
#include <string_view>

#include "distop/core/tensor.hpp"
#include "distop/dist/tensor_space.hpp"

namespace distop {

// A distributed tensor as seen from one rank: its space and the local box the space gives this
// rank (empty outside the partition). Copies share storage, like Tensor; clone() copies deeply.
template <class T>
class DistTensor {
 public:
  DistTensor() = default;
  // Zero-filled.
  explicit DistTensor(TensorSpace space);
  // Wraps existing local storage. Collective over the space's parent: the local shape is checked
  // on every rank and a mismatch anywhere is an error everywhere.
  DistTensor(TensorSpace space, Tensor<T> local);
  // Local entries left uninitialised, for outputs that are overwritten in full.
  static DistTensor uninitialized(TensorSpace space);
  // Wraps existing local storage without communicating: only this rank's box is checked (an Error
  // on this rank alone if its shape is not the space's local shape). For storage laid out by a
  // plan that every rank follows alike, such as views into a flat buffer.
  static DistTensor from_local(TensorSpace space, Tensor<T> local);

  const TensorSpace& space() const noexcept { return space_; }
  Tensor<T>& local() noexcept { return local_; }
  const Tensor<T>& local() const noexcept { return local_; }
  T* data() const noexcept { return local_.data(); }
  std::int64_t local_numel() const noexcept { return local_.numel(); }

  DistTensor clone() const { return DistTensor(space_, local_.clone(), Unchecked{}); }
  // The same storage seen in another space that gives every rank a box of the same shape (for
  // example the same ranks under a reshaped grid). Not collective: the check uses metadata only.
  DistTensor reinterpreted(TensorSpace space) const;

 private:
  struct Unchecked {};
  DistTensor(TensorSpace space, Tensor<T> local, Unchecked)
      : space_(std::move(space)), local_(std::move(local)) {}
  TensorSpace space_;
  Tensor<T> local_;
};

// <a, b>: the sum over every rank of the local products, accumulated in double. Collective over the
// parent communicator of the spaces, which must be equal.
template <class T>
double inner(const DistTensor<T>& a, const DistTensor<T>& b);
// sqrt(<a, a>).
template <class T>
double norm(const DistTensor<T>& a);
// Throws the same Error on every rank unless x lives in `expected` (metadata only, no messages).
template <class T>
void check_space(const DistTensor<T>& x, const TensorSpace& expected, std::string_view op,
                 const char* what);

extern template class DistTensor<float>;
extern template class DistTensor<double>;

}  // namespace distop
