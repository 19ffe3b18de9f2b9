// Repartition, AllGather, ReduceScatter, Gather and Scatter over random spaces against their
// definition, computed on every rank from the whole tensor's metadata: 1-D to 4-D tensors of
// extents 1-6, grids of 1-4 axes, rank subsets in random order (idle ranks), replicating axes,
// balanced and explicit blocks, float and double. Every source rank's copy holds values that name
// the rank, so reading the wrong replica shows. Each case checks the forward (every destination
// entry is the entry of the one source copy it reads), the adjoint (every source entry is the sum
// of the destination entries that read it), both applied twice, the message and byte counts, and
// the dot-product test. The seed is fixed: a failure names its case and repeats.
#include <gtest/gtest.h>

#include <limits>
#include <random>
#include <sstream>

#include "distop/ops/all_gather.hpp"
#include "distop/ops/gather.hpp"
#include "distop/ops/reduce_scatter.hpp"
#include "distop/ops/scatter.hpp"
#include "distop/ops/repartition.hpp"
#include "distop/testing/adjoint_test.hpp"
#include "mpi_test_util.hpp"

using namespace distop;
using distop::test::world_size;

namespace {

struct Rng {
  std::mt19937_64 g;
  std::int64_t uniform(std::int64_t lo, std::int64_t hi) {  // [lo, hi]
    return lo + static_cast<std::int64_t>(g() % static_cast<std::uint64_t>(hi - lo + 1));
  }
};

struct Spec {
  Shape grid;
  std::vector<int> ranks;
  std::vector<int> axis_map;
  std::vector<std::vector<std::int64_t>> blocks;  // empty: balanced
  std::string str() const {
    std::ostringstream s;
    s << "grid " << grid.str() << " ranks";
    for (int r : ranks) s << ' ' << r;
    s << " map";
    for (int m : axis_map) s << ' ' << m;
    if (!blocks.empty()) s << " explicit blocks";
    return s.str();
  }
};

// A grid of at most `nranks` cells on a random subset of the ranks in random order; each tensor
// axis split by an unused grid axis no longer than it, or by none; explicit blocks of at least one
// entry a third of the time.
Spec random_spec(Rng& r, const Shape& tensor, int nranks) {
  Spec s;
  const int dims = static_cast<int>(r.uniform(1, 4));
  std::vector<std::int64_t> grid;
  std::int64_t cells = 1;
  for (int g = 0; g < dims; ++g) {
    std::int64_t e = r.uniform(1, 4);
    while (cells * e > nranks) --e;
    grid.push_back(e);
    cells *= e;
  }
  s.grid = Shape(grid);
  std::vector<int> all(static_cast<std::size_t>(nranks));
  for (int i = 0; i < nranks; ++i) all[i] = i;
  for (int i = nranks - 1; i > 0; --i) std::swap(all[i], all[r.uniform(0, i)]);
  s.ranks.assign(all.begin(), all.begin() + cells);
  std::vector<bool> used(static_cast<std::size_t>(dims), false);
  for (int t = 0; t < tensor.rank(); ++t) {
    int m = -1;
    if (r.uniform(0, 3) != 0) {
      const int g = static_cast<int>(r.uniform(0, dims - 1));
      if (!used[g] && grid[g] <= tensor[t]) {
        m = g;
        used[g] = true;
      }
    }
    s.axis_map.push_back(m);
  }
  if (r.uniform(0, 2) == 0) {
    for (int t = 0; t < tensor.rank(); ++t) {
      const std::int64_t parts = s.axis_map[t] < 0 ? 1 : grid[s.axis_map[t]];
      std::vector<std::int64_t> b(static_cast<std::size_t>(parts), 1);
      for (std::int64_t k = parts; k < tensor[t]; ++k) ++b[r.uniform(0, parts - 1)];
      s.blocks.push_back(b);
    }
  }
  return s;
}

TensorSpace make(const Shape& tensor, const Spec& s) {
  Partition p = Partition::world(s.grid, s.ranks);
  if (!s.blocks.empty())
    return TensorSpace(p, Decomposition::blocks(tensor, s.grid, s.blocks, s.axis_map));
  return TensorSpace(p, Decomposition::balanced(tensor, s.grid, s.axis_map));
}

// One grid cell of a space: its rank, coordinates and global box.
struct Cell {
  int rank;
  std::vector<int> coords;
  Box box;
  bool holds(const std::vector<std::int64_t>& index) const {
    for (std::size_t a = 0; a < index.size(); ++a)
      if (index[a] < box.offset[a] || index[a] >= box.offset[a] + box.extent[a]) return false;
    return true;
  }
};

std::vector<Cell> cells_of(const TensorSpace& s) {
  std::vector<Cell> out;
  const auto& p = s.partition();
  for (int i = 0; i < p.size(); ++i) {
    const auto c = p.coords_of(i);
    out.push_back(
        {p.ranks()[i], c,
         Box{s.decomposition().local_offset(c), s.decomposition().local_shape(c).extents()}});
  }
  return out;
}

const Cell* cell_of_rank(const std::vector<Cell>& cells, int rank) {
  for (const auto& c : cells)
    if (c.rank == rank) return &c;
  return nullptr;
}

std::vector<std::int64_t> unravel(std::int64_t i, const Shape& shape) {
  std::vector<std::int64_t> v(static_cast<std::size_t>(shape.rank()));
  for (int a = shape.rank() - 1; a >= 0; --a) {
    v[a] = i % shape[a];
    i /= shape[a];
  }
  return v;
}

double source_value(int rank, std::int64_t g) {
  return static_cast<double>(g % 1000 + 1000 * (rank + 1));
}
double destination_value(int rank, std::int64_t g) {
  return static_cast<double>((g * 3 + rank * 5) % 31 + 1);
}

template <class T>
void fill(DistTensor<T>& x, int rank, double (*value)(int, std::int64_t)) {
  std::vector<T> v;
  for (const auto g : x.space().global_indices()) v.push_back(static_cast<T>(value(rank, g)));
  if (!v.empty()) x.local().copy_from(Tensor<T>::from_vector(x.space().local_shape(), v));
}

// Checks a Repartition (or, with `reversed`, a ReversedRepartition) whose plan moves A to B
// against the definition in docs/adjoints.md. Returns the number of failed checks on this rank.
template <class T>
int check(const LinearOperator<T>& op, bool reversed, const std::string& what) {
  const TensorSpace& a = reversed ? op.range() : op.domain();
  const TensorSpace& b = reversed ? op.domain() : op.range();
  const int me = a.partition().parent_rank();
  const auto sources = cells_of(a);
  const auto destinations = cells_of(b);
  const Cell* mine_a = cell_of_rank(sources, me);
  const Cell* mine_b = cell_of_rank(destinations, me);
  // Which replica a destination cell reads: on one partition, the one with its own coordinate on
  // every replicating axis; between partitions, coordinate 0.
  const bool one_partition = a.partition().same_as(b.partition());
  auto reads = [&](const Cell& s, const Cell& d) {
    for (int g = 0; g < a.partition().dim(); ++g)
      if (a.decomposition().replicates(g) && s.coords[g] != (one_partition ? d.coords[g] : 0))
        return false;
    return true;
  };
  int failed = 0;
  const T nan = std::numeric_limits<T>::quiet_NaN();
  for (int repeat = 0; repeat < 2; ++repeat) {
    DistTensor<T> x(a);
    fill(x, me, source_value);
    auto y = DistTensor<T>::uninitialized(b);
    y.local().fill(nan);
    reversed ? op.adjoint(x, y) : op.forward(x, y);
    const auto gy = b.global_indices();
    const auto vy = y.local().to_vector();
    for (std::size_t i = 0; i < vy.size(); ++i) {
      const auto index = unravel(gy[i], b.global_shape());
      double expected = 0;
      int copies = 0;
      for (const auto& s : sources)
        if (reads(s, *mine_b) && s.holds(index)) {
          expected = source_value(s.rank, gy[i]);
          ++copies;
        }
      if (copies != 1 || static_cast<double>(vy[i]) != expected) {
        ADD_FAILURE() << what << ": copy, rank " << me << " entry " << i << " is " << vy[i]
                      << ", expected " << expected << " from " << copies << " source(s)";
        ++failed;
        break;
      }
    }
    DistTensor<T> dy(b);
    fill(dy, me, destination_value);
    auto dx = DistTensor<T>::uninitialized(a);
    dx.local().fill(nan);
    reversed ? op.forward(dy, dx) : op.adjoint(dy, dx);
    const auto gx = a.global_indices();
    const auto vx = dx.local().to_vector();
    for (std::size_t i = 0; i < vx.size(); ++i) {
      const auto index = unravel(gx[i], a.global_shape());
      double expected = 0;
      for (const auto& d : destinations)
        if (reads(*mine_a, d) && d.holds(index)) expected += destination_value(d.rank, gx[i]);
      if (static_cast<double>(vx[i]) != expected) {
        ADD_FAILURE() << what << ": sum, rank " << me << " entry " << i << " is " << vx[i]
                      << ", expected " << expected;
        ++failed;
        break;
      }
    }
  }
  // The copy direction's messages: one per other rank whose box it reads (receiving) or that
  // reads its box (sending), of the overlap's bytes; none at all for identical spaces.
  CommStats copy;
  const auto bytes = static_cast<std::int64_t>(sizeof(T));
  if (!(a == b)) {
    for (const auto& s : sources)
      if (mine_b && s.rank != me && reads(s, *mine_b) && !s.box.intersect(mine_b->box).empty()) {
        ++copy.messages_received;
        copy.bytes_received += s.box.intersect(mine_b->box).numel() * bytes;
      }
    for (const auto& d : destinations)
      if (mine_a && d.rank != me && reads(*mine_a, d) && !d.box.intersect(mine_a->box).empty()) {
        ++copy.messages_sent;
        copy.bytes_sent += d.box.intersect(mine_a->box).numel() * bytes;
      }
  }
  const CommStats sum{copy.messages_received, copy.bytes_received, copy.messages_sent,
                      copy.bytes_sent};
  if (!((reversed ? op.adjoint_stats() : op.forward_stats()) == copy) ||
      !((reversed ? op.forward_stats() : op.adjoint_stats()) == sum)) {
    ADD_FAILURE() << what << ": message counts on rank " << me << " differ from the closed form";
    ++failed;
  }
  const auto report = distop::testing::adjoint_test(op);
  if (!report.passed) {
    ADD_FAILURE() << what << ": " << report.str();
    ++failed;
  }
  return failed;
}

int failures_anywhere(int failed) {
  MPI_Allreduce(MPI_IN_PLACE, &failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  return failed;
}

Shape random_tensor(Rng& r) {
  std::vector<std::int64_t> extents(static_cast<std::size_t>(r.uniform(1, 4)));
  for (auto& e : extents) e = r.uniform(1, 6);
  return Shape(extents);
}

// Oversubscribed ranks (more than the machine's two cores in CI) take far longer per collective.
int cases(int at_most_two_ranks, int more) { return world_size() <= 2 ? at_most_two_ranks : more; }

}  // namespace

TEST(RepartitionSweep, RandomSpacesMatchTheDefinition) {
  const int n = world_size();
  Rng r{std::mt19937_64(12345 + static_cast<std::uint64_t>(n))};
  int failed = 0;
  for (int c = 0; c < cases(300, 40) && failures_anywhere(failed) == 0; ++c) {
    const Shape tensor = random_tensor(r);
    const Spec sa = random_spec(r, tensor, n);
    const Spec sb = r.uniform(0, 5) == 0 ? sa : random_spec(r, tensor, n);
    const std::string what =
        "case " + std::to_string(c) + ": " + tensor.str() + " from " + sa.str() + " to " + sb.str();
    const TensorSpace a = make(tensor, sa);
    const TensorSpace b = make(tensor, sb);
    if (r.uniform(0, 1) == 0) {
      Repartition<double> op(a, b);
      failed += check(op, false, what);
      failed += check(ReversedRepartition<double>(op.plan()), true, what + " (reversed)");
    } else {
      failed += check(Repartition<float>(a, b), false, what + " (float)");
    }
  }
}

TEST(RepartitionSweep, GatherFamilyOnRandomSpacesMatchesTheDefinition) {
  const int n = world_size();
  Rng r{std::mt19937_64(777 + static_cast<std::uint64_t>(n))};
  int failed = 0;
  for (int c = 0; c < cases(100, 15) && failures_anywhere(failed) == 0; ++c) {
    const Shape tensor = random_tensor(r);
    const Spec s = random_spec(r, tensor, n);
    std::vector<int> axes;
    for (int g = 0; g < s.grid.rank(); ++g)
      if (r.uniform(0, 1) == 1) axes.push_back(g);
    const int root = static_cast<int>(r.uniform(0, n - 1));
    const std::string what = "case " + std::to_string(c) + ": " + tensor.str() + " on " + s.str();
    const TensorSpace a = make(tensor, s);
    failed += check(AllGather<double>(a, axes), false, what + ", all-gather");
    failed += check(ReduceScatter<double>(a, axes), true, what + ", reduce-scatter");
    failed += check(Gather<float>(a, root), false, what + ", gather to " + std::to_string(root));
    failed +=
        check(Scatter<double>(a, root), false, what + ", scatter from " + std::to_string(root));
  }
}
