#pragma once
// The interface every optimizer implements (torch.optim.Optimizer's): parameter groups with
// options of their own, step and zero_grad, and state_dict / load_state_dict.

#include <cstddef>
#include <map>
#include <string>
#include <vector>

#include "distop/autodiff/var.hpp"
#include "distop/core/tensor.hpp"

namespace distop::optim {

// A parameter group's options by torch's names ("lr", "momentum", "beta1", ...); booleans as 0/1.
using Hyperparameters = std::map<std::string, double>;

// An optimizer's state on this rank, as torch's state_dict() holds it.
template <class T>
struct OptimizerState {
  // The state of one parameter: tensors of the parameter's local box shape by torch's names
  // ("momentum_buffer", "exp_avg", "exp_avg_sq", "max_exp_avg_sq", "square_avg", "grad_avg",
  // "sum") and scalars ("step"). Empty until the parameter's first step, except for optimizers
  // that make it up front (Adagrad).
  struct Param {
    std::map<std::string, Tensor<T>> tensors;
    std::map<std::string, double> scalars;
    bool empty() const noexcept { return tensors.empty() && scalars.empty(); }
  };
  std::string optimizer;                // name(): "SGD", "Adam", "AdamW", "RMSprop", "Adagrad"
  std::vector<Hyperparameters> groups;  // every option of each group
  std::vector<Param> params;            // one per parameter, the groups in order
};

// The names of the state a parameter has once stepped (OptimizerState::Param's keys).
struct StateKeys {
  std::vector<std::string> tensors;
  std::vector<std::string> scalars;
};

// A parameter group: parameters and the options they are updated with.
template <class T, class Options>
struct ParamGroup {
  std::vector<Var<T>> params;
  Options options{};
};

// An optimizer of distributed parameters. Every update is local: each rank updates its own box of
// each parameter from its own box of the gradient, so replicated copies stay equal when their
// gradients are (making them so, for example by averaging in data-parallel training, is the
// caller's explicit step). Not copyable: it refers to its parameters and owns their state.
template <class T>
class Optimizer {
 public:
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  virtual std::string name() const = 0;
  // One update of every parameter that has a gradient; parameters without one are skipped, their
  // state kept (as torch skips p.grad is None).
  virtual void step() = 0;
  // Forgets every parameter's gradient (torch's zero_grad(set_to_none=True); Var::zero_grad).
  void zero_grad();

  std::size_t group_count() const noexcept { return groups_.size(); }
  const std::vector<Var<T>>& group_parameters(std::size_t g) const;
  // Every parameter, the groups in order (the order of OptimizerState::params).
  std::vector<Var<T>> parameters() const;
  std::size_t parameter_count() const noexcept;
  // The group of parameters()[i].
  std::size_t group_of(std::size_t i) const;

  // Group g's learning rate, and setting it (for schedules), checked as the constructor checks it.
  double lr(std::size_t g) const;
  void set_lr(std::size_t g, double lr);
  // Sets every group's learning rate.
  void set_lr(double lr);

  // Every option of group g, by torch's names.
  virtual Hyperparameters group_options(std::size_t g) const = 0;
  // The state a stepped parameter of group g has.
  virtual StateKeys state_keys(std::size_t g) const = 0;
  // A deep copy of the options and the whole state (in the unsharded layout). Every rank that
  // holds a part of the optimizer calls it: for the optimizers of optim/ it is local; one whose
  // state is spread over ranks (parallel::ShardedOptimizer) gathers it, collectively.
  virtual OptimizerState<T> state_dict() const = 0;
  // Throws distop::Error unless load_state_dict(state) would succeed: the same optimizer name and
  // group count, every group's options complete and valid, one entry per parameter, each empty
  // (where allowed) or holding exactly the state_keys() of its group's options with tensors of the
  // parameter's local box shape. Local, not collective.
  virtual void check_state_dict(const OptimizerState<T>& state) const = 0;
  // Replaces every group's options and the whole state with deep copies of `state`, after
  // check_state_dict; on error nothing changes.
  virtual void load_state_dict(const OptimizerState<T>& state) = 0;

 protected:
  // Checks that every parameter is defined and appears once in all the groups; `op` names the
  // optimizer in errors.
  Optimizer(std::vector<std::vector<Var<T>>> groups, const std::string& op);

  virtual double group_lr(std::size_t g) const = 0;
  // Sets group g's lr, checked; g is valid.
  virtual void set_group_lr(std::size_t g, double lr) = 0;
  void check_group(std::size_t g, const char* op) const;

 private:
  std::vector<std::vector<Var<T>>> groups_;
};

extern template class Optimizer<float>;
extern template class Optimizer<double>;

// Writes "warning: <text>" to stderr once per process for each `key` ("SGD momentum"), on rank 0
// of MPI_COMM_WORLD only (on every process where MPI is not running): for values that torch.optim
// accepts but that cannot be meant (SGD's momentum above 1, whose updates then grow without
// bound). The optimizers' checks (construction, set_lr, load_state_dict) warn with the option's
// name, and train::check_options with the flag's, under the same key ("<name()> <option>"): the
// first to run says it, the others stay silent. Returns whether it wrote the warning now.
// Thread-safe.
bool warn_once(const std::string& key, const std::string& text);

}  // namespace distop::optim
