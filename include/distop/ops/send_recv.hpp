#pragma once
// SendRecv<T>: moves a whole tensor from one rank to another (a point-to-point Send/Recv pair).

#include <mpi.h>

#include <memory>

#include "distop/comm/collectives.hpp"
#include "distop/comm/mpi.hpp"
#include "distop/ops/linear_operator.hpp"

namespace distop {

// A tensor moved from source rank s to destination rank d of a parent communicator.
//   domain: a tensor on a one-rank partition {s} (s holds all of it).
//   range:  the same global shape on a one-rank partition {d}.
//   forward (y = S x): s sends x, d receives it into y (overwrite). s == d is a local copy.
//   adjoint (x = S* y): the reverse transfer, d sends y back and s receives it into x (overwrite).
//     Proof: <S x, y> = <x_s, y_d> (the only components) = <x, S* y>.
//   collective over: the parent communicator at construction (all its ranks call, with the same
//     arguments); forward and adjoint involve s and d alone, every other rank returns at once.
//   messages: one of numel * sizeof(T) bytes, on a duplicate of the parent owned by the operator
//     (so that in-flight transfers never meet other operators' messages); none when s == d.
// Bad input (ranks that passed different shapes, partitions or scalar types, partitions of more
// than one rank, ranks out of range) raises the same Error on every rank at construction.
template <class T>
class SendRecv final : public LinearOperator<T> {
 public:
  // Collective over the parent of src's partition, which must have one rank, as must dst; both
  // partitions come from the same parent.
  SendRecv(const TensorSpace& src, const Partition& dst);
  // A tensor of `shape` from rank `src` of comm to rank `dst`; collective over comm.
  SendRecv(MPI_Comm comm, const Shape& shape, int src, int dst);

  const TensorSpace& domain() const override { return domain_; }
  const TensorSpace& range() const override { return range_; }
  void forward(const DistTensor<T>& x, DistTensor<T>& y) const override;
  void adjoint(const DistTensor<T>& y, DistTensor<T>& x) const override;
  std::string name() const override { return "SendRecv"; }
  // Forward: s sends 1 message of numel * sizeof(T) bytes, d receives it; adjoint: the reverse.
  // Zero when s == d, and on every other rank.
  CommStats forward_stats() const override { return stats(src_, dst_); }
  CommStats adjoint_stats() const override { return stats(dst_, src_); }

  // The source and destination as ranks of the parent communicator.
  int source() const noexcept { return src_; }
  int destination() const noexcept { return dst_; }

  // The nonblocking halves of forward and adjoint: post the transfer (MPI_Isend on the sending
  // rank, MPI_Irecv on the receiving one; the copy at once when s == d) and return the request
  // whose wait() completes it. The argument buffers must stay alive and untouched until then.
  comm::Request start_forward(const DistTensor<T>& x, DistTensor<T>& y) const;
  comm::Request start_adjoint(const DistTensor<T>& y, DistTensor<T>& x) const;

 private:
  struct Spaces {
    TensorSpace src;
    Partition dst;
  };
  // Agrees on the arguments over comm, then builds the two one-rank partitions.
  static Spaces make_spaces(MPI_Comm comm, const Shape& shape, int src, int dst);
  explicit SendRecv(const Spaces& spaces) : SendRecv(spaces.src, spaces.dst) {}
  comm::Request transfer(const DistTensor<T>& from, DistTensor<T>& to, int sender, int receiver,
                         int tag) const;
  CommStats stats(int sender, int receiver) const;

  TensorSpace domain_;
  TensorSpace range_;
  std::shared_ptr<const comm::Comm> comm_;
  int src_ = -1;
  int dst_ = -1;
  int rank_ = -1;
};

extern template class SendRecv<float>;
extern template class SendRecv<double>;

}  // namespace distop
