#pragma once
// Dropout on the tape, with a mask that does not depend on the partitioning: the function
// nn::dropout and the module nn::Dropout<T>.

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "distop/autodiff/tape.hpp"
#include "distop/autodiff/var.hpp"
#include "distop/nn/module.hpp"

namespace distop::nn {

// PyTorch's dropout: in training, each entry is zeroed with probability p and the others scaled by
// 1 / (1 - p); y lives in x's space. The mask comes from counter-based random numbers keyed by
// (seed, the entry's global row-major index) (kernels/dropout.hpp), so a distributed tensor and its
// one-rank counterpart, and replicated copies, drop the same entries; the caller draws fresh masks
// by passing a fresh seed each step (say, a base seed mixed with the step number). Not training, or
// p = 0: the identity, returning x itself (nothing recorded). Error unless 0 <= p <= 1.
//
// Local (no messages). Recorded when x requires a gradient: dx = m dy with the same mask m (the
// mask is recomputed from the seed, not stored).
template <class T>
Var<T> dropout(Tape& tape, const Var<T>& x, double p, std::uint64_t seed, bool training = true);

// Options of a Dropout module, for designated initialisers: `{.seed = 7}`.
struct DropoutOptions {
  // The masks are a function of this seed and the call count alone; give each Dropout of a model
  // its own.
  std::uint64_t seed = 0;
};

// PyTorch's nn.Dropout as a module: forward applies nn::dropout with probability p in training
// mode (Module::training()) and is the identity, returning x itself, in evaluation mode.
//
// Each call in training mode draws a new mask: call number k (counted from 0) uses the seed
// random::bits(options.seed, k), and the count then goes up by one (at p = 0 too, so that it
// counts training calls whatever p is). Calls in evaluation mode neither draw nor count. So the
// masks are a function of (seed, k) and of each entry's global index only: the same on every rank
// that holds a replica of the module, and the same at any partitioning of the input.
//
// The call count is state: a run resumed from a checkpoint continues its masks exactly only if the
// count is restored too. It is the module's non-persistent count buffer "calls" (Module's
// NamedBuffer): not in state_dict() (PyTorch's dropout has no state, and a state_dict of this
// model must load into a PyTorch model of the same names), but saved and restored by checkpoints
// (io/checkpoint.hpp) like any buffer.
//
//   nn::Dropout<float> drop(0.5, {.seed = 7});
//   auto h = drop.forward(tape, x);   // training: a new mask each call; after model.eval(): x
template <class T>
class Dropout : public Module<T> {
 public:
  // Error unless 0 <= p <= 1.
  explicit Dropout(double p, DropoutOptions options = {});

  double p() const noexcept { return p_; }
  std::uint64_t seed() const noexcept { return seed_; }
  // The number of calls made in training mode so far (the next call's k).
  std::uint64_t calls() const noexcept { return static_cast<std::uint64_t>(*calls_); }
  // Sets the call count: the next call in training mode is call `calls`.
  void set_calls(std::uint64_t calls) noexcept { *calls_ = static_cast<std::int64_t>(calls); }

  // Not to be called on one module from several threads at once (it counts the calls).
  Var<T> forward(Tape& tape, const Var<T>& x);

 private:
  double p_;
  std::uint64_t seed_;
  std::shared_ptr<std::int64_t> calls_;  // the count buffer "calls"
};

extern template class Dropout<float>;
extern template class Dropout<double>;


}  // namespace distop::nn
