#pragma once
// Internal: the host fast paths of the kernels, one layer beside the portable Kokkos kernels.
//
// The portable kernels (src/kernels/*.cpp) are the device forms: Kokkos parallel loops that a GPU
// runs and the host runs too. Some kernels also have a host-only form that is several times
// faster on a CPU (hand-vectorised x86 code, or a different algorithm that suits a CPU's caches
// and BLAS). Each such kernel calls its host_fast_path function once, at the top of its entry
// point, after the argument checks; the function returns true when it did the work and false
// where it does not apply (another geometry, no AVX2/AVX-512, conv_method() says otherwise), and
// then the portable form below runs.
//
// The layer is compiled only in a host build with DISTOP_ENABLE_HOST_KERNELS=ON (the default):
// with the option OFF, or in a device build, every function here is an inline `return false`,
// so the portable forms run everywhere (which is how the test suite exercises the GPU's code on
// a CPU). docs/performance.md ("Host fast paths") lists the kernels that have one and what it
// gains over the portable form.
//
// The fast paths here: the convolution (the direct kernels of conv_direct.hpp for few channels
// on one thread, and the row-folded im2col, "bands", elsewhere; host/conv.cpp), and max and
// average pooling (blocked rows, AVX-512 for 2-wide windows; host/pool.cpp), and the portable
// convolution's im2col and col2im (a work item per row; host/conv.cpp), and the bias rows
// (add_row_vector, fill_rows, sum_rows: plain loops and rows_simd.hpp; host/rows.cpp), and the
// box kernels (pack, unpack, copy_box, fill_box: run by run, AVX-512/AVX2 sweeps of
// host/box_simd.hpp; host/box.cpp). Each function returns false first thing where
// kernels::host_kernels_enabled() is false: the environment variable DISTOP_HOST_KERNELS=off
// switches the layer off at run time in a build that compiled it, so that one build tests both
// forms.
//
// Everything host-only lives in this folder: the fast paths, their hand-vectorised forms
// (*_simd.*, over the vector traits of simd_vec_*.inc, compiled per instruction set by
// simd_target.hpp), the run loops of runs.hpp, and the CPU detection behind host_simd_bytes() and
// host_kernels_enabled() (simd.cpp, compiled in every build). The kernels beside this folder are
// the portable ones.

#include <cstdint>

#include "../conv_internal.hpp"
#include "../pool_internal.hpp"
#include "../space.hpp"
#include "distop/kernels/box.hpp"
#include "distop/kernels/conv.hpp"
#include "distop/kernels/simd.hpp"

namespace distop::kernels::host_fast_path {

#if DISTOP_HOST_KERNELS

// kernels::conv_forward, conv_backward_input, conv_backward_weight on checked raw pointers (see
// conv_detail::im2col_forward); conv_backward the direct kernels' fused weight, input and bias
// gradients (false unless grads.dw is wanted and the direct kernels take it).
template <class T>
bool conv_forward(const T* x, const T* w, const T* bias, T* y, std::int64_t n, std::int64_t c,
                  std::int64_t o, const conv_detail::Geo& g, ConvColumns<T>* keep);
template <class T>
bool conv_backward_input(const T* dy, const T* w, T beta, T* dx, std::int64_t n, std::int64_t c,
                         std::int64_t o, const conv_detail::Geo& g);
template <class T>
bool conv_backward_weight(const T* dy, const T* x, T beta, T* dw, std::int64_t n, std::int64_t c,
                          std::int64_t o, const conv_detail::Geo& g, const ConvColumns<T>* kept);
template <class T>
bool conv_backward(const T* dy, const T* x, const T* w, const ConvGradients<T>& grads,
                   std::int64_t n, std::int64_t c, std::int64_t o, const conv_detail::Geo& g,
                   const ConvColumns<T>* kept);

// The portable convolution's im2col and col2im (conv_im2col.cpp): col [C taps, nb P] from the nb
// samples of x [nb, C, in...]; dx = beta dx + the adjoint applied to col. A work item per row of
// col (or per sample and channel of dx), whose inner loops are runs of out[2] entries decoded
// once per row, where the portable form decodes every entry.
template <class T>
bool im2col(const T* x, std::int64_t nb, std::int64_t channels, const conv_detail::Geo& g, T* col);
template <class T>
bool col2im(const T* col, std::int64_t nb, std::int64_t channels, const conv_detail::Geo& g, T beta,
            T* dx);

// kernels::add_row_vector, fill_rows and sum_rows (elementwise_rows.cpp) on checked raw pointers: y
// (dy) [rows, n], b (db) [n], rows and n positive (host/rows.cpp).
template <class T>
bool add_row_vector(T* y, const T* b, std::int64_t rows, std::int64_t n);
template <class T>
bool fill_rows(T* y, const T* b, std::int64_t rows, std::int64_t n);
template <class T>
bool sum_rows(const T* dy, std::int64_t rows, std::int64_t n, T beta, T* db);

// kernels::max_pool_forward and avg_pool_forward on checked raw pointers: `planes` planes (N C)
// of x [in...] into y [out...] (and argmax, y's indices into x).
template <class T>
bool max_pool_forward(const pool_detail::Geometry3& g, std::int64_t planes, const T* x, T* y,
                      std::int64_t* argmax);
template <class T>
bool avg_pool_forward(const pool_detail::Geometry3& g, std::int64_t planes, const T* x, T* y,
                      double scale);

// The box kernels of box.cpp on checked boxes: d's runs (as dst_runs) = s's runs (as src_runs,
// the same iterated extents and run length), or += when accumulate (pack and unpack, with a
// packed buffer's runs on one side, box_detail::packed_like); dst_box of d (dst_shape) =
// src_box of s (false where s and d are one tensor: the boxes may overlap); every run of d =
// value.
template <class T>
bool copy_runs(const detail::BoxRuns& dst_runs, T* d, const detail::BoxRuns& src_runs, const T* s,
               bool accumulate);
template <class T>
bool copy_box(const Shape& src_shape, const Box& src_box, const T* s, const Shape& dst_shape,
              const Box& dst_box, T* d, bool accumulate);
template <class T>
bool fill_runs(const detail::BoxRuns& runs, T* d, T value);

#else

template <class T>
bool conv_forward(const T*, const T*, const T*, T*, std::int64_t, std::int64_t, std::int64_t,
                  const conv_detail::Geo&, ConvColumns<T>*) {
  return false;
}
template <class T>
bool conv_backward_input(const T*, const T*, T, T*, std::int64_t, std::int64_t, std::int64_t,
                         const conv_detail::Geo&) {
  return false;
}
template <class T>
bool conv_backward_weight(const T*, const T*, T, T*, std::int64_t, std::int64_t, std::int64_t,
                          const conv_detail::Geo&, const ConvColumns<T>*) {
  return false;
}
template <class T>
bool conv_backward(const T*, const T*, const T*, const ConvGradients<T>&, std::int64_t,
                   std::int64_t, std::int64_t, const conv_detail::Geo&, const ConvColumns<T>*) {
  return false;
}

template <class T>
bool im2col(const T*, std::int64_t, std::int64_t, const conv_detail::Geo&, T*) {
  return false;
}
template <class T>
bool col2im(const T*, std::int64_t, std::int64_t, const conv_detail::Geo&, T, T*) {
  return false;
}

template <class T>
bool add_row_vector(T*, const T*, std::int64_t, std::int64_t) {
  return false;
}
template <class T>
bool fill_rows(T*, const T*, std::int64_t, std::int64_t) {
  return false;
}
template <class T>
bool sum_rows(const T*, std::int64_t, std::int64_t, T, T*) {
  return false;
}

template <class T>
bool max_pool_forward(const pool_detail::Geometry3&, std::int64_t, const T*, T*, std::int64_t*) {
  return false;
}
template <class T>
bool avg_pool_forward(const pool_detail::Geometry3&, std::int64_t, const T*, T*, double) {
  return false;
}

template <class T>
bool copy_runs(const detail::BoxRuns&, T*, const detail::BoxRuns&, const T*, bool) {
  return false;
}
template <class T>
bool copy_box(const Shape&, const Box&, const T*, const Shape&, const Box&, T*, bool) {
  return false;
}
template <class T>
bool fill_runs(const detail::BoxRuns&, T*, T) {
  return false;
}

#endif

}  // namespace distop::kernels::host_fast_path
