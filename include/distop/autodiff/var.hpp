#pragma once
// Var<T>: a distributed tensor on the tape, with its gradient.

#include <memory>
#include <optional>

#include "distop/core/error.hpp"
#include "distop/dist/dist_tensor.hpp"
#include "distop/kernels/axpy.hpp"

namespace distop {

// A value and, once backward has reached it, the gradient of the loss with respect to it (a
// tensor of the same space). Copies refer to the same variable. A Var used by several operations
// accumulates the gradient each of them sends back. Parameters are Vars made with
// requires_grad = true; an operation records itself on the tape only if one of its inputs requires
// a gradient, and then its outputs do too.
template <class T>
class Var {
 public:
  Var() = default;
  explicit Var(DistTensor<T> value, bool requires_grad = false)
      : node_(std::make_shared<Node>(Node{std::move(value), std::nullopt, false, requires_grad})) {}

  bool defined() const noexcept { return node_ != nullptr; }
  // A Var is a handle: const refers to the handle, not to the variable it shares. value(),
  // space() and the gradient of an undefined (default-constructed) Var are errors.
  DistTensor<T>& value() const { return node().value; }
  const TensorSpace& space() const { return node().value.space(); }
  bool requires_grad() const noexcept { return node_ && node_->requires_grad; }

  bool has_grad() const noexcept { return node_ && node_->has_grad; }
  // The gradient; a zero tensor is made on first access.
  DistTensor<T>& grad() const {
    Node& n = node();
    if (!n.has_grad) {
      if (reusable_grad(n))
        n.grad->local().fill(T(0));
      else
        n.grad.emplace(n.value.space());
      n.has_grad = true;
    }
    return *n.grad;
  }
  // For a Var without a gradient yet: makes its gradient and returns it, for the caller to
  // overwrite every entry of (they are unspecified until then). The storage of the gradient that
  // zero_grad() forgot is reused when nothing else refers to it.
  DistTensor<T>& new_grad_for_overwrite() const {
    Node& n = node();
    DISTOP_CHECK(!n.has_grad, "Var::new_grad_for_overwrite", "the Var has a gradient already");
    if (!reusable_grad(n)) n.grad = DistTensor<T>::uninitialized(n.value.space());
    n.has_grad = true;
    return *n.grad;
  }
  // grad += g. Takes g's storage when there is no gradient yet (g must not be used afterwards).
  void accumulate_grad(DistTensor<T> g) const {
    Node& n = node();
    check_space(g, n.value.space(), "Var::accumulate_grad", "the gradient");
    if (!n.has_grad) {
      n.grad = std::move(g);
      n.has_grad = true;
    } else {
      kernels::axpy(T(1), g.local(), n.grad->local());
    }
  }
  // Forgets the gradient: the next accumulation starts from zero. Its storage is kept for that
  // next gradient (a training step then allocates no parameter gradients), unless something else
  // still refers to it; release_grad() frees it.
  void zero_grad() const noexcept {
    if (node_) node_->has_grad = false;
  }
  // Moves the gradient out, leaving the Var without one (a zero tensor if it had none). For a
  // tape entry handing a gradient on once nothing else will read it.
  DistTensor<T> take_grad() const {
    Node& n = node();
    DistTensor<T> g = n.has_grad ? std::move(*n.grad) : DistTensor<T>(n.value.space());
    n.grad.reset();
    n.has_grad = false;
    return g;
  }
  // Forgets the gradient and frees its storage.
  void release_grad() const noexcept {
    if (node_) {
      node_->grad.reset();
      node_->has_grad = false;
    }
  }
  bool same_as(const Var& other) const noexcept { return node_ == other.node_; }

 private:
  struct Node {
    DistTensor<T> value;
    std::optional<DistTensor<T>> grad;  // kept (unused) after zero_grad() for reuse
    bool has_grad;
    bool requires_grad;
  };
  Node& node() const {
    DISTOP_CHECK(node_ != nullptr, "Var", "use of an undefined (default-constructed) Var");
    return *node_;
  }
  // Whether the forgotten gradient's storage can hold the next one.
  static bool reusable_grad(const Node& n) noexcept {
    const std::optional<DistTensor<T>>& g = n.grad;
    return g && g->space() == n.value.space() && !g->local().empty() &&
           !g->local().shares_storage();
  }

  std::shared_ptr<Node> node_;
};

}  // namespace distop
