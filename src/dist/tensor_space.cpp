#include "distop/dist/tensor_space.hpp"

#include "distop/comm/agree.hpp"
#include "distop/core/error.hpp"

namespace distop {

struct TensorSpace::Impl {
  Partition partition;
  Decomposition decomposition;
  Shape local_shape;
  std::vector<std::int64_t> local_offset;
};

TensorSpace::TensorSpace(Shape global, Partition partition)
    : TensorSpace(partition, Decomposition::balanced(global, partition.shape())) {}

TensorSpace::TensorSpace(Partition partition, Decomposition decomposition) {
  DISTOP_CHECK(decomposition.grid() == partition.shape(), "TensorSpace", "decomposition over grid ",
               decomposition.grid().str(), " does not fit ", partition.str());
  auto impl = std::make_shared<Impl>(Impl{std::move(partition), std::move(decomposition), {}, {}});
  if (impl->partition.active()) {
    impl->local_shape = impl->decomposition.local_shape(impl->partition.coords());
    impl->local_offset = impl->decomposition.local_offset(impl->partition.coords());
  } else {
    const int r = impl->decomposition.global_shape().rank();
    impl->local_shape = Shape(std::vector<std::int64_t>(static_cast<std::size_t>(r), 0));
    impl->local_offset.assign(static_cast<std::size_t>(r), 0);
  }
  impl_ = std::move(impl);
}

namespace {
void check_defined(const void* p) {
  DISTOP_CHECK(p != nullptr, "TensorSpace", "use of a default-constructed (empty) space");
}
}  // namespace

const Shape& TensorSpace::global_shape() const {
  check_defined(impl_.get());
  return impl_->decomposition.global_shape();
}
const Partition& TensorSpace::partition() const {
  check_defined(impl_.get());
  return impl_->partition;
}
const Decomposition& TensorSpace::decomposition() const {
  check_defined(impl_.get());
  return impl_->decomposition;
}
const Shape& TensorSpace::local_shape() const {
  check_defined(impl_.get());
  return impl_->local_shape;
}
const std::vector<std::int64_t>& TensorSpace::local_offset() const {
  check_defined(impl_.get());
  return impl_->local_offset;
}

Shape TensorSpace::local_shape_at(const std::vector<int>& coords) const {
  return decomposition().local_shape(coords);
}

Shape TensorSpace::local_shape_of_rank(int parent_rank) const {
  auto c = partition().coords_of_rank(parent_rank);
  if (c.empty()) return Shape(std::vector<std::int64_t>(static_cast<std::size_t>(rank()), 0));
  return local_shape_at(c);
}

std::vector<std::int64_t> TensorSpace::global_indices() const {
  const auto& local = local_shape();
  const auto& offset = local_offset();
  const auto gstride = global_shape().strides();
  std::vector<std::int64_t> out(static_cast<std::size_t>(local.numel()));
  const int r = local.rank();
  std::vector<std::int64_t> idx(static_cast<std::size_t>(r), 0);
  for (std::size_t i = 0; i < out.size(); ++i) {
    std::int64_t g = 0;
    for (int d = 0; d < r; ++d) g += (idx[d] + offset[d]) * gstride[d];
    out[i] = g;
    for (int d = r - 1; d >= 0; --d) {
      if (++idx[d] < local[d]) break;
      idx[d] = 0;
    }
  }
  return out;
}

TensorSpace TensorSpace::with_extent(int axis, std::int64_t extent) const {
  const auto& d = decomposition();
  DISTOP_CHECK(axis >= 0 && axis < rank(), "TensorSpace::with_extent", "axis ", axis,
               " out of range for a tensor of rank ", rank());
  DISTOP_CHECK(d.parts(axis) == 1, "TensorSpace::with_extent", "axis ", axis,
               " is split over the grid; only an unsplit axis can change its extent");
  Shape g = global_shape();
  g[axis] = extent;
  std::vector<std::vector<std::int64_t>> extents;
  for (int a = 0; a < rank(); ++a) {
    std::vector<std::int64_t> e;
    const auto& b = d.bounds(a);
    for (std::size_t i = 0; i + 1 < b.size(); ++i) e.push_back(b[i + 1] - b[i]);
    if (a == axis) e = {extent};
    extents.push_back(std::move(e));
  }
  return TensorSpace(partition(), Decomposition::blocks(g, d.grid(), extents, d.axis_map()));
}

bool TensorSpace::operator==(const TensorSpace& other) const {
  if (impl_ == other.impl_) return true;
  if (!impl_ || !other.impl_) return false;
  return impl_->partition.same_as(other.impl_->partition) &&
         impl_->decomposition == other.impl_->decomposition;
}

std::uint64_t TensorSpace::fingerprint() const {
  comm::Fingerprint fp;
  fp.add_all(global_shape().extents()).add_all(partition().shape().extents());
  // What operator== compares: the grid axis that splits each axis only where it is split.
  fp.add_all(partition().ranks());
  for (int a = 0; a < rank(); ++a)
    fp.add(static_cast<std::uint64_t>(decomposition().split_by(a)))
        .add_all(decomposition().bounds(a));
  return fp.value();
}

std::string TensorSpace::str() const {
  if (!impl_) return "TensorSpace(empty)";
  return "TensorSpace(" + global_shape().str() + " " + impl_->decomposition.str() + " on " +
         impl_->partition.str() + ")";
}

}  // namespace distop
