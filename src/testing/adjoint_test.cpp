#include "distop/testing/adjoint_test.hpp"

#include <cmath>
#include <sstream>

#include "distop/comm/mpi.hpp"
#include "distop/core/random.hpp"
#include "distop/kernels/axpy.hpp"
#include "distop/kernels/reduce.hpp"

namespace distop::testing {

std::string AdjointReport::str() const {
  std::ostringstream os;
  os.precision(17);
  os << (passed ? "PASS" : "FAIL") << ": <F x, y> = " << forward_inner
     << ", <x, F* y> = " << adjoint_inner << ", relative error " << relative_error << " (tolerance "
     << tolerance << ")";
  return os.str();
}

template <class T>
DistTensor<T> random_tensor(const TensorSpace& space, std::uint64_t seed) {
  const auto stream = random::mix(
      seed ^ random::mix(static_cast<std::uint64_t>(space.partition().parent_rank() + 1)));
  std::vector<T> values(static_cast<std::size_t>(space.local_shape().numel()));
  for (std::size_t i = 0; i < values.size(); ++i)
    values[i] = static_cast<T>(2.0 * random::uniform(stream, i) - 1.0);
  auto x = DistTensor<T>::uninitialized(space);
  x.local().copy_from(Tensor<T>::from_vector(space.local_shape(), values));
  return x;
}

template <class T>
AdjointReport adjoint_test(const LinearOperator<T>& op, std::uint64_t seed, double tolerance) {
  const MPI_Comm comm = op.domain().partition().parent();
  auto x = random_tensor<T>(op.domain(), seed);
  auto fx = op.apply(x);
  // y = z + s F x (AdjointReport): |F x|^2, |z|^2 and <F x, z> first.
  auto y = random_tensor<T>(op.range(), random::mix(seed + 1));
  double g[3] = {kernels::dot(fx.local(), fx.local()), kernels::dot(y.local(), y.local()),
                 kernels::dot(fx.local(), y.local())};
  DISTOP_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, g, 3, MPI_DOUBLE, MPI_SUM, comm), "adjoint_test");
  if (g[0] > 0 && y.local_numel() > 0) {
    const double s = (g[2] < 0 ? -1.0 : 1.0) * std::sqrt(g[1] / g[0]);
    kernels::axpy(static_cast<T>(s), fx.local(), y.local());
  }
  // <F x, y> before F* runs: an adjoint that hands back y's storage (a pass-through) may be
  // followed by writes into it.
  const double fx_y = kernels::dot(fx.local(), y.local());
  auto fty = op.apply_adjoint(y);
  // One allreduce for the four sums.
  double s[4] = {fx_y, kernels::dot(x.local(), fty.local()), kernels::dot(x.local(), x.local()),
                 kernels::dot(fty.local(), fty.local())};
  DISTOP_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, s, 4, MPI_DOUBLE, MPI_SUM, comm), "adjoint_test");
  AdjointReport r;
  r.forward_inner = s[0];
  r.adjoint_inner = s[1];
  const double diff = std::abs(s[0] - s[1]);
  const double scale = s[0] != 0 ? std::abs(s[0]) : std::sqrt(s[2] * s[3]);
  r.relative_error = scale > 0 ? diff / scale : diff;
  r.tolerance = tolerance;
  r.passed = r.relative_error <= tolerance;
  return r;
}

template DistTensor<float> random_tensor(const TensorSpace&, std::uint64_t);
template DistTensor<double> random_tensor(const TensorSpace&, std::uint64_t);
template AdjointReport adjoint_test(const LinearOperator<float>&, std::uint64_t, double);
template AdjointReport adjoint_test(const LinearOperator<double>&, std::uint64_t, double);

}  // namespace distop::testing
