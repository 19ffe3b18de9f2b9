#include "distop/autodiff/nonblocking.hpp"

#include <functional>
#include <string>
#include <utility>

#include "distop/autodiff/function.hpp"
#include "distop/comm/collectives.hpp"
#include "distop/comm/watchdog.hpp"
#include "distop/core/error.hpp"

namespace distop {

// What a transfer started on the tape holds until both of its directions have completed.
template <class T>
struct Pending<T>::State {
  // Posts the adjoint transfer of dy into dx and returns its request.
  using PostAdjoint = std::function<comm::Request(const DistTensor<T>& dy, DistTensor<T>& dx)>;

  const Tape* tape = nullptr;
  std::string name;  // of the operator
  Var<T> x;
  DistTensor<T> y;  // filled by the forward transfer; handed to the Var that wait returns
  comm::Request forward;
  bool waited = false;
  TensorSpace domain;
  TensorSpace range;
  PostAdjoint post_adjoint;
  DistTensor<T> dy;  // read by the adjoint transfer
  DistTensor<T> dx;  // written by it
  comm::Request backward;
  bool posted = false;
};

namespace {

template <class T>
using State = typename Pending<T>::State;

// What a watchdog report written during one of the transfer's waits names
// (comm::OperatorScope): the operator, the direction and the spaces.
template <class T>
std::string describe_transfer(const void* state, bool adjoint) {
  const auto& s = *static_cast<const State<T>*>(state);
  const auto space = [](const TensorSpace& t) {
    return t.global_shape().str() + " on partition " + t.partition().shape().str();
  };
  return s.name + (adjoint ? " adjoint" : " forward") + " (domain " + space(s.domain) + "; range " +
         space(s.range) + ")";
}

template <class T>
std::shared_ptr<void> hold(const DistTensor<T>& t) {
  return std::make_shared<DistTensor<T>>(t);
}

// The common part of every start: keeps the buffers of the forward transfer alive until it
// completes and records start's entry, the adjoint of the post: wait for the reverse transfer
// that wait's entry posted, then accumulate dx.
template <class T>
std::shared_ptr<State<T>> started(Tape& tape, std::string name, const Var<T>& x, DistTensor<T> y,
                                  comm::Request forward, TensorSpace domain, TensorSpace range,
                                  typename State<T>::PostAdjoint post_adjoint) {
  auto s = std::make_shared<State<T>>();
  s->tape = &tape;
  s->name = std::move(name);
  s->x = x;
  s->y = std::move(y);
  s->forward = std::move(forward);
  s->forward.keep_alive(hold(x.value()));
  s->forward.keep_alive(hold(s->y));
  s->domain = std::move(domain);
  s->range = std::move(range);
  s->post_adjoint = std::move(post_adjoint);
  if (x.requires_grad()) {
    detail::TapeRecorder::record(
        tape, s->name + ".start",
        [s, use = x.use()]() {
          DISTOP_CHECK(
              s->posted, s->name + ".start",
              "backward reached a transfer whose wait was not recorded on the same tape after "
              "its start");
          {
            const comm::OperatorScope scope(s.get(), &describe_transfer<T>, true);
            s->backward.wait();
          }
          s->x.accumulate_grad(std::move(s->dx));
          s->dx = DistTensor<T>();
          s->dy = DistTensor<T>();
        },
        Tape::Kind::operator_adjoint);
  }
  return s;
}

}  // namespace

template <class T>
bool Pending<T>::pending() const noexcept {
  return state_ && !state_->waited;
}

template <class T>
Pending<T> start(Tape& tape, std::shared_ptr<const SendRecv<std::type_identity_t<T>>> op,
                 const Var<T>& x) {
  DISTOP_CHECK(op != nullptr, "SendRecv.start", "no operator given");
  auto y = DistTensor<T>::uninitialized(op->range());
  auto request = op->start_forward(x.value(), y);
  auto post = [op](const DistTensor<T>& dy, DistTensor<T>& dx) {
    return op->start_adjoint(dy, dx);
  };
  return Pending<T>(started<T>(tape, op->name(), x, std::move(y), std::move(request), op->domain(),
                               op->range(), std::move(post)));
}

template <class T>
Pending<T> start(Tape& tape, std::shared_ptr<const AllSumReduce<std::type_identity_t<T>>> op,
                 const Var<T>& x) {
  DISTOP_CHECK(op != nullptr, "AllSumReduce.start", "no operator given");
  check_space(x.value(), op->domain(), "AllSumReduce.start", "the input");
  auto y = DistTensor<T>::uninitialized(op->range());
  comm::Request request;
  if (op->comm() != MPI_COMM_NULL)
    request = comm::iallreduce_sum(x.value().data(), y.data(), y.local_numel(), op->comm());
  auto post = [op](const DistTensor<T>& dy, DistTensor<T>& dx) {
    if (op->comm() == MPI_COMM_NULL) return comm::Request();
    return comm::iallreduce_sum(dy.data(), dx.data(), dx.local_numel(), op->comm());
  };
  return Pending<T>(started<T>(tape, op->name(), x, std::move(y), std::move(request), op->domain(),
                               op->range(), std::move(post)));
}

template <class T>
Var<T> wait(Tape& tape, Pending<T>& pending) {
  DISTOP_CHECK(pending.state_ != nullptr, "wait", "this Pending was not made by start");
  auto s = pending.state_;
  const std::string op = s->name + ".wait";
  DISTOP_CHECK(!s->waited, op, "this transfer was already waited for");
  DISTOP_CHECK(s->tape == &tape, op, "wait is on another tape than the start");
  s->waited = true;
  pending.state_.reset();
  {
    const comm::OperatorScope scope(s.get(), &describe_transfer<T>, false);
    s->forward.wait();
  }
  Var<T> y(std::move(s->y), s->x.requires_grad());
  s->y = DistTensor<T>();
  if (!s->x.requires_grad()) return y;
  // wait's entry, the adjoint of the wait: post the reverse transfer of dy (zeros if no gradient
  // reached y, so that the partner's transfer is matched all the same).
  detail::TapeRecorder::record(
      tape, op,
      [s, y]() {
        s->dy = y.has_grad() ? y.grad() : DistTensor<T>(s->range);
        s->dx = DistTensor<T>::uninitialized(s->domain);
        s->backward = s->post_adjoint(s->dy, s->dx);
        s->backward.keep_alive(hold(s->dy));
        s->backward.keep_alive(hold(s->dx));
        s->posted = true;
      },
      Tape::Kind::operator_adjoint);
  return y;
}

#define DISTOP_INSTANTIATE(T)                                                                 \
  template class Pending<T>;                                                                  \
  template Pending<T> start<T>(Tape&, std::shared_ptr<const SendRecv<T>>, const Var<T>&);     \
  template Pending<T> start<T>(Tape&, std::shared_ptr<const AllSumReduce<T>>, const Var<T>&); \
  template Var<T> wait<T>(Tape&, Pending<T>&);
DISTOP_INSTANTIATE(float)
DISTOP_INSTANTIATE(double)
#undef DISTOP_INSTANTIATE

}  // namespace distop
