#include "distop/nn/module.hpp"

#include <mpi.h>

#include <algorithm>
#include <set>

#include "distop/core/error.hpp"
#include "distop/core/mpi_check.hpp"
#include "distop/dist/assemble.hpp"
#include "distop/nn/sequential.hpp"

namespace distop::nn {

const char* to_string(GradientReduction r) noexcept {
  switch (r) {
    case GradientReduction::per_replica:
      return "per_replica";
    case GradientReduction::tied:
      return "tied";
  }
  return "?";
}

template <class T>
void Module<T>::check_new_name(const std::string& name, bool defined) const {
  constexpr const char* op = "Module::register";
  DISTOP_CHECK(!name.empty() && name.find('.') == std::string::npos, op, "the name '", name,
               "' must be non-empty and without '.'");
  DISTOP_CHECK(defined, op, "'", name, "' is undefined (a default-constructed Var or null)");
  auto taken = [&](const auto& list) {
    return std::any_of(list.begin(), list.end(), [&](const auto& e) {
      if constexpr (requires { e.name; })
        return e.name == name;
      else
        return e.first == name;
    });
  };
  DISTOP_CHECK(!taken(parameters_) && !taken(buffers_) && !taken(children_), op, "the name '", name,
               "' is taken already in this module");
}

template <class T>
Var<T>& Module<T>::register_parameter(std::string name, Var<T> parameter,
                                      GradientReduction reduction) {
  check_new_name(name, parameter.defined());
  DISTOP_CHECK(parameter.requires_grad(), "Module::register_parameter", "parameter '", name,
               "' does not require a gradient");
  parameters_.push_back(OwnParameter{std::move(name), std::move(parameter), reduction, {}});
  return parameters_.back().var;
}

template <class T>
Var<T>& Module<T>::register_parameter(std::string name, Var<T> parameter,
                                      GradientReduction reduction, Shape state_shape) {
  DISTOP_CHECK(
      parameter.defined() && state_shape.numel() == parameter.space().global_shape().numel(),
      "Module::register_parameter", "parameter '", name, "' of global shape ",
      parameter.defined() ? parameter.space().global_shape().str() : std::string("?"),
      " cannot be shown as ", state_shape.str(), " in the state_dict");
  Var<T>& var = register_parameter(std::move(name), std::move(parameter), reduction);
  parameters_.back().state_shape = std::move(state_shape);
  return var;
}

template <class T>
DistTensor<T>& Module<T>::register_buffer(std::string name, DistTensor<T> buffer, bool persistent) {
  check_new_name(name, true);
  buffers_.push_back(NamedBuffer<T>{std::move(name), std::move(buffer), nullptr, persistent});
  return buffers_.back().tensor;
}

template <class T>
void Module<T>::register_count(std::string name, std::shared_ptr<std::int64_t> count,
                               bool persistent) {
  check_new_name(name, count != nullptr);
  buffers_.push_back(
      NamedBuffer<T>{std::move(name), DistTensor<T>(), std::move(count), persistent});
}

template <class T>
void Module<T>::collect_parameters(const std::string& prefix,
                                   std::vector<NamedParameter<T>>& out) const {
  for (const auto& p : parameters_)
    out.push_back({prefix + p.name, p.var, p.reduction, p.state_shape});
  for (const auto& [name, child] : children_) child->collect_parameters(prefix + name + ".", out);
}

template <class T>
void Module<T>::collect_buffers(const std::string& prefix, std::vector<NamedBuffer<T>>& out) const {
  for (const auto& b : buffers_) out.push_back({prefix + b.name, b.tensor, b.count, b.persistent});
  for (const auto& [name, child] : children_) child->collect_buffers(prefix + name + ".", out);
}

template <class T>
std::vector<NamedParameter<T>> Module<T>::named_parameters() const {
  std::vector<NamedParameter<T>> out;
  collect_parameters("", out);
  return out;
}

template <class T>
std::vector<Var<T>> Module<T>::parameters() const {
  std::vector<Var<T>> out;
  for (auto& p : named_parameters()) out.push_back(std::move(p.var));
  return out;
}

template <class T>
std::vector<NamedBuffer<T>> Module<T>::named_buffers() const {
  std::vector<NamedBuffer<T>> out;
  collect_buffers("", out);
  return out;
}

template <class T>
void Module<T>::train(bool on) {
  training_ = on;
  for (auto& [name, child] : children_) child->train(on);
}

namespace {

template <class T>
MPI_Datatype mpi_type() {
  return std::is_same_v<T, float> ? MPI_FLOAT : MPI_DOUBLE;
}

// The global tensor on every rank: assembled on parent rank 0, then broadcast.
template <class T>
std::vector<T> assemble_everywhere(const DistTensor<T>& x) {
  std::vector<T> v = assemble(x, 0);
  const MPI_Comm parent = x.space().partition().parent();
  v.resize(static_cast<std::size_t>(x.space().global_shape().numel()));
  DISTOP_MPI_CHECK(MPI_Bcast(v.data(), static_cast<int>(v.size()), mpi_type<T>(), 0, parent),
                   "Module::state_dict");
  return v;
}

}  // namespace

template <class T>
StateDict<T> Module<T>::state_dict() const {
  StateDict<T> state;
  for (const auto& p : named_parameters())
    state[p.name] = StateTensor<T>{p.shape(), assemble_everywhere(p.var.value())};
  for (const auto& b : named_buffers()) {
    if (!b.persistent) continue;
    if (b.count)
      state[b.name] = StateTensor<T>{Shape{}, std::vector<std::int64_t>{*b.count}};
    else
      state[b.name] =
          StateTensor<T>{b.tensor.space().global_shape(), assemble_everywhere(b.tensor)};
  }
  return state;
}

template <class T>
LoadResult Module<T>::load_state_dict(const StateDict<T>& state, bool strict) {
  constexpr const char* op = "load_state_dict";
  const auto params = named_parameters();
  auto buffers = named_buffers();
  std::erase_if(buffers, [](const NamedBuffer<T>& b) { return !b.persistent; });
  LoadResult result;
  std::set<std::string> known;
  auto check = [&](const std::string& name, const Shape& shape, bool count) {
    known.insert(name);
    const auto it = state.find(name);
    if (it == state.end()) {
      result.missing_keys.push_back(name);
      return;
    }
    DISTOP_CHECK(it->second.is_count() == count, op, "'", name, "' is ",
                 it->second.is_count() ? "an integer count" : "a tensor",
                 " in the state_dict, but ", count ? "an integer count" : "a tensor",
                 " in the module");
    DISTOP_CHECK(it->second.shape == shape, op, "'", name, "' has shape ", it->second.shape.str(),
                 " in the state_dict, but ", shape.str(), " in the module");
    const std::size_t n =
        count ? std::get<1>(it->second.values).size() : std::get<0>(it->second.values).size();
    DISTOP_CHECK(static_cast<std::int64_t>(n) == shape.numel(), op, "'", name, "' holds ", n,
                 " values for shape ", shape.str());
  };
  for (const auto& p : params) check(p.name, p.shape(), false);
  for (const auto& b : buffers)
    check(b.name, b.count ? Shape{} : b.tensor.space().global_shape(), b.count != nullptr);
  for (const auto& [name, entry] : state)
    if (!known.count(name)) result.unexpected_keys.push_back(name);
  if (strict) {
    DISTOP_CHECK(result.missing_keys.empty(), op, "the state_dict has no entry '",
                 result.missing_keys.front(), "'", result.missing_keys.size() > 1 ? " (and " : "",
                 result.missing_keys.size() > 1 ? std::to_string(result.missing_keys.size() - 1)
                                                : std::string(),
                 result.missing_keys.size() > 1 ? " more)" : "");
    DISTOP_CHECK(result.unexpected_keys.empty(), op, "the state_dict has an entry '",
                 result.unexpected_keys.front(), "' that the module does not have",
                 result.unexpected_keys.size() > 1 ? " (and " : "",
                 result.unexpected_keys.size() > 1
                     ? std::to_string(result.unexpected_keys.size() - 1)
                     : std::string(),
                 result.unexpected_keys.size() > 1 ? " more)" : "");
  }
  // Every check has passed: now change things.
  for (const auto& p : params) {
    const auto it = state.find(p.name);
    if (it != state.end()) distribute(std::get<0>(it->second.values), p.var.value());
  }
  for (const auto& b : buffers) {
    const auto it = state.find(b.name);
    if (it == state.end()) continue;
    if (b.count) {
      *b.count = std::get<1>(it->second.values).front();
    } else {
      DistTensor<T> t = b.tensor;  // a handle on the buffer's storage
      distribute(std::get<0>(it->second.values), t);
    }
  }
  return result;
}

template <class T>
void Module<T>::set_path(const std::string& path) {
  path_ = path;
  for (auto& [name, child] : children_) child->set_path(path + "." + name);
}

template <class T>
Sequential<T>& Sequential<T>::add(Function function) {
  DISTOP_CHECK(static_cast<bool>(function), "Sequential::add", "step ", steps_.size(),
               " is an empty function");
  steps_.push_back(std::move(function));
  return *this;
}

template <class T>
Var<T> Sequential<T>::forward(Tape& tape, const Var<T>& x) {
  Var<T> h = x;
  for (auto& step : steps_) h = step(tape, h);
  return h;
}

template class Module<float>;
template class Module<double>;
template class Sequential<float>;
template class Sequential<double>;

}  // namespace distop::nn
