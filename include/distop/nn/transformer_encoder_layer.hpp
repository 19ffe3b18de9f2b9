#pragma once
// A pre-norm transformer encoder block (torch.nn.TransformerEncoderLayer with norm_first=True,
// batch_first=True, activation='gelu'), local.

#include <cstdint>
#include <memory>

#include "distop/autodiff/tape.hpp"
#include "distop/autodiff/var.hpp"
#include "distop/nn/activation.hpp"
#include "distop/nn/dropout.hpp"
#include "distop/nn/layer_norm.hpp"
#include "distop/nn/linear.hpp"
#include "distop/nn/module.hpp"
#include "distop/nn/multihead_attention.hpp"

namespace distop::nn {

// Options of a TransformerEncoderLayer, for designated initialisers: `{.dropout = 0, .seed = 2}`.
struct TransformerEncoderLayerOptions {
  double dropout = 0.1;  // torch's default, for the attention weights and the three residual paths
  double layer_norm_eps = 1e-5;
  GeluApproximate approximate = GeluApproximate::none;
  std::uint64_t seed = 0;  // the parameters and dropout masks are functions of it alone
};

// torch.nn.TransformerEncoderLayer(d_model, nhead, dim_feedforward, dropout, activation='gelu',
// batch_first=True, norm_first=True) on x [N, S, d_model]:
//   x = x + dropout1(self_attn(norm1(x)))
//   x = x + dropout2(linear2(dropout(gelu(linear1(norm2(x))))))
// Children in torch's order and names: "self_attn" (MultiheadAttention), "linear1"
// [dim_feedforward, d_model], "dropout", "linear2" [d_model, dim_feedforward], "norm1", "norm2"
// (LayerNorm), "dropout1", "dropout2"; so state_dict() holds torch's names
// (self_attn.in_proj_weight, linear1.weight, norm1.weight, ...). Local, as MultiheadAttention.
template <class T>
class TransformerEncoderLayer : public Module<T> {
 public:
  TransformerEncoderLayer(std::int64_t d_model, std::int64_t nhead,
                          std::int64_t dim_feedforward = 2048,
                          TransformerEncoderLayerOptions options = {});

  MultiheadAttention<T>& self_attn() noexcept { return *self_attn_; }
  Linear<T>& linear1() noexcept { return *linear1_; }
  Linear<T>& linear2() noexcept { return *linear2_; }
  LayerNorm<T>& norm1() noexcept { return *norm1_; }
  LayerNorm<T>& norm2() noexcept { return *norm2_; }

  // y [N, S, d_model]; `mask` as MultiheadAttention's (torch's src_mask and is_causal).
  Var<T> forward(Tape& tape, const Var<T>& x, const AttentionMask<T>& mask = {});

 private:
  TransformerEncoderLayerOptions options_;
  std::shared_ptr<MultiheadAttention<T>> self_attn_;
  std::shared_ptr<Linear<T>> linear1_;
  std::shared_ptr<Dropout<T>> dropout_;
  std::shared_ptr<Linear<T>> linear2_;
  std::shared_ptr<LayerNorm<T>> norm1_;
  std::shared_ptr<LayerNorm<T>> norm2_;
  std::shared_ptr<Dropout<T>> dropout1_;
  std::shared_ptr<Dropout<T>> dropout2_;
};

extern template class TransformerEncoderLayer<float>;
extern template class TransformerEncoderLayer<double>;

}  // namespace distop::nn
