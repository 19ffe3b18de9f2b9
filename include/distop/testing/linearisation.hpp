#pragma once
// Adjoint-testing a layer: its linearisation with respect to one variable, as a LinearOperator.

#include <functional>
#include <string>

#include "distop/autodiff/apply.hpp"
#include "distop/autodiff/tape.hpp"
#include "distop/autodiff/var.hpp"
#include "distop/ops/linear_operator.hpp"

namespace distop::testing {

// The map dp -> J dp of a computation g that is affine in the variable p (a layer's input, weight
// or bias, with everything else held fixed), with J* computed by the tape. Passing it to
// adjoint_test checks that the layer's recorded backward is the exact adjoint of its forward. Only
// for g affine in p (a linear or convolution layer in any of its inputs): for any other g,
// g(dp) - g(0) is not linear in dp and the test means nothing; check such a g's gradients with
// testing::gradcheck (testing/gradcheck.hpp).
//   forward(dp, y):  p = dp, y = g() - g() at p = 0 (which removes the constant part).
//   adjoint(y, dp):  runs g on the tape, seeds the output gradient with y, replays the tape and
//                    returns p's gradient (zero if nothing reached p).
// `p` must require a gradient; g is collective as the layer is.
template <class T>
class TapeLinearisation final : public LinearOperator<T> {
 public:
  using Function = std::function<Var<T>(Tape&)>;
  TapeLinearisation(Var<T> p, TensorSpace range, Function g, std::string name = "TapeLinearisation")
      : p_(std::move(p)), range_(std::move(range)), g_(std::move(g)), name_(std::move(name)) {}

  const TensorSpace& domain() const override { return p_.space(); }
  const TensorSpace& range() const override { return range_; }
  std::string name() const override { return name_; }

  void forward(const DistTensor<T>& dp, DistTensor<T>& y) const override {
    this->check_forward_args(dp, y);
    Tape tape;
    p_.value().local().copy_from(dp.local());
    auto at_dp = g_(tape).value().clone();
    p_.value().local().fill(T(0));
    auto at_zero = g_(tape).value();
    tape.clear();
    y.local().copy_from(at_dp.local());
    kernels::axpy(T(-1), at_zero.local(), y.local());
  }

  void adjoint(const DistTensor<T>& y, DistTensor<T>& dp) const override {
    this->check_adjoint_args(y, dp);
    Tape tape;
    p_.zero_grad();
    auto out = g_(tape);
    out.grad().local().copy_from(y.local());
    tape.backward();
    if (p_.has_grad()) {
      dp.local().copy_from(p_.grad().local());
    } else {
      dp.local().fill(T(0));
    }
    p_.zero_grad();
  }

 private:
  mutable Var<T> p_;
  TensorSpace range_;
  Function g_;
  std::string name_;
};

}  // namespace distop::testing
