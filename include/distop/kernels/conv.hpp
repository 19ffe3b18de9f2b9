#pragma once
// Local convolution kernels: N-D (1-3 spatial axes) cross-correlation as GEMMs over im2col or
// band matrices (see ConvMethod).

#include <cstdint>

#include "distop/core/tensor.hpp"
#include "distop/kernels/simd.hpp"
#include "distop/kernels/window.hpp"

namespace distop::kernels {

// Shapes, with d = g.dims() spatial axes:
//   x  [N, C, in_1 .. in_d]     (in = g.in)
//   w  [O, C, k_1 .. k_d]       (k = g.kernel)
//   y  [N, O, out_1 .. out_d]   (out = g.out)
// y[n, o, p] = bias[o] + sum_{c, j} w[o, c, j] x[n, c, p * stride - offset + j * dilation], with
// x read as zero outside its extents (PyTorch's Conv{1,2,3}d with zero padding, groups = 1).
// Every function checks the shapes against g and throws a distop::Error naming the mismatch.
// Computed as GEMMs (BLAS on the host, cuBLAS in CUDA builds) over batches of samples: on an
// im2col matrix [C k_1..k_d, out_1..out_d per sample], or on the host on a band matrix (see
// ConvMethod); the scratch is kept between calls.

// The im2col (or band) matrices of one forward pass, or the direct kernels' padded input frames,
// kept for the weight gradient, which then reads them instead of building them again (the
// backward pass of a layer whose input is small next to its im2col matrix, LeNet's for one, spends
// about as long in im2col as in the GEMMs). conv_forward fills it when asked and the matrices of
// the whole batch take at most conv_kept_columns_limit(); otherwise it stays empty and the weight
// gradient rebuilds them. Valid only for the x, w and geometry of that forward pass: the weight
// gradient checks the sizes and the layout, not the contents.
template <class T>
struct ConvColumns {
  Tensor<T> data;  // the matrices of consecutive chunks of samples, one after another
  std::int64_t samples_per_chunk = 0;
  bool bands = false;   // row-folded matrices (ConvMethod::bands) rather than plain im2col
  bool frames = false;  // the direct kernels' padded input frames, sample after sample
  bool empty() const noexcept { return data.numel() == 0; }
};

// How the host kernels compute a convolution. im2col: one GEMM over the im2col matrix
// [C k..., out...]. bands: where the stride along the second-to-last spatial axis (the height of a
// 2-D convolution) is 1, a matrix holding each input row once and one GEMM per kernel row over
// shifted column blocks of it: k_h times less copying. direct: for 1-D and 2-D windows of stride
// 1 on a CPU with AVX2 and FMA (AVX-512 where it has it; kernels/simd.hpp), no GEMM at all: vector
// loops over each output plane flattened to one run (or, for narrow planes with many output
// channels, over the channels), which keep their sums in registers across every tap (see
// src/kernels/host/conv_direct.hpp); they beat the GEMMs where the channels are few (LeNet's layers).
// automatic (the default) takes direct where it applies, the host runs one thread and the layer
// has at most kDirectMaxChannels input or output channels (for the weight gradient, both; for the
// input gradient, also at least 4 input channels); else bands wherever they apply, im2col
// elsewhere. A method set that does not apply to a geometry falls back the same way (direct to
// bands to im2col). Device builds always use im2col. A process-wide setting, for tests and
// benchmarks; not thread-safe against concurrent convolutions.
enum class ConvMethod { automatic, im2col, bands, direct };
inline constexpr std::int64_t kDirectMaxChannels = 32;
void set_conv_method(ConvMethod method);
ConvMethod conv_method();
inline constexpr std::int64_t kMaxKeptColumnsBytes = std::int64_t{64} << 20;
// The most bytes of matrices (im2col or band matrices, or the direct kernels' padded frames) that
// one convolution keeps from its forward pass for its weight gradient (ConvColumns): by default
// kMaxKeptColumnsBytes; 0 keeps none, so the weight gradient rebuilds them (less memory held
// between forward and backward, a slower backward). A process-wide setting, as set_conv_method.
// Error (distop::Error) for a negative limit.
void set_conv_kept_columns_limit(std::int64_t bytes);
std::int64_t conv_kept_columns_limit();

// y = conv(x, w) + bias (bias [O], or an empty tensor for none). Overwrites y. With keep, also
// keeps the im2col matrices there (see ConvColumns).
template <class T>
void conv_forward(const Tensor<T>& x, const Tensor<T>& w, const Tensor<T>& bias, Tensor<T>& y,
                  const WindowGeometry& g, ConvColumns<T>* keep = nullptr);
// dx = beta dx + conv^T_x(dy, w): the adjoint of x -> conv(x, w).
template <class T>
void conv_backward_input(const Tensor<T>& dy, const Tensor<T>& w, T beta, Tensor<T>& dx,
                         const WindowGeometry& g);
// dw = beta dw + conv^T_w(dy, x): the adjoint of w -> conv(x, w). With kept (from conv_forward
// on the same x and g), its im2col matrices are read instead of rebuilt.
template <class T>
void conv_backward_weight(const Tensor<T>& dy, const Tensor<T>& x, T beta, Tensor<T>& dw,
                          const WindowGeometry& g, const ConvColumns<T>* kept = nullptr);
// db[o] = beta db[o] + sum over n and the spatial axes of dy[n, o, ...].
template <class T>
void conv_backward_bias(const Tensor<T>& dy, T beta, Tensor<T>& db);

// The gradients a layer's backward pass wants, each added as above (beta scales what was there,
// 0: not read); a null target is not computed.
template <class T>
struct ConvGradients {
  Tensor<T>* dx = nullptr;
  T beta_x = T(0);
  Tensor<T>* dw = nullptr;
  T beta_w = T(0);
  Tensor<T>* db = nullptr;
  T beta_b = T(0);
};
// All of them from one dy: the same results as conv_backward_input, conv_backward_weight and
// conv_backward_bias. Where the direct kernels take dw (and dx, if wanted) one pass over the
// samples computes everything: each sample's dy padded once, its bias sums taken while it is in
// cache, x's padded frames read from kept (conv_forward's) when it holds them. kept as for
// conv_backward_weight.
template <class T>
void conv_backward(const Tensor<T>& dy, const Tensor<T>& x, const Tensor<T>& w,
                   const WindowGeometry& g, const ConvGradients<T>& grads,
                   const ConvColumns<T>* kept = nullptr);

}  // namespace distop::kernels
