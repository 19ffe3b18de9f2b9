#include "distop/dist/partition.hpp"

#include <algorithm>
#include <cstdint>
#include <map>
#include <numeric>

#include "distop/comm/agree.hpp"
#include "distop/comm/mpi.hpp"
#include "distop/core/error.hpp"

namespace distop {

struct Partition::Impl {
  std::shared_ptr<comm::Comm> parent;  // shared by every partition derived from the same parent
  int parent_rank = -1;
  int parent_size = 0;
  Shape grid;
  std::vector<int> ranks;
  std::vector<int> coords;
  int index = -1;
  comm::Comm comm;
  std::map<std::vector<int>, comm::Comm> axes_comms;
};

namespace {

std::string list(const std::vector<int>& ranks) {
  std::string s = "{";
  for (std::size_t i = 0; i < ranks.size(); ++i) s += (i ? ", " : "") + std::to_string(ranks[i]);
  return s + "}";
}

// What is wrong with a grid and rank list over a parent of `parent_size` ranks ("" if nothing).
std::string check_grid(const Shape& grid, const std::vector<int>& ranks, int parent_size) {
  try {
    DISTOP_CHECK(grid.rank() >= 1, "Partition", "a partition needs at least one axis");
    for (auto e : grid)
      DISTOP_CHECK(e >= 1, "Partition", "grid extents must be at least 1, found ", grid.str());
    DISTOP_CHECK(grid.numel() <= parent_size, "Partition", "grid ", grid.str(), " needs ",
                 grid.numel(), " ranks, but only ", parent_size, " are running");
    DISTOP_CHECK(static_cast<std::int64_t>(ranks.size()) == grid.numel(), "Partition", "grid ",
                 grid.str(), " has ", grid.numel(), " cells but ", ranks.size(),
                 " ranks were given");
    std::vector<int> sorted = ranks;
    std::sort(sorted.begin(), sorted.end());
    DISTOP_CHECK(std::adjacent_find(sorted.begin(), sorted.end()) == sorted.end(), "Partition",
                 "a rank appears twice in the rank list");
    DISTOP_CHECK(sorted.front() >= 0 && sorted.back() < parent_size, "Partition",
                 "ranks must lie in [0, ", parent_size, "), found ", sorted.front(), "..",
                 sorted.back());
  } catch (const Error& e) {
    return e.detail();
  }
  return {};
}

}  // namespace

Partition Partition::make(std::shared_ptr<void> parent_void, Shape grid, std::vector<int> ranks,
                          const std::string& problem) {
  auto parent = std::static_pointer_cast<comm::Comm>(parent_void);
  auto impl = std::make_shared<Impl>();
  impl->parent = parent;
  impl->parent_rank = parent->rank();
  impl->parent_size = parent->size();
  if (ranks.empty() && grid.rank() >= 1) {
    const std::int64_t n = std::max<std::int64_t>(grid.numel(), 0);
    ranks.resize(static_cast<std::size_t>(std::min<std::int64_t>(n, impl->parent_size)));
    std::iota(ranks.begin(), ranks.end(), 0);
  }
  // Every rank must pass the same grid and ranks, and an error in them is raised on all ranks.
  comm::Fingerprint fp;
  fp.add_all(grid.extents()).add(0x5bd1e995ULL).add_all(ranks);
  comm::agree_on_arguments(parent->get(), "Partition", fp.value(),
                           problem.empty() ? check_grid(grid, ranks, impl->parent_size) : problem,
                           "ranks disagree on the partition: this rank asked for grid " +
                               grid.str() + " of ranks " + list(ranks));
  impl->grid = std::move(grid);
  impl->ranks = std::move(ranks);
  auto it = std::find(impl->ranks.begin(), impl->ranks.end(), impl->parent_rank);
  MPI_Comm sub = MPI_COMM_NULL;
  const int color = it == impl->ranks.end() ? MPI_UNDEFINED : 0;
  const int key = it == impl->ranks.end() ? 0 : static_cast<int>(it - impl->ranks.begin());
  DISTOP_MPI_CHECK(MPI_Comm_split(parent->get(), color, key, &sub), "Partition");
  impl->comm = comm::Comm::adopt(sub);
  Partition p(impl);
  if (color == 0) {
    impl->index = key;
    impl->coords = p.coords_of(key);
  }
  return p;
}

Partition::Partition(MPI_Comm parent, Shape grid, std::vector<int> ranks)
    : Partition(make(std::make_shared<comm::Comm>(comm::Comm::duplicate(parent)), std::move(grid),
                     std::move(ranks))) {}

Partition Partition::world(Shape grid, std::vector<int> ranks) {
  return Partition(MPI_COMM_WORLD, std::move(grid), std::move(ranks));
}

Partition Partition::self(Shape grid) {
  DISTOP_CHECK(grid.numel() == 1, "Partition::self", "a one-process grid has one cell, found ",
               grid.str());
  return Partition(MPI_COMM_SELF, std::move(grid));
}

const Shape& Partition::shape() const noexcept { return impl_->grid; }
int Partition::size() const noexcept { return static_cast<int>(impl_->ranks.size()); }
bool Partition::active() const noexcept { return impl_->index >= 0; }
const std::vector<int>& Partition::coords() const noexcept { return impl_->coords; }
int Partition::index() const noexcept { return impl_->index; }
MPI_Comm Partition::comm() const noexcept { return impl_->comm.get(); }
MPI_Comm Partition::parent() const noexcept { return impl_->parent->get(); }
int Partition::parent_rank() const noexcept { return impl_->parent_rank; }
int Partition::parent_size() const noexcept { return impl_->parent_size; }
const std::vector<int>& Partition::ranks() const noexcept { return impl_->ranks; }

std::vector<int> Partition::coords_of(int index) const {
  DISTOP_CHECK(index >= 0 && index < size(), "Partition", "grid index ", index,
               " out of range for ", str());
  std::vector<int> c(static_cast<std::size_t>(dim()));
  for (int d = dim() - 1; d >= 0; --d) {
    c[d] = static_cast<int>(index % shape()[d]);
    index = static_cast<int>(index / shape()[d]);
  }
  return c;
}

int Partition::rank_at(const std::vector<int>& coords) const {
  DISTOP_CHECK(static_cast<int>(coords.size()) == dim(), "Partition", "expected ", dim(),
               " coordinates, found ", coords.size());
  std::int64_t index = 0;
  for (int d = 0; d < dim(); ++d) {
    DISTOP_CHECK(coords[d] >= 0 && coords[d] < shape()[d], "Partition", "coordinate ", coords[d],
                 " out of range on axis ", d, " of ", str());
    index = index * shape()[d] + coords[d];
  }
  return impl_->ranks[static_cast<std::size_t>(index)];
}

std::vector<int> Partition::coords_of_rank(int parent_rank) const {
  auto it = std::find(impl_->ranks.begin(), impl_->ranks.end(), parent_rank);
  if (it == impl_->ranks.end()) return {};
  return coords_of(static_cast<int>(it - impl_->ranks.begin()));
}

Partition Partition::slice(int axis, int index) const {
  // Bad arguments are agreed on (in make) like any other, so no rank is left waiting.
  if (axis < 0 || axis >= dim() || index < 0 || index >= shape()[axis]) {
    const std::string problem =
        "Partition::slice: " +
        (axis < 0 || axis >= dim() ? "axis " + std::to_string(axis) + " out of range for "
                                   : "index " + std::to_string(index) + " out of range on axis " +
                                         std::to_string(axis) + " of ") +
        str();
    return make(impl_->parent, shape(), impl_->ranks, problem);
  }
  Shape grid = shape();
  grid[axis] = 1;
  std::vector<int> ranks;
  for (int i = 0; i < size(); ++i)
    if (coords_of(i)[axis] == index) ranks.push_back(impl_->ranks[i]);
  return make(impl_->parent, std::move(grid), std::move(ranks));
}

Partition Partition::reshape(Shape grid) const {
  std::string problem;
  if (grid.numel() != size())
    problem = "Partition::reshape: cannot arrange the " + std::to_string(size()) + " ranks of " +
              str() + " as " + grid.str();
  return make(impl_->parent, std::move(grid), impl_->ranks, problem);
}

Partition Partition::unite(const Partition& other) const {
  int same = MPI_UNEQUAL;
  DISTOP_MPI_CHECK(MPI_Comm_compare(parent(), other.parent(), &same), "Partition::unite");
  DISTOP_CHECK(same == MPI_IDENT || same == MPI_CONGRUENT, "Partition::unite",
               "the partitions come from different parent communicators");
  std::vector<int> ranks = impl_->ranks;
  for (int r : other.ranks())
    if (std::find(ranks.begin(), ranks.end(), r) == ranks.end()) ranks.push_back(r);
  Shape grid{static_cast<std::int64_t>(ranks.size())};
  return make(impl_->parent, std::move(grid), std::move(ranks));
}

MPI_Comm Partition::axes_comm(std::vector<int> axes) const {
  std::sort(axes.begin(), axes.end());
  for (int a : axes)
    DISTOP_CHECK(a >= 0 && a < dim(), "Partition::axes_comm", "axis ", a, " out of range for ",
                 str());
  if (!active()) return MPI_COMM_NULL;
  auto it = impl_->axes_comms.find(axes);
  if (it != impl_->axes_comms.end()) return it->second.get();
  // Colour: index over the axes not in `axes`; key: index over `axes`.
  int color = 0, key = 0;
  for (int d = 0; d < dim(); ++d) {
    const bool along = std::find(axes.begin(), axes.end(), d) != axes.end();
    int& v = along ? key : color;
    v = v * static_cast<int>(shape()[d]) + coords()[d];
  }
  MPI_Comm sub = MPI_COMM_NULL;
  DISTOP_MPI_CHECK(MPI_Comm_split(comm(), color, key, &sub), "Partition::axes_comm");
  return impl_->axes_comms.emplace(axes, comm::Comm::adopt(sub)).first->second.get();
}

bool Partition::same_as(const Partition& other) const noexcept {
  if (impl_ == other.impl_) return true;
  if (shape() != other.shape() || ranks() != other.ranks()) return false;
  // The ranks are parent ranks: they name the same processes only under congruent parents (two
  // duplicates of one communicator are; a communicator that orders its processes otherwise is not).
  if (impl_->parent == other.impl_->parent) return true;
  int same = MPI_UNEQUAL;
  // Unchecked (noexcept): where the comparison fails, the partitions are taken to differ.
  if (MPI_Comm_compare(parent(), other.parent(), &same) != MPI_SUCCESS) return false;
  return same == MPI_IDENT || same == MPI_CONGRUENT;
}

std::string Partition::str() const {
  std::string s = "Partition" + shape().str() + " of ranks {";
  for (std::size_t i = 0; i < impl_->ranks.size(); ++i)
    s += (i ? ", " : "") + std::to_string(impl_->ranks[i]);
  return s + "}";
}

}  // namespace distop
