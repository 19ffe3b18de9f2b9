#include "distop/nn/dropout.hpp"

#include <utility>

#include "common.hpp"
#include "distop/core/random.hpp"
#include "distop/core/trace.hpp"
#include "distop/kernels/dropout.hpp"

namespace distop::nn {

namespace {

void check_probability(double p) {
  DISTOP_CHECK(p >= 0 && p <= 1, "dropout", "the drop probability must lie in [0, 1], found ", p);
}

}  // namespace

template <class T>
Var<T> dropout(Tape& tape, const Var<T>& x, double p, std::uint64_t seed, bool training) {
  check_probability(p);
  if (!training || p == 0) return x;
  return make_function<T>(tape, "dropout", {x}, [&] {
    const TensorSpace& xs = x.space();
    auto y = DistTensor<T>::uninitialized(xs);
    kernels::dropout(x.value().local(), xs.global_shape(), xs.local_offset(), p, seed, T(0),
                     y.local());
    return Computed{std::move(y), [p, seed](const DistTensor<T>& dy, Gradients<T>& grads) {
                      const TensorSpace& s = grads.input(0).space();
                      grads.accumulate(0, [&](T beta, Tensor<T>& dx) {
                        kernels::dropout(dy.local(), s.global_shape(), s.local_offset(), p, seed,
                                         beta, dx);
                      });
                    }};
  });
}

template <class T>
Dropout<T>::Dropout(double p, DropoutOptions options)
    : p_(p), seed_(options.seed), calls_(std::make_shared<std::int64_t>(0)) {
  check_probability(p);
  this->register_count("calls", calls_, /*persistent=*/false);
}

template <class T>
Var<T> Dropout<T>::forward(Tape& tape, const Var<T>& x) {
  const trace::Compute span("Dropout", this->registered_path());
  if (!this->training()) return x;
  const auto k = static_cast<std::uint64_t>((*calls_)++);
  return dropout(tape, x, p_, random::bits(seed_, k), true);
}

template Var<float> dropout(Tape&, const Var<float>&, double, std::uint64_t, bool);
template Var<double> dropout(Tape&, const Var<double>&, double, std::uint64_t, bool);
template class Dropout<float>;
template class Dropout<double>;

}  // namespace distop::nn
