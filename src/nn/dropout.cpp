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

template <class T>
void collect_dropouts(Module<T>& m, const std::string& name,
                      std::vector<std::pair<std::string, Dropout<T>*>>& out) {
  if (auto* d = dynamic_cast<Dropout<T>*>(&m)) out.emplace_back(name, d);
  for (const auto& [child_name, child] : m.named_children())
    collect_dropouts(*child, name.empty() ? child_name : name + "." + child_name, out);
}

}  // namespace

template <class T>
Var<T> dropout(Tape& tape, const Var<T>& x, double p, std::uint64_t seed, bool training) {
  const trace::Compute span("dropout");
  check_probability(p);
  if (!training || p == 0) return x;
  const TensorSpace& xs = x.space();
  auto y_value = DistTensor<T>::uninitialized(xs);
  kernels::dropout(x.value().local(), xs.global_shape(), xs.local_offset(), p, seed, T(0),
                   y_value.local());
  Var<T> y(std::move(y_value), x.requires_grad());
  if (!x.requires_grad()) return y;
  tape.record("dropout", [xin = x, y, p, seed, use = x.use()]() {
    if (!y.has_grad()) return;
    const TensorSpace& s = xin.space();
    accumulate_grad(xin, [&](T beta, Tensor<T>& dx) {
      kernels::dropout(y.grad().local(), s.global_shape(), s.local_offset(), p, seed, beta, dx);
    });
  });
  return y;
}

template <class T>
Dropout<T>::Dropout(double p, DropoutOptions options) : p_(p), seed_(options.seed) {
  check_probability(p);
}

template <class T>
Var<T> Dropout<T>::forward(Tape& tape, const Var<T>& x) {
  const trace::Compute span("Dropout", this->registered_path());
  if (!this->training()) return x;
  const std::uint64_t k = calls_++;
  return dropout(tape, x, p_, random::bits(seed_, k), true);
}

template <class T>
std::vector<std::pair<std::string, Dropout<T>*>> named_dropouts(Module<T>& model) {
  std::vector<std::pair<std::string, Dropout<T>*>> out;
  collect_dropouts(model, "", out);
  return out;
}

template Var<float> dropout(Tape&, const Var<float>&, double, std::uint64_t, bool);
template Var<double> dropout(Tape&, const Var<double>&, double, std::uint64_t, bool);
template class Dropout<float>;
template class Dropout<double>;
template std::vector<std::pair<std::string, Dropout<float>*>> named_dropouts(Module<float>&);
template std::vector<std::pair<std::string, Dropout<double>*>> named_dropouts(Module<double>&);

}  // namespace distop::nn
