#include "distop/ops/send_recv.hpp"

#include <climits>
#include <cstdint>
#include <string>
#include <vector>

#include "distop/comm/agree.hpp"

namespace distop {

namespace {

constexpr const char* kOp = "SendRecv";
// Forward and adjoint messages travel in opposite directions; distinct tags keep them apart even
// so.
constexpr int kForwardTag = 1;
constexpr int kAdjointTag = 2;

template <class T>
const char* type_name() {
  return sizeof(T) == sizeof(double) ? "double" : "float";
}

// SendRecv's agreement: a mismatch names the shapes each side asked for.
void agree_on_arguments(MPI_Comm comm, std::uint64_t h, const std::string& problem,
                        const std::string& mine) {
  comm::agree_on_arguments(comm, kOp, h, problem, "mismatched Send/Recv shapes: " + mine);
}

bool valid_extents(const Shape& shape) {
  if (shape.rank() < 1) return false;
  for (auto e : shape)
    if (e < 1) return false;
  return true;
}

}  // namespace

template <class T>
typename SendRecv<T>::Spaces SendRecv<T>::make_spaces(MPI_Comm comm, const Shape& shape, int src,
                                                      int dst) {
  int size = 0;
  DISTOP_MPI_CHECK(MPI_Comm_size(comm, &size), kOp);
  std::string problem;
  if (!valid_extents(shape)) {
    problem =
        "a tensor to send needs at least one axis and extents of at least 1, found " + shape.str();
  } else if (src < 0 || src >= size || dst < 0 || dst >= size) {
    problem = "ranks " + std::to_string(src) + " -> " + std::to_string(dst) +
              " out of range: the communicator has ranks 0.." + std::to_string(size - 1);
  }
  comm::Fingerprint fp;
  fp.add(sizeof(T)).add_all(shape.extents()).add(static_cast<std::uint64_t>(src));
  fp.add(static_cast<std::uint64_t>(dst));
  agree_on_arguments(comm, fp.value(), problem,
                     std::string("this rank asked to send a ") + type_name<T>() +
                         " tensor of shape " + shape.str() + " from rank " + std::to_string(src) +
                         " to rank " + std::to_string(dst));
  Partition ps(comm, Shape{1}, {src});
  Partition pd(comm, Shape{1}, {dst});
  const std::vector<int> whole(static_cast<std::size_t>(shape.rank()), -1);
  return {TensorSpace(ps, Decomposition::balanced(shape, ps.shape(), whole)), pd};
}

template <class T>
SendRecv<T>::SendRecv(MPI_Comm comm, const Shape& shape, int src, int dst)
    : SendRecv(make_spaces(comm, shape, src, dst)) {}

template <class T>
SendRecv<T>::SendRecv(const TensorSpace& src, const Partition& dst) : domain_(src) {
  const Partition& ps = src.partition();
  const Shape& global = src.global_shape();
  std::string problem;
  if (ps.size() != 1) {
    problem = "the source must be a partition of one rank, found " + ps.str();
  } else if (dst.size() != 1) {
    problem = "the destination must be a partition of one rank, found " + dst.str();
  } else if (global.numel() > INT_MAX) {
    problem = "a message of " + std::to_string(global.numel()) +
              " elements exceeds MPI's int count limit";
  } else {
    int same = MPI_UNEQUAL;
    DISTOP_MPI_CHECK(MPI_Comm_compare(ps.parent(), dst.parent(), &same), kOp);
    if (same != MPI_IDENT && same != MPI_CONGRUENT)
      problem = "the source and destination partitions come from different parent communicators";
  }
  comm::Fingerprint fp;
  fp.add(sizeof(T)).add_all(global.extents()).add_all(ps.shape().extents()).add_all(ps.ranks());
  fp.add_all(dst.shape().extents()).add_all(dst.ranks()).add_all(src.decomposition().axis_map());
  agree_on_arguments(ps.parent(), fp.value(), problem,
                     std::string("this rank asked to send a ") + type_name<T>() +
                         " tensor of shape " + global.str() + " from " + ps.str() + " to " +
                         dst.str());
  src_ = ps.ranks().front();
  dst_ = dst.ranks().front();
  rank_ = ps.parent_rank();
  // Mirror the source's decomposition where the grids agree, so that y lives in the space a user
  // would write for a tensor on dst; hold every axis whole otherwise.
  const std::vector<int> axis_map =
      dst.shape() == ps.shape() ? src.decomposition().axis_map()
                                : std::vector<int>(static_cast<std::size_t>(global.rank()), -1);
  range_ = TensorSpace(dst, Decomposition::balanced(global, dst.shape(), axis_map));
  comm_ = std::make_shared<const comm::Comm>(comm::Comm::duplicate(ps.parent()));
}

template <class T>
comm::Request SendRecv<T>::transfer(const DistTensor<T>& from, DistTensor<T>& to, int sender,
                                    int receiver, int tag) const {
  const std::int64_t n = domain_.global_shape().numel();
  if (rank_ == sender && sender == receiver) {
    comm::copy(from.data(), to.data(), n);
    return {};
  }
  if (rank_ == sender) return comm::isend(from.data(), n, receiver, tag, comm_->get());
  if (rank_ == receiver) return comm::irecv(to.data(), n, sender, tag, comm_->get());
  return {};
}

template <class T>
comm::Request SendRecv<T>::start_forward(const DistTensor<T>& x, DistTensor<T>& y) const {
  this->check_forward_args(x, y);
  return transfer(x, y, src_, dst_, kForwardTag);
}

template <class T>
comm::Request SendRecv<T>::start_adjoint(const DistTensor<T>& y, DistTensor<T>& x) const {
  this->check_adjoint_args(y, x);
  return transfer(y, x, dst_, src_, kAdjointTag);
}

template <class T>
void SendRecv<T>::forward(const DistTensor<T>& x, DistTensor<T>& y) const {
  start_forward(x, y).wait();
}

template <class T>
void SendRecv<T>::adjoint(const DistTensor<T>& y, DistTensor<T>& x) const {
  start_adjoint(y, x).wait();
}

template <class T>
CommStats SendRecv<T>::stats(int sender, int receiver) const {
  if (sender == receiver) return {};
  const std::int64_t bytes = domain_.global_shape().numel() * static_cast<std::int64_t>(sizeof(T));
  if (rank_ == sender) return {1, bytes, 0, 0};
  if (rank_ == receiver) return {0, 0, 1, bytes};
  return {};
}

template class SendRecv<float>;
template class SendRecv<double>;

}  // namespace distop
