#include "distop/nn/transformer_encoder_layer.hpp"

#include <utility>

#include "distop/core/trace.hpp"
#include "distop/nn/arithmetic.hpp"
#include "distop/nn/init.hpp"
#include "heads.hpp"

namespace distop::nn {

template <class T>
TransformerEncoderLayer<T>::TransformerEncoderLayer(std::int64_t d_model, std::int64_t nhead,
                                                    std::int64_t dim_feedforward,
                                                    TransformerEncoderLayerOptions options)
    : options_(options) {
  const std::uint64_t seed = options.seed;
  auto dropout = [&](const char* name) {
    return this->register_module(
        name, std::make_shared<Dropout<T>>(options.dropout,
                                           DropoutOptions{.seed = parameter_seed(seed, name)}));
  };
  // torch's registration order: self_attn, linear1, dropout, linear2, norm1, norm2, dropout1,
  // dropout2.
  self_attn_ = this->register_module(
      "self_attn", std::make_shared<MultiheadAttention<T>>(
                       d_model, nhead,
                       MultiheadAttentionOptions{.dropout = options.dropout,
                                                 .seed = parameter_seed(seed, "self_attn")}));
  linear1_ = this->register_module(
      "linear1",
      std::make_shared<Linear<T>>(d_model, dim_feedforward,
                                  LinearOptions{.seed = parameter_seed(seed, "linear1")}));
  dropout_ = dropout("dropout");
  linear2_ = this->register_module(
      "linear2",
      std::make_shared<Linear<T>>(dim_feedforward, d_model,
                                  LinearOptions{.seed = parameter_seed(seed, "linear2")}));
  const LayerNormOptions norm{.eps = options.layer_norm_eps};
  norm1_ = this->register_module("norm1", std::make_shared<LayerNorm<T>>(d_model, norm));
  norm2_ = this->register_module("norm2", std::make_shared<LayerNorm<T>>(d_model, norm));
  dropout1_ = dropout("dropout1");
  dropout2_ = dropout("dropout2");
}

template <class T>
Var<T> TransformerEncoderLayer<T>::forward(Tape& tape, const Var<T>& x,
                                           const AttentionMask<T>& mask) {
  const trace::Compute span("TransformerEncoderLayer", this->registered_path());
  detail::check_sequences(x.space(), "TransformerEncoderLayer");
  const std::int64_t seq = x.space().global_shape()[1];
  Var<T> h = add(
      tape, x, dropout1_->forward(tape, self_attn_->forward(tape, norm1_->forward(tape, x), mask)));
  Var<T> f = linear1_->forward(tape, detail::sequence_rows(tape, norm2_->forward(tape, h)));
  f = dropout_->forward(tape, gelu(tape, f, options_.approximate));
  f = detail::rows_to_sequences(tape, linear2_->forward(tape, f), seq);
  return add(tape, h, dropout2_->forward(tape, f));
}

template class TransformerEncoderLayer<float>;
template class TransformerEncoderLayer<double>;

}  // namespace distop::nn
