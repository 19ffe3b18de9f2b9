#pragma once
// Putting linear operators and the start of backward on the tape.

#include <memory>

#include "distop/autodiff/function.hpp"
#include "distop/autodiff/tape.hpp"
#include "distop/autodiff/var.hpp"
#include "distop/core/timers.hpp"
#include "distop/ops/linear_operator.hpp"

namespace distop {

// y = F x, recorded so that backward adds F* (dL/dy) to dL/dx. The operator is shared with the
// tape and must not change before backward. The adjoint runs on every rank even where no gradient
// reached y (it then sends zeros), because its messages are matched by other ranks' calls.
template <class T>
Var<T> apply(Tape& tape, std::shared_ptr<const LinearOperator<T>> op, const Var<T>& x) {
  Var<T> y;
  {
    const timers::Scope timer(timers::enabled() ? op->name() : std::string());
    y = Var<T>(op->apply(x.value()), x.requires_grad());
  }
  if (x.requires_grad()) {
    detail::TapeRecorder::record(
        tape, op->name(),
        [op, x, y, use = x.use()]() mutable {
          DistTensor<T> g = op->apply_adjoint(y.grad());  // grad(): zeros if none arrived
          // A pass-through adjoint hands back y's gradient itself: x must not take that storage,
          // or later contributions to x's gradient would change y's too.
          if (!x.has_grad() && g.local().shares_storage()) g = g.clone();
          x.accumulate_grad(std::move(g));
        },
        Tape::Kind::operator_adjoint);
  }
  return y;
}

// Seeds dL/dL = 1 on every entry of `loss` (each rank's component, under the sum convention the
// loss is the sum of its components) and replays the tape. A tape replays once: calling this again
// for the same loss, with nothing recorded since, is an error (it would add nothing to the
// gradients); record a new forward pass instead. Every rank reaches the same verdict, since all
// record the same entries.
template <class T>
void backward(Tape& tape, Var<T>& loss) {
  DISTOP_CHECK(!(tape.replayed() && loss.has_grad()), "backward",
               "the tape was replayed for this loss already and nothing was recorded since; a "
               "tape replays once, so run the forward pass again to get new gradients");
  loss.grad().local().fill(T(1));
  tape.backward();
}

// Replays the tape from a given output gradient: dL/d(output) = `grad` (a tensor of output's
// space), for an output that is not a scalar loss (PyTorch's output.backward(grad)). Every rank
// passes its own box of the gradient. The same once-only rule as above holds.
template <class T>
void backward(Tape& tape, Var<T>& output, const DistTensor<T>& grad) {
  DISTOP_CHECK(!(tape.replayed() && output.has_grad()), "backward",
               "the tape was replayed for this output already and nothing was recorded since; a "
               "tape replays once, so run the forward pass again to get new gradients");
  check_space(grad, output.space(), "backward", "the output gradient");
  output.zero_grad();
  output.accumulate_grad(grad.clone());
  tape.backward();
}

}  // namespace distop
