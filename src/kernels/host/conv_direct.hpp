#pragma once
// Internal: direct (GEMM-free) host convolution kernels for 1-D and 2-D windows of stride 1,
// vectorised with AVX-512 or AVX2 + FMA, chosen at run time.
//
// The idea ("flat planes"): pad each input channel into a frame of pitch wp = out2 + (k2 - 1) d2
// holding every entry any output reads (zeros for the padding). Output (r, q) then reads frame
// entry (r + j1 d1) wp + q + j2 d2 for tap (j1, j2), so with t = r wp + q every tap is one shift
// of one flat array: y[o][t] = sum_{c, j} w[o, c, j] xp[c][t + shift_j]. The columns q >= out2
// of each flat output row are computed and thrown away (wp - out2 = (k2 - 1) d2 of them), and in
// exchange the whole output plane is one long run of vectors, whatever its width. The input
// gradient scatters the flat dy (zero in those columns) through the transposed weights to the
// frame positions each tap read; the weight gradient correlates the flat dy with the shifted
// frames. Each output vector is held in a register across all C k1 k2 taps (a block of output
// channels times a few vectors at a time), so the kernels run near the FMA units' speed for any
// channel count, where a GEMM of LeNet's shapes (6 or 16 output channels, 25 or 150 inner
// products) runs at a third of it.
//
// Where a layer has a vector's worth of output channels and the dropped columns would be a
// quarter of the work or more (narrow planes: LeNet's conv2), the forward pass and the weight
// gradient put the channels across the lanes instead: a vector holds one output position's (or
// one tap's) sums for 16 channels, only the outputs' positions are visited, and y and dy are
// transposed to and from that layout (by_channels in conv_direct.cpp).

#include <cstddef>
#include <cstdint>

#include "distop/kernels/conv.hpp"

namespace distop::kernels::detail {

// A 1-D or 2-D window with stride 1 (a 1-D window has in1 = out1 = k1 = 1), in the terms of
// WindowGeometry: output (r, q) reads input (r - off1 + j1 d1, q - off2 + j2 d2), zero outside.
struct DirectGeo {
  std::int64_t in1, in2;    // input extents (height, width)
  std::int64_t out1, out2;  // output extents
  std::int64_t k1, k2;      // kernel extents
  std::int64_t d1, d2;      // dilations
  std::int64_t off1, off2;  // offsets
};

// The most scratch, in bytes, the three kernels below take for one geometry and channel counts
// with elements of elem_size bytes (one sample's padded planes of every channel).
std::int64_t direct_conv_scratch_bytes(const DirectGeo& g, std::int64_t c, std::int64_t o,
                                       std::size_t elem_size);

// One sample's padded input frames, in entries (c of them): what a forward pass keeps per sample
// for the weight gradient.
template <class T>
std::int64_t direct_conv_frame_entries(const DirectGeo& g, std::int64_t c);

// x [n, c, in1, in2], w [o, c, k1, k2], bias [o] or null, y [n, o, out1, out2] (overwritten).
// frames: null, or room for n direct_conv_frame_entries, where the padded input is left for
// the weight gradient.
template <class T>
void direct_conv_forward(const T* x, const T* w, const T* bias, T* y, std::int64_t n,
                         std::int64_t c, std::int64_t o, const DirectGeo& g, T* frames);
// dx = beta dx + conv^T_x(dy, w) (dx not read when beta is 0).
template <class T>
void direct_conv_backward_input(const T* dy, const T* w, T beta, T* dx, std::int64_t n,
                                std::int64_t c, std::int64_t o, const DirectGeo& g);
// dw = beta dw + conv^T_w(dy, x) (dw not read when beta is 0). frames: null, or those a forward
// pass left for this x (then x is not read).
template <class T>
void direct_conv_backward_weight(const T* dy, const T* x, T beta, T* dw, std::int64_t n,
                                 std::int64_t c, std::int64_t o, const DirectGeo& g,
                                 const T* frames);
// The weight gradient with, where dx and db are not null, the input gradient and db = beta_b db +
// the sums of dy, in one pass: each sample's dy padded once and summed while in cache (the same
// results as the separate calls and conv_backward_bias). frames as for the weight gradient.
template <class T>
void direct_conv_backward(const T* dy, const T* x, const T* w, T beta_x, T* dx, T beta_w, T* dw,
                          T beta_b, T* db, std::int64_t n, std::int64_t c, std::int64_t o,
                          const DirectGeo& g, const T* frames);

}  // namespace distop::kernels::detail
