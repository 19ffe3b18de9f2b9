#pragma once
// BasicOptimizer<T, Rule>: the Optimizer interface for an update applied parameter by parameter,
// written once for every such rule (SGD, Adam, AdamW, RMSprop, Adagrad; a rule of your own too).
//
// A Rule is a struct with
//   using Options = ...;                 a struct of double and bool options, `lr` among them
//   static constexpr const char* kName;  name(), also the op of the errors
//   static constexpr bool kEagerState;   every parameter's state is made at construction (as
//                                        torch's Adagrad does), not at its first step
//   template <class O, class F> static void visit(O& options, F&& f);
//                                        f(name, member) for every option, member a double& or
//                                        bool& (const& when O is const), in one fixed order
//   static void check(const Options&);   throws distop::Error naming an invalid option
//   static StateKeys state_keys(const Options&);
//                                        the state of a stepped parameter under these options
//   template <class T> static void init_state(Param<T>&, const Tensor<T>& value, const Options&);
//                                        makes an empty state: at construction (kEagerState) or
//                                        just before the parameter's first update
//   template <class T> static void update(Tensor<T>& value, const Tensor<T>& grad, Param<T>&,
//                                         const Options&);
//                                        one step of one parameter (local boxes)
// where Param<T> is OptimizerState<T>::Param. After an update the state must hold exactly
// state_keys(options), tensors of the value's shape.

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "distop/core/error.hpp"
#include "distop/optim/optimizer.hpp"

namespace distop::optim {

template <class T, class Rule>
class BasicOptimizer : public Optimizer<T> {
 public:
  using Options = typename Rule::Options;
  using Group = ParamGroup<T, Options>;
  using Param = typename OptimizerState<T>::Param;

  // One group of every parameter.
  explicit BasicOptimizer(std::vector<Var<T>> params, Options options = {})
      : BasicOptimizer(one_group(std::move(params), options)) {}
  // Groups, each with its own options (torch's list of param_group dicts).
  explicit BasicOptimizer(std::vector<Group> groups)
      : Optimizer<T>(parameters_of(groups), Rule::kName) {
    for (std::size_t g = 0; g < groups.size(); ++g) {
      check_group_options(groups[g].options, g, groups.size());
      options_.push_back(groups[g].options);
    }
    state_.resize(this->parameter_count());
    if constexpr (Rule::kEagerState) {
      std::size_t j = 0;
      for (std::size_t g = 0; g < options_.size(); ++g)
        for (const auto& p : this->group_parameters(g))
          Rule::init_state(state_[j++], p.value().local(), options_[g]);
    }
  }

  std::string name() const override { return Rule::kName; }

  void step() override {
    std::size_t j = 0;
    for (std::size_t g = 0; g < options_.size(); ++g) {
      for (const auto& p : this->group_parameters(g)) {
        Param& state = state_[j++];
        if (!p.has_grad()) continue;
        Tensor<T>& value = p.value().local();
        if (state.empty()) Rule::init_state(state, value, options_[g]);
        Rule::update(value, p.grad().local(), state, options_[g]);
      }
    }
  }

  // Group g's options.
  const Options& options(std::size_t g = 0) const {
    this->check_group(g, Rule::kName);
    return options_[g];
  }

  Hyperparameters group_options(std::size_t g) const override {
    this->check_group(g, Rule::kName);
    Hyperparameters h;
    Rule::visit(options_[g],
                [&](const char* key, const auto& v) { h[key] = static_cast<double>(v); });
    return h;
  }

  StateKeys state_keys(std::size_t g) const override {
    this->check_group(g, Rule::kName);
    return Rule::state_keys(options_[g]);
  }

  OptimizerState<T> state_dict() const override {
    OptimizerState<T> s;
    s.optimizer = Rule::kName;
    for (std::size_t g = 0; g < options_.size(); ++g) s.groups.push_back(group_options(g));
    for (const Param& p : state_) s.params.push_back(clone(p));
    return s;
  }

  void check_state_dict(const OptimizerState<T>& state) const override { (void)checked(state); }

  void load_state_dict(const OptimizerState<T>& state) override {
    std::vector<Options> options = checked(state);
    std::vector<Param> copies;
    for (const Param& p : state.params) copies.push_back(clone(p));
    options_ = std::move(options);
    state_ = std::move(copies);
  }

 protected:
  double group_lr(std::size_t g) const override { return options_[g].lr; }
  void set_group_lr(std::size_t g, double lr) override {
    Options o = options_[g];
    o.lr = lr;
    check_group_options(o, g, options_.size());
    options_[g] = o;
  }

 private:
  static std::vector<Group> one_group(std::vector<Var<T>> params, const Options& options) {
    std::vector<Group> groups(1);
    groups[0].params = std::move(params);
    groups[0].options = options;
    return groups;
  }
  static std::vector<std::vector<Var<T>>> parameters_of(const std::vector<Group>& groups) {
    std::vector<std::vector<Var<T>>> params;
    for (const auto& group : groups) params.push_back(group.params);
    return params;
  }
  // Rule::check, naming the group when there are several.
  static void check_group_options(const Options& o, std::size_t g, std::size_t groups) {
    if (groups <= 1) return Rule::check(o);
    try {
      Rule::check(o);
    } catch (const Error& e) {
      throw Error(Rule::kName, "parameter group " + std::to_string(g) + ": " + e.detail());
    }
  }
  static Param clone(const Param& p) {
    Param c;
    for (const auto& [key, t] : p.tensors) c.tensors.emplace(key, t.clone());
    c.scalars = p.scalars;
    return c;
  }
  static std::string join(const std::vector<std::string>& keys) {
    std::string s;
    for (const auto& k : keys) s += (s.empty() ? "'" : ", '") + k + "'";
    return s.empty() ? "none" : s;
  }
  template <class Map>
  static std::vector<std::string> keys_of(const Map& m) {
    std::vector<std::string> keys;
    for (const auto& [key, value] : m) keys.push_back(key);
    return keys;
  }
  static Options from_hyperparameters(const Hyperparameters& h, std::size_t g,
                                      const std::string& op) {
    Options o{};
    std::vector<std::string> expected;
    Rule::visit(o, [&](const char* key, auto& v) {
      expected.emplace_back(key);
      const auto it = h.find(key);
      DISTOP_CHECK(it != h.end(), op, "parameter group ", g, " has no option '", key, "'");
      if constexpr (std::is_same_v<std::remove_cvref_t<decltype(v)>, bool>) {
        DISTOP_CHECK(it->second == 0 || it->second == 1, op, "parameter group ", g, ": option '",
                     key, "' is a boolean (0 or 1), found ", it->second);
        v = it->second == 1;
      } else {
        v = it->second;
      }
    });
    for (const auto& [key, value] : h) {
      bool known = false;
      for (const auto& e : expected) known = known || e == key;
      DISTOP_CHECK(known, op, "parameter group ", g, " has option '", key, "', which ", Rule::kName,
                   " does not have (its options: ", join(expected), ")");
    }
    return o;
  }
  // The options of `state` once every check of load_state_dict has passed.
  std::vector<Options> checked(const OptimizerState<T>& s) const {
    const std::string op = std::string(Rule::kName) + "::load_state_dict";
    DISTOP_CHECK(s.optimizer == Rule::kName, op, "the state is of optimizer ", s.optimizer,
                 ", which cannot be loaded into optimizer ", Rule::kName);
    DISTOP_CHECK(s.groups.size() == options_.size(), op, "the state has ", s.groups.size(),
                 " parameter groups, this optimizer ", options_.size());
    std::vector<Options> options;
    for (std::size_t g = 0; g < s.groups.size(); ++g) {
      options.push_back(from_hyperparameters(s.groups[g], g, op));
      try {
        Rule::check(options.back());
      } catch (const Error& e) {
        throw Error(op, "parameter group " + std::to_string(g) + ": " + e.detail());
      }
    }
    DISTOP_CHECK(s.params.size() == this->parameter_count(), op, "the state has ", s.params.size(),
                 " parameters, this optimizer ", this->parameter_count());
    std::size_t j = 0;
    for (std::size_t g = 0; g < options.size(); ++g) {
      const StateKeys keys = Rule::state_keys(options[g]);
      for (const auto& p : this->group_parameters(g)) {
        const Param& ps = s.params[j];
        const Shape& shape = p.value().local().shape();
        if (ps.empty()) {
          DISTOP_CHECK(!Rule::kEagerState, op, "parameter ", j, " has no state, but ", Rule::kName,
                       " keeps state for every parameter from the start");
        } else {
          DISTOP_CHECK(keys_of(ps.tensors) == sorted(keys.tensors) &&
                           keys_of(ps.scalars) == sorted(keys.scalars),
                       op, "parameter ", j, " has state tensors ", join(keys_of(ps.tensors)),
                       " and scalars ", join(keys_of(ps.scalars)), ", expected tensors ",
                       join(keys.tensors), " and scalars ", join(keys.scalars),
                       " under its group's options");
          for (const auto& [key, t] : ps.tensors)
            DISTOP_CHECK(t.shape() == shape, op, "parameter ", j, "'s state tensor '", key,
                         "' has shape ", t.shape().str(), ", expected the local shape ",
                         shape.str(), " of the parameter's box");
          for (const auto& [key, v] : ps.scalars)
            DISTOP_CHECK(std::isfinite(v) && (key != "step" || (v >= 0 && v == std::floor(v))), op,
                         "parameter ", j, "'s state scalar '", key, "' is ", v,
                         key == "step" ? ", expected a whole number >= 0" : ", expected finite");
        }
        ++j;
      }
    }
    return options;
  }
  static std::vector<std::string> sorted(std::vector<std::string> v) {
    std::sort(v.begin(), v.end());
    return v;
  }

  std::vector<Options> options_;
  std::vector<Param> state_;  // one per parameter, the groups in order
};

}  // namespace distop::optim
