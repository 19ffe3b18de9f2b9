#pragma once
// Internal: what the convolution's files share (conv.cpp the entry points and their dispatch,
// conv_im2col.cpp the portable im2col forms, host/conv_bands.cpp the host fast paths).

#include <algorithm>
#include <cstdint>

#include "distop/kernels/conv.hpp"
#include "space.hpp"
#include "tuning.hpp"

namespace distop::kernels::conv_detail {

// How many samples share one im2col matrix and one GEMM. A GEMM per sample reads the samples in
// place (no permutation of y or dy), but once a sample has few output positions its GEMM is too
// narrow for BLAS to run well, so samples are grouped until the matrix has about kMinColumns
// columns, within kMaxScratchBytes of scratch (settings per execution space, tuning.hpp).
constexpr std::int64_t kMinColumns = kTuning.min_columns;
constexpr std::int64_t kMaxScratchBytes = kTuning.max_scratch_bytes;

// The geometry padded to 3 spatial axes: a 1-D or 2-D window gets leading axes of extent 1, so
// that one set of kernels serves every dimension.
struct Geo {
  std::int64_t in[3], out[3], k[3], s[3], dil[3], off[3];
  std::int64_t taps;   // k[0] k[1] k[2]
  std::int64_t in_n;   // in[0] in[1] in[2]: input entries per channel
  std::int64_t out_n;  // out[0] out[1] out[2]: output positions per channel
  bool pointwise;      // 1x1 kernel, stride 1, offset 0: the im2col matrix is x itself
};

inline Geo padded(const WindowGeometry& g) {
  Geo r{};
  const int d = g.dims();
  for (int a = 0; a < 3; ++a) {
    const int s = a - (3 - d);  // the spatial axis of g, or negative for a padding axis
    const auto u = static_cast<std::size_t>(s);
    r.in[a] = s < 0 ? 1 : g.in[s];
    r.out[a] = s < 0 ? 1 : g.out[s];
    r.k[a] = s < 0 ? 1 : g.kernel[u];
    r.s[a] = s < 0 ? 1 : g.stride[u];
    r.dil[a] = s < 0 ? 1 : g.dilation[u];
    r.off[a] = s < 0 ? 0 : g.offset[u];
  }
  r.taps = r.k[0] * r.k[1] * r.k[2];
  r.in_n = r.in[0] * r.in[1] * r.in[2];
  r.out_n = r.out[0] * r.out[1] * r.out[2];
  r.pointwise = true;
  for (int a = 0; a < 3; ++a)
    r.pointwise = r.pointwise && r.k[a] == 1 && r.s[a] == 1 && r.off[a] == 0 && r.in[a] == r.out[a];
  return r;
}

// Samples per chunk (see kMinColumns).
inline std::int64_t chunk_samples(std::int64_t n, std::int64_t rows_k, std::int64_t p,
                                  std::size_t elem) {
  std::int64_t nb =
      std::clamp<std::int64_t>((kMinColumns + p - 1) / p, 1, std::max<std::int64_t>(n, 1));
  const std::int64_t per_sample = rows_k * p * static_cast<std::int64_t>(elem);
  nb = std::min(
      nb, std::max<std::int64_t>(1, kMaxScratchBytes / std::max<std::int64_t>(per_sample, 1)));
  return nb;
}

// The portable (im2col + GEMM) forms of the three passes, on raw pointers to tensors whose shapes
// conv.cpp has checked: x [n, c, in...], w [o, c, k...], y and dy [n, o, out...]. The device runs
// them, and the host where no fast path (host/fast_path.hpp) applies. keep and kept as in
// kernels::conv_forward and kernels::conv_backward_weight.
template <class T>
void im2col_forward(const T* x, const T* w, const T* bias, T* y, std::int64_t n, std::int64_t c,
                    std::int64_t o, const Geo& g, ConvColumns<T>* keep);
template <class T>
void im2col_backward_input(const T* dy, const T* w, T beta, T* dx, std::int64_t n, std::int64_t c,
                           std::int64_t o, const Geo& g);
template <class T>
void im2col_backward_weight(const T* dy, const T* x, T beta, T* dw, std::int64_t n, std::int64_t c,
                            std::int64_t o, const Geo& g, const ConvColumns<T>* kept);

}  // namespace distop::kernels::conv_detail
