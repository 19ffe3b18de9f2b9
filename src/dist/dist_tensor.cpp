#include "distop/dist/dist_tensor.hpp"

#include <cmath>

#include "distop/comm/agree.hpp"
#include "distop/comm/mpi.hpp"
#include "distop/kernels/reduce.hpp"

namespace distop {

template <class T>
DistTensor<T>::DistTensor(TensorSpace space)
    : space_(std::move(space)), local_(space_.local_shape()) {}

template <class T>
DistTensor<T>::DistTensor(TensorSpace space, Tensor<T> local)
    : space_(std::move(space)), local_(std::move(local)) {
  const bool ok = local_.shape() == space_.local_shape();
  comm::agree_ok(space_.partition().parent(), "DistTensor", ok,
                 "local tensor of shape " + local_.shape().str() + " where " + space_.str() +
                     " expects " + space_.local_shape().str());
}

template <class T>
DistTensor<T> DistTensor<T>::uninitialized(TensorSpace space) {
  auto local = Tensor<T>::uninitialized(space.local_shape());
  return DistTensor(std::move(space), std::move(local), Unchecked{});
}

template <class T>
DistTensor<T> DistTensor<T>::from_local(TensorSpace space, Tensor<T> local) {
  DISTOP_CHECK(local.shape() == space.local_shape(), "DistTensor::from_local",
               "local tensor of shape ", local.shape().str(), " where ", space.str(), " expects ",
               space.local_shape().str());
  return DistTensor(std::move(space), std::move(local), Unchecked{});
}

template <class T>
DistTensor<T> DistTensor<T>::reinterpreted(TensorSpace space) const {
  for (int r = 0; r < space.partition().parent_size(); ++r)
    DISTOP_CHECK(space.local_shape_of_rank(r) == space_.local_shape_of_rank(r),
                 "DistTensor::reinterpreted", "rank ", r, " holds ",
                 space_.local_shape_of_rank(r).str(), " in ", space_.str(), " but ",
                 space.local_shape_of_rank(r).str(), " in ", space.str());
  return DistTensor(std::move(space), local_, Unchecked{});
}

template <class T>
void check_space(const DistTensor<T>& x, const TensorSpace& expected, std::string_view op,
                 const char* what) {
  DISTOP_CHECK(x.space() == expected, std::string(op), what, " lives in ", x.space().str(),
               ", expected ", expected.str());
}

template <class T>
double inner(const DistTensor<T>& a, const DistTensor<T>& b) {
  check_space(b, a.space(), "inner", "the second argument");
  double local = kernels::dot(a.local(), b.local());
  DISTOP_MPI_CHECK(
      MPI_Allreduce(MPI_IN_PLACE, &local, 1, MPI_DOUBLE, MPI_SUM, a.space().partition().parent()),
      "inner");
  return local;
}

template <class T>
double norm(const DistTensor<T>& a) {
  return std::sqrt(inner(a, a));
}

#define DISTOP_INSTANTIATE(T)                                                           \
  template class DistTensor<T>;                                                         \
  template double inner(const DistTensor<T>&, const DistTensor<T>&);                    \
  template double norm(const DistTensor<T>&);                                           \
  template void check_space(const DistTensor<T>&, const TensorSpace&, std::string_view, \
                            const char*);
DISTOP_INSTANTIATE(float)
DISTOP_INSTANTIATE(double)
#undef DISTOP_INSTANTIATE

}  // namespace distop
