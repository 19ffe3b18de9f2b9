#include "distop/optim/sgd.hpp"

#include <cmath>
#include <utility>

#include "distop/core/error.hpp"
#include "distop/kernels/axpy.hpp"

namespace distop::optim {

namespace {
void check_options(const SGDOptions& o) {
  DISTOP_CHECK(o.lr >= 0 && std::isfinite(o.lr), "SGD",
               "learning rate must be finite and >= 0, found ", o.lr);
  DISTOP_CHECK(o.momentum >= 0 && std::isfinite(o.momentum), "SGD",
               "momentum must be finite and >= 0, found ", o.momentum);
  DISTOP_CHECK(std::isfinite(o.dampening), "SGD", "dampening must be finite, found ", o.dampening);
  DISTOP_CHECK(o.weight_decay >= 0 && std::isfinite(o.weight_decay), "SGD",
               "weight decay must be finite and >= 0, found ", o.weight_decay);
  DISTOP_CHECK(!o.nesterov || (o.momentum > 0 && o.dampening == 0), "SGD",
               "Nesterov momentum needs momentum > 0 and dampening 0, found momentum ", o.momentum,
               " and dampening ", o.dampening);
}
}  // namespace

template <class T>
SGD<T>::SGD(std::vector<Var<T>> parameters, SGDOptions options)
    : params_(std::move(parameters)), momentum_(params_.size()), options_(options) {
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
void SGD<T>::set_options(const SGDOptions& options) {
  check_options(options);
  options_ = options;
}

template <class T>
std::vector<std::optional<Tensor<T>>> SGD<T>::momentum_buffers() const {
  std::vector<std::optional<Tensor<T>>> out(momentum_.size());
  for (std::size_t i = 0; i < momentum_.size(); ++i)
    if (momentum_[i]) out[i] = momentum_[i]->clone();
  return out;
}

template <class T>
void SGD<T>::set_momentum_buffers(const std::vector<std::optional<Tensor<T>>>& buffers) {
  constexpr const char* op = "SGD::set_momentum_buffers";
  DISTOP_CHECK(buffers.size() == params_.size(), op, "expected one entry per parameter (",
               params_.size(), "), found ", buffers.size());
  for (std::size_t i = 0; i < buffers.size(); ++i) {
    if (!buffers[i]) continue;
    const Shape& expected = params_[i].value().local().shape();
    DISTOP_CHECK(buffers[i]->shape() == expected, op, "the momentum buffer of parameter ", i,
                 " has shape ", buffers[i]->shape().str(), ", expected the local shape ",
                 expected.str(), " of the parameter's box");
  }
  std::vector<std::optional<Tensor<T>>> copies(buffers.size());
  for (std::size_t i = 0; i < buffers.size(); ++i)
    if (buffers[i]) copies[i] = buffers[i]->clone();
  momentum_ = std::move(copies);
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
      std::optional<Tensor<T>>& buf = momentum_[i];
      if (!buf)
        buf = g.clone();
      else
        kernels::axpby(static_cast<T>(1 - o.dampening), g, momentum, *buf);
      if (o.nesterov)
        kernels::axpy(momentum, *buf, g);
      else
        g = *buf;
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
