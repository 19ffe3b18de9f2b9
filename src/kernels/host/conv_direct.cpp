#include "conv_direct.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "../../core/scratch.hpp"
#include "distop/core/error.hpp"
#include "simd_target.hpp"

namespace distop::kernels {
namespace detail {

namespace {

// Entries past the end of a flat run that a tile may read or write: the longest tile is 4
// vectors of 16 floats (kConvNV * lanes for AVX-512 float; everything else is shorter).
constexpr std::int64_t kTail = 64;
constexpr std::size_t kLine = 64;  // bytes in a cache line

// The flat-plane layout of one geometry (see conv_direct.hpp).
struct Frame {
  std::int64_t wp;      // pitch: out2 + (k2 - 1) d2
  std::int64_t hp;      // rows: out1 + (k1 - 1) d1
  std::int64_t span;    // the largest tap shift, (k1 - 1) d1 wp + (k2 - 1) d2
  std::int64_t taps;    // k1 k2
  std::int64_t t_out;   // flat output positions: out1 wp
  std::int64_t lead;    // leading zeros of a dy plane: span rounded up to whole cache lines
  std::int64_t x_len;   // one padded input plane: t_out + span + kTail (>= hp wp + kTail)
  std::int64_t dy_len;  // one padded dy plane: lead zeros, then hp wp + kTail
  std::vector<std::int64_t> shift;  // tap j = j1 k2 + j2 -> j1 d1 wp + j2 d2
};

template <class T>
Frame frame_of(const DirectGeo& g) {
  Frame f;
  f.wp = g.out2 + (g.k2 - 1) * g.d2;
  f.hp = g.out1 + (g.k1 - 1) * g.d1;
  f.span = (g.k1 - 1) * g.d1 * f.wp + (g.k2 - 1) * g.d2;
  f.taps = g.k1 * g.k2;
  f.t_out = g.out1 * f.wp;
  // Planes start on cache lines (the scratch does), and so do the dy planes' flat runs, which
  // the weight gradient's tiles load at multiples of a vector from there.
  constexpr auto line = static_cast<std::int64_t>(kLine / sizeof(T));
  auto whole_lines = [](std::int64_t n) { return (n + line - 1) / line * line; };
  f.lead = whole_lines(f.span);
  f.x_len = whole_lines(f.t_out + f.span + kTail);
  f.dy_len = whole_lines(f.lead + f.hp * f.wp + kTail);
  f.shift.resize(static_cast<std::size_t>(f.taps));
  for (std::int64_t j1 = 0; j1 < g.k1; ++j1)
    for (std::int64_t j2 = 0; j2 < g.k2; ++j2)
      f.shift[static_cast<std::size_t>(j1 * g.k2 + j2)] = j1 * g.d1 * f.wp + j2 * g.d2;
  return f;
}

// Scratch leased from the library's pool (core/scratch.hpp) for one kernel call, in host memory,
// starting on a cache line: laid-out weights or weight-gradient sums, input frames, padded dy or
// an output buffer, the weight gradient's lane sums, the input gradient's weights and frame, the
// transposed dy of the channel form.
template <class T>
::distop::detail::Scratch<T> scratch(std::int64_t n) {
  static_assert(kLine <= 64, "the pool's blocks start on 64-byte boundaries");
  return ::distop::detail::Scratch<T>(n, ::distop::detail::ScratchSpace::kHost);
}

#ifdef DISTOP_SIMD_X86

// Lanes [a, b) of L, clamped: the mask of a partial load, as bits or as a lane bound.
constexpr std::int64_t clamp_lane(std::int64_t v, int lanes) {
  return v < 0 ? 0 : (v > lanes ? lanes : v);
}
constexpr unsigned range_bits(std::int64_t a, std::int64_t b, int lanes) {
  const std::int64_t lo = clamp_lane(a, lanes), hi = clamp_lane(b, lanes);
  return hi <= lo ? 0u : ((hi >= 32 ? ~0u : (1u << hi) - 1u) & ~((1u << lo) - 1u));
}

DISTOP_TARGET_BEGIN("avx512f,avx2,fma")
namespace avx512 {
// The sum of a vector's lanes, once per tile (GCC 12's _mm512_reduce_add_* trips
// -Wmaybe-uninitialized inside its own header).
template <class T, int L, class V>
T lane_sum(V v) {
  alignas(64) T a[L];
  std::memcpy(a, &v, sizeof a);
  T s = T(0);
  for (int i = 0; i < L; ++i) s += a[i];
  return s;
}
template <class T>
struct Simd;
template <>
struct Simd<float> {
  using V = __m512;
  static constexpr int L = 16;
  static V zero() { return _mm512_setzero_ps(); }
  static V load(const float* p) { return _mm512_loadu_ps(p); }
  static void store(float* p, V v) { _mm512_storeu_ps(p, v); }
  static V bcast(float s) { return _mm512_set1_ps(s); }
  static V fma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
  static V add(V a, V b) { return _mm512_add_ps(a, b); }
  static void pin(V& v) { asm("" : "+v"(v)); }  // v stays in a register (no folded reloads)
  // Masked loads and stores: lanes [a, b) of a vector (clamped), a mask computed once per layout.
  using Mask = __mmask16;
  static Mask range_mask(std::int64_t a, std::int64_t b) {
    return static_cast<Mask>(range_bits(a, b, L));
  }
  static V load_m(const float* p, Mask m) { return _mm512_maskz_loadu_ps(m, p); }
  static void store_m(float* p, Mask m, V v) { _mm512_mask_storeu_ps(p, m, v); }
  // Lane i = p[i stride] for the lanes in m, zero elsewhere.
  static V gather_m(const float* p, std::int64_t stride, Mask m) {
    const __m512i index =
        _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                           _mm512_set1_epi32(static_cast<int>(stride)));
    return _mm512_mask_i32gather_ps(_mm512_setzero_ps(), m, index, p, 4);
  }
  static float hsum(V v) { return lane_sum<float, L>(v); }
};
template <>
struct Simd<double> {
  using V = __m512d;
  static constexpr int L = 8;
  static V zero() { return _mm512_setzero_pd(); }
  static V load(const double* p) { return _mm512_loadu_pd(p); }
  static void store(double* p, V v) { _mm512_storeu_pd(p, v); }
  static V bcast(double s) { return _mm512_set1_pd(s); }
  static V fma(V a, V b, V c) { return _mm512_fmadd_pd(a, b, c); }
  static V add(V a, V b) { return _mm512_add_pd(a, b); }
  static void pin(V& v) { asm("" : "+v"(v)); }
  using Mask = __mmask8;
  static Mask range_mask(std::int64_t a, std::int64_t b) {
    return static_cast<Mask>(range_bits(a, b, L));
  }
  static V load_m(const double* p, Mask m) { return _mm512_maskz_loadu_pd(m, p); }
  static void store_m(double* p, Mask m, V v) { _mm512_mask_storeu_pd(p, m, v); }
  static V gather_m(const double* p, std::int64_t stride, Mask m) {
    const __m256i index = _mm256_mullo_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7),
                                             _mm256_set1_epi32(static_cast<int>(stride)));
    return _mm512_mask_i32gather_pd(_mm512_setzero_pd(), m, index, p, 8);
  }
  static double hsum(V v) { return lane_sum<double, L>(v); }
};
// 32 vector registers: up to 8 x 3 or 6 x 4 accumulators for the convolution tiles, 4 x 6 for
// the correlation's.
constexpr int kConvOB = 8;
constexpr int kConvNV(int ob) { return ob <= 6 ? 4 : 3; }
constexpr int kCorrOB = 4;
constexpr int kCorrJB = 6;
constexpr int kChanCB = 4;  // channel_correlate: 4 x 5 sums
constexpr int kChanJB = 5;
constexpr int kChanPB = 14;  // channel_conv: up to 2 x 14 outputs' sums
#include "conv_direct_simd.inc"
}  // namespace avx512
DISTOP_TARGET_END

DISTOP_TARGET_BEGIN("avx2,fma")
namespace avx2 {
template <class T>
struct Simd;
template <>
struct Simd<float> {
  using V = __m256;
  static constexpr int L = 8;
  static V zero() { return _mm256_setzero_ps(); }
  static V load(const float* p) { return _mm256_loadu_ps(p); }
  static void store(float* p, V v) { _mm256_storeu_ps(p, v); }
  static V bcast(float s) { return _mm256_set1_ps(s); }
  static V fma(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
  static V add(V a, V b) { return _mm256_add_ps(a, b); }
  static void pin(V& v) { asm("" : "+x"(v)); }
  using Mask = __m256i;
  static Mask range_mask(std::int64_t a, std::int64_t b) {
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    const __m256i from =
        _mm256_cmpgt_epi32(lane, _mm256_set1_epi32(static_cast<int>(clamp_lane(a, L)) - 1));
    const __m256i to =
        _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(clamp_lane(b, L))), lane);
    return _mm256_and_si256(from, to);
  }
  static V load_m(const float* p, Mask m) { return _mm256_maskload_ps(p, m); }
  static void store_m(float* p, Mask m, V v) { _mm256_maskstore_ps(p, m, v); }
  static V gather_m(const float* p, std::int64_t stride, Mask m) {
    const __m256i index = _mm256_mullo_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7),
                                             _mm256_set1_epi32(static_cast<int>(stride)));
    return _mm256_mask_i32gather_ps(_mm256_setzero_ps(), p, index, _mm256_castsi256_ps(m), 4);
  }
  static float hsum(V v) {
    const __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    const __m128 t = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(t, _mm_shuffle_ps(t, t, 1)));
  }
};
template <>
struct Simd<double> {
  using V = __m256d;
  static constexpr int L = 4;
  static V zero() { return _mm256_setzero_pd(); }
  static V load(const double* p) { return _mm256_loadu_pd(p); }
  static void store(double* p, V v) { _mm256_storeu_pd(p, v); }
  static V bcast(double s) { return _mm256_set1_pd(s); }
  static V fma(V a, V b, V c) { return _mm256_fmadd_pd(a, b, c); }
  static V add(V a, V b) { return _mm256_add_pd(a, b); }
  static void pin(V& v) { asm("" : "+x"(v)); }
  using Mask = __m256i;
  static Mask range_mask(std::int64_t a, std::int64_t b) {
    const __m256i lane = _mm256_setr_epi64x(0, 1, 2, 3);
    const __m256i from = _mm256_cmpgt_epi64(lane, _mm256_set1_epi64x(clamp_lane(a, L) - 1));
    const __m256i to = _mm256_cmpgt_epi64(_mm256_set1_epi64x(clamp_lane(b, L)), lane);
    return _mm256_and_si256(from, to);
  }
  static V load_m(const double* p, Mask m) { return _mm256_maskload_pd(p, m); }
  static void store_m(double* p, Mask m, V v) { _mm256_maskstore_pd(p, m, v); }
  static V gather_m(const double* p, std::int64_t stride, Mask m) {
    const __m128i index =
        _mm_mullo_epi32(_mm_setr_epi32(0, 1, 2, 3), _mm_set1_epi32(static_cast<int>(stride)));
    return _mm256_mask_i32gather_pd(_mm256_setzero_pd(), p, index, _mm256_castsi256_pd(m), 8);
  }
  static double hsum(V v) {
    const __m128d s = _mm_add_pd(_mm256_castpd256_pd128(v), _mm256_extractf128_pd(v, 1));
    return _mm_cvtsd_f64(_mm_add_sd(s, _mm_unpackhi_pd(s, s)));
  }
};
// 16 vector registers: up to 4 x 3 accumulators for the convolution tiles, 2 x 5 for the
// correlation's.
constexpr int kConvOB = 4;
constexpr int kConvNV(int) { return 3; }
constexpr int kCorrOB = 2;
constexpr int kCorrJB = 5;
constexpr int kChanCB = 2;
constexpr int kChanJB = 5;
constexpr int kChanPB = 6;
#include "conv_direct_simd.inc"
}  // namespace avx2
DISTOP_TARGET_END

// The instruction set's form of each loop (a direct call; the choice is one load and branch).
#define DISTOP_DIRECT_DISPATCH(call) \
  do {                               \
    if (host_simd_bytes() == 64)     \
      avx512::call;                  \
    else                             \
      avx2::call;                    \
  } while (false)

template <class T>
void flat_conv(const T* in, std::int64_t in_len, std::int64_t ic_n, const std::int64_t* shift,
               std::int64_t taps, const T* wk, std::int64_t oc_n, std::int64_t count, T* out,
               std::int64_t out_len) {
  DISTOP_DIRECT_DISPATCH(flat_conv(in, in_len, ic_n, shift, taps, wk, oc_n, count, out, out_len));
}
template <class T>
void flat_correlate(const T* dy, std::int64_t dy_len, std::int64_t o_n, const T* x,
                    std::int64_t x_len, std::int64_t c_n, std::int64_t nb, std::int64_t count,
                    const DirectGeo& g, std::int64_t wp, bool fresh, T* vsums) {
  DISTOP_DIRECT_DISPATCH(flat_correlate(dy, dy_len, o_n, x, x_len, c_n, nb, count, g.k1, g.k2, g.d1,
                                        g.d2, wp, fresh, vsums));
}
template <class T>
void flat_scatter(const T* dy, std::int64_t dy_len, std::int64_t o_n, const std::int64_t* shift,
                  std::int64_t taps, const T* wk, std::int64_t c_n, std::int64_t count, T* frame,
                  std::int64_t frame_len) {
  DISTOP_DIRECT_DISPATCH(
      flat_scatter(dy, dy_len, o_n, shift, taps, wk, c_n, count, frame, frame_len));
}
template <class T>
void zero_run(T* p, std::int64_t n) {
  DISTOP_DIRECT_DISPATCH(zero_run(p, n));
}
template <class T>
void lane_sums(const T* vsums, std::int64_t n, T* sums) {
  DISTOP_DIRECT_DISPATCH(lane_sums(vsums, n, sums));
}
template <class T>
void add_to_lanes(const T* row, std::int64_t p, double* lane) {
  DISTOP_DIRECT_DISPATCH(add_to_lanes(row, p, lane));
}
template <class T>
void transpose_out(const T* src, std::int64_t rows, std::int64_t cols, std::int64_t src_stride,
                   const T* add, T* dst, std::int64_t dst_stride, std::int64_t valid) {
  DISTOP_DIRECT_DISPATCH(transpose_out(src, rows, cols, src_stride, add, dst, dst_stride, valid));
}
template <class T>
void channel_conv(const T* xp, std::int64_t x_len, std::int64_t c_n, const std::int64_t* shift,
                  std::int64_t taps, const T* wk, std::int64_t o_pad, std::int64_t out1,
                  std::int64_t out2, std::int64_t wp, T* yt) {
  DISTOP_DIRECT_DISPATCH(channel_conv(xp, x_len, c_n, shift, taps, wk, o_pad, out1, out2, wp, yt));
}
template <class T>
void channel_correlate(const T* dyt, std::int64_t positions, std::int64_t o_pad,
                       const std::int64_t* fpos, const T* frames, std::int64_t x_len,
                       std::int64_t c_n, std::int64_t n, std::int64_t k1, std::int64_t k2,
                       std::int64_t row_step, T* wl) {
  DISTOP_DIRECT_DISPATCH(
      channel_correlate(dyt, positions, o_pad, fpos, frames, x_len, c_n, n, k1, k2, row_step, wl));
}
template <class T>
void add_scalar_run(T* dst, const T* src, T b, std::int64_t n) {
  DISTOP_DIRECT_DISPATCH(add_scalar_run(dst, src, b, n));
}
template <class T>
void scale_add_run(T* d, const T* src, T beta, std::int64_t n) {
  DISTOP_DIRECT_DISPATCH(scale_add_run(d, src, beta, n));
}
template <class T>
void pad_input(const T* x, std::int64_t c_n, const DirectGeo& g, const Frame& f, T* xp) {
  DISTOP_DIRECT_DISPATCH(pad_input(x, c_n, g, f, xp));
}
template <class T>
void pad_grad(const T* dy, std::int64_t o_n, const DirectGeo& g, const Frame& f, T* dyp) {
  DISTOP_DIRECT_DISPATCH(pad_grad(dy, o_n, g, f, dyp));
}
#undef DISTOP_DIRECT_DISPATCH

#else  // not x86-64: the kernels are never chosen (host_simd_bytes() is 0)

template <class T>
void flat_conv(const T*, std::int64_t, std::int64_t, const std::int64_t*, std::int64_t, const T*,
               std::int64_t, std::int64_t, T*, std::int64_t) {}
template <class T>
void flat_correlate(const T*, std::int64_t, std::int64_t, const T*, std::int64_t, std::int64_t,
                    std::int64_t, std::int64_t, const DirectGeo&, std::int64_t, bool, T*) {}
template <class T>
void flat_scatter(const T*, std::int64_t, std::int64_t, const std::int64_t*, std::int64_t, const T*,
                  std::int64_t, std::int64_t, T*, std::int64_t) {}
template <class T>
void zero_run(T*, std::int64_t) {}
template <class T>
void lane_sums(const T*, std::int64_t, T*) {}
template <class T>
void add_to_lanes(const T*, std::int64_t, double*) {}
template <class T>
void transpose_out(const T*, std::int64_t, std::int64_t, std::int64_t, const T*, T*, std::int64_t,
                   std::int64_t) {}
template <class T>
void channel_conv(const T*, std::int64_t, std::int64_t, const std::int64_t*, std::int64_t, const T*,
                  std::int64_t, std::int64_t, std::int64_t, std::int64_t, T*) {}
template <class T>
void channel_correlate(const T*, std::int64_t, std::int64_t, const std::int64_t*, const T*,
                       std::int64_t, std::int64_t, std::int64_t, std::int64_t, std::int64_t,
                       std::int64_t, T*) {}
template <class T>
void add_scalar_run(T*, const T*, T, std::int64_t) {}
template <class T>
void scale_add_run(T*, const T*, T, std::int64_t) {}
template <class T>
void pad_input(const T*, std::int64_t, const DirectGeo&, const Frame&, T*) {}
template <class T>
void pad_grad(const T*, std::int64_t, const DirectGeo&, const Frame&, T*) {}

#endif

// Whether the forward pass and the weight gradient put the output channels across the lanes
// (channel_conv, channel_correlate): where there is a vector's worth of channels and the flat
// rows' dropped columns would be a quarter of the work or more (LeNet's conv2: 4 of 14). On wider
// planes the flat forms waste little, and the channel forms' transposes of y and dy (a strided
// pass over every output) cost more than they save: measured 0.65-0.85x of the flat forms on
// 28 x 28 and 32 x 32 planes.
bool by_channels(const DirectGeo& g, std::int64_t o, std::int64_t lanes) {
  const std::int64_t wp = g.out2 + (g.k2 - 1) * g.d2;
  return lanes > 0 && o >= lanes && 4 * (wp - g.out2) >= wp;
}

void require_available(const char* op) {
  DISTOP_CHECK(host_simd_bytes() != 0, op,
               "the direct convolution kernels need an x86-64 CPU with AVX2 and FMA");
}

}  // namespace

template <class T>
std::int64_t direct_conv_frame_entries(const DirectGeo& g, std::int64_t c) {
  return c * frame_of<T>(g).x_len;
}

std::int64_t direct_conv_scratch_bytes(const DirectGeo& g, std::int64_t c, std::int64_t o,
                                       std::size_t elem_size) {
  // Planes of at most hp wp + span + 2 kTail entries and a cache line, per channel (the weight
  // gradient's chunks hold several samples, but only where one sample's planes are small).
  const std::int64_t wp = g.out2 + (g.k2 - 1) * g.d2, hp = g.out1 + (g.k1 - 1) * g.d1;
  const std::int64_t plane = hp * wp + (g.k1 - 1) * g.d1 * wp + (g.k2 - 1) * g.d2 + 2 * kTail + 16;
  return (c + o) * plane * static_cast<std::int64_t>(elem_size);
}

template <class T>
void direct_conv_forward(const T* x, const T* w, const T* bias, T* y, std::int64_t n,
                         std::int64_t c, std::int64_t o, const DirectGeo& g, T* frames) {
  require_available("conv_forward");
  const Frame f = frame_of<T>(g);
  const std::int64_t in_n = g.in1 * g.in2, out_n = g.out1 * g.out2;
  // At least a vector's worth of output channels: the channels across the lanes (channel_conv),
  // over the outputs' positions only.
  const auto lanes = static_cast<std::int64_t>(host_simd_bytes() / static_cast<int>(sizeof(T)));
  if (by_channels(g, o, lanes)) {
    const std::int64_t o_pad = (o + lanes - 1) / lanes * lanes;
    // wk [c][tap][o_pad]: a tap's weights for the output channels side by side (zero past o).
    const auto wk_buf = scratch<T>(c * f.taps * o_pad);
    T* const wk = wk_buf.data();
    for (std::int64_t i = 0; i < c * f.taps; ++i) {
      for (std::int64_t oc = 0; oc < o; ++oc) wk[i * o_pad + oc] = w[oc * c * f.taps + i];
      for (std::int64_t oc = o; oc < o_pad; ++oc) wk[i * o_pad + oc] = T(0);
    }
    const auto frames_buf = scratch<T>(frames ? 0 : c * f.x_len);
    T* const scratch_frames = frames ? nullptr : frames_buf.data();
    const auto yt_buf = scratch<T>(out_n * o_pad);
    T* const yt = yt_buf.data();
    for (std::int64_t s = 0; s < n; ++s) {
      T* const xp = frames ? frames + s * c * f.x_len : scratch_frames;
      pad_input(x + s * c * in_n, c, g, f, xp);
      channel_conv(xp, f.x_len, c, f.shift.data(), f.taps, wk, o_pad, g.out1, g.out2, f.wp, yt);
      // y[oc][p] = yt[p][oc] + bias[oc].
      transpose_out(yt, o, out_n, o_pad, bias, y + s * o * out_n, out_n, out_n);
    }
    return;
  }
  // wk [c][tap][o]: a tap's weights for consecutive output channels side by side.
  const auto wk_buf = scratch<T>(c * f.taps * o);
  T* const wk = wk_buf.data();
  for (std::int64_t oc = 0; oc < o; ++oc)
    for (std::int64_t ic = 0; ic < c; ++ic)
      for (std::int64_t j = 0; j < f.taps; ++j)
        wk[(ic * f.taps + j) * o + oc] = w[(oc * c + ic) * f.taps + j];
  const std::int64_t out_len = f.t_out + kTail;
  const auto frames_buf = scratch<T>(frames ? 0 : c * f.x_len);
  T* const scratch_frames = frames ? nullptr : frames_buf.data();
  const auto out_buf = scratch<T>(o * out_len);
  T* const out = out_buf.data();
  for (std::int64_t s = 0; s < n; ++s) {
    T* const xp = frames ? frames + s * c * f.x_len : scratch_frames;
    pad_input(x + s * c * in_n, c, g, f, xp);
    flat_conv(xp, f.x_len, c, f.shift.data(), f.taps, wk, o, f.t_out, out, out_len);
    T* ys = y + s * o * out_n;
    for (std::int64_t oc = 0; oc < o; ++oc) {
      const T b = bias ? bias[oc] : T(0);
      for (std::int64_t r = 0; r < g.out1; ++r)
        add_scalar_run(ys + oc * out_n + r * g.out2, out + oc * out_len + r * f.wp, b, g.out2);
    }
  }
}

// The input gradient of one sample, from its padded dy planes (pad_grad): the frame's gradient,
// every output's dy through the weights scattered to the frame positions its taps read,
// frame[c][t + shift_j] += sum_o w[o, c, j] dy[o][t], then dx = beta dx + the frame's entries
// that hold input. The weights are laid out once, as [tap][o][c].
template <class T>
class InputScatter {
 public:
  // No weights (w null): a scatter that is never used, and costs nothing.
  InputScatter(const T* w, std::int64_t c, std::int64_t o, const DirectGeo& g, const Frame& f)
      : c_(c), o_(o), g_(g), f_(f) {
    if (w == nullptr) return;
    wk_buf_ = scratch<T>(c * f.taps * o);
    wk_ = wk_buf_.data();
    for (std::int64_t oc = 0; oc < o; ++oc)
      for (std::int64_t ic = 0; ic < c; ++ic)
        for (std::int64_t j = 0; j < f.taps; ++j)
          wk_[(j * o + oc) * c + ic] = w[(oc * c + ic) * f.taps + j];
    // Frames as long as the input's (the last tile's scatter reaches t_out + span + a tile).
    frame_buf_ = scratch<T>(c * f.x_len);
    frame_ = frame_buf_.data();
  }

  void sample(const T* dyp, T beta, T* dx) const {
    const Frame& f = f_;
    const DirectGeo& g = g_;
    zero_run(frame_, c_ * f.x_len);
    flat_scatter(dyp + f.lead, f.dy_len, o_, f.shift.data(), f.taps, wk_, c_, f.t_out, frame_,
                 f.x_len);
    // Input entry (i1, i2) sits at frame position (i1 + off1, i2 + off2): frame rows [r_lo, r_hi)
    // and columns [q_lo, q_hi) hold input entries, so input columns [q_lo - off2, q_hi - off2)
    // of the rows in there get the frame's gradient and the others none.
    const std::int64_t r_lo = std::clamp<std::int64_t>(g.off1, 0, f.hp);
    const std::int64_t r_hi = std::clamp<std::int64_t>(g.off1 + g.in1, r_lo, f.hp);
    const std::int64_t q_lo = std::clamp<std::int64_t>(g.off2, 0, f.wp);
    const std::int64_t q_hi = std::clamp<std::int64_t>(g.off2 + g.in2, q_lo, f.wp);
    const std::int64_t i_lo = q_lo - g.off2, i_hi = q_hi - g.off2;
    for (std::int64_t ch = 0; ch < c_; ++ch) {
      for (std::int64_t i1 = 0; i1 < g.in1; ++i1) {
        T* d = dx + (ch * g.in1 + i1) * g.in2;
        const std::int64_t r = i1 + g.off1;
        const bool inside = r >= r_lo && r < r_hi && i_hi > i_lo;
        const std::int64_t a = inside ? i_lo : g.in2, b = inside ? i_hi : g.in2;
        for (std::int64_t i2 = 0; i2 < a; ++i2) d[i2] = beta == T(0) ? T(0) : beta * d[i2];
        if (inside) scale_add_run(d + a, frame_ + ch * f.x_len + r * f.wp + q_lo, beta, b - a);
        for (std::int64_t i2 = b; i2 < g.in2; ++i2) d[i2] = beta == T(0) ? T(0) : beta * d[i2];
      }
    }
  }

 private:
  std::int64_t c_, o_;
  const DirectGeo& g_;
  const Frame& f_;
  ::distop::detail::Scratch<T> wk_buf_, frame_buf_;
  T* wk_ = nullptr;
  T* frame_ = nullptr;
};

// The bias gradient's sums, db[o] = sum over samples and positions of dy[s, o, ...], taken a sample
// at a time while its dy is in cache: entry q of a plane into lane q % kLanes of its channel, the
// lanes carried from sample to sample and folded pairwise at the end, in double (the order of
// conv_backward_bias, so the results are the same to the bit).
template <class T>
class BiasSums {
 public:
  explicit BiasSums(std::int64_t o) : lanes_(static_cast<std::size_t>(o) * kLanes, 0.0) {}
  void add(const T* dy, std::int64_t o, std::int64_t p) {
    for (std::int64_t oc = 0; oc < o; ++oc)
      add_to_lanes(dy + oc * p, p, lanes_.data() + oc * kLanes);
  }
  void write(std::int64_t o, T beta, T* db) {
    for (std::int64_t oc = 0; oc < o; ++oc) {
      double* lane = lanes_.data() + oc * kLanes;
      for (int w = kLanes / 2; w >= 1; w /= 2)
        for (int k = 0; k < w; ++k) lane[k] += lane[k + w];
      const auto acc = static_cast<T>(lane[0]);
      db[oc] = beta == T(0) ? acc : beta * db[oc] + acc;
    }
  }

 private:
  static constexpr int kLanes = 16;
  std::vector<double> lanes_;
};

// The gradients wanted (dx, dw, db; any may be null, dw null only with dx set) in one pass over
// the samples: each sample's dy padded once and summed for db, its input gradient scattered from
// the padded dy, and the weight gradient correlated chunk by chunk (or, with the channels across
// the lanes, over the whole batch at the end). frames: the forward pass's kept input frames, or
// null to pad x here.
template <class T>
void direct_backward(const T* dy, const T* x, const T* w, T beta_x, T* dx, T beta_w, T* dw,
                     T beta_b, T* db, std::int64_t n, std::int64_t c, std::int64_t o,
                     const DirectGeo& g, const T* frames) {
  const Frame f = frame_of<T>(g);
  const std::int64_t in_n = g.in1 * g.in2, out_n = g.out1 * g.out2;
  BiasSums<T> bias(db ? o : 0);
  const InputScatter<T> scatter(dx ? w : nullptr, c, o, g, f);
  if (!dw) {
    const auto dyp_buf = scratch<T>(o * f.dy_len);
    T* const dyp = dyp_buf.data();
    for (std::int64_t s = 0; s < n; ++s) {
      pad_grad(dy + s * o * out_n, o, g, f, dyp);
      if (db) bias.add(dy + s * o * out_n, o, out_n);
      scatter.sample(dyp, beta_x, dx + s * c * in_n);
    }
    if (db) bias.write(o, beta_b, db);
    return;
  }
  const std::int64_t taps_all = o * c * f.taps;
  // At least a vector's worth of output channels (and unit column steps): the weight gradient
  // with the channels across the lanes (channel_correlate), over the outputs' positions only.
  const auto lanes = static_cast<std::int64_t>(host_simd_bytes() / static_cast<int>(sizeof(T)));
  // It keeps the whole batch's transposed dy (and, unless the forward pass kept them, its input
  // frames) until the end: only within the bound of the forward's kept frames.
  const std::int64_t o_pad = lanes > 0 ? (o + lanes - 1) / lanes * lanes : o;
  const std::int64_t batch_bytes =
      n * (out_n * o_pad + (frames ? 0 : c * f.x_len)) * static_cast<std::int64_t>(sizeof(T));
  if (by_channels(g, o, lanes) && g.d2 == 1 && batch_bytes <= kMaxKeptColumnsBytes) {
    const auto dyt_buf = scratch<T>(n * out_n * o_pad);
    T* const dyt = dyt_buf.data();
    const auto frames_buf = scratch<T>(frames ? 0 : n * c * f.x_len);
    T* const all_frames = frames ? nullptr : frames_buf.data();
    const auto dyp_buf = scratch<T>(dx ? o * f.dy_len : 0);
    T* const dyp = dx ? dyp_buf.data() : nullptr;
    for (std::int64_t s = 0; s < n; ++s) {
      const T* dys = dy + s * o * out_n;
      if (!frames) pad_input(x + s * c * in_n, c, g, f, all_frames + s * c * f.x_len);
      if (db) bias.add(dys, o, out_n);
      if (dx) {
        pad_grad(dys, o, g, f, dyp);
        scatter.sample(dyp, beta_x, dx + s * c * in_n);
      }
      // dyt[p][oc] = dy[oc][p]: the sample's dy with the channels side by side (zero past o).
      transpose_out(dys, out_n, o_pad, out_n, static_cast<const T*>(nullptr),
                    dyt + s * out_n * o_pad, o_pad, o);
    }
    // Where output position p = (r, q) reads the frame for tap (0, 0): r wp + q.
    std::vector<std::int64_t> fpos(static_cast<std::size_t>(out_n));
    for (std::int64_t r = 0; r < g.out1; ++r)
      for (std::int64_t q = 0; q < g.out2; ++q)
        fpos[static_cast<std::size_t>(r * g.out2 + q)] = r * f.wp + q;
    const auto wl_buf = scratch<T>(o_pad * c * f.taps);
    T* const wl = wl_buf.data();
    channel_correlate(dyt, out_n, o_pad, fpos.data(), frames ? frames : all_frames, f.x_len, c, n,
                      g.k1, g.k2, g.d1 * f.wp, wl);
    const std::int64_t ct = c * f.taps;
    for (std::int64_t oc = 0; oc < o; ++oc)
      for (std::int64_t i = 0; i < ct; ++i) {
        const T v = wl[((oc / lanes) * ct + i) * lanes + oc % lanes];
        T& d = dw[oc * ct + i];
        d = beta_w == T(0) ? v : beta_w * d + v;
      }
    if (db) bias.write(o, beta_b, db);
    return;
  }
  constexpr std::int64_t kLanes = 64 / sizeof(T);  // the widest vector's lanes
  const auto vsums_buf = scratch<T>(taps_all * kLanes);
  T* const vsums = vsums_buf.data();
  // (The first chunk's tiles start their sums from zero: no pass to clear vsums.)
  // Chunks of samples whose planes one tile reads (a block of output channels' dy and one
  // frame; the kernel rows then reuse them from the 48 KiB L1 cache) take about 36 KiB: LeNet's
  // conv2 takes 5 samples at a time, conv1 one (measured 3-8 % faster than 24 KiB on conv2).
  const std::int64_t tile_bytes =
      (std::min<std::int64_t>(o, 4) * f.dy_len + f.x_len) * static_cast<std::int64_t>(sizeof(T));
  const std::int64_t nb = std::clamp<std::int64_t>((std::int64_t{36} << 10) / tile_bytes, 1, n);
  // The input frames: the forward pass's, kept, or padded here chunk by chunk.
  const auto padded_buf = scratch<T>(frames ? 0 : nb * c * f.x_len);
  T* const padded = frames ? nullptr : padded_buf.data();
  const auto dyp_buf = scratch<T>(nb * o * f.dy_len);
  T* const dyp = dyp_buf.data();
  for (std::int64_t s0 = 0; s0 < n; s0 += nb) {
    const std::int64_t m = std::min(nb, n - s0);
    const T* const xp = frames ? frames + s0 * c * f.x_len : padded;
    for (std::int64_t s = 0; s < m; ++s) {
      if (!frames) pad_input(x + (s0 + s) * c * in_n, c, g, f, padded + s * c * f.x_len);
      pad_grad(dy + (s0 + s) * o * out_n, o, g, f, dyp + s * o * f.dy_len);
      if (db) bias.add(dy + (s0 + s) * o * out_n, o, out_n);
      if (dx) scatter.sample(dyp + s * o * f.dy_len, beta_x, dx + (s0 + s) * c * in_n);
    }
    // The flat dy runs start after each plane's leading zeros.
    flat_correlate(dyp + f.lead, f.dy_len, o, xp, f.x_len, c, m, f.t_out, g, f.wp, s0 == 0, vsums);
  }
  const auto sums_buf = scratch<T>(taps_all);
  T* const sums = sums_buf.data();
  lane_sums(vsums, taps_all, sums);
  for (std::int64_t i = 0; i < taps_all; ++i)
    dw[i] = beta_w == T(0) ? sums[i] : beta_w * dw[i] + sums[i];
  if (db) bias.write(o, beta_b, db);
}

template <class T>
void direct_conv_backward_input(const T* dy, const T* w, T beta, T* dx, std::int64_t n,
                                std::int64_t c, std::int64_t o, const DirectGeo& g) {
  require_available("conv_backward_input");
  direct_backward<T>(dy, nullptr, w, beta, dx, T(0), nullptr, T(0), nullptr, n, c, o, g, nullptr);
}

template <class T>
void direct_conv_backward_weight(const T* dy, const T* x, T beta, T* dw, std::int64_t n,
                                 std::int64_t c, std::int64_t o, const DirectGeo& g,
                                 const T* frames) {
  require_available("conv_backward_weight");
  direct_backward<T>(dy, x, nullptr, T(0), nullptr, beta, dw, T(0), nullptr, n, c, o, g, frames);
}

template <class T>
void direct_conv_backward(const T* dy, const T* x, const T* w, T beta_x, T* dx, T beta_w, T* dw,
                          T beta_b, T* db, std::int64_t n, std::int64_t c, std::int64_t o,
                          const DirectGeo& g, const T* frames) {
  require_available("conv_backward");
  direct_backward<T>(dy, x, w, beta_x, dx, beta_w, dw, beta_b, db, n, c, o, g, frames);
}

#define DISTOP_INSTANTIATE_DIRECT_CONV(T)                                                    \
  template std::int64_t direct_conv_frame_entries<T>(const DirectGeo&, std::int64_t);        \
  template void direct_conv_forward<T>(const T*, const T*, const T*, T*, std::int64_t,       \
                                       std::int64_t, std::int64_t, const DirectGeo&, T*);    \
  template void direct_conv_backward_input<T>(const T*, const T*, T, T*, std::int64_t,       \
                                              std::int64_t, std::int64_t, const DirectGeo&); \
  template void direct_conv_backward_weight<T>(const T*, const T*, T, T*, std::int64_t,      \
                                               std::int64_t, std::int64_t, const DirectGeo&, \
                                               const T*);                                    \
  template void direct_conv_backward<T>(const T*, const T*, const T*, T, T*, T, T*, T, T*,   \
                                        std::int64_t, std::int64_t, std::int64_t,            \
                                        const DirectGeo&, const T*);
DISTOP_INSTANTIATE_DIRECT_CONV(float)
DISTOP_INSTANTIATE_DIRECT_CONV(double)
#undef DISTOP_INSTANTIATE_DIRECT_CONV

}  // namespace detail
}  // namespace distop::kernels
