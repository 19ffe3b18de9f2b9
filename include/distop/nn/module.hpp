#pragma once
// Module<T>: the base of layers and models. Named parameters and buffers, child modules, training
// mode, and the state_dict of global tensors.

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "distop/autodiff/var.hpp"
#include "distop/core/shape.hpp"
#include "distop/dist/dist_tensor.hpp"

namespace distop::nn {

// How a parameter's gradient combines across the replicas of data-parallel training (and so what
// data parallelism does with it; it never guesses).
enum class GradientReduction {
  // Each copy holds its own replica's contribution (the gradient of the loss of the data that
  // copy's rank saw): the copies' gradients are to be summed (averaged, with the loss's 1/R) over
  // the replicas. Linear, Conv, BatchNorm and the blocks of DistributedLinear and DistributedConv.
  per_replica,
  // Every copy already holds the gradient summed over the ranks of the layer's partition (the
  // gradient with respect to the one shared value): DistributedBatchNorm's weight and bias. Data
  // parallelism must not sum it again over those ranks.
  tied,
};
const char* to_string(GradientReduction r) noexcept;

template <class T>
struct NamedParameter {
  std::string name;  // hierarchical, "features.0.weight"
  Var<T> var;
  GradientReduction reduction = GradientReduction::per_replica;
  // The shape the state_dict shows, where it differs from the Var's global shape (the same
  // entries in the same row-major order, seen in another shape: a layer that holds torch's
  // [3E, E] as [3, E, E] to split its second axis, say); unset otherwise.
  std::optional<Shape> state_shape = std::nullopt;
  // The entry's shape in the state_dict: state_shape, or the Var's global shape.
  const Shape& shape() const { return state_shape ? *state_shape : var.space().global_shape(); }
};

// A buffer: state that is saved and loaded but not trained (BatchNorm's running statistics, or its
// count of batches). A tensor of T, or an integer count saved as a 0-d I64 tensor
// (num_batches_tracked). A persistent buffer is part of the state_dict (the model's weights, as
// PyTorch's are); a non-persistent one (PyTorch's register_buffer(..., persistent=False)) is not,
// but is training state all the same: checkpoints (io/checkpoint.hpp) hold every buffer, so that
// a resumed run continues exactly (Dropout's call count, from which its masks follow).
template <class T>
struct NamedBuffer {
  std::string name;
  DistTensor<T> tensor;                 // empty for a count
  std::shared_ptr<std::int64_t> count;  // null for a tensor
  bool persistent = true;
};

// One entry of a state_dict: a global tensor on the host, row-major, of T (parameters and tensor
// buffers) or of int64 (counts, shape []).
template <class T>
struct StateTensor {
  Shape shape;
  std::variant<std::vector<T>, std::vector<std::int64_t>> values;
  bool is_count() const noexcept { return values.index() == 1; }
};
template <class T>
using StateDict = std::map<std::string, StateTensor<T>>;

// What load_state_dict did not match (PyTorch's _IncompatibleKeys): entries the module has but the
// state_dict lacks, and entries the state_dict has but the module lacks.
struct LoadResult {
  std::vector<std::string> missing_keys;
  std::vector<std::string> unexpected_keys;
};

// The base of every layer and model. A module registers its parameters, buffers and children by
// name, in the order a reader expects (PyTorch's registration order); named_parameters() and
// named_buffers() visit them in that order, depth first, children's names prefixed with
// "<child>.", exactly as PyTorch names a state_dict. Layers that mirror a torch layer use its names
// and layouts (Conv: "weight" [out, in, k...], "bias"; Linear; BatchNorm: "weight", "bias",
// "running_mean", "running_var", "num_batches_tracked").
//
// Registration stores handles (a Var, a DistTensor sharing storage, a shared_ptr), so a module can
// be moved; children are held by shared_ptr. Modules are not copyable.
template <class T>
class Module {
 public:
  virtual ~Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;
  Module(Module&&) noexcept = default;
  Module& operator=(Module&&) noexcept = default;

  // Every parameter of this module and its descendants, hierarchically named, registration order.
  std::vector<NamedParameter<T>> named_parameters() const;
  std::vector<Var<T>> parameters() const;
  std::vector<NamedBuffer<T>> named_buffers() const;
  // The direct children, in registration order.
  const std::vector<std::pair<std::string, std::shared_ptr<Module>>>& named_children()
      const noexcept {
    return children_;
  }

  // PyTorch's train() and eval(): sets the mode of this module and every descendant.
  void train(bool on = true);
  void eval() { train(false); }
  bool training() const noexcept { return training_; }

  // Every parameter and persistent buffer as a global tensor, assembled from the boxes and held by
  // every rank. Collective over the parameters' parent communicator.
  StateDict<T> state_dict() const;
  // Overwrites every parameter's and persistent buffer's boxes with its part of the global tensor
  // of the same name. Every rank passes the same state_dict (it is checked from what each rank
  // holds; a difference between ranks shows as different errors or values, so pass what
  // state_dict() or io::read_state_dict returned). Not collective.
  //
  // Errors (distop::Error, op "load_state_dict", naming the entry), before anything changes: with
  // `strict`, an entry of the module missing from `state` or an entry of `state` the module lacks;
  // always, a shape other than the module's, or a tensor where a count is expected or the
  // reverse. Without `strict` the unmatched names are returned instead.
  LoadResult load_state_dict(const StateDict<T>& state, bool strict = true);

 protected:
  Module() = default;
  // Registers a parameter (a Var that requires a gradient) under `name`, which must be a
  // non-empty name without '.' and not already taken in this module. Returns the Var.
  Var<T>& register_parameter(std::string name, Var<T> parameter,
                             GradientReduction reduction = GradientReduction::per_replica);
  // A parameter whose state_dict entry has shape `state_shape` (of the Var's number of entries,
  // the same row-major order), not its global shape (NamedParameter::state_shape).
  Var<T>& register_parameter(std::string name, Var<T> parameter, GradientReduction reduction,
                             Shape state_shape);
  // A buffer (see NamedBuffer; `persistent` false keeps it out of the state_dict).
  DistTensor<T>& register_buffer(std::string name, DistTensor<T> buffer, bool persistent = true);
  void register_count(std::string name, std::shared_ptr<std::int64_t> count,
                      bool persistent = true);
  template <class M>
  std::shared_ptr<M> register_module(std::string name, std::shared_ptr<M> module) {
    check_new_name(name, module != nullptr);
    children_.emplace_back(std::move(name), module);
    children_.back().second->train(training_);
    children_.back().second->set_path(path_.empty() ? children_.back().first
                                                    : path_ + "." + children_.back().first);
    return module;
  }
  // The path under which this module is registered in its parents, "features.0" (the names of its
  // registrations, outermost first, whichever was made first), or empty for a module registered
  // nowhere. Traces name its forward pass by it (core/trace.hpp).
  const std::string& registered_path() const noexcept { return path_; }

 private:
  void check_new_name(const std::string& name, bool defined) const;
  // Sets the registered path of this module to `path` and its descendants' to path.<their names>.
  void set_path(const std::string& path);
  void collect_parameters(const std::string& prefix, std::vector<NamedParameter<T>>& out) const;
  void collect_buffers(const std::string& prefix, std::vector<NamedBuffer<T>>& out) const;

  struct OwnParameter {
    std::string name;
    Var<T> var;
    GradientReduction reduction;
    std::optional<Shape> state_shape;
  };
  std::vector<OwnParameter> parameters_;
  std::vector<NamedBuffer<T>> buffers_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
  std::string path_;
  bool training_ = true;
};

extern template class Module<float>;
extern template class Module<double>;

}  // namespace distop::nn
