#pragma once
// LinearOperator<T>: the contract every data-movement primitive meets.

#include <cstdint>
#include <string>

#include "distop/comm/watchdog.hpp"
#include "distop/dist/dist_tensor.hpp"
#include "distop/dist/tensor_space.hpp"

namespace distop {

// What one application of an operator moves on this rank: the messages it sends and receives and
// their payload in bytes. Local copies are not messages. Operators built on an MPI collective count
// the collective's logical volume, as written in their doc comment (for instance a broadcast root
// sends one message to each other member of its group).
struct CommStats {
  std::int64_t messages_sent = 0;
  std::int64_t bytes_sent = 0;
  std::int64_t messages_received = 0;
  std::int64_t bytes_received = 0;

  CommStats& operator+=(const CommStats& o) {
    messages_sent += o.messages_sent;
    bytes_sent += o.bytes_sent;
    messages_received += o.messages_received;
    bytes_received += o.bytes_received;
    return *this;
  }
  friend bool operator==(const CommStats&, const CommStats&) = default;
};

// A linear map F from domain() to range(), with its adjoint F*, defined by
// <F x, y> = <x, F* y> under the spaces' inner products (the sum convention, docs/adjoints.md).
//
// - forward(x, y): y = F x. Overwrites y, which must already live in range() (a DistTensor made
//   from range()); x must live in domain(). Collective as the operator's doc comment says.
// - adjoint(y, x): x = F* y. Overwrites x (in domain()); y lives in range().
// - x and y never alias. Plans are built by the constructor (collective); forward and adjoint
//   move payload only, and check spaces from metadata alone, so a mismatch raises the same Error
//   on every rank before any message is sent.
//
// The scalar type is a template parameter: an operator moves float or double tensors.
template <class T>
class LinearOperator {
 public:
  virtual ~LinearOperator() = default;
  virtual const TensorSpace& domain() const = 0;
  virtual const TensorSpace& range() const = 0;
  virtual void forward(const DistTensor<T>& x, DistTensor<T>& y) const = 0;
  virtual void adjoint(const DistTensor<T>& y, DistTensor<T>& x) const = 0;
  virtual std::string name() const = 0;
  // What forward and adjoint each move on this rank (metadata only; no messages). Operators that
  // move nothing between ranks keep the default, zero.
  virtual CommStats forward_stats() const { return {}; }
  virtual CommStats adjoint_stats() const { return {}; }

  // Convenience: a new tensor in range() holding F x, and one in domain() holding F* y. A hang
  // watchdog's report written meanwhile names the operator, the direction and the spaces
  // (comm::OperatorScope; a few atomic operations per call).
  DistTensor<T> apply(const DistTensor<T>& x) const {
    const comm::OperatorScope scope(this, &describe_for_watchdog, false);
    auto y = DistTensor<T>::uninitialized(range());
    forward(x, y);
    return y;
  }
  DistTensor<T> apply_adjoint(const DistTensor<T>& y) const {
    const comm::OperatorScope scope(this, &describe_for_watchdog, true);
    auto x = DistTensor<T>::uninitialized(domain());
    adjoint(y, x);
    return x;
  }

  // "<name> forward (domain [4, 120] on partition [1, 1]; range [4, 120] on partition [2, 1])"
  // (or adjoint) for the operator `op`, a LinearOperator<T>: what comm::OperatorScope names.
  static std::string describe_for_watchdog(const void* op, bool adjoint) {
    const auto& f = *static_cast<const LinearOperator<T>*>(op);
    const auto space = [](const TensorSpace& s) {
      return s.global_shape().str() + " on partition " + s.partition().shape().str();
    };
    return f.name() + (adjoint ? " adjoint" : " forward") + " (domain " + space(f.domain()) +
           "; range " + space(f.range()) + ")";
  }

 protected:
  // Both tensors must live in the operator's spaces; raises the same Error on every rank if not.
  void check_forward_args(const DistTensor<T>& x, const DistTensor<T>& y) const {
    if (x.space() == domain() && y.space() == range()) return;  // no strings on the hot path
    check_space(x, domain(), name() + ".forward", "the input");
    check_space(y, range(), name() + ".forward", "the output");
  }
  void check_adjoint_args(const DistTensor<T>& y, const DistTensor<T>& x) const {
    if (y.space() == range() && x.space() == domain()) return;
    check_space(y, range(), name() + ".adjoint", "the input");
    check_space(x, domain(), name() + ".adjoint", "the output");
  }
};

}  // namespace distop
