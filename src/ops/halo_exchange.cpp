#include "distop/ops/halo_exchange.hpp"

#include <array>
#include <functional>

#include "distop/comm/agree.hpp"
#include "distop/comm/collectives.hpp"
#include "distop/comm/exchange.hpp"
#include "distop/comm/mpi.hpp"
#include "distop/core/error.hpp"
#include "distop/kernels/box.hpp"

namespace distop {

namespace {

constexpr const char* kOp = "HaloExchange";
// Forward sweep a uses tag kTag + a, adjoint sweep a uses kTag + kAdjointTag + a; the
// communicator is the plan's own, so these only keep the two directions apart when read in traces.
constexpr int kTag = 40;
constexpr int kAdjointTag = 1000;

std::int64_t block_extent(const TensorSpace& interior, int axis, std::int64_t part) {
  const auto& b = interior.decomposition().bounds(axis);
  return b[part + 1] - b[part];
}

// Throws a distop::Error unless `spec` fits `interior`. Metadata only: the same on every rank.
void validate(const TensorSpace& interior, const HaloSpec& spec) {
  const auto& p = interior.partition();
  const auto& d = interior.decomposition();
  const int rank = interior.rank();
  DISTOP_CHECK(p.dim() == rank, kOp, "a tensor of rank ", rank, " (shape ",
               interior.global_shape().str(), ") on a partition of rank ", p.dim(), " (", p.str(),
               "): a halo exchange needs one grid axis per tensor axis");
  for (int a = 0; a < rank; ++a)
    DISTOP_CHECK(d.axis_map()[a] == a, kOp, "tensor axis ", a, " is split by grid axis ",
                 d.axis_map()[a], " in ", interior.str(),
                 "; a halo exchange needs tensor axis a split by grid axis a");
  DISTOP_CHECK(static_cast<int>(spec.size()) == rank, kOp, "ghost widths for ", spec.size(),
               " axes given for a tensor of rank ", rank);
  for (int a = 0; a < rank; ++a) {
    const std::int64_t parts = d.parts(a);
    DISTOP_CHECK(static_cast<std::int64_t>(spec[a].size()) == parts, kOp, "tensor axis ", a,
                 " is split in ", parts, " parts but ", spec[a].size(), " ghost widths were given");
    for (std::int64_t c = 0; c < parts; ++c) {
      const auto& w = spec[a][c];
      DISTOP_CHECK(w.left >= 0 && w.right >= 0, kOp, "ghost widths must be non-negative, found {",
                   w.left, ", ", w.right, "} for part ", c, " of tensor axis ", a);
      DISTOP_CHECK(c == 0 || w.left <= block_extent(interior, a, c - 1), kOp, "part ", c,
                   " of tensor axis ", a, " asks for a left halo of ", w.left,
                   " entries, more than its left neighbour's block of ",
                   block_extent(interior, a, c - 1), " (", interior.str(), ")");
      DISTOP_CHECK(c == parts - 1 || w.right <= block_extent(interior, a, c + 1), kOp, "part ", c,
                   " of tensor axis ", a, " asks for a right halo of ", w.right,
                   " entries, more than its right neighbour's block of ",
                   block_extent(interior, a, c + 1), " (", interior.str(), ")");
    }
  }
}

}  // namespace

TensorSpace halo_space(const TensorSpace& interior, const HaloSpec& spec) {
  validate(interior, spec);
  const auto& d = interior.decomposition();
  std::vector<std::int64_t> global;
  std::vector<std::vector<std::int64_t>> extents;
  for (int a = 0; a < interior.rank(); ++a) {
    std::vector<std::int64_t> e;
    for (std::int64_t c = 0; c < d.parts(a); ++c)
      e.push_back(spec[a][c].left + block_extent(interior, a, c) + spec[a][c].right);
    std::int64_t total = 0;
    for (auto x : e) total += x;
    global.push_back(total);
    extents.push_back(std::move(e));
  }
  return TensorSpace(interior.partition(),
                     Decomposition::blocks(Shape(std::move(global)), d.grid(), std::move(extents)));
}

namespace detail {

// What one rank does in a halo exchange: per tensor axis a and side (0 left, 1 right), the
// neighbour, this rank's g_a zone on that side and the mirror it sends to fill the neighbour's g_a
// zone facing it (see the derivation in halo_exchange.hpp). Boxes are in the padded local array.
class HaloPlan {
 public:
  struct Side {
    int peer = -1;  // the neighbour's rank in comm, -1 on the domain boundary
    Box ghost;
    Box mirror;                   // empty on the boundary
    std::int64_t ghost_at = -1;   // the ghost box's offset when it is contiguous, else -1
    std::int64_t mirror_at = -1;  // likewise for the mirror
    kernels::BoxPlan ghost_plan;  // the boxes for the kernels, described once
    kernels::BoxPlan mirror_plan;
  };

  HaloPlan(const TensorSpace& interior, HaloSpec spec_in)
      : spec(std::move(spec_in)), space(halo_space(interior, spec)) {
    const auto& p = interior.partition();
    const int rank = interior.rank();
    interior_box = Box{std::vector<std::int64_t>(static_cast<std::size_t>(rank), 0),
                       std::vector<std::int64_t>(static_cast<std::size_t>(rank), 0)};
    if (!p.active()) return;
    comm = comm::Comm::duplicate(p.comm());
    const auto& coords = p.coords();
    const auto& padded = space.local_shape();
    const auto grid_strides = p.shape().strides();
    std::vector<GhostWidths> mine;
    std::vector<std::int64_t> n;
    for (int a = 0; a < rank; ++a) {
      mine.push_back(spec[a][coords[a]]);
      n.push_back(block_extent(interior, a, coords[a]));
      interior_box.offset[a] = mine[a].left;
      interior_box.extent[a] = n[a];
    }
    for (int a = 0; a < rank; ++a) {
      // g_a's cross-section: whole on the axes before a, interior on the axes after it.
      Box slab = interior_box;
      for (int b = 0; b < a; ++b) {
        slab.offset[b] = 0;
        slab.extent[b] = padded[b];
      }
      const std::int64_t parts = static_cast<std::int64_t>(spec[a].size());
      std::array<Side, 2> sides;
      for (int s = 0; s < 2; ++s) {
        Side& side = sides[s];
        side.ghost = slab;
        side.ghost.offset[a] = s == 0 ? 0 : mine[a].left + n[a];
        side.ghost.extent[a] = s == 0 ? mine[a].left : mine[a].right;
        const std::int64_t neighbour = coords[a] + (s == 0 ? -1 : 1);
        if (neighbour >= 0 && neighbour < parts) {
          side.peer = p.index() + static_cast<int>((s == 0 ? -1 : 1) * grid_strides[a]);
          // The neighbour's facing zone: its right one when it is on the left, and vice versa.
          const std::int64_t width = s == 0 ? spec[a][neighbour].right : spec[a][neighbour].left;
          side.mirror = slab;
          side.mirror.offset[a] = s == 0 ? mine[a].left : mine[a].left + n[a] - width;
          side.mirror.extent[a] = width;
        } else {
          side.mirror = slab;
          side.mirror.extent[a] = 0;
        }
        side.ghost_at = contiguous_offset(padded, side.ghost);
        side.mirror_at = contiguous_offset(padded, side.mirror);
        side.ghost_plan = kernels::BoxPlan(padded, side.ghost);
        side.mirror_plan = kernels::BoxPlan(padded, side.mirror);
      }
      sweeps.push_back(std::move(sides));
    }
  }

  // Forward volumes on this rank; the adjoint's are the same with sent and received swapped.
  CommStats forward_stats(std::size_t element) const {
    CommStats st;
    const auto bytes = static_cast<std::int64_t>(element);
    for (const auto& sides : sweeps) {
      for (const auto& s : sides) {
        if (s.peer < 0) continue;
        if (!s.mirror.empty()) {
          st.messages_sent += 1;
          st.bytes_sent += s.mirror.numel() * bytes;
        }
        if (!s.ghost.empty()) {
          st.messages_received += 1;
          st.bytes_received += s.ghost.numel() * bytes;
        }
      }
    }
    return st;
  }

  HaloSpec spec;
  TensorSpace space;
  Box interior_box;
  comm::Comm comm;
  std::vector<std::array<Side, 2>> sweeps;  // per tensor axis, empty outside the partition
};

}  // namespace detail

namespace {

// Builds the plan after one allreduce over the parent that checks every rank passed the same
// arguments and found no error in them (comm::agree_on_arguments): ranks never part ways on the
// collective, and every rank raises the same error.
std::shared_ptr<const detail::HaloPlan> make_plan(
    const TensorSpace& interior, const std::function<HaloSpec()>& make_spec,
    const std::function<void(comm::Fingerprint&)>& digest_args) {
  std::string error;
  HaloSpec spec;
  comm::Fingerprint digest;
  try {
    digest.add(interior.fingerprint());
    digest_args(digest);
    spec = make_spec();
    validate(interior, spec);
  } catch (const Error& e) {
    error = e.detail();
  }
  comm::agree_on_arguments(interior.partition().parent(), kOp, digest.value(), error,
                           "this rank passed " + interior.str() +
                               " and its ghost widths or windows to the constructor, which is "
                               "collective over the parent");
  return std::make_shared<const detail::HaloPlan>(interior, std::move(spec));
}

template <class T>
std::vector<Tensor<T>> make_buffers(const detail::HaloPlan& plan) {
  std::vector<Tensor<T>> buffers;
  for (const auto& sides : plan.sweeps) {
    for (const auto& s : sides) {
      const bool ghost = s.peer >= 0 && !s.ghost.empty() && s.ghost_at < 0;
      const bool mirror = s.peer >= 0 && !s.mirror.empty();
      buffers.push_back(ghost ? Tensor<T>::uninitialized(Shape{s.ghost.numel()}) : Tensor<T>());
      buffers.push_back(mirror ? Tensor<T>::uninitialized(Shape{s.mirror.numel()}) : Tensor<T>());
    }
  }
  return buffers;
}

}  // namespace

template <class T>
HaloExchange<T>::HaloExchange(const TensorSpace& interior, HaloSpec spec)
    : plan_(make_plan(
          interior, [&] { return spec; },
          [&](comm::Fingerprint& d) {
            d.add(spec.size());
            for (const auto& axis : spec) {
              d.add(axis.size());
              for (const auto& w : axis) {
                d.add(static_cast<std::uint64_t>(w.left));
                d.add(static_cast<std::uint64_t>(w.right));
              }
            }
          })),
      interior_(interior),
      space_(plan_->space),
      buffers_(make_buffers<T>(*plan_)) {}

template <class T>
HaloExchange<T>::HaloExchange(const TensorSpace& interior, const std::vector<ConvWindow>& windows)
    : plan_(make_plan(
          interior,
          [&] {
            DISTOP_CHECK(
                interior.decomposition().balanced(), kOp,
                "the widths a window needs follow from a balanced split of the input, but ",
                interior.str(), " is not balanced");
            return halo_spec(interior.global_shape(), interior.partition().shape(), windows);
          },
          [&](comm::Fingerprint& d) {
            d.add(windows.size());
            for (const auto& w : windows) {
              d.add(static_cast<std::uint64_t>(w.kernel));
              d.add(static_cast<std::uint64_t>(w.stride));
              d.add(static_cast<std::uint64_t>(w.padding));
              d.add(static_cast<std::uint64_t>(w.dilation));
            }
          })),
      interior_(interior),
      space_(plan_->space),
      buffers_(make_buffers<T>(*plan_)) {}

template <class T>
const HaloSpec& HaloExchange<T>::spec() const noexcept {
  return plan_->spec;
}

template <class T>
const Box& HaloExchange<T>::interior_box() const noexcept {
  return plan_->interior_box;
}

// Forward: y = x, then sweeps a = 0, 1, ... each apply E_a in place: zero the boundary ghost zones,
// receive the neighbours' mirrors into the others, send this rank's mirrors.
template <class T>
void HaloExchange<T>::forward(const DistTensor<T>& x, DistTensor<T>& y) const {
  this->check_forward_args(x, y);
  if (!space_.partition().active()) return;
  comm::copy(x.data(), y.data(), y.local_numel());
  auto& out = y.local();
  for (std::size_t a = 0; a < plan_->sweeps.size(); ++a) {
    const auto& sides = plan_->sweeps[a];
    comm::Exchange<T> ex(plan_->comm.get(), kTag + static_cast<int>(a));
    for (std::size_t s = 0; s < 2; ++s) {
      const auto& side = sides[s];
      if (side.ghost.empty()) continue;
      if (side.peer < 0) {
        kernels::fill_box(out, side.ghost_plan, T(0));
      } else {
        T* to = side.ghost_at >= 0 ? out.data() + side.ghost_at : buffers_[4 * a + 2 * s].data();
        ex.recv(to, side.ghost.numel(), side.peer);
      }
    }
    for (std::size_t s = 0; s < 2; ++s) {
      const auto& side = sides[s];
      if (side.peer < 0 || side.mirror.empty()) continue;
      const T* from = nullptr;
      if (side.mirror_at >= 0) {
        from = out.data() + side.mirror_at;
      } else {
        auto& buf = buffers_[4 * a + 2 * s + 1];
        kernels::pack(out, side.mirror_plan, buf.data());
        from = buf.data();
      }
      ex.send(from, side.mirror.numel(), side.peer);
    }
    ex.wait();
    for (std::size_t s = 0; s < 2; ++s) {
      const auto& side = sides[s];
      if (side.peer >= 0 && !side.ghost.empty() && side.ghost_at < 0)
        kernels::unpack(buffers_[4 * a + 2 * s].data(), side.ghost_plan, out);
    }
  }
}

// Adjoint: x = y, then sweeps a = D-1, ..., 0 each apply E_a* in place: send the g_a zones to the
// neighbours, add what arrives into the mirrors, zero the g_a zones.
template <class T>
void HaloExchange<T>::adjoint(const DistTensor<T>& y, DistTensor<T>& x) const {
  this->check_adjoint_args(y, x);
  if (!space_.partition().active()) return;
  comm::copy(y.data(), x.data(), x.local_numel());
  auto& out = x.local();
  for (std::size_t a = plan_->sweeps.size(); a-- > 0;) {
    const auto& sides = plan_->sweeps[a];
    comm::Exchange<T> ex(plan_->comm.get(), kTag + kAdjointTag + static_cast<int>(a));
    for (std::size_t s = 0; s < 2; ++s) {
      const auto& side = sides[s];
      if (side.peer >= 0 && !side.mirror.empty())
        ex.recv(buffers_[4 * a + 2 * s + 1].data(), side.mirror.numel(), side.peer);
    }
    for (std::size_t s = 0; s < 2; ++s) {
      const auto& side = sides[s];
      if (side.peer < 0 || side.ghost.empty()) continue;
      const T* from = nullptr;
      if (side.ghost_at >= 0) {
        from = out.data() + side.ghost_at;
      } else {
        auto& buf = buffers_[4 * a + 2 * s];
        kernels::pack(out, side.ghost_plan, buf.data());
        from = buf.data();
      }
      ex.send(from, side.ghost.numel(), side.peer);
    }
    ex.wait();
    for (std::size_t s = 0; s < 2; ++s) {
      const auto& side = sides[s];
      if (side.peer >= 0 && !side.mirror.empty())
        kernels::unpack(buffers_[4 * a + 2 * s + 1].data(), side.mirror_plan, out, true);
      if (!side.ghost.empty()) kernels::fill_box(out, side.ghost_plan, T(0));
    }
  }
}

template <class T>
CommStats HaloExchange<T>::forward_stats() const {
  return plan_->forward_stats(sizeof(T));
}

template <class T>
CommStats HaloExchange<T>::adjoint_stats() const {
  const auto f = forward_stats();
  return {f.messages_received, f.bytes_received, f.messages_sent, f.bytes_sent};
}

template class HaloExchange<float>;
template class HaloExchange<double>;

}  // namespace distop
