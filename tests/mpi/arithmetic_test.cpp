// nn::add, sub, mul and div with torch's broadcasting on distributed tensors: the second operand
// aligned with the first (on its partition, its axes of the first's extent split alike) or held
// whole on every rank (replicated, or a copy per process on Partition::self), against the batch
// split over the ranks (balanced, uneven, with an idle rank) or the features split. Values against
// the global loops, gradients against the one-rank computation and finite differences, the
// broadcast's adjoint by the dot-product test (float and double), broken contracts as an Error on
// every rank, and a matmul's output added to a tensor of the same boxes at 1 rank and under pure
// data parallelism.
#include "distop/nn/arithmetic.hpp"

#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "box_util.hpp"
#include "distop/autodiff/apply.hpp"
#include "distop/kernels/reduce.hpp"
#include "distop/nn/matmul.hpp"
#include "distop/nn/reduction.hpp"
#include "gradcheck.hpp"
#include "mpi_gradcheck.hpp"
#include "mpi_test_util.hpp"

using namespace distop;
using distop::test::local_space;
using distop::test::random_tensor;
using distop::test::world_size;

namespace {

constexpr std::int64_t kBatch = 7;
constexpr std::int64_t kFeatures = 5;

// How a's axes are laid out over the ranks: `parts` blocks along axis `axis`, over a 1-D grid.
struct Layout {
  std::string name;
  Partition partition;
  int axis;
  std::vector<std::int64_t> parts;
};

std::vector<std::int64_t> balanced_parts(std::int64_t n, int p) {
  const auto b = balanced_bounds(n, p);
  std::vector<std::int64_t> parts;
  for (int i = 0; i < p; ++i) parts.push_back(b[i + 1] - b[i]);
  return parts;
}

// The batch axis split balanced, unevenly (one row on every rank but the last), and over every rank
// but rank 0 (idle); the feature axis split balanced.
std::vector<Layout> layouts() {
  const int n = world_size();
  std::vector<Layout> out;
  out.push_back({"batch balanced", Partition::world(Shape{n}), 0, balanced_parts(kBatch, n)});
  if (n >= 2) {
    std::vector<std::int64_t> parts(static_cast<std::size_t>(n), 1);
    parts.back() = kBatch - (n - 1);
    out.push_back({"batch uneven", Partition::world(Shape{n}), 0, parts});
  }
  if (n >= 3) {
    std::vector<int> ranks;
    for (int r = 1; r < n; ++r) ranks.push_back(r);
    out.push_back({"batch over ranks 1..", Partition::world(Shape{n - 1}, ranks), 0,
                   balanced_parts(kBatch, n - 1)});
  }
  out.push_back({"features balanced", Partition::world(Shape{n}), 1, balanced_parts(kFeatures, n)});
  return out;
}

// `shape` on the layout's partition: axis l.axis split as the layout says where it has a's extent
// there (a's shape is [kBatch, kFeatures, ...]), every other axis whole (replicated along the
// grid).
TensorSpace space_of(const Layout& l, const Shape& shape, int a_rank) {
  std::vector<std::vector<std::int64_t>> extents;
  std::vector<int> map;
  const int lead = a_rank - shape.rank();  // b's axis j is a's axis j + lead
  for (int j = 0; j < shape.rank(); ++j) {
    const bool split = j + lead == l.axis && shape[j] == (l.axis == 0 ? kBatch : kFeatures);
    extents.push_back(split ? l.parts : std::vector<std::int64_t>{shape[j]});
    map.push_back(split ? 0 : -1);
  }
  return TensorSpace(l.partition, Decomposition::blocks(shape, l.partition.shape(), extents, map));
}

// Where b lives, given the layout of a: on a's partition split as a (aligned), on a's partition
// whole (replicated: each rank uses the part under its box of a), or a copy on each process.
enum class Placement { aligned, replicated, on_each_process };
const Placement kPlacements[] = {Placement::aligned, Placement::replicated,
                                 Placement::on_each_process};

TensorSpace b_space(const Layout& l, const Shape& b_shape, int a_rank, Placement p) {
  if (p == Placement::on_each_process) return local_space(b_shape);
  if (p == Placement::replicated)
    return TensorSpace(l.partition,
                       Decomposition::balanced(b_shape, l.partition.shape(),
                                               std::vector<int>(b_shape.extents().size(), -1)));
  return space_of(l, b_shape, a_rank);
}

using Binary = Var<double> (*)(Tape&, const Var<double>&, const Var<double>&);
struct Op {
  const char* name;
  Binary f;
  Var<float> (*f_float)(Tape&, const Var<float>&, const Var<float>&);
  double (*naive)(double, double);
  bool linear_in_b;
};

std::vector<Op> ops() {
  return {
      {"add", nn::add<double>, nn::add<float>, [](double a, double b) { return a + b; }, true},
      {"sub", nn::sub<double>, nn::sub<float>, [](double a, double b) { return a - b; }, true},
      {"mul", nn::mul<double>, nn::mul<float>, [](double a, double b) { return a * b; }, true},
      {"div", nn::div<double>, nn::div<float>, [](double a, double b) { return a / b; }, false}};
}

// b's shapes against a [kBatch, kFeatures] (and a [kBatch, kFeatures, 3] for the last two).
struct Operand {
  Shape a_shape, b_shape;
};
std::vector<Operand> operands() {
  return {{Shape{kBatch, kFeatures}, Shape{kFeatures}},          // a bias, a LayerNorm's weight
          {Shape{kBatch, kFeatures}, Shape{1, kFeatures}},       //
          {Shape{kBatch, kFeatures}, Shape{kBatch, 1}},          // a mean taken with keepdim
          {Shape{kBatch, kFeatures}, Shape{1}},                  // a scalar
          {Shape{kBatch, kFeatures}, Shape{kBatch, kFeatures}},  // a's shape
          {Shape{kBatch, kFeatures, 3}, Shape{kFeatures, 1}},    // a middle axis
          {Shape{kBatch, kFeatures, 3}, Shape{kBatch, 1, 3}}};
}

// The entry of b (global shape bs, broadcast against as) that global entry i of a meets.
std::int64_t broadcast_entry(const Shape& as, const Shape& bs, std::int64_t i) {
  std::int64_t j = 0, stride = 1;
  const auto strides = as.strides();
  for (int d = as.rank() - 1, e = bs.rank() - 1; e >= 0; --d, --e) {
    const std::int64_t index = (i / strides[d]) % as[d];
    if (bs[e] != 1) j += index * stride;
    stride *= bs[e];
  }
  return j;
}

// The global values of a tensor drawn by random_tensor (by global index): the same in any space.
std::vector<double> global_values(const Shape& shape, std::uint64_t seed, double lo, double hi) {
  return random_tensor<double>(local_space(shape), seed, lo, hi).local().to_vector();
}

void expect_near_rel(double got, double want, double tol, const std::string& what) {
  EXPECT_NEAR(got, want, tol * std::max(1.0, std::abs(want))) << what;
}

void expect_box(const DistTensor<double>& got, const std::vector<double>& want,
                const std::string& what) {
  distop::test::expect_box_near(got, want, 1e-12, what);
}

// Whether b's space holds whole copies (rather than blocks that add up to the tensor once).
bool copies(const TensorSpace& bs) {
  for (int d = 0; d < bs.rank(); ++d)
    if (bs.decomposition().split_by(d) >= 0) return false;
  return true;
}

struct Result {
  Var<double> a, b, y;
};

// y = op(a, b) and the gradients of L = <y, r>, a and r drawn by global index, b in [0.5, 1.5).
Result run(const Op& op, const TensorSpace& as, const TensorSpace& bs) {
  Var<double> a(random_tensor<double>(as, 1), true);
  Var<double> b(random_tensor<double>(bs, 2, 0.5, 1.5), true);
  Tape tape;
  Var<double> y = op.f(tape, a, b);
  auto l = test::weighted_sum(tape, y, random_tensor<double>(y.space(), 3));
  backward(tape, l);
  return {a, b, y};
}

}  // namespace

// Values and both gradients equal the computation on one rank, for every operation, operand
// shape, placement of b and layout of a that the rules allow.
TEST(Arithmetic, BroadcastEqualsOneRank) {
  const std::vector<Layout> all_layouts = layouts();
  for (const auto& op : ops()) {
    for (const auto& o : operands()) {
      const Result ref = run(op, local_space(o.a_shape), local_space(o.b_shape));
      const auto y_ref = ref.y.value().local().to_vector();
      const auto da_ref = ref.a.grad().local().to_vector();
      const auto db_ref = ref.b.grad().local().to_vector();
      // The loop over a's entries, for the values.
      const auto av = global_values(o.a_shape, 1, -1, 1);
      const auto bv = global_values(o.b_shape, 2, 0.5, 1.5);
      for (std::size_t i = 0; i < y_ref.size(); ++i)
        ASSERT_NEAR(y_ref[i],
                    op.naive(av[i], bv[static_cast<std::size_t>(broadcast_entry(
                                        o.a_shape, o.b_shape, static_cast<std::int64_t>(i)))]),
                    1e-15);
      for (const auto& l : all_layouts) {
        if (o.a_shape[l.axis] < static_cast<std::int64_t>(l.parts.size())) continue;
        for (Placement p : kPlacements) {
          const TensorSpace as = space_of(l, o.a_shape, o.a_shape.rank());
          const TensorSpace bs = b_space(l, o.b_shape, o.a_shape.rank(), p);
          SCOPED_TRACE(std::string(op.name) + " " + o.a_shape.str() + " with " + o.b_shape.str() +
                       ", " + l.name + ", b " + bs.str());
          const Result d = run(op, as, bs);
          expect_box(d.y.value(), y_ref, "y");
          expect_box(d.a.grad(), da_ref, "da");
          if (copies(bs)) {  // each copy's gradient is its part; they add up to the whole's
            const auto db = distop::test::sum_over_ranks(d.b.grad(), db_ref.size());
            for (std::size_t i = 0; i < db.size(); ++i)
              expect_near_rel(db[i], db_ref[i], 1e-12,
                              "db (summed over the copies) entry " + std::to_string(i));
          } else {
            expect_box(d.b.grad(), db_ref, "db");
          }
        }
      }
    }
  }
}

// The broadcast b -> b repeated over a's box is linear; its adjoint (the tape's gradient of b) is
// the sum over the broadcast axes. Checked by the dot-product test over all ranks, each copy of b
// its own component: <B x, r> = <x, B* r>.
template <class T>
void broadcast_adjoint_cases() {
  const std::vector<Layout> all_layouts = layouts();
  const double tol = sizeof(T) >= 8 ? 1e-13 : 1e-5;
  for (const auto& o : operands()) {
    for (const auto& l : all_layouts) {
      if (o.a_shape[l.axis] < static_cast<std::int64_t>(l.parts.size())) continue;
      for (Placement p : kPlacements) {
        const TensorSpace as = space_of(l, o.a_shape, o.a_shape.rank());
        const TensorSpace bs = b_space(l, o.b_shape, o.a_shape.rank(), p);
        SCOPED_TRACE(o.a_shape.str() + " with " + o.b_shape.str() + ", " + l.name + ", b " +
                     bs.str());
        const Var<T> zero(DistTensor<T>(as), false);
        const Var<T> factor(distop::test::random_tensor<T>(as, 7), false);
        Var<T> x(distop::test::random_tensor<T>(bs, 8, -1, 1), true);
        const auto r = distop::test::random_tensor<T>(as, 9);
        for (const char* name : {"add", "mul"}) {
          SCOPED_TRACE(name);
          x.zero_grad();
          Tape tape;
          Var<T> y = std::string(name) == "add" ? nn::add(tape, zero, x) : nn::mul(tape, factor, x);
          backward(tape, y, r);
          ASSERT_TRUE(x.has_grad());
          double sides[2] = {
              y.value().local_numel() > 0 ? kernels::dot(y.value().local(), r.local()) : 0.0,
              kernels::dot(x.value().local(), x.grad().local())};
          MPI_Allreduce(MPI_IN_PLACE, sides, 2, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
          EXPECT_NEAR(sides[0], sides[1], tol * std::max(1.0, std::abs(sides[0])));
        }
      }
    }
  }
}

TEST(Arithmetic, BroadcastAdjointDotProductTestDouble) { broadcast_adjoint_cases<double>(); }
TEST(Arithmetic, BroadcastAdjointDotProductTestFloat) { broadcast_adjoint_cases<float>(); }

// Gradients of a and of every copy or block of b against finite differences of the total loss.
// (testing::gradcheck takes inputs on partitions of one parent, so b on Partition::self is left to
// the one-rank equivalence and the dot-product test above.)
TEST(Arithmetic, BroadcastGradientsMatchFiniteDifferences) {
  const std::vector<Layout> all_layouts = layouts();
  const std::vector<Operand> chosen{operands()[0], operands()[2], operands()[5]};
  for (const auto& op : ops()) {
    for (const auto& o : chosen) {
      for (const auto& l : all_layouts) {
        if (o.a_shape[l.axis] < static_cast<std::int64_t>(l.parts.size())) continue;
        for (Placement p : {Placement::aligned, Placement::replicated}) {
          const TensorSpace as = space_of(l, o.a_shape, o.a_shape.rank());
          const TensorSpace bs = b_space(l, o.b_shape, o.a_shape.rank(), p);
          SCOPED_TRACE(std::string(op.name) + " " + o.a_shape.str() + " with " + o.b_shape.str() +
                       ", " + l.name + ", b " + bs.str());
          Var<double> a(random_tensor<double>(as, 1), true);
          Var<double> b(random_tensor<double>(bs, 2, 0.5, 1.5), true);
          const auto r = random_tensor<double>(as, 3);
          test::expect_gradients_match_everywhere(
              [&](Tape& t) { return test::weighted_sum(t, op.f(t, a, b), r); }, {a, b});
        }
      }
    }
  }
}

TEST(Arithmetic, FloatMatchesDouble) {
  const std::vector<Layout> all_layouts = layouts();
  for (const auto& op : ops()) {
    for (const auto& l : all_layouts) {
      const Operand o = operands()[2];  // a column [N, 1]
      if (o.a_shape[l.axis] < static_cast<std::int64_t>(l.parts.size())) continue;
      SCOPED_TRACE(std::string(op.name) + ", " + l.name);
      const TensorSpace as = space_of(l, o.a_shape, 2);
      const auto bd = random_tensor<double>(space_of(l, o.b_shape, 2), 2, 0.5, 1.5);
      DistTensor<float> bf(bd.space());
      const auto v = bd.local().to_vector();
      bf.local().copy_from(
          Tensor<float>::from_vector(bd.local().shape(), std::vector<float>(v.begin(), v.end())));
      test::expect_float_matches_double(
          as, [&](Tape& t, const Var<double>& x) { return op.f(t, x, Var<double>(bd)); },
          [&](Tape& t, const Var<float>& x) { return op.f_float(t, x, Var<float>(bf)); }, 1e-6);
    }
  }
}

// A matmul's output lives in a space derived by matmul; a tensor with the same boxes, made
// otherwise, is in an equal space: they add (the case of pure data parallelism, and of one rank,
// where the batch's split over a grid axis of extent 1 is no split).
TEST(Arithmetic, MatmulOutputAddsToATensorOfTheSameBoxes) {
  const int n = world_size();
  for (const Shape& grid : {Shape{n}, Shape{n, 1}}) {
    SCOPED_TRACE("grid " + grid.str());
    const Partition p = Partition::world(grid);
    // x [N, F] with the batch split by grid axis 0 and, on [n, 1], the features by grid axis 1.
    const std::vector<int> x_map =
        grid.rank() == 1 ? std::vector<int>{0, -1} : std::vector<int>{0, 1};
    const TensorSpace xs(p, Decomposition::balanced(Shape{kBatch, kFeatures}, grid, x_map));
    const TensorSpace ws(
        p, Decomposition::balanced(Shape{kFeatures, 3}, grid, std::vector<int>{-1, -1}));
    const TensorSpace zs(p, Decomposition::balanced(Shape{kBatch, 3}, grid, x_map));
    Var<double> x(random_tensor<double>(xs, 1), true);
    Var<double> w(random_tensor<double>(ws, 2), true);
    Var<double> z(random_tensor<double>(zs, 3), true);
    Tape tape;
    Var<double> y = nn::matmul(tape, x, w);
    EXPECT_TRUE(y.space() == zs);
    EXPECT_TRUE(zs == y.space());
    // Equal spaces hash alike on every rank.
    std::uint64_t f[2] = {y.space().fingerprint(), zs.fingerprint()};
    std::uint64_t lo[2], hi[2];
    MPI_Allreduce(f, lo, 2, MPI_UINT64_T, MPI_MIN, MPI_COMM_WORLD);
    MPI_Allreduce(f, hi, 2, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD);
    EXPECT_EQ(lo[0], hi[0]);
    EXPECT_EQ(lo[0], lo[1]);
    EXPECT_EQ(hi[0], hi[1]);
    Var<double> s = nn::add(tape, y, z);
    Var<double> t = nn::sub(tape, z, y);
    auto l = test::weighted_sum(tape, nn::mul(tape, s, t), random_tensor<double>(zs, 4));
    backward(tape, l);
    EXPECT_TRUE(s.space() == zs);
    const auto yv = y.value().local().to_vector(), zv = z.value().local().to_vector();
    const auto sv = s.value().local().to_vector(), tv = t.value().local().to_vector();
    for (std::size_t i = 0; i < yv.size(); ++i) {
      EXPECT_DOUBLE_EQ(sv[i], yv[i] + zv[i]);
      EXPECT_DOUBLE_EQ(tv[i], zv[i] - yv[i]);
    }
    EXPECT_TRUE(x.has_grad() && w.has_grad() && z.has_grad());
  }
}

TEST(Arithmetic, BrokenBroadcastContractsAreErrorsOnEveryRank) {
  DISTOP_REQUIRE_RANKS(2);
  const int n = world_size();
  const Partition p = Partition::world(Shape{n});
  Tape tape;
  const Shape as{kBatch, kFeatures};
  Var<double> a(
      random_tensor<double>(TensorSpace(p, Decomposition::balanced(as, p.shape(), {0, -1})), 1),
      true);
  auto on = [&](const Partition& q, const Shape& s, std::vector<int> map) {
    return Var<double>(
        DistTensor<double>(TensorSpace(q, Decomposition::balanced(s, q.shape(), std::move(map)))));
  };
  for (const auto& op : ops()) {
    SCOPED_TRACE(op.name);
    // Shapes that do not broadcast: torch aligns [N] with the features.
    EXPECT_THROW(op.f(tape, a, on(p, Shape{kBatch}, {-1})), Error);
    EXPECT_THROW(op.f(tape, a, on(p, Shape{1, kBatch, kFeatures}, {-1, -1, -1})), Error);
    // The features split where a's are not, on a's partition: neither aligned nor whole.
    EXPECT_THROW(op.f(tape, a, on(p, Shape{kFeatures}, {0})), Error);
    // A column split other than a's batch.
    std::vector<std::int64_t> other(static_cast<std::size_t>(n), 1);
    other.front() = kBatch - (n - 1);
    if (other != balanced_parts(kBatch, n)) {
      EXPECT_THROW(
          op.f(tape, a,
               Var<double>(DistTensor<double>(TensorSpace(
                   p, Decomposition::blocks(Shape{kBatch, 1}, p.shape(), {other, {1}}, {0, -1}))))),
          Error);
    }
    // Whole, but held by rank 0 only: the other ranks hold boxes of a and no b.
    EXPECT_THROW(op.f(tape, a, on(Partition::world(Shape{1}, {0}), Shape{kFeatures}, {-1})), Error);
  }
  EXPECT_EQ(tape.size(), 0u);
}
