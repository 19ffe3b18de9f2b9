#pragma once
// HaloExchange<T>: fills the ghost zones of a block-partitioned tensor from the neighbours that
// own them, and, in the adjoint, adds the ghost values back into their owners.

#include <cstdint>
#include <memory>
#include <vector>

#include "distop/core/box.hpp"
#include "distop/ops/halo.hpp"
#include "distop/ops/linear_operator.hpp"

namespace distop {

namespace detail {
class HaloPlan;
}

// The space of the padded local arrays: each rank of `interior`'s partition holds its interior
// block extended by spec[a][c_a] ghost entries on each side of every axis a (c_a: its grid
// coordinate). It is the "virtual" global tensor whose blocks are these padded arrays, laid side by
// side (Decomposition::blocks with the padded extents), so its inner product is the sum over ranks
// of the local products, ghosts included. Metadata only; errors as HaloExchange's constructor.
TensorSpace halo_space(const TensorSpace& interior, const HaloSpec& spec);

// Halo exchange on an N-D block partition (DistDL's HaloExchange).
//
//   interior: a tensor split by a partition with one grid axis per tensor axis (tensor axis a by
//     grid axis a); blocks balanced or given explicitly.
//   domain = range: halo_space(interior, spec), the padded local arrays.
//   forward (y = H x, overwrites y): the interior entries of y are those of x; every ghost entry
//     of y holds the value that the neighbour owning it has in the interior of x. Ghost zones on a
//     side with no neighbour (the domain boundary) are zero: zero padding, which a layer with
//     another padding mode overwrites. x's ghost entries are not read.
//   adjoint (x = H* y, overwrites x): each ghost value of y is added into the owner's interior
//     entry that it mirrors; every ghost entry of x is zero.
//   collective over: the parent communicator at construction (one allreduce that checks every rank
//     passed the same arguments, then a communicator duplicate over the partition); forward and
//     adjoint over the partition's ranks, point-to-point between neighbours only. Ranks outside
//     the partition hold empty tensors and return at once.
//
// Derivation. Write g_a for the ghost entries whose last ghost axis is a: their axis-a index is in
// a ghost zone, their index on every axis b > a is interior, on axes b < a it is anything. Every
// ghost entry is in exactly one g_a. An entry e of g_a on a side with a neighbour mirrors the entry
// s(e) of that neighbour with the same indices but for axis a, shifted into the neighbour's
// interior; s(e) is interior on axes >= a, so it lies in no g_b with b >= a. One sweep along axis a
// is the linear map
//   E_a = Z_a + S_a,  (Z_a x)_e = 0 for e in g_a, x_e otherwise;  (S_a x)_e = x_{s(e)} for e in
//   g_a with a neighbour, 0 otherwise,
// and the forward is H = E_{D-1} ... E_1 E_0: by induction on a, when E_a runs, every s(e) it reads
// (interior, or in some g_b with b < a) already holds its final value, and later sweeps never write
// g_a; so corners travel through the intermediate ranks (an entry ghost on axes 0 and 1 is read in
// sweep 1 from the axis-1 neighbour's g_0 entry, filled by sweep 0 from the diagonal rank). Z_a is
// a diagonal 0/1 projection, so Z_a* = Z_a, and S_a* = S_a^T: (S_a^T y)_f = sum over e in g_a with
// s(e) = f of y_e. Hence
//   E_a* y = Z_a y + S_a^T y: send every g_a value to its owner, add it into s(e), zero g_a
// (the entries s(e) are not in g_a, so adding and zeroing do not interfere), and
//   H* = E_0* E_1* ... E_{D-1}*: the adjoint sweeps the axes in reverse order, D-1 first.
// <H x, y> = <x, H* y> holds exactly in the sum-over-ranks inner product of the padded space.
//
// Communication (CommStats): the forward sweep a receives on each side with a neighbour one
// message of g_a's volume on that side, width_a * prod_{b<a} padded_b * prod_{b>a} interior_b,
// and sends to each neighbour the mirror of the neighbour's g_a zone facing it; zero-sized
// messages are not sent. In total a rank receives each of its ghost entries once (those on a
// boundary side are zeroed locally). The adjoint moves the same messages in the other direction.
//
// Plans (neighbours, boxes, buffers) are built once; forward and adjoint are not thread-safe on
// one operator (they share its staging buffers).
template <class T>
class HaloExchange final : public LinearOperator<T> {
 public:
  // Explicit ghost widths: spec[a][c] for part c along tensor axis a (one entry per part), each
  // width >= 0 and no wider than the neighbour's block on that side (a width on a side with no
  // neighbour is allowed: it is zero padding). Collective over the interior's parent.
  HaloExchange(const TensorSpace& interior, HaloSpec spec);
  // The widths a convolution or pooling with windows[a] along tensor axis a needs (halo_spec; the
  // interior must be balanced), surplus trimmed to zero: the layer trims owned inputs it does not
  // read. Collective over the interior's parent.
  HaloExchange(const TensorSpace& interior, const std::vector<ConvWindow>& windows);

  const TensorSpace& domain() const override { return space_; }
  const TensorSpace& range() const override { return space_; }
  void forward(const DistTensor<T>& x, DistTensor<T>& y) const override;
  void adjoint(const DistTensor<T>& y, DistTensor<T>& x) const override;
  std::string name() const override { return "HaloExchange"; }
  CommStats forward_stats() const override;
  CommStats adjoint_stats() const override;

  // The space the operator was built from: each rank's interior block, without ghosts.
  const TensorSpace& interior_space() const noexcept { return interior_; }
  const HaloSpec& spec() const noexcept;
  // This rank's interior inside its padded local array (all extents 0 outside the partition).
  const Box& interior_box() const noexcept;

 private:
  std::shared_ptr<const detail::HaloPlan> plan_;
  TensorSpace interior_;
  TensorSpace space_;
  // Staging for boxes that are not contiguous in the local array and for adjoint receives; two
  // per (axis, side): the ghost box's and the mirror box's.
  mutable std::vector<Tensor<T>> buffers_;
};

extern template class HaloExchange<float>;
extern template class HaloExchange<double>;

}  // namespace distop
