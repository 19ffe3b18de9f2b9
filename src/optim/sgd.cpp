#include "distop/optim/sgd.hpp"

#include <utility>

#include "distop/core/error.hpp"
#include "distop/kernels/axpy.hpp"

namespace distop::optim {

namespace {
void check_options(const SGDOptions& o) {
  DISTOP_CHECK(o.lr >= 0, "SGD", "learning rate must be >= 0, found ", o.lr);
  DISTOP_CHECK(o.momentum >= 0, "SGD", "momentum must be >= 0, found ", o.momentum);
  DISTOP_CHECK(o.weight_decay >= 0, "SGD", "weight decay must be >= 0, found ", o.weight_decay);
  DISTOP_CHECK(!o.nesterov || (o.momentum > 0 && o.dampening == 0), "SGD",
               "Nesterov momentum needs momentum > 0 and dampening 0, found momentum ", o.momentum,
               " and dampening ", o.dampening);
}
}  // namespace

template <class T>
SGD<T>::SGD(std::vector<Var<T>> parameters, SGDOptions options)
    : params_(std::move(parameters)), state_(params_.size()), options_(options) {
  check_options(options_);
  for (const auto& p : params_)
    DISTOP_CHECK(p.defined(), "SGD", "a parameter is an undefined (default-constructed) Var");
}

template <class T>
void SGD<T>::set_lr(double lr) {
  SGDOptions o = options_;
  o.lr = lr;
  check_options(o);
  options_ = o;
}

template <class T>
void SGD<T>::step() {
  const auto& o = options_;
  const T momentum = static_cast<T>(o.momentum);
  for (std::size_t i = 0; i < params_.size(); ++i) {
    Var<T>& p = params_[i];
    if (!p.has_grad()) continue;
    Tensor<T>& value = p.value().local();
    // g aliases the gradient unless it has to be changed, as PyTorch's out-of-place updates do.
    Tensor<T> g = p.grad().local();
    const bool modified = o.weight_decay != 0 || (o.momentum != 0 && o.nesterov);
    if (modified) g = g.clone();
    if (o.weight_decay != 0) kernels::axpy(static_cast<T>(o.weight_decay), value, g);
    if (o.momentum != 0) {
      State& s = state_[i];
      if (!s.has_buffer) {
        s.momentum_buffer = g.clone();
        s.has_buffer = true;
      } else {
        kernels::axpby(static_cast<T>(1 - o.dampening), g, momentum, s.momentum_buffer);
      }
      if (o.nesterov)
        kernels::axpy(momentum, s.momentum_buffer, g);
      else
        g = s.momentum_buffer;
    }
    kernels::axpy(static_cast<T>(-o.lr), g, value);
  }
}

template <class T>
void SGD<T>::zero_grad() {
  for (auto& p : params_) p.zero_grad();
}

template class SGD<float>;
template class SGD<double>;

}  // namespace distop::optim
