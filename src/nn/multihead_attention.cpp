#include "distop/nn/multihead_attention.hpp"

#include <Kokkos_Core.hpp>
#include <cmath>
#include <utility>

#include "distop/core/random.hpp"
#include "distop/core/trace.hpp"
#include "distop/nn/arithmetic.hpp"
#include "distop/nn/dropout.hpp"
#include "distop/nn/init.hpp"
#include "distop/nn/matmul.hpp"
#include "distop/nn/softmax.hpp"
#include "heads.hpp"

namespace distop::nn {

namespace {

std::int64_t checked_heads(std::int64_t embed_dim, std::int64_t num_heads) {
  DISTOP_CHECK(embed_dim > 0 && num_heads > 0 && embed_dim % num_heads == 0, "MultiheadAttention",
               "embed_dim must be a positive multiple of num_heads, found ", embed_dim, " and ",
               num_heads);
  return num_heads;
}

}  // namespace

template <class T>
MultiheadAttention<T>::MultiheadAttention(std::int64_t embed_dim, std::int64_t num_heads,
                                          MultiheadAttentionOptions options)
    : embed_dim_(embed_dim),
      num_heads_(checked_heads(embed_dim, num_heads)),
      options_(options),
      in_proj_(embed_dim, 3 * embed_dim, {.seed = parameter_seed(options.seed, "in_proj")}),
      calls_(std::make_shared<std::int64_t>(0)) {
  DISTOP_CHECK(options.dropout >= 0.0 && options.dropout <= 1.0, "MultiheadAttention",
               "dropout must lie in [0, 1], found ", options.dropout);
  // torch's _reset_parameters: xavier_uniform_ on in_proj_weight [3E, E] (fan_in E, fan_out 3E),
  // zero biases; out_proj.weight keeps nn.Linear's default.
  uniform_init(in_proj_.weight().value(), parameter_seed(options.seed, "in_proj_weight"),
               std::sqrt(6.0 / static_cast<double>(4 * embed_dim)));
  Kokkos::deep_copy(in_proj_.bias().value().local().view(), T(0));
  this->register_parameter("in_proj_weight", in_proj_.weight());
  this->register_parameter("in_proj_bias", in_proj_.bias());
  out_proj_ = this->register_module(
      "out_proj",
      std::make_shared<Linear<T>>(embed_dim, embed_dim,
                                  LinearOptions{.seed = parameter_seed(options.seed, "out_proj")}));
  Kokkos::deep_copy(out_proj_->bias().value().local().view(), T(0));
  this->register_count("calls", calls_, /*persistent=*/false);
}

template <class T>
Var<T> MultiheadAttention<T>::forward(Tape& tape, const Var<T>& x, const AttentionMask<T>& mask) {
  return forward(tape, x, x, x, mask);
}

template <class T>
Var<T> MultiheadAttention<T>::forward(Tape& tape, const Var<T>& query, const Var<T>& key,
                                      const Var<T>& value, const AttentionMask<T>& mask) {
  const trace::Compute span("MultiheadAttention", this->registered_path());
  const char* op = "MultiheadAttention";
  for (const Var<T>* v : {&query, &key, &value}) {
    detail::check_sequences(v->space(), op);
    DISTOP_CHECK(v->space().global_shape()[2] == embed_dim_, op, "expected inputs [N, S, ",
                 embed_dim_, "], found ", v->space().str());
  }
  const Shape& qs = query.space().global_shape();
  const Shape& ks = key.space().global_shape();
  DISTOP_CHECK(ks == value.space().global_shape() && ks[0] == qs[0], op,
               "expected key and value of one shape [N, S2, E] with the query's N, found query ",
               query.space().str(), ", key ", key.space().str(), " and value ",
               value.space().str());
  const std::int64_t s = qs[1];
  const std::int64_t s2 = ks[1];
  // The input projection of each distinct input; the part of in_proj_weight it is for is then
  // picked out of the heads (the projections of the other parts get no gradient).
  auto project = [&](const Var<T>& x, std::int64_t seq) {
    return detail::split_heads(tape, in_proj_.forward(tape, detail::sequence_rows(tape, x)), seq, 3,
                               num_heads_);
  };
  Var<T> q, k, v;
  if (query.same_as(key) && key.same_as(value)) {
    auto qkv = project(query, s);
    q = qkv[0];
    k = qkv[1];
    v = qkv[2];
  } else {
    q = project(query, s)[0];
    auto kv = project(key, s2);
    k = kv[1];
    v = key.same_as(value) ? kv[2] : project(value, s2)[2];
  }
  return detail::rows_to_sequences(tape, out_proj_->forward(tape, attend(tape, q, k, v, mask)), s);
}

template <class T>
Var<T> MultiheadAttention<T>::attend(Tape& tape, const Var<T>& q, const Var<T>& k, const Var<T>& v,
                                     const AttentionMask<T>& mask) {
  const bool drop = this->training() && options_.dropout > 0.0;
  const std::uint64_t seed = drop ? random::bits(parameter_seed(options_.seed, "dropout"),
                                                 static_cast<std::uint64_t>((*calls_)++))
                                  : 0;
  const Var<T> attended =
      detail::attention(tape, q, k, v, mask, 1.0 / std::sqrt(static_cast<double>(head_dim())),
                        drop ? options_.dropout : 0.0, seed);
  return detail::merge_heads(tape, attended);  // [N S, E]
}

template class MultiheadAttention<float>;
template class MultiheadAttention<double>;

}  // namespace distop::nn
