#pragma once
// Var<T>: a distributed tensor on the tape, with its gradient.

#include <array>
#include <functional>
#include <memory>
#include <optional>
#include <utility>

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
  struct Node;

 public:
  Var() = default;
  explicit Var(DistTensor<T> value, bool requires_grad = false)
      : node_(std::make_shared<Node>(
            Node{std::move(value), std::nullopt, false, requires_grad, false, 0, {}})) {}

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
  // grad += g. Takes g's storage when there is no gradient yet (g must not be used afterwards),
  // unless the gradient's storage is pinned: g is then copied into it.
  void accumulate_grad(DistTensor<T> g) const {
    Node& n = node();
    check_space(g, n.value.space(), "Var::accumulate_grad", "the gradient");
    if (!n.has_grad) {
      if (n.pinned)
        n.grad->local().copy_from(g.local());
      else
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
    if (n.pinned) {  // the storage stays where it is pinned; a copy leaves
      DistTensor<T> g = n.has_grad ? n.grad->clone() : DistTensor<T>(n.value.space());
      n.has_grad = false;
      return g;
    }
    DistTensor<T> g = n.has_grad ? std::move(*n.grad) : DistTensor<T>(n.value.space());
    n.grad.reset();
    n.has_grad = false;
    return g;
  }
  // Forgets the gradient and frees its storage (unpinning it).
  void release_grad() const noexcept {
    if (node_) {
      node_->grad.reset();
      node_->has_grad = false;
      node_->pinned = false;
    }
  }
  bool same_as(const Var& other) const noexcept { return node_ == other.node_; }

  // Gradients in storage that something else owns (a data-parallel reducer's flat bucket, of
  // which `storage` is a view in the Var's space): from now on every gradient of this Var is
  // written there. The first contribution of a backward pass is copied in (never taken over),
  // later ones are added in place, zero_grad() keeps the storage for the next pass. The current
  // gradient, if any, is copied into the storage. unpin_grad() ends it (the Var keeps a copy).
  void pin_grad(DistTensor<T> storage) const {
    Node& n = node();
    check_space(storage, n.value.space(), "Var::pin_grad", "the gradient storage");
    if (n.has_grad) storage.local().copy_from(n.grad->local());
    n.grad = std::move(storage);
    n.pinned = true;
  }
  void unpin_grad() const {
    Node& n = node();
    if (!n.pinned) return;
    n.pinned = false;
    if (n.grad) n.grad = n.grad->clone();
  }
  bool grad_pinned() const noexcept { return node_ && node_->pinned; }

  // Knowing when a gradient is final. An operation that will send a gradient to this Var holds a
  // Use from the time it is recorded until its adjoint has run (its tape entry is destroyed then).
  // When the last Use of the Var goes, the ready hook (if one is set) runs: in a backward replay,
  // the Var's gradient has then received every contribution. Data parallelism starts reducing the
  // gradient there, while the rest of the backward pass computes.
  class Use {
   public:
    Use() = default;
    Use(const Use&) = delete;
    Use& operator=(const Use&) = delete;
    Use(Use&& other) noexcept : node_(std::move(other.node_)) {}
    Use& operator=(Use&& other) noexcept {
      if (this != &other) {
        release();
        node_ = std::move(other.node_);
      }
      return *this;
    }
    ~Use() { release(); }

   private:
    friend class Var;
    explicit Use(std::shared_ptr<Node> node) : node_(std::move(node)) { ++node_->uses; }
    void release() noexcept {
      if (!node_) return;
      std::shared_ptr<Node> n = std::move(node_);
      if (--n->uses == 0 && n->ready_hook) {
        try {
          n->ready_hook();
        } catch (...) {
          // A hook must not throw through a destructor; it reports its failures itself.
        }
      }
    }
    std::shared_ptr<Node> node_;
  };
  // A Use of this Var: counted only when a ready hook is set (otherwise an empty token).
  Use use() const { return node_ && node_->ready_hook ? Use(node_) : Use(); }
  bool has_ready_hook() const noexcept { return node_ && node_->ready_hook; }
  // Sets (or, with an empty function, clears) the hook run when the last Use goes.
  void set_ready_hook(std::function<void()> hook) const { node().ready_hook = std::move(hook); }

 private:
  struct Node {
    DistTensor<T> value;
    std::optional<DistTensor<T>> grad;  // kept (unused) after zero_grad() for reuse
    bool has_grad;
    bool requires_grad;
    bool pinned = false;  // grad is storage owned elsewhere (pin_grad)
    int uses = 0;         // live Uses
    std::function<void()> ready_hook;
  };
  Node& node() const {
    DISTOP_CHECK(node_ != nullptr, "Var", "use of an undefined (default-constructed) Var");
    return *node_;
  }
  // Whether the forgotten gradient's storage can hold the next one.
  static bool reusable_grad(const Node& n) noexcept {
    const std::optional<DistTensor<T>>& g = n.grad;
    return g && g->space() == n.value.space() &&
           (n.pinned || (!g->local().empty() && !g->local().shares_storage()));
  }

  std::shared_ptr<Node> node_;
};

// The Uses of several Vars (undefined ones give empty tokens), for a tape entry to hold.
template <class T, class... V>
std::array<typename Var<T>::Use, sizeof...(V)> uses_of(const V&... vars) {
  return {(vars.defined() ? vars.use() : typename Var<T>::Use())...};
}

}  // namespace distop
