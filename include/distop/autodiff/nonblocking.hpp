#pragma once
// Nonblocking transfers on the tape: start ... wait, with compute in between that overlaps the
// communication in the forward pass and again in the backward pass.

#include <memory>
#include <type_traits>

#include "distop/autodiff/tape.hpp"
#include "distop/autodiff/var.hpp"
#include "distop/ops/all_sum_reduce.hpp"
#include "distop/ops/send_recv.hpp"

namespace distop {

// The adjoint-MPI rule for nonblocking calls: Isend + Wait <-> Wait + Irecv and
// Iallreduce + Wait <-> Wait + Iallreduce. start and wait each record one tape entry, so the
// backward pass, replaying the tape in reverse, posts the reverse transfer where the forward pass
// waited and waits for it where the forward pass posted:
//
//   forward, in program order          backward, in reverse order
//   start  "SendRecv.start"            wait's entry  "SendRecv.wait":  posts the transfer of dy:
//     src: MPI_Isend(x)                   dst: MPI_Isend(dy);  src: MPI_Irecv(dx)
//     dst: MPI_Irecv(y)                   (src == dst: dx = dy, copied at once)
//     (src == dst: y = x, copied at once)
//   ... compute (overlaps) ...         ... the compute's adjoints (overlap) ...
//   wait   "SendRecv.wait":            start's entry "SendRecv.start": MPI_Wait on the reverse
//     MPI_Wait; y is in place             transfer, then dL/dx += dx (on src)
//
//   start  "AllSumReduce.start":       wait's entry  "AllSumReduce.wait":
//     MPI_Iallreduce(x -> y, sum)         MPI_Iallreduce(dy -> dx, sum) (A is self-adjoint)
//   wait   "AllSumReduce.wait":        start's entry "AllSumReduce.start":
//     MPI_Wait                            MPI_Wait, then dL/dx += dx
//
// Ranks outside the operator (not src or dst; outside the partition) post nothing, but record
// the same entries. Entries are recorded only when x requires a gradient, which must then be so on
// every rank of the parent communicator (as for every operation on the tape); wait's entry always
// posts its transfer, sending zeros for a dy that received no gradient, so that the ranks stay
// matched. A y produced by wait requires a gradient when x does.
//
// Buffers: x's value must not be modified between start and wait (MPI reads it while the send or
// the reduction is in flight), and y exists only once wait returns. The Pending and the tape
// entries hold every buffer a transfer uses until it completes, in both directions. Every rank
// calls start and wait in the same order (SPMD), as for the blocking collectives; transfers on
// different operators may be in flight together and waited for in any order.
//
// Destroying a Pending that was never waited for does not block: the transfer is abandoned (see
// comm::Request), which leaves the partner's side unmatched; it is a programming error.
template <class T>
class Pending {
 public:
  Pending() = default;
  // Whether start made it and wait has not consumed it yet.
  bool pending() const noexcept;
  struct State;

 private:
  explicit Pending(std::shared_ptr<State> state) : state_(std::move(state)) {}
  std::shared_ptr<State> state_;

  template <class U>
  friend Pending<U> start(Tape&, std::shared_ptr<const SendRecv<std::type_identity_t<U>>>,
                          const Var<U>&);
  template <class U>
  friend Pending<U> start(Tape&, std::shared_ptr<const AllSumReduce<std::type_identity_t<U>>>,
                          const Var<U>&);
  template <class U>
  friend Var<U> wait(Tape&, Pending<U>&);
};

// Posts the transfer of x (MPI_Isend on src, MPI_Irecv on dst) and returns its Pending. x lives in
// op->domain(). The operator is shared with the tape and must not change before backward.
template <class T>
Pending<T> start(Tape& tape, std::shared_ptr<const SendRecv<std::type_identity_t<T>>> op,
                 const Var<T>& x);
// Posts y = A x as MPI_Iallreduce over each sub-grid of op (x lives in op->domain()).
template <class T>
Pending<T> start(Tape& tape, std::shared_ptr<const AllSumReduce<std::type_identity_t<T>>> op,
                 const Var<T>& x);
// Completes the transfer and returns y (in the operator's range); the Pending is consumed. Must
// be called on the tape start recorded on, once.
template <class T>
Var<T> wait(Tape& tape, Pending<T>& pending);

extern template class Pending<float>;
extern template class Pending<double>;

}  // namespace distop
