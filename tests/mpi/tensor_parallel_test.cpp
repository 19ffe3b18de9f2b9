// Tensor parallelism (Megatron): TensorParallelMultiheadAttention, TensorParallelMLP and
// TensorParallelTransformerEncoderLayer over T = 1-4 ranks (T = n on n ranks; T = 1 with two
// data-parallel replicas at 2; T = 2 with an idle rank at 3; T = 2 on grid axis 0 with two
// replicas on grid axis 1 at 4) equal the local layers with the same seed on the whole batch:
// outputs, input gradients and every parameter's gradient (summed over the replicas) to 1e-12 in
// double, without and with the causal and an additive mask, with dropout; the state_dict's names,
// global shapes and values; one AllSumReduce forward and one backward per block; the dot-product
// test of the linearisations and testing::gradcheck through the canonical copy of the tied
// tensors; bad sizes and inputs an Error on every rank.
#include "distop/nn/tensor_parallel.hpp"

#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "distop/autodiff/apply.hpp"
#include "distop/autodiff/function.hpp"
#include "distop/core/timers.hpp"
#include "distop/kernels/axpy.hpp"
#include "distop/nn/activation.hpp"
#include "distop/nn/init.hpp"
#include "distop/nn/linear.hpp"
#include "distop/nn/multihead_attention.hpp"
#include "distop/nn/transformer_encoder_layer.hpp"
#include "distop/ops/broadcast.hpp"
#include "distop/testing/adjoint_test.hpp"
#include "distop/testing/gradcheck.hpp"
#include "distop/testing/linearisation.hpp"
#include "gradcheck.hpp"
#include "mpi_test_util.hpp"

using namespace distop;
using distop::test::error_of;
using distop::test::world_rank;
using distop::test::world_size;

namespace {

constexpr std::int64_t kSeq = 3, kHeadDim = 2;

// A tensor-parallel layout: the partition, its tensor-parallel grid axis, and the grid axis that
// splits the batch (data-parallel replicas), or -1.
struct Layout {
  std::string name;
  Partition partition;
  int axis;
  int batch_axis;
  std::int64_t t() const { return partition.shape()[axis]; }
  std::int64_t replicas() const { return batch_axis < 0 ? 1 : partition.shape()[batch_axis]; }
  std::int64_t heads() const { return 2 * t(); }
  std::int64_t embed() const { return heads() * kHeadDim; }
  std::int64_t batch() const { return 2 * replicas(); }
  // x [N, S, E] (or [M, E]) on the partition: the batch split over batch_axis, tied over axis.
  TensorSpace space(const Shape& global) const {
    std::vector<int> map{batch_axis};  // the batch axis, then the others whole
    map.resize(static_cast<std::size_t>(global.rank()), -1);
    return TensorSpace(partition, Decomposition::balanced(global, partition.shape(), map));
  }
};

// Built once per run: partitions are collective to make.
const std::vector<Layout>& layouts() {
  static const std::vector<Layout> out = [] {
    const int n = world_size();
    std::vector<Layout> v;
    v.push_back({"T=" + std::to_string(n), Partition::world(Shape{n}), 0, -1});
    if (n == 2) v.push_back({"T=1, 2 replicas", Partition::world(Shape{2, 1}), 1, 0});
    if (n == 3) v.push_back({"T=2, rank 2 idle", Partition::world(Shape{2}), 0, -1});
    if (n == 4)
      v.push_back({"T=2 on grid axis 0, 2 replicas", Partition::world(Shape{2, 2}), 0, 1});
    return v;
  }();
  return out;
}

double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b) {
  EXPECT_EQ(a.size(), b.size());
  double m = 0;
  for (std::size_t i = 0; i < a.size() && i < b.size(); ++i) m = std::max(m, std::abs(a[i] - b[i]));
  return m;
}

// The torch index (of the global tensor named `name`) of each entry of this rank's box: its global
// index (in_proj's [3, E, E] holds torch's [3E, E] in the same order).
std::vector<std::int64_t> torch_indices(const TensorSpace& s) { return s.global_indices(); }

// Every parameter of `tp` equals the local module's parameter of the same name (in the same
// order) at its torch indices: the value, and the gradient summed over the data-parallel replicas
// (the local module saw the whole batch, each replica its part).
void expect_parameters_match(const Layout& l, const nn::Module<double>& tp,
                             const std::vector<nn::NamedParameter<double>>& local) {
  const auto params = tp.named_parameters();
  ASSERT_EQ(params.size(), local.size());
  const MPI_Comm replicas =
      l.batch_axis < 0 ? MPI_COMM_NULL : l.partition.axes_comm({l.batch_axis});
  for (std::size_t i = 0; i < params.size(); ++i) {
    SCOPED_TRACE(params[i].name);
    ASSERT_EQ(params[i].name, local[i].name);
    ASSERT_EQ(params[i].shape(), local[i].shape());
    const auto idx = torch_indices(params[i].var.space());
    const auto v = params[i].var.value().local().to_vector();
    auto g = params[i].var.grad().local().to_vector();
    if (replicas != MPI_COMM_NULL)
      MPI_Allreduce(MPI_IN_PLACE, g.data(), static_cast<int>(g.size()), MPI_DOUBLE, MPI_SUM,
                    replicas);
    const auto lv = local[i].var.value().local().to_vector();
    const auto lg = local[i].var.grad().local().to_vector();
    double dv = 0, dg = 0;
    for (std::size_t j = 0; j < idx.size(); ++j) {
      dv = std::max(dv, std::abs(v[j] - lv[static_cast<std::size_t>(idx[j])]));
      dg = std::max(dg, std::abs(g[j] - lg[static_cast<std::size_t>(idx[j])]));
    }
    EXPECT_EQ(dv, 0.0);
    EXPECT_LT(dg, 1e-12);
  }
}

// This rank's batch box of a whole [N, ...] tensor (its rows, contiguous).
std::vector<double> batch_box(const std::vector<double>& whole, const TensorSpace& s) {
  const std::int64_t row = s.global_shape().numel() / s.global_shape()[0];
  const auto begin = whole.begin() + static_cast<std::ptrdiff_t>(s.local_offset()[0] * row);
  return std::vector<double>(begin, begin + static_cast<std::ptrdiff_t>(s.local_shape().numel()));
}

// Runs the tensor-parallel layer on the tied input and the local one on the whole batch here,
// both from the same output gradient, and compares everything.
template <class Tp, class Local, class TpForward, class LocalForward>
void expect_equals_local(const Layout& l, const Shape& global, Tp& tp, Local& local,
                         TpForward tp_forward, LocalForward local_forward) {
  for (auto& p : tp.parameters()) p.zero_grad();
  for (auto& p : local.parameters()) p.zero_grad();
  const TensorSpace xs = l.space(global);
  Tape tape;
  Var<double> x(test::random_tensor<double>(xs, 1), true);
  Var<double> y = tp_forward(tape, x);
  ASSERT_TRUE(y.space() == xs) << y.space().str();
  backward(tape, y, test::random_tensor<double>(xs, 2));

  const TensorSpace whole = test::local_space(global);
  Tape local_tape;
  Var<double> xl(test::random_tensor<double>(whole, 1), true);
  Var<double> yl = local_forward(local_tape, xl);
  backward(local_tape, yl, test::random_tensor<double>(whole, 2));
  if (!l.partition.active()) return;  // an idle rank: nothing to compare
  EXPECT_LT(
      max_abs_diff(y.value().local().to_vector(), batch_box(yl.value().local().to_vector(), xs)),
      1e-12);
  EXPECT_LT(
      max_abs_diff(x.grad().local().to_vector(), batch_box(xl.grad().local().to_vector(), xs)),
      1e-12);
  expect_parameters_match(l, tp, local.named_parameters());
}

// The local MLP of TensorParallelMLP(seed): Linear, gelu, Linear.
struct LocalMlp : nn::Module<double> {
  std::shared_ptr<nn::Linear<double>> linear1, linear2;
  LocalMlp(std::int64_t e, std::int64_t f, std::uint64_t seed) {
    linear1 = register_module(
        "linear1", std::make_shared<nn::Linear<double>>(
                       e, f, nn::LinearOptions{.seed = nn::parameter_seed(seed, "linear1")}));
    linear2 = register_module(
        "linear2", std::make_shared<nn::Linear<double>>(
                       f, e, nn::LinearOptions{.seed = nn::parameter_seed(seed, "linear2")}));
  }
  Var<double> forward(Tape& tape, const Var<double>& x) {
    return linear2->forward(tape, nn::gelu(tape, linear1->forward(tape, x)));
  }
};

TEST(TensorParallel, LayersEqualTheLocalLayers) {
  for (const auto& l : layouts()) {
    SCOPED_TRACE(l.name);
    const std::int64_t e = l.embed();
    const Shape seqs{l.batch(), kSeq, e};
    {
      // Attention without a mask, then with the causal and an additive mask.
      nn::TensorParallelMultiheadAttention<double> tp(e, l.heads(), l.partition,
                                                      {.tensor_axis = l.axis, .seed = 7});
      nn::MultiheadAttention<double> local(e, l.heads(), {.seed = 7});
      nn::AttentionMask<double> none;
      nn::AttentionMask<double> mask{
          .attn_mask = test::random_tensor<double>(test::local_space({kSeq, kSeq}), 5),
          .is_causal = true};
      for (const auto* m : {&none, &mask}) {
        SCOPED_TRACE(m->is_causal ? "causal, attn_mask" : "no mask");
        expect_equals_local(
            l, seqs, tp, local, [&](Tape& t, const Var<double>& x) { return tp.forward(t, x, *m); },
            [&](Tape& t, const Var<double>& x) { return local.forward(t, x, *m); });
      }
    }
    {
      SCOPED_TRACE("MLP on rows");
      nn::TensorParallelMLP<double> tp(e, 3 * l.t(), l.partition,
                                       {.tensor_axis = l.axis, .seed = 4});
      LocalMlp local(e, 3 * l.t(), 4);
      expect_equals_local(
          l, Shape{l.batch() * kSeq, e}, tp, local,
          [&](Tape& t, const Var<double>& x) { return tp.forward(t, x); },
          [&](Tape& t, const Var<double>& x) { return local.forward(t, x); });
    }
    {
      // The encoder layer with dropout (on the attention weights, the hidden units and both
      // residual paths: the masks keyed by global index alike) and the causal mask.
      SCOPED_TRACE("encoder layer");
      nn::TensorParallelTransformerEncoderLayer<double> tp(
          e, l.heads(), 2 * e, l.partition, {.tensor_axis = l.axis, .dropout = 0.3, .seed = 9});
      nn::TransformerEncoderLayer<double> local(e, l.heads(), 2 * e, {.dropout = 0.3, .seed = 9});
      expect_equals_local(
          l, seqs, tp, local,
          [&](Tape& t, const Var<double>& x) { return tp.forward(t, x, {.is_causal = true}); },
          [&](Tape& t, const Var<double>& x) { return local.forward(t, x, {.is_causal = true}); });
    }
  }
}

TEST(TensorParallel, StateDictHasTheLocalNamesShapesAndValues) {
  {
    const Layout& l = layouts().front();
    const std::int64_t e = l.embed();
    nn::TensorParallelTransformerEncoderLayer<double> tp(e, l.heads(), 2 * e, l.partition,
                                                         {.tensor_axis = l.axis, .seed = 5});
    nn::TransformerEncoderLayer<double> local(e, l.heads(), 2 * e, {.seed = 5});
    const auto sd = tp.state_dict();
    const auto want = local.state_dict();
    ASSERT_EQ(sd.size(), want.size());
    for (auto it = sd.begin(), jt = want.begin(); it != sd.end(); ++it, ++jt) {
      SCOPED_TRACE(it->first);
      ASSERT_EQ(it->first, jt->first);
      ASSERT_EQ(it->second.shape, jt->second.shape);
      const auto& v = std::get<0>(it->second.values);
      const auto& w = std::get<0>(jt->second.values);
      // in_proj too, held as [3, E, E]: torch's layout at every T.
      EXPECT_EQ(v, w);
    }
    // It loads into the local layer (another T) and comes back out unchanged.
    nn::TransformerEncoderLayer<double> loaded(e, l.heads(), 2 * e, {.seed = 8});
    loaded.load_state_dict(sd);
    const auto back = loaded.state_dict();
    for (auto it = sd.begin(), jt = back.begin(); it != sd.end(); ++it, ++jt)
      EXPECT_EQ(std::get<0>(it->second.values), std::get<0>(jt->second.values)) << it->first;
    // A state_dict goes back into a layer of the same layout.
    nn::TensorParallelTransformerEncoderLayer<double> other(e, l.heads(), 2 * e, l.partition,
                                                            {.tensor_axis = l.axis, .seed = 6});
    other.load_state_dict(sd);
    const auto mine = tp.named_parameters(), theirs = other.named_parameters();
    for (std::size_t i = 0; i < mine.size(); ++i)
      EXPECT_EQ(theirs[i].var.value().local().to_vector(), mine[i].var.value().local().to_vector())
          << mine[i].name;
  }
}

// Sequence parallelism inside the encoder layer: the tokens split over one grid axis (heads over
// another at 4 ranks), attention by ring and by all-to-all, contiguous (with dropout) and zigzag
// (causal) layouts: output, input gradient and every parameter's gradient (on every copy: the
// copies along the token axis are tied) equal the local layer's on the whole input.
TEST(TensorParallel, SequenceParallelEncoderLayerEqualsTheLocalLayer) {
  const int n = world_size();
  struct SpLayout {
    std::string name;
    Partition partition;  // [T, P]: heads over axis 0, tokens over axis 1
  };
  std::vector<SpLayout> sps{{"S=" + std::to_string(n), Partition::world(Shape{1, n})}};
  if (n == 4) sps.push_back({"T=2 x S=2", Partition::world(Shape{2, 2})});
  for (const auto& sl : sps)
    for (auto strategy :
         {nn::SequenceParallelStrategy::ring, nn::SequenceParallelStrategy::alltoall})
      for (auto layout : {nn::SequenceLayout::contiguous, nn::SequenceLayout::zigzag}) {
        const bool zigzag = layout == nn::SequenceLayout::zigzag;
        SCOPED_TRACE(sl.name + ", " + std::string(nn::to_string(strategy)) +
                     (zigzag ? ", zigzag" : ", contiguous"));
        const std::int64_t t = sl.partition.shape()[0], p = sl.partition.shape()[1];
        const std::int64_t heads = t * std::max<std::int64_t>(2, p), e = heads * kHeadDim;
        const std::int64_t batch = 2, seq = 2 * p + 1;
        const double drop = zigzag ? 0.0 : 0.3;  // the dropout masks follow the tensors' order
        nn::TensorParallelTransformerEncoderLayer<double> tp(
            e, heads, 2 * e, sl.partition,
            {.tensor_axis = 0,
             .dropout = drop,
             .seed = 9,
             .sequence_parallel =
                 nn::SequenceParallel{.sequence_axis = 1, .strategy = strategy, .layout = layout}});
        nn::TransformerEncoderLayer<double> local(e, heads, 2 * e, {.dropout = drop, .seed = 9});
        const auto pos = nn::sequence_positions(seq, static_cast<int>(p), layout);
        const TensorSpace xs(
            sl.partition, Decomposition::blocks(
                              Shape{batch, seq, e}, sl.partition.shape(),
                              {{batch}, nn::sequence_blocks(seq, static_cast<int>(p), layout), {e}},
                              {-1, 1, -1}));
        const TensorSpace whole = test::local_space(Shape{batch, seq, e});
        const auto xw = test::random_tensor<double>(whole, 1).local().to_vector();
        const auto dyw = test::random_tensor<double>(whole, 2).local().to_vector();
        // This rank's box of a whole [N, S, E] tensor held in the layout's token order.
        auto box = [&](const std::vector<double>& w) {
          std::vector<double> v;
          for (std::int64_t i : xs.global_indices()) {
            const std::int64_t c = i % e, s = (i / e) % seq, b = i / (e * seq);
            v.push_back(w[static_cast<std::size_t>((b * seq + pos[s]) * e + c)]);
          }
          return v;
        };
        Tape tape;
        Var<double> x(
            DistTensor<double>(xs, Tensor<double>::from_vector(xs.local_shape(), box(xw))), true);
        Var<double> y = tp.forward(tape, x, {.is_causal = true});
        backward(tape, y,
                 DistTensor<double>(xs, Tensor<double>::from_vector(xs.local_shape(), box(dyw))));
        Tape local_tape;
        Var<double> xl(test::random_tensor<double>(whole, 1), true);
        Var<double> yl = local.forward(local_tape, xl, {.is_causal = true});
        backward(local_tape, yl, test::random_tensor<double>(whole, 2));
        EXPECT_LT(max_abs_diff(y.value().local().to_vector(), box(yl.value().local().to_vector())),
                  1e-12);
        EXPECT_LT(max_abs_diff(x.grad().local().to_vector(), box(xl.grad().local().to_vector())),
                  1e-12);
        const auto params = tp.named_parameters(), want = local.named_parameters();
        ASSERT_EQ(params.size(), want.size());
        for (std::size_t i = 0; i < params.size(); ++i) {
          SCOPED_TRACE(params[i].name);
          // The copies along the token axis are tied: each holds the whole gradient.
          const auto g = params[i].var.grad().local().to_vector();
          const auto lg = want[i].var.grad().local().to_vector();
          const auto idx = torch_indices(params[i].var.space());
          double d = 0;
          for (std::size_t j = 0; j < idx.size(); ++j)
            d = std::max(d, std::abs(g[j] - lg[static_cast<std::size_t>(idx[j])]));
          EXPECT_LT(d, 1e-12);
        }
      }
}

TEST(TensorParallel, OneAllReduceForwardAndOneBackwardPerBlock) {
  const Layout l = layouts().front();
  const std::int64_t e = l.embed();
  nn::TensorParallelMultiheadAttention<double> attn(e, l.heads(), l.partition, {.seed = 1});
  nn::TensorParallelTransformerEncoderLayer<double> layer(e, l.heads(), 2 * e, l.partition,
                                                          {.dropout = 0.0, .seed = 3});
  const TensorSpace xs = l.space(Shape{l.batch(), kSeq, e});
  const auto count = [](const char* name) {
    const auto s = timers::snapshot();
    const auto it = s.find(name);
    return it == s.end() ? 0LL : it->second.calls;
  };
  const std::vector<std::pair<const char*, std::function<Var<double>(Tape&, const Var<double>&)>>>
      blocks{{"attention", [&](Tape& t, const Var<double>& x) { return attn.forward(t, x); }},
             {"encoder layer", [&](Tape& t, const Var<double>& x) { return layer.forward(t, x); }}};
  const long long want[] = {1, 2};  // attention; attention and MLP
  for (std::size_t b = 0; b < blocks.size(); ++b) {
    SCOPED_TRACE(blocks[b].first);
    for (int run = 0; run < 2; ++run) {  // the first builds the plans
      Tape tape;
      Var<double> x(test::random_tensor<double>(xs, 1), true);
      timers::enable(true);
      timers::reset();
      Var<double> y = blocks[b].second(tape, x);
      const long long forward_calls = count("AllSumReduce");
      const long long forward_adjoints = count("AllSumReduce.adjoint");
      backward(tape, y, test::random_tensor<double>(xs, 2));
      const long long backward_calls = count("AllSumReduce") - forward_calls;
      const long long backward_adjoints = count("AllSumReduce.adjoint");
      std::vector<std::string> other_ops;
      for (const auto& [name, entry] : timers::snapshot())
        for (const char* op : {"Broadcast", "SumReduce", "Repartition", "AllGather",
                               "ReduceScatter", "Gather", "Scatter", "SendRecv", "HaloExchange"})
          if (name.starts_with(op)) other_ops.push_back(name);
      timers::enable(false);
      EXPECT_EQ(forward_calls, want[b]);
      EXPECT_EQ(forward_adjoints, 0);
      EXPECT_EQ(backward_calls, 0);
      EXPECT_EQ(backward_adjoints, want[b]);
      EXPECT_TRUE(other_ops.empty()) << other_ops.front();
    }
  }
  // An input that needs no gradient: no all-reduce backward.
  Tape tape;
  Var<double> x(test::random_tensor<double>(xs, 1), false);
  timers::enable(true);
  timers::reset();
  Var<double> y = attn.forward(tape, x);
  backward(tape, y, test::random_tensor<double>(xs, 2));
  EXPECT_EQ(count("AllSumReduce.adjoint"), 0);
  EXPECT_EQ(count("AllSumReduce"), 1);
  timers::enable(false);
}

// ---- Through the canonical copy: the sum convention's operators and checks ----

// s on the slice at coordinate 0 of the tensor-parallel axis -> the tied B s; its gradient is the
// tied gradient's canonical copy (the gradient with respect to the one value).
Var<double> tie_copies(Tape& tape, const Var<double>& s,
                       const std::shared_ptr<const Broadcast<double>>& b) {
  return make_function<double>(tape, "tie_copies", {s}, [&] {
    return Computed{b->apply(s.value()), [](const DistTensor<double>& dy, Gradients<double>& g) {
                      g.accumulate(0, [&](double beta, Tensor<double>& dx) {
                        if (dx.numel() == 0) return;
                        if (beta == 0.0)
                          dx.copy_from(dy.local());
                        else
                          kernels::axpy(1.0, dy.local(), dx);
                      });
                    }};
  });
}

// The tied y -> its canonical copy on the slice; the gradient becomes tied: B dy.
Var<double> canonical_copy(Tape& tape, const Var<double>& y,
                           const std::shared_ptr<const Broadcast<double>>& b) {
  return make_function<double>(
      tape, "canonical_copy", {y},
      [&] {
        DistTensor<double> s(b->domain());
        if (s.local_numel() > 0) s.local().copy_from(y.value().local());
        return Computed{std::move(s), [b](const DistTensor<double>& ds, Gradients<double>& g) {
                          g.add(0, b->apply(ds));
                        }};
      },
      FunctionOptions{.collective = true});
}

// The canonical form of a layout's space: the slice's space and the Broadcast onto the partition.
struct Canonical {
  TensorSpace space;
  std::shared_ptr<const Broadcast<double>> broadcast;
  Canonical(const Layout& l, const Shape& global) {
    const Partition slice = l.partition.slice(l.axis, 0);
    std::vector<int> map{l.batch_axis};
    map.resize(static_cast<std::size_t>(global.rank()), -1);
    space = TensorSpace(slice, Decomposition::balanced(global, slice.shape(), map));
    broadcast = std::make_shared<const Broadcast<double>>(space, l.partition);
    EXPECT_TRUE(broadcast->range() == l.space(global)) << broadcast->range().str();
  }
};

TEST(TensorParallel, LinearisationsPassTheDotProductTest) {
  const Layout& l = layouts().front();
  const std::int64_t e = l.embed(), f = 2 * e;
  const Canonical cr(l, Shape{l.batch() * kSeq, e}), cs(l, Shape{l.batch(), kSeq, e});

  // ColumnParallelLinear in its tied input (f's adjoint) and RowParallelLinear in its split input
  // (g's), through the canonical copy.
  nn::ColumnParallelLinear<double> column(e, f, l.partition, {.tensor_axis = l.axis, .seed = 1});
  Var<double> xc(test::random_tensor<double>(cr.space, 1), true);
  TensorSpace column_out;
  {
    Tape t;
    column_out = column.forward(t, tie_copies(t, xc, cr.broadcast)).space();
  }
  const auto rc = distop::testing::adjoint_test(distop::testing::TapeLinearisation<double>(
      xc, column_out, [&](Tape& t) { return column.forward(t, tie_copies(t, xc, cr.broadcast)); },
      "ColumnParallelLinear(x)"));
  EXPECT_TRUE(rc.passed) << rc.str();
  nn::RowParallelLinear<double> row(f, e, l.partition, {.tensor_axis = l.axis, .seed = 2});
  Var<double> h(test::random_tensor<double>(column_out, 3), true);
  const auto rr = distop::testing::adjoint_test(distop::testing::TapeLinearisation<double>(
      h, cr.space, [&](Tape& t) { return canonical_copy(t, row.forward(t, h), cr.broadcast); },
      "RowParallelLinear(x)"));
  EXPECT_TRUE(rr.passed) << rr.str();

  // The attention in out_proj.weight (it enters linearly).
  nn::TensorParallelMultiheadAttention<double> attn(e, l.heads(), l.partition,
                                                    {.tensor_axis = l.axis, .seed = 3});
  const Var<double> xs(test::random_tensor<double>(cs.space, 1), false);
  const auto ra = distop::testing::adjoint_test(distop::testing::TapeLinearisation<double>(
      attn.out_proj().weight(), cs.space,
      [&](Tape& t) {
        return canonical_copy(
            t, attn.forward(t, tie_copies(t, xs, cs.broadcast), {.is_causal = true}), cs.broadcast);
      },
      "TensorParallelMultiheadAttention(out_proj.weight)"));
  EXPECT_TRUE(ra.passed) << ra.str();
}

TEST(TensorParallel, GradcheckThroughTheCanonicalCopy) {
  const Layout& l = layouts().back();
  const std::int64_t e = l.embed();
  const Canonical cs(l, Shape{l.batch(), kSeq, e});
  nn::TensorParallelMultiheadAttention<double> attn(e, l.heads(), l.partition,
                                                    {.tensor_axis = l.axis, .seed = 8});
  Var<double> x(test::random_tensor<double>(cs.space, 1), true);
  // The canonical input and a split parameter (each rank's block its own variables); the tied
  // and the other split parameters are compared with the local layer's gradients above.
  const auto report = distop::testing::gradcheck(
      [&](Tape& t) {
        return canonical_copy(
            t, attn.forward(t, tie_copies(t, x, cs.broadcast), {.is_causal = true}), cs.broadcast);
      },
      {x, attn.in_proj_weight()}, {.step = 1e-6, .tolerance = 1e-7, .max_entries = 1});
  EXPECT_TRUE(report.passed) << report.str();
}

TEST(TensorParallel, BadSizesAndInputsAreAnErrorOnEveryRank) {
  DISTOP_REQUIRE_RANKS(2);
  const int n = world_size();
  const Partition line = Partition::world(Shape{n});
  // Heads, hidden units and features that T = n does not divide.
  EXPECT_NE(error_of([&] {
              nn::TensorParallelMultiheadAttention<double>(2 * (n + 1), n + 1, line);
            }).find("num_heads"),
            std::string::npos);
  EXPECT_NE(error_of([&] { nn::TensorParallelMLP<double>(4, n + 1, line); }).find("hidden"),
            std::string::npos);
  EXPECT_NE(
      error_of([&] { nn::ColumnParallelLinear<double>(4, n + 1, line); }).find("out_features"),
      std::string::npos);
  EXPECT_NE(error_of([&] { nn::RowParallelLinear<double>(n + 1, 4, line); }).find("in_features"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              nn::TensorParallelMultiheadAttention<double>(4 * n, 2 * n, line, {.tensor_axis = 1});
            }).find("tensor_axis"),
            std::string::npos);

  // A sequence axis that is no other grid axis than the tensor axis.
  EXPECT_NE(error_of([&] {
              nn::ColumnParallelLinear<double>(4, n, line, {.sequence_axis = 1});
            }).find("sequence_axis 1"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              nn::RowParallelLinear<double>(n, 4, line, {.sequence_axis = 0});
            }).find("sequence_axis 0"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              nn::TensorParallelMultiheadAttention<double>(
                  4 * n, 2 * n, line,
                  {.sequence_parallel = nn::SequenceParallel{.sequence_axis = 2}});
            }).find("sequence_axis 2"),
            std::string::npos);
  EXPECT_NE(error_of([&] { nn::LayerNorm<double>(4, line, {.tie_axis = 3}); }).find("tie_axis 3"),
            std::string::npos);

  const std::int64_t e = 4 * n;
  nn::TensorParallelMultiheadAttention<double> attn(e, 2 * n, line);
  nn::TensorParallelMLP<double> mlp(e, 2 * e, line);
  // The batch split over the tensor-parallel axis: not replicated.
  const TensorSpace split_batch(
      line, Decomposition::balanced(Shape{n, kSeq, e}, line.shape(), {0, -1, -1}));
  Var<double> xb(test::random_tensor<double>(split_batch, 1), true);
  EXPECT_NE(error_of([&] {
              Tape t;
              attn.forward(t, xb);
            }).find("replicated along the tensor-parallel grid axis"),
            std::string::npos);
  // Another partition (each rank alone).
  Var<double> xl(test::random_tensor<double>(test::local_space({2, kSeq, e}), 1), true);
  EXPECT_NE(error_of([&] {
              Tape t;
              attn.forward(t, xl);
            }).find("expected the layer's"),
            std::string::npos);
  // Rows split over the axis into the MLP; a wrong feature count.
  const TensorSpace split_rows(line, Decomposition::balanced(Shape{n, e}, line.shape(), {0, -1}));
  Var<double> xr(test::random_tensor<double>(split_rows, 1), true);
  EXPECT_NE(error_of([&] {
              Tape t;
              mlp.forward(t, xr);
            }).find("replicated"),
            std::string::npos);
  const TensorSpace tied(
      line, Decomposition::balanced(Shape{2, kSeq, e + 1}, line.shape(), {-1, -1, -1}));
  Var<double> xw(test::random_tensor<double>(tied, 1), true);
  EXPECT_NE(error_of([&] {
              Tape t;
              attn.forward(t, xw);
            }).find("expected an input [N, S, " + std::to_string(e) + "]"),
            std::string::npos);
}

}  // namespace
