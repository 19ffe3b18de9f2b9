#pragma once
// train::Model: what train::fit trains. Any model class with an input space and a forward pass,
// behind one interface, so that the training driver is compiled once (src/train) for every model.

#include <concepts>
#include <cstdint>
#include <functional>
#include <string>

#include "distop/autodiff/tape.hpp"
#include "distop/autodiff/var.hpp"
#include "distop/dist/tensor_space.hpp"
#include "distop/nn/module.hpp"

namespace distop::train {

// A model train::fit can train: an nn::Module<T> (its parameters, buffers and state_dict) with
//   TensorSpace input_space(std::int64_t batch) const;  // where a batch of `batch` inputs lives:
//                                                        // its axis 0 is the batch (whole, split
//                                                        // or replicated over the model's ranks)
//   Var<T> forward(Tape& tape, const Var<T>& x);         // the output for the input x
// and, optionally,
//   std::string describe() const;                        // one line per layer, for the log
template <class M, class T>
concept TrainableModel = std::derived_from<M, nn::Module<T>> &&
    requires(M& m, const M& cm, Tape& tape, const Var<T>& x, std::int64_t batch) {
  { cm.input_space(batch) } -> std::convertible_to<TensorSpace>;
  { m.forward(tape, x) } -> std::same_as<Var<T>>;
};

// A TrainableModel behind one interface. Refers to the model, which must outlive it; copies refer
// to the same model.
template <class T>
class Model {
 public:
  template <class M>
  requires TrainableModel<M, T> Model(
      M& model)  // NOLINT(google-explicit-constructor): any model converts, as to a reference
      : module_(&model),
        input_space_(
            [&model](std::int64_t batch) { return TensorSpace(model.input_space(batch)); }),
        forward_([&model](Tape& tape, const Var<T>& x) { return model.forward(tape, x); }) {
    if constexpr (requires(const M& m) {
                    { m.describe() } -> std::convertible_to<std::string>;
                  })
      describe_ = [&model] { return std::string(model.describe()); };
  }

  nn::Module<T>& module() const noexcept { return *module_; }
  TensorSpace input_space(std::int64_t batch) const { return input_space_(batch); }
  Var<T> forward(Tape& tape, const Var<T>& x) const { return forward_(tape, x); }
  // The model's describe(), or else one line per parameter: its name and global shape.
  std::string describe() const;

 private:
  nn::Module<T>* module_;
  std::function<TensorSpace(std::int64_t)> input_space_;
  std::function<Var<T>(Tape&, const Var<T>&)> forward_;
  std::function<std::string()> describe_;
};

template <class T>
std::string Model<T>::describe() const {
  if (describe_) return describe_();
  std::string out;
  for (const auto& p : module_->named_parameters())
    out += "  " + p.name + " " + p.var.space().global_shape().str() + "\n";
  return out;
}

}  // namespace distop::train
