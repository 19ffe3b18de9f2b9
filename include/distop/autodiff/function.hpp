#pragma once
// Defining a differentiable operation: make_function runs the operation's forward computation and
// records its backward function on the tape with whatever the forward saved (what
// torch.autograd.Function is to PyTorch). Every layer, loss and operation of distop is written
// this way.
//
//   // y = x * x, elementwise.
//   template <class T>
//   Var<T> square(Tape& tape, const Var<T>& x) {
//     return make_function<T>(tape, "square", {x}, [&] {
//       DistTensor<T> y = ...;                                // y = x * x
//       return Computed{std::move(y), [](const DistTensor<T>& dy, Gradients<T>& grads) {
//         const Tensor<T>& xv = grads.input(0).value().local();
//         grads.accumulate(0, [&](T beta, Tensor<T>& g) {
//           // g = beta g + 2 x dy
//         });
//       }};
//     });
//   }
//
// The forward computation runs inside a trace span named after the operation (core/trace.hpp), so
// a timeline shows every operation's forward and, named alike, its backward. It returns the output
// and the backward function, which saves what it needs by capture (intermediate tensors the
// forward computed, say). The backward runs once, when backward() replays the tape, and is
// destroyed right after, releasing what it saved. The inputs are kept alive by the tape entry:
// grads.input(i).value() is the saved input.

#include <array>
#include <cstddef>
#include <initializer_list>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "distop/autodiff/tape.hpp"
#include "distop/autodiff/var.hpp"
#include "distop/core/error.hpp"
#include "distop/core/trace.hpp"

namespace distop {

// v.grad += (what `write` computes), without a temporary: `write(beta, g)` must overwrite g with
// beta g + the contribution, and is called with beta = 1 on v's existing gradient, or with beta =
// 0 on fresh uninitialised storage that becomes v's gradient. If `write` throws, v is left
// without a half-written gradient.
template <class T, class Write>
void accumulate_grad(const Var<T>& v, Write&& write) {
  if (v.has_grad()) {
    write(T(1), v.grad().local());
  } else {
    DistTensor<T>& g = v.new_grad_for_overwrite();
    try {
      write(T(0), g.local());
    } catch (...) {
      v.zero_grad();
      throw;
    }
  }
}

// x.grad += y.grad, for an operation whose output y holds x's entries as they are (y's boxes are
// x's; only the global view may differ). For a backward function that runs after which nothing
// reads y's gradient: when x has no gradient yet, x takes y's gradient storage instead of a copy,
// unless something else still refers to that storage.
template <class T>
void pass_grad(const Var<T>& y, const Var<T>& x) {
  const bool same_space = y.space() == x.space();
  auto as_x = [&](DistTensor<T> g) { return same_space ? g : g.reinterpreted(x.space()); };
  if (x.has_grad())
    x.accumulate_grad(as_x(y.grad()));  // added in place, y's gradient only read
  else if (!y.grad().local().shares_storage())
    x.accumulate_grad(as_x(y.take_grad()));
  else
    x.accumulate_grad(as_x(y.grad().clone()));
}

namespace detail {

// Up to N elements held in place, more on the heap: what make_function's tape entries hold (an
// operation's inputs, outputs and Uses, a backward's pass-throughs), so that recording and
// replaying an operation of a few inputs allocates nothing.
template <class E, std::size_t N>
class InlineVector {
 public:
  InlineVector() = default;
  InlineVector(std::initializer_list<E> list) {
    for (const E& e : list) push_back(e);
  }
  // Implicit, so that a std::vector may be passed where an InlineVector is taken.
  InlineVector(std::vector<E> v) {  // NOLINT(google-explicit-constructor)
    if (v.size() > N) {
      heap_ = std::move(v);
      on_heap_ = true;
    } else {
      for (E& e : v) push_back(std::move(e));
    }
  }

  void push_back(E e) {
    if (!on_heap_ && size_ < N) {
      in_place_[size_++] = std::move(e);
      return;
    }
    if (!on_heap_) {
      heap_.reserve(2 * N);
      for (std::size_t i = 0; i < size_; ++i) heap_.push_back(std::move(in_place_[i]));
      on_heap_ = true;
    }
    heap_.push_back(std::move(e));
  }
  void clear() noexcept {
    for (std::size_t i = 0; i < size_; ++i) in_place_[i] = E();
    size_ = 0;
    heap_.clear();
    on_heap_ = false;
  }
  std::size_t size() const noexcept { return on_heap_ ? heap_.size() : size_; }
  bool empty() const noexcept { return size() == 0; }
  E* data() noexcept { return on_heap_ ? heap_.data() : in_place_.data(); }
  const E* data() const noexcept { return on_heap_ ? heap_.data() : in_place_.data(); }
  E& operator[](std::size_t i) noexcept { return data()[i]; }
  const E& operator[](std::size_t i) const noexcept { return data()[i]; }
  E* begin() noexcept { return data(); }
  E* end() noexcept { return data() + size(); }
  const E* begin() const noexcept { return data(); }
  const E* end() const noexcept { return data() + size(); }

 private:
  std::array<E, N> in_place_{};
  std::size_t size_ = 0;  // used entries of in_place_
  std::vector<E> heap_;
  bool on_heap_ = false;
};

}  // namespace detail

// The Vars an operation depends on, as make_function takes them: a braced list ({x, w}) or a
// std::vector<Var<T>>. Up to four are held without allocating.
template <class T>
using FunctionInputs = detail::InlineVector<Var<T>, 4>;

// The inputs' gradients, as a backward function sees them: input i is the i-th Var passed to
// make_function. Contributions are added to what the input's gradient already holds (a Var used by
// several operations sums what each sends back).
template <class T>
class Gradients {
 public:
  std::size_t size() const noexcept { return inputs_.size(); }
  // Whether input i wants a gradient. Contributions to one that does not are ignored, so a
  // backward function may skip computing them.
  bool required(std::size_t i) const { return input(i).requires_grad(); }
  // The input itself (its value, saved by the operation's recording).
  const Var<T>& input(std::size_t i) const {
    DISTOP_CHECK(i < inputs_.size(), "Gradients", "input ", i, " of an operation with ",
                 inputs_.size(), " inputs");
    return inputs_[i];
  }
  // grad_i += what `write(beta, g)` writes (see accumulate_grad).
  template <class Write>
  void accumulate(std::size_t i, Write&& write) {
    if (required(i)) accumulate_grad(input(i), std::forward<Write>(write));
  }
  // grad_i += g, taking g's storage when input i has no gradient yet. g must live in input i's
  // space (an Error otherwise).
  void add(std::size_t i, DistTensor<T> g) {
    if (required(i)) input(i).accumulate_grad(std::move(g));
  }
  // grad_i += the gradient of output `o` as it is (a pass-through: output o's boxes are input i's).
  // Applied when the backward function returns, so that it may still read dy; the last
  // pass-through of an output then takes that output's gradient storage instead of a copy.
  void add_output_grad(std::size_t i, std::size_t o = 0) {
    DISTOP_CHECK(o < outputs_.size(), "Gradients", "output ", o, " of an operation with ",
                 outputs_.size(), " outputs");
    if (required(i)) pending_.push_back({i, o});
  }
  // Carries out the pass-throughs; make_function calls it after the backward function.
  void finish() {
    for (std::size_t k = 0; k < pending_.size(); ++k) {
      const auto [i, o] = pending_[k];
      bool last = true;
      for (std::size_t m = k + 1; m < pending_.size(); ++m) last = last && pending_[m].second != o;
      const Var<T>& x = input(i);
      const Var<T>& y = outputs_[o];
      if (last) {
        pass_grad(y, x);
      } else {
        DistTensor<T> g = y.grad();
        if (!(y.space() == x.space())) g = g.reinterpreted(x.space());
        x.accumulate_grad(x.has_grad() ? std::move(g) : g.clone());  // y's storage stays y's
      }
    }
    pending_.clear();
  }

  // Made by make_function for the duration of one backward call (it refers to its inputs and
  // outputs without owning them).
  Gradients(std::span<const Var<T>> inputs, std::span<const Var<T>> outputs)
      : inputs_(inputs), outputs_(outputs) {}

 private:
  std::span<const Var<T>> inputs_;
  std::span<const Var<T>> outputs_;
  detail::InlineVector<std::pair<std::size_t, std::size_t>, 2> pending_;  // (input, output)
};

// What an operation's forward computation hands make_function: the output value(s) and the
// backward function. `Values` is DistTensor<T> (one output) or std::vector<DistTensor<T>>
// (several).
//   One output:  backward(const DistTensor<T>& dy, Gradients<T>& grads)
//   Several:     backward(std::span<const DistTensor<T>* const> dys, Gradients<T>& grads),
//                dys[o] being output o's gradient, or nullptr for an output no gradient reached.
template <class Values, class Backward>
struct Computed {
  Values value;
  Backward backward;
};
template <class Values, class Backward>
Computed(Values, Backward) -> Computed<Values, Backward>;

struct FunctionOptions {
  // The backward sends or receives messages. Unless collective, backward is not called at all when
  // no output received a gradient. A collective operation has its backward called on every rank
  // whatever reached it, so that its messages are matched: dy (or dys) then holds zero tensors in
  // place of missing gradients, and backward must contribute to every required input (zeros
  // included) so that whether an input has a gradient stays the same on every rank.
  bool collective = false;
};

namespace detail {

template <class T, class Values>
struct IsTensorVector : std::false_type {};
template <class T>
struct IsTensorVector<T, std::vector<DistTensor<T>>> : std::true_type {};

// Tape::record, for distop's autodiff layer (make_function, apply, the nonblocking transfers).
struct TapeRecorder {
  template <class F>
  static void record(Tape& tape, std::string name, F&& backward,
                     Tape::Kind kind = Tape::Kind::compute) {
    tape.record(std::move(name), std::forward<F>(backward), kind);
  }
};

// Records the operation of make_function once its outputs exist.
template <class T, class Backward>
void record_function(Tape& tape, std::string name, FunctionInputs<T> inputs,
                     InlineVector<Var<T>, 1> outputs, Backward backward, bool collective) {
  // Each watched input's Use lasts until the adjoint has run: then its gradient has this
  // contribution. Only Vars with a ready hook are counted (outside data-parallel training, none).
  InlineVector<typename Var<T>::Use, 4> uses;
  for (const auto& x : inputs)
    if (x.has_ready_hook()) uses.push_back(x.use());
  TapeRecorder::record(
      tape, std::move(name),
      [inputs = std::move(inputs), outputs = std::move(outputs), backward = std::move(backward),
       collective, uses = std::move(uses)]() mutable {
        // One output's gradient pointer in place; several on the heap.
        InlineVector<const DistTensor<T>*, 1> dys;
        bool any = false;
        for (const auto& y : outputs) {
          dys.push_back(y.has_grad() || collective ? &y.grad() : nullptr);  // zeros if none
          any = any || y.has_grad();
        }
        if (any || collective) {
          Gradients<T> grads{std::span<const Var<T>>(inputs.data(), inputs.size()),
                             std::span<const Var<T>>(outputs.data(), outputs.size())};
          backward(std::span<const DistTensor<T>* const>(dys.data(), dys.size()), grads);
          grads.finish();
        }
        // The inputs' gradients have this operation's contribution: their Uses go, the last
        // input's first (a ready hook sees the same order whatever the input count).
        for (std::size_t i = uses.size(); i-- > 0;) uses[i] = typename Var<T>::Use();
      });
}

}  // namespace detail

// A differentiable operation: runs `forward` (callable as forward() or forward(bool recording),
// returning a Computed: the output value(s) and the backward function) inside a trace span named
// `name`, and, when any input requires a gradient, records the backward function on the tape as
// `name`. `recording` tells the forward whether the backward will run at all, so that it can skip
// saving what only the backward needs. Returns the output as a Var<T> (one output) or a
// std::vector<Var<T>> (several), each requiring a gradient when any input does. The inputs are
// the Vars the outputs depend on differentiably ({x, w}, or a std::vector<Var<T>>); input i is
// grads.input(i) in the backward. Recording an operation of up to four inputs and one output
// allocates nothing besides what its forward and backward allocate.
template <class T, class Forward>
auto make_function(Tape& tape, std::string_view name, FunctionInputs<T> inputs, Forward&& forward,
                   FunctionOptions options = {}) {
  bool record = false;
  for (const auto& x : inputs) {
    DISTOP_CHECK(x.defined(), std::string(name),
                 "an input is an undefined (default-constructed) Var");
    record = record || x.requires_grad();
  }
  std::string op(name);
  const trace::Compute span(op.c_str());
#ifdef DISTOP_SMPI
  const detail::OpHookScope hook(op.c_str(), false);
#endif
  auto computed = [&] {
    if constexpr (std::is_invocable_v<Forward&, bool>)
      return forward(record);
    else
      return forward();
  }();
  using Values = decltype(computed.value);
  using Backward = decltype(computed.backward);
  if constexpr (detail::IsTensorVector<T, Values>::value) {
    static_assert(
        std::is_invocable_v<Backward&, std::span<const DistTensor<T>* const>, Gradients<T>&>,
        "make_function: with several outputs the backward must be callable as "
        "f(std::span<const DistTensor<T>* const>, Gradients<T>&)");
    std::vector<Var<T>> outputs;
    outputs.reserve(computed.value.size());
    for (auto& v : computed.value) outputs.emplace_back(std::move(v), record);
    if (record)
      detail::record_function<T>(tape, std::move(op), std::move(inputs), outputs,
                                 std::move(computed.backward), options.collective);
    return outputs;
  } else {
    static_assert(std::is_same_v<Values, DistTensor<T>>,
                  "make_function: the forward must return Computed{value, backward} with a "
                  "DistTensor<T> value or a std::vector<DistTensor<T>> of values");
    static_assert(std::is_invocable_v<Backward&, const DistTensor<T>&, Gradients<T>&>,
                  "make_function: the backward must be callable as "
                  "f(const DistTensor<T>& dy, Gradients<T>&)");
    Var<T> y(std::move(computed.value), record);
    if (record) {
      detail::record_function<T>(
          tape, std::move(op), std::move(inputs), {y},
          [backward = std::move(computed.backward)](std::span<const DistTensor<T>* const> dys,
                                                    Gradients<T>& grads) mutable {
            backward(*dys[0], grads);
          },
          options.collective);
    }
    return y;
  }
}

}  // namespace distop
