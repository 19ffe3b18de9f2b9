// bench_step_model: a model of one training step of examples/lenet5 (model parallel over 2 ranks
// per replica, data parallel over the replicas), of examples/cnn (data parallel, one rank per
// replica, buckets overlapped with backward) and of examples/unet3d (every layer on a spatial grid
// of ranks, replicas over the rest), and of sequence-parallel attention (ring and all-to-all, a
// fixed block of tokens per rank), projected to 1,024 ranks of a cluster.
//
//   mpiexec.mpich -n 2 build/benchmarks/bench_step_model [--batch 64] [--global-batch 1024] [--csv]
//       [--programs lenet5,cnn,unet3d] [--unet-batch 2] [--volume-per-rank 16]
//       [--unet-model-ranks 8] [--attention-block 1024] [--attention-heads 16]
//       [--attention-head-dim 64] [--attention-speedup F]
//
// Compute is measured here, per layer: each program's step runs under distop's trace
// (core/trace.hpp) at every batch the projections need (weak scaling: --batch per replica; strong
// scaling: --global-batch / replicas), LeNet-5 on the 2 ranks, examples/cnn on rank 0 alone. A
// layer's time is its "compute" events' own time (less the operators nested in them; functions
// nested in a layer, its "conv" or "max_pool", count as the layer's; the two pools of LeNet-5 are
// one unregistered module, "DistributedPool", and examples/cnn's "Pool"),
// forward and backward apart, the slowest rank's, the median over --steps steps after --warmup; the
// step's compute is the median of the slowest rank's sum, the optimizer step and the rest of the
// phases included.
// The operators' measured time is printed beside the model's for reference only.
//
// Communication comes from the cost model (distop/ops/cost_model.hpp) on the cluster given by the
// flags (a two-level fat tree, step_model.hpp; defaults: platforms/ib-fat-tree-1024.xml):
//   LeNet-5's operators inside a replica (its 2 ranks on one leaf), forward and adjoint: the halo
//   exchanges of conv1, pool1, conv2 and pool2 and the repartition to fc1, each from its own
//   CommStats (built on the spaces the model uses at that batch) with point_to_point_plan; the
//   convolutions' weight and bias broadcasts (adjoint: sum-reduces) with broadcast/sum_reduce; the
//   fully connected layers' input broadcasts over their P_out ranks and output sum-reduces over
//   their P_in ranks;
//   examples/unet3d's operators on a spatial grid of P ranks (unet_grid(P)), each rank a
//   --volume-per-rank^3 block (the volume grows with P: weak scaling), --unet-batch volumes, on the
//   slowest rank (interior along every split axis; unet3d_ops): each 3x3x3 convolution's halo
//   exchange, its sweeps one after another (unet_halo_sweeps, step_model.hpp; checked against the
//   HaloExchange the model builds on the 2 ranks), GroupNorm's all-gather of 2 x N x G statistics
//   per part forward and all-reduce of 2 x N x G sums backward, every convolution's weight and
//   bias broadcast (adjoint: sum-reduce), the loss's small all-reduces; compute measured on rank 0
//   alone at one rank's block;
//   the gradients' reduction over R replicas: DataParallel's buckets (its default caps), each a
//   reduce-scatter as an all-to-all of chunks, the chunks' sum and an all-gather (bucket_seconds),
//   over the R ranks of the reduction group (for LeNet-5 spread over 2R hosts): the last bucket
//   exposed with overlap, all of them without.
// Output: per-layer tables, then the weak and strong scaling projections for 1-1,024 ranks with
// each configuration's efficiency against the smallest one and the term that limits it (unet3d:
// weak scaling over the spatial grid, one replica, and hybrid, replicas of --unet-model-ranks).
// Attention (--programs attention): the forward and the backward of one block (--attention-block
// queries against as many keys, --attention-heads heads of --attention-head-dim, batch 1, float)
// measured on rank 0 alone; at P ranks the sequence is P blocks (weak scaling in tokens per rank,
// so each rank's attention work grows as P: the ideal step is P block times). The ring: P - 1
// steps, each the larger of a block's compute and its key/value transfer to the next rank (point
// to point, on the machine spanning the P ranks), then the last block; backward alike with the
// block and its gradient in flight. The all-to-all: the same arithmetic (H/P heads over the whole
// sequence) plus four all-to-alls forward and four backward of the rank's q, k, v and output
// (alltoallv, P - 1 peers); it needs H >= P. Memory per rank: the ring's blocks (q, k, v, output,
// two travelling blocks and their gradients) and two block score tiles; the all-to-all's H/P heads'
// scores and weights over the whole sequence. --attention-speedup F divides the measured block
// times by F, for a device F times faster than this host (the network's times stay).
// With --csv: rows record,program,batch,name,ms (record: layer, compute, operator), then the
// projections under their own header.
#include "step_model.hpp"

#include <mpi.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <distop/distop.hpp>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "../examples/lenet5/model.hpp"
#include "../examples/unet3d/model.hpp"
#include "bench_util.hpp"
#include "cnn_step.hpp"  // examples/cnn's model, by path (examples/lenet5's has the same name)

// nlohmann/json trips GCC 12's -Wnull-dereference once inlined here.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wnull-dereference"
#include <nlohmann/json.hpp>
#pragma GCC diagnostic pop

namespace {

using namespace distop;

// What one program's step costs at one batch: compute per layer (ms, slowest rank), the step's
// compute (ms), the operators' measured time (ms), and DataParallel's buckets (bytes, ready order).
struct Measured {
  std::int64_t batch = 0;
  std::map<std::string, double> layer_ms;  // "forward conv1", "backward conv1", ...
  double compute_ms = 0;
  double ops_ms = 0;
  std::vector<std::int64_t> buckets;
};

// Every rank's own compute time per layer from the trace file at `path` (written on rank 0 of the
// traced communicator), per step: for rank -> (key -> seconds), plus the operators' time.
struct TraceTotals {
  std::map<int, std::map<std::string, std::vector<double>>> layers;  // rank -> key -> per step
  std::map<int, std::vector<double>> ops;                            // rank -> per step
};

TraceTotals parse_trace(const std::string& path, int steps) {
  std::ifstream in(path);
  const auto doc = nlohmann::json::parse(in);
  struct Ev {
    std::string name, cat;
    double ts, dur;
  };
  std::map<int, std::vector<Ev>> by_rank;
  for (const auto& e : doc.at("traceEvents")) {
    if (e.value("ph", "") != "X" || e.value("tid", 0) != 0) continue;
    by_rank[e.at("pid").get<int>()].push_back(
        {e.at("name").get<std::string>(), e.at("cat").get<std::string>(), e.at("ts").get<double>(),
         e.at("dur").get<double>()});
  }
  TraceTotals out;
  for (auto& [rank, evs] : by_rank) {
    std::sort(evs.begin(), evs.end(),
              [](const Ev& a, const Ev& b) { return a.ts != b.ts ? a.ts < b.ts : a.dur > b.dur; });
    // Own time = duration less the children's; a stack of the open events.
    std::vector<std::size_t> open;
    std::vector<double> own(evs.size());
    std::vector<std::string> phase(evs.size());
    std::vector<std::string> layer(evs.size());  // the outermost compute event's name
    std::vector<bool> in_op(evs.size(), false);
    std::vector<int> step(evs.size(), -1);  // a step begins with its forward phase
    int current = -1;
    out.ops[rank].assign(static_cast<std::size_t>(steps), 0.0);
    for (std::size_t i = 0; i < evs.size(); ++i) {
      while (!open.empty() && evs[open.back()].ts + evs[open.back()].dur <= evs[i].ts + 1e-3)
        open.pop_back();
      own[i] = evs[i].dur;
      if (!open.empty()) {
        own[open.back()] -= evs[i].dur;
        phase[i] = phase[open.back()];
        in_op[i] = in_op[open.back()];
        layer[i] = layer[open.back()];
      }
      if (evs[i].cat == "compute" && layer[i].empty()) layer[i] = evs[i].name;
      if (evs[i].cat == "phase") phase[i] = evs[i].name;
      if (evs[i].cat == "phase" && evs[i].name == "forward") ++current;
      step[i] = std::min(current, steps - 1);
      const bool is_op = evs[i].cat == "op" || evs[i].cat == "adjoint";
      if (is_op && !in_op[i] && step[i] >= 0)
        out.ops[rank][static_cast<std::size_t>(step[i])] += evs[i].dur * 1e-6;
      in_op[i] = in_op[i] || is_op;
      open.push_back(i);
    }
    for (std::size_t i = 0; i < evs.size(); ++i) {
      if (phase[i].empty() || in_op[i] || step[i] < 0) continue;
      std::string key;
      if (evs[i].cat == "compute")
        key = phase[i] + " " + layer[i];
      else if (evs[i].cat == "phase")
        key = phase[i] + " (rest)";
      else
        continue;
      auto& v = out.layers[rank][key];
      v.resize(static_cast<std::size_t>(steps), 0.0);
      v[static_cast<std::size_t>(step[i])] += std::max(0.0, own[i]) * 1e-6;
    }
  }
  return out;
}

struct Settings {
  std::int64_t batch = 64;
  std::int64_t global_batch = 1024;
  int max_ranks = 1024;
  int steps = 5;
  int warmup = 1;
  bool csv = false;
  std::string trace_path = "bench_step_model.trace";
  bench::FatTree cluster;
  std::vector<std::string> programs{"lenet5", "cnn", "unet3d"};
  std::int64_t unet_batch = 2;          // volumes per replica
  std::int64_t volume_per_rank = 16;    // each rank's block: volume_per_rank^3 voxels
  int unet_model_ranks = 8;             // the hybrid projection's ranks per replica
  std::int64_t attention_block = 1024;  // tokens per rank
  std::int64_t attention_heads = 16;
  std::int64_t attention_head_dim = 64;
  double attention_speedup = 1;  // the measured block times divided by this (a faster device)
  bool wants(const std::string& p) const {
    return std::find(programs.begin(), programs.end(), p) != programs.end();
  }
};

// Runs `steps` traced steps of `step` (a function of the phase spans' names) over `comm` after
// `warmup`, and returns every rank's totals on rank 0 of comm (others: empty).
TraceTotals traced(const Settings& s, const std::string& program, MPI_Comm comm,
                   const std::function<void()>& step) {
  for (int i = 0; i < s.warmup; ++i) step();
  const std::string path = s.trace_path + "." + program + ".json";
  trace::start(comm);
  for (int i = 0; i < s.steps; ++i) step();
  trace::stop_and_write(path, comm);
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  return rank == 0 ? parse_trace(path, s.steps) : TraceTotals{};
}

// Reduces the totals to the median over the steps of the slowest rank's, per layer and per step.
Measured summarize(const TraceTotals& t, std::int64_t batch, int steps) {
  Measured m;
  m.batch = batch;
  const auto n = static_cast<std::size_t>(steps);
  std::map<std::string, std::vector<double>> layer;
  std::vector<double> compute(n, 0.0), ops(n, 0.0);
  for (const auto& [rank, layers] : t.layers) {
    std::vector<double> total(n, 0.0);
    for (const auto& [key, per_step] : layers) {
      auto& v = layer[key];
      v.resize(n, 0.0);
      for (std::size_t i = 0; i < n; ++i) {
        v[i] = std::max(v[i], per_step[i]);
        total[i] += per_step[i];
      }
    }
    for (std::size_t i = 0; i < n; ++i) compute[i] = std::max(compute[i], total[i]);
  }
  for (const auto& [rank, per_step] : t.ops)
    for (std::size_t i = 0; i < n; ++i) ops[i] = std::max(ops[i], per_step[i]);
  for (const auto& [key, v] : layer) m.layer_ms[key] = bench::median(v) * 1e3;
  m.compute_ms = bench::median(compute) * 1e3;
  m.ops_ms = bench::median(ops) * 1e3;
  return m;
}

// One training step in the trace's phases: forward (`loss_of` records it on the tape and returns
// the loss), backward, then the optimizer's step and zero_grad.
template <class Optimizer, class LossOf>
void phased_step(Optimizer& opt, LossOf&& loss_of) {
  Tape tape;
  Var<float> loss;
  {
    trace::Span phase("phase", "forward");
    loss = loss_of(tape);
  }
  {
    trace::Span phase("phase", "backward");
    backward(tape, loss);
  }
  trace::Span phase("phase", "optimizer");
  opt.step();
  opt.zero_grad();
}

// LeNet-5's step at `batch` on the 2 ranks of MPI_COMM_WORLD (valid on rank 0).
Measured measure_lenet5(const Settings& s, examples::LeNet5& model, std::int64_t batch) {
  DistTensor<float> x(model.input_space(batch));
  nn::uniform_init(x, 7, 0.5);
  std::vector<std::int32_t> labels;
  if (model.holds_output())
    for (std::int64_t i = 0; i < batch; ++i) labels.push_back(static_cast<std::int32_t>(i % 10));
  optim::SGD<float> opt(model.parameters(), {.lr = 0.01, .momentum = 0.9});
  const auto totals = traced(s, "lenet5", MPI_COMM_WORLD, [&] {
    phased_step(opt, [&](Tape& tape) {
      return loss::cross_entropy(tape, model.forward(tape, Var<float>(x)), labels);
    });
  });
  return summarize(totals, batch, s.steps);
}

// examples/cnn's step at `batch` on this rank alone.
Measured measure_cnn(const Settings& s, examples::ConvNet& model, std::int64_t batch) {
  const bench::CnnBatch data(model, batch);
  optim::SGD<float> opt(model.parameters(), {.lr = 1e-4, .momentum = 0.9});
  const auto totals = traced(s, "cnn", MPI_COMM_SELF, [&] {
    phased_step(opt, [&](Tape& tape) { return data.loss(tape, model); });
  });
  return summarize(totals, batch, s.steps);
}

// examples/unet3d's step (BCE with logits + soft Dice, Adam, as the example) at `batch` volumes on
// this rank alone.
Measured measure_unet3d(const Settings& s, examples::UNet3d& model, const Shape& volume,
                        std::int64_t batch) {
  DistTensor<float> x(model.input_space(batch)), y(x.space());
  examples::SyntheticVolumes(volume, 1001).fill(0, x, y);
  optim::Adam<float> opt(model.parameters(), {.lr = 1e-3});
  const auto totals = traced(s, "unet3d", MPI_COMM_SELF, [&] {
    phased_step(opt, [&](Tape& tape) {
      auto logits = model.forward(tape, Var<float>(x));
      return nn::add(tape, loss::bce_with_logits(tape, logits, y),
                     loss::dice(tape, nn::sigmoid(tape, logits), y));
    });
  });
  return summarize(totals, batch, s.steps);
}

// The halo exchange a distributed convolution or pool makes for its input space and spatial
// windows (nn/spatial.hpp: identity windows on the batch and channel axes), or null if no window
// crosses a block.
std::shared_ptr<HaloExchange<float>> halo_of(const TensorSpace& x,
                                             const std::vector<ConvWindow>& spatial) {
  std::vector<ConvWindow> w(2);
  w.insert(w.end(), spatial.begin(), spatial.end());
  for (const auto& axis : halo_spec(x.global_shape(), x.partition().shape(), w))
    for (const GhostWidths& g : axis)
      if (g.left > 0 || g.right > 0) return std::make_shared<HaloExchange<float>>(x, w);
  return nullptr;
}

// A point-to-point operator's time, forward plus adjoint, on this rank: it packs what it sends and
// unpacks what it receives; the adjoint adds the received bytes into its output.
double p2p_seconds(const LinearOperator<float>& op, std::int64_t copied, const cost::Machine& m) {
  const auto f = op.forward_stats(), a = op.adjoint_stats();
  return cost::point_to_point_plan(f, {f.bytes_sent, copied, f.bytes_received, 0}, m) +
         cost::point_to_point_plan(a, {a.bytes_sent, copied, a.bytes_received, a.bytes_received},
                                   m);
}

double bytes_of(const TensorSpace& s) {
  return static_cast<double>(s.local_shape().numel()) * sizeof(float);
}

// LeNet-5's model-parallel operators at `batch`, forward and adjoint, on the slowest rank
// (collective over MPI_COMM_WORLD), seconds, with one line per operator on `lines` (rank 0's).
double lenet5_comm_seconds(examples::LeNet5& model, std::int64_t batch, const cost::Machine& m,
                           std::vector<std::pair<std::string, double>>* lines) {
  std::map<std::string, std::shared_ptr<nn::Module<float>>> child;
  for (const auto& [name, c] : model.named_children()) child[name] = c;
  auto conv1 = std::dynamic_pointer_cast<nn::DistributedConv<float>>(child.at("conv1"));
  auto conv2 = std::dynamic_pointer_cast<nn::DistributedConv<float>>(child.at("conv2"));
  const nn::DistributedPool<float> pool(nn::PoolKind::max, 2, 2);
  std::vector<std::pair<std::string, double>> ops;
  auto add = [&](const std::string& name, double sec) {
    ops.emplace_back(name, bench::max_over_ranks(sec));
  };
  // The convolutions and pools, their halos and parameters' broadcasts.
  TensorSpace x = model.input_space(batch);
  const std::pair<std::shared_ptr<nn::DistributedConv<float>>, Shape> convs[] = {
      {conv1, Shape{28, 28}}, {conv2, Shape{14, 14}}};
  for (int l = 0; l < 2; ++l) {
    const auto& [conv, spatial] = convs[l];
    const std::string n = std::to_string(l + 1);
    const auto h = halo_of(x, conv->windows());
    add("conv" + n + " HaloExchange", h ? p2p_seconds(*h, bytes_of(h->range()), m) : 0.0);
    // The parameters live on the P_co x P_ci weight blocks, each broadcast over the spatial grid.
    const auto wgrid = conv->weight_partition().shape();
    const int p = static_cast<int>(x.partition().shape().numel() / (wgrid[0] * wgrid[1]));
    const auto wb = static_cast<std::int64_t>(conv->weight().value().local_numel() * sizeof(float));
    const auto bb = static_cast<std::int64_t>(conv->out_channels() * sizeof(float));
    add("conv" + n + " weight Broadcast",
        p > 1 ? cost::broadcast(cost::Direction::kForward, wb, p, m) +
                    cost::broadcast(cost::Direction::kAdjoint, wb, p, m) +
                    cost::broadcast(cost::Direction::kForward, bb, p, m) +
                    cost::broadcast(cost::Direction::kAdjoint, bb, p, m)
              : 0.0);
    const TensorSpace y = conv->output_space(batch, spatial);
    const auto ph = halo_of(y, pool.windows());
    add("pool" + n + " HaloExchange", ph ? p2p_seconds(*ph, bytes_of(ph->range()), m) : 0.0);
    x = pool.output_space(y);
  }
  // The repartition of the [N, 16, 5, 5] maps onto fc1's input ranks, split by channel.
  std::vector<std::shared_ptr<nn::DistributedLinear<float>>> fc;
  for (const char* name : {"fc1", "fc2", "fc3"})
    fc.push_back(std::dynamic_pointer_cast<nn::DistributedLinear<float>>(child.at(name)));
  const auto p_in = fc[0]->input_partition().size();
  const Repartition<float> to_fc(
      x, TensorSpace(x.global_shape(), fc[0]->input_partition().reshape(Shape{1, p_in, 1, 1})));
  add("Repartition to fc1", p2p_seconds(to_fc, 0, m));
  // The fully connected layers: x's blocks broadcast over P_out, y's summed over P_in.
  for (int l = 0; l < 3; ++l) {
    const auto grid = fc[l]->weight_partition().shape();
    const int p_out = static_cast<int>(grid[0]), p_i = static_cast<int>(grid[1]);
    const auto xb = batch * fc[l]->in_features() / p_i * static_cast<std::int64_t>(sizeof(float));
    const auto yb =
        batch * fc[l]->out_features() / p_out * static_cast<std::int64_t>(sizeof(float));
    double sec = 0;
    if (p_out > 1)
      sec += cost::broadcast(cost::Direction::kForward, xb, p_out, m) +
             cost::broadcast(cost::Direction::kAdjoint, xb, p_out, m);
    if (p_i > 1)
      sec += cost::sum_reduce(cost::Direction::kForward, yb, p_i, m) +
             cost::sum_reduce(cost::Direction::kAdjoint, yb, p_i, m);
    add("fc" + std::to_string(l + 1) + " Broadcast/SumReduce", sec);
  }
  double total = 0;
  for (const auto& [name, sec] : ops) total += sec;
  if (lines) *lines = ops;
  return total;
}

// examples/unet3d's convolutions in forward order: name, level (0: full resolution, 1: halved,
// 2: quartered; the level of the input), input and output channels, kernel (3: 3x3x3 with padding
// 1, followed by a GroupNorm; 2: the transposed convolutions, stride 2; 1: the head).
struct UNetConv {
  std::string name;
  int level;
  std::int64_t in, out, kernel;
};
std::vector<UNetConv> unet_convs(std::int64_t c) {
  return {{"enc0.conv1", 0, 1, c, 3},
          {"enc0.conv2", 0, c, c, 3},
          {"enc1.conv1", 1, c, 2 * c, 3},
          {"enc1.conv2", 1, 2 * c, 2 * c, 3},
          {"mid.conv1", 2, 2 * c, 4 * c, 3},
          {"mid.conv2", 2, 4 * c, 4 * c, 3},
          {"up1", 2, 4 * c, 2 * c, 2},
          {"dec1.conv1", 1, 4 * c, 2 * c, 3},
          {"dec1.conv2", 1, 2 * c, 2 * c, 3},
          {"up0", 1, 2 * c, c, 2},
          {"dec0.conv1", 0, 2 * c, c, 3},
          {"dec0.conv2", 0, c, c, 3},
          {"head", 0, c, 1, 1}};
}

// examples/unet3d's model-parallel operators over a spatial grid of P ranks (unet_grid(P)), each
// rank a block of volume_per_rank^3 voxels at full resolution, `batch` volumes, forward and
// adjoint, on the slowest rank (interior along every split axis), seconds, one line per operator:
// each 3x3x3 convolution's halo exchange (unet_halo_sweeps: the faces, edges and corners one voxel
// deep, of its input channels); each GroupNorm's all-gather of every part's 2 x n x G statistics
// (doubles) forward and its all-reduce of 2 x n x G sums backward; every convolution's weight and
// bias broadcast from the grid's first rank (adjoint: sum-reduces); the loss's all-reduces (BCE's
// agreement on its input, Dice's two sums forward and its seed backward). The 2x2x2 pools and the
// stride-2 transposed convolutions need no halo over even blocks, the concatenations are local.
std::vector<std::pair<std::string, double>> unet3d_ops(const Settings& s, int p, std::int64_t batch,
                                                       const cost::Machine& m) {
  const Shape g = examples::unet_grid(p);
  const std::array<std::int64_t, 3> grid{g[2], g[3], g[4]};
  const examples::UNetOptions o;
  std::vector<std::pair<std::string, double>> ops;
  if (p == 1) return ops;
  using cost::Direction;
  for (const UNetConv& c : unet_convs(o.base_channels)) {
    const std::int64_t e = s.volume_per_rank >> c.level;
    if (c.kernel == 3) {
      const auto sweeps = bench::unet_halo_sweeps({e, e, e}, grid, batch, c.in);
      const std::int64_t padded = batch * c.in * (e + 2) * (e + 2) * (e + 2) * 4;
      ops.emplace_back(c.name + " HaloExchange",
                       sweeps.empty() ? 0.0 : bench::halo_sweeps_seconds(sweeps, padded, m));
    }
    const std::int64_t wb = c.in * c.out * c.kernel * c.kernel * c.kernel * 4, bb = c.out * 4;
    ops.emplace_back(c.name + " weight Broadcast",
                     cost::broadcast(Direction::kForward, wb, p, m) +
                         cost::broadcast(Direction::kAdjoint, wb, p, m) +
                         cost::broadcast(Direction::kForward, bb, p, m) +
                         cost::broadcast(Direction::kAdjoint, bb, p, m));
    if (c.kernel == 3) {
      const std::int64_t stats = 2 * batch * o.groups * 8;
      std::string norm = c.name;
      norm.replace(norm.find("conv"), 4, "norm");
      ops.emplace_back(norm + " AllGather/AllSumReduce", cost::allgather(stats * p, p, m).seconds +
                                                             cost::allreduce(stats, p, m).seconds);
    }
  }
  ops.emplace_back("loss AllSumReduce", cost::allreduce(4, p, m).seconds +
                                            cost::allreduce(16, p, m).seconds +
                                            cost::allreduce(8, p, m).seconds);
  return ops;
}

double total_of(const std::vector<std::pair<std::string, double>>& ops) {
  double t = 0;
  for (const auto& [name, sec] : ops) t += sec;
  return t;
}

// Checks unet_halo_sweeps against the halo exchanges examples/unet3d's convolutions build over the
// ranks of MPI_COMM_WORLD (collective): their messages and bytes, forward and adjoint, on every
// rank; an Error on every rank where any differs. The model's rank is interior along every split
// axis, so the check holds on grids where every rank is (2 parts along an axis, or 1).
void check_unet_halos(const Settings& s, std::int64_t batch) {
  int ranks = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  const Shape g = examples::unet_grid(ranks);
  const std::int64_t b = s.volume_per_rank;
  const examples::UNet3d model(Shape{b * g[2], b * g[3], b * g[4]}, {}, MPI_COMM_WORLD);
  std::map<std::string, std::shared_ptr<nn::DistributedConv<float>>> convs;
  for (const auto& [name, child] : model.named_children())
    for (const auto& [inner, layer] : child->named_children())
      if (auto conv = std::dynamic_pointer_cast<nn::DistributedConv<float>>(layer))
        convs[name + "." + inner] = conv;
  std::string mismatch;
  int checked = 0;
  for (const UNetConv& c : unet_convs(examples::UNetOptions{}.base_channels)) {
    if (c.kernel != 3) continue;
    const std::int64_t e = b >> c.level;
    const TensorSpace x(Shape{batch, c.in, e * g[2], e * g[3], e * g[4]}, model.grid());
    const auto h = halo_of(x, convs.at(c.name)->windows());
    CommStats want;
    for (const auto& sweep : bench::unet_halo_sweeps({e, e, e}, {g[2], g[3], g[4]}, batch, c.in))
      want += sweep;
    const CommStats f = h ? h->forward_stats() : CommStats{}, a = h ? h->adjoint_stats() : f;
    if (!(f == want && a == want) && mismatch.empty())
      mismatch = c.name + ": the model's " + std::to_string(want.messages_sent) + " messages of " +
                 std::to_string(want.bytes_sent) + " B against the operator's " +
                 std::to_string(f.messages_sent) + " of " + std::to_string(f.bytes_sent) + " B";
    ++checked;
  }
  comm::agree_ok(MPI_COMM_WORLD, "bench_step_model", mismatch.empty(),
                 "unet3d's halo model differs from its HaloExchange: " + mismatch);
  DISTOP_CHECK(checked == 10, "bench_step_model", "expected 10 3x3x3 convolutions, found ",
               checked);
}

// DataParallel's buckets (bytes, in ready order) of `model` over `replicas`, the slowest rank's
// per bucket (collective over MPI_COMM_WORLD's ranks in replicas).
std::vector<std::int64_t> buckets_of(nn::Module<float>& model, const parallel::Replicas& replicas) {
  const parallel::DataParallel<float> dp(model, replicas);
  std::vector<std::int64_t> out;
  for (const auto& b : dp.buckets()) out.push_back(static_cast<std::int64_t>(b.bytes));
  return out;
}

std::string grid_str(int p) {
  const Shape g = examples::unet_grid(p);
  return std::to_string(g[2]) + "x" + std::to_string(g[3]) + "x" + std::to_string(g[4]);
}

// examples/unet3d's operators at --unet-model-ranks and --max-ranks (rank 0).
void unet3d_operator_tables(const Settings& s) {
  const std::int64_t b = s.unet_batch;
  for (const int p : {s.unet_model_ranks, s.max_ranks}) {
    if (p == 1) continue;
    const auto ops = unet3d_ops(s, p, b, bench::fat_tree_machine(s.cluster, p));
    if (s.csv) {
      for (const auto& [name, v] : ops)
        std::printf("operator,unet3d,%lld,%s %s,%.5f\n", static_cast<long long>(b),
                    grid_str(p).c_str(), name.c_str(), v * 1e3);
      continue;
    }
    std::printf(
        "\n# unet3d: model-parallel operators on a %s grid (%d ranks), %lld^3 voxels per rank, "
        "batch %lld, forward + adjoint, modelled on the cluster (slowest rank), ms\n",
        grid_str(p).c_str(), p, static_cast<long long>(s.volume_per_rank),
        static_cast<long long>(b));
    for (const auto& [name, v] : ops) std::printf("  %-40s %9.5f\n", name.c_str(), v * 1e3);
    std::printf("  %-40s %9.5f\n", "total", total_of(ops) * 1e3);
  }
}

// examples/unet3d's projections (rank 0): weak scaling over spatial grids of 1..--max-ranks ranks
// (one replica; each rank's block fixed, so the volume grows with the ranks), and hybrid: replicas
// of --unet-model-ranks ranks each, with the gradients' reduction overlapped or not.
void project_unet3d(const Settings& s, const Measured& m,
                    const std::vector<std::int64_t>& buckets) {
  const std::int64_t b = s.unet_batch;
  auto print = [&](const char* scaling, bool overlap, const bench::StepTerms& base,
                   const bench::StepTerms& t, int ranks, int model_ranks, bool is_base) {
    const double eff = bench::weak_efficiency(base, t);
    const std::string limit = is_base ? "-" : bench::limiting_term(base, t, false);
    if (s.csv)
      std::printf("projection,unet3d,%s,%s,%d,%d,%lld,%.4f,%.4f,%.4f,%.4f,%.4f,%s\n", scaling,
                  overlap ? "overlap" : "none", ranks, t.replicas, static_cast<long long>(t.batch),
                  t.compute * 1e3, t.comm * 1e3, t.reduction * 1e3, t.step() * 1e3, eff,
                  limit.c_str());
    else
      std::printf("%6d %8d %6lld %10.4f %10.4f %10.4f %10.4f %6.3f  %-20s %s\n", ranks, t.replicas,
                  static_cast<long long>(t.batch), t.compute * 1e3, t.comm * 1e3, t.reduction * 1e3,
                  t.step() * 1e3, eff, limit.c_str(), grid_str(model_ranks).c_str());
  };
  auto header = [&](const std::string& title) {
    if (!s.csv)
      std::printf("\n# %s\n%6s %8s %6s %10s %10s %10s %10s %6s  %-20s %s\n", title.c_str(), "ranks",
                  "replicas", "batch", "compute", "comm", "reduction", "step ms", "eff",
                  "limited by", "grid");
  };
  const std::string block = std::to_string(s.volume_per_rank) + "^3 voxels per rank, batch " +
                            std::to_string(b) + " per replica";
  // Weak scaling over the spatial grid: one replica of p ranks.
  header("unet3d, weak scaling over the spatial grid (" + block + "), one replica");
  bench::StepTerms base;
  for (int p = 1; p <= s.max_ranks; p *= 2) {
    bench::StepTerms t;
    t.batch = b;
    t.compute = m.compute_ms * 1e-3;
    t.comm = total_of(unet3d_ops(s, p, b, bench::fat_tree_machine(s.cluster, p)));
    if (p == 1) base = t;
    print("weak-spatial", true, base, t, p, p, p == 1);
  }
  // Hybrid: replicas of unet_model_ranks ranks, the reduction group spanning every rank.
  const int pm = s.unet_model_ranks;
  const double comm = total_of(unet3d_ops(s, pm, b, bench::fat_tree_machine(s.cluster, pm)));
  for (const bool overlap : {true, false}) {
    header("unet3d, weak scaling, hybrid: replicas of " + std::to_string(pm) + " ranks (" + block +
           "), reduction " +
           (overlap ? "overlapped (last bucket exposed)" : "after backward (all buckets)"));
    bench::StepTerms hbase;
    for (int r = 1; r * pm <= s.max_ranks; r *= 2) {
      const auto red =
          bench::reduction_seconds(buckets, r, bench::fat_tree_machine(s.cluster, r * pm));
      bench::StepTerms t;
      t.replicas = r;
      t.batch = b;
      t.compute = m.compute_ms * 1e-3;
      t.comm = comm;
      t.reduction = overlap ? red.exposed : red.all;
      if (r == 1) hbase = t;
      print("weak-hybrid", overlap, hbase, t, r * pm, pm, r == 1);
    }
  }
}

// One block of sequence-parallel attention (the ring's unit of work) on this rank alone: the
// forward's and the backward's seconds, the median over --steps after --warmup.
std::pair<double, double> measure_attention_block(const Settings& s) {
  const Partition self = Partition::self(Shape{1});
  const Shape global{1, s.attention_heads, s.attention_block, s.attention_head_dim};
  const TensorSpace space(self, Decomposition::balanced(global, self.shape(), {-1, -1, -1, -1}));
  const nn::SequenceParallelAttention<float> attention(space, {});
  auto seeded = [&](std::uint64_t seed) {
    std::vector<float> v(static_cast<std::size_t>(global.numel()));
    for (std::size_t i = 0; i < v.size(); ++i)
      v[i] = static_cast<float>(2 * random::uniform(seed, i) - 1);
    return DistTensor<float>(space, Tensor<float>::from_vector(global, v));
  };
  Var<float> q(seeded(1), true), k(seeded(2), true), v(seeded(3), true);
  const DistTensor<float> dy = seeded(4);
  std::vector<double> fwd, bwd;
  for (int i = 0; i < s.warmup + s.steps; ++i) {
    Tape tape;
    for (auto* x : {&q, &k, &v}) x->zero_grad();
    double t0 = MPI_Wtime();
    Var<float> y = attention.forward(tape, q, k, v);
    const double t1 = MPI_Wtime();
    backward(tape, y, dy);
    const double t2 = MPI_Wtime();
    if (i < s.warmup) continue;
    fwd.push_back(t1 - t0);
    bwd.push_back(t2 - t1);
  }
  return {bench::median(fwd), bench::median(bwd)};
}

// Sequence-parallel attention projected over 1..--max-ranks ranks (rank 0), ring and all-to-all.
void project_attention(const Settings& s, double fwd, double bwd) {
  fwd /= s.attention_speedup;
  bwd /= s.attention_speedup;
  const std::int64_t b = s.attention_block, h = s.attention_heads, d = s.attention_head_dim;
  const double block_bytes = 4.0 * static_cast<double>(h * b * d);  // one of q, k, v (float)
  if (!s.csv)
    std::printf(
        "\n# attention: one block of %lld tokens, %lld heads of %lld (float): forward %.3f ms, "
        "backward %.3f ms (measured on one rank, divided by --attention-speedup)\n# attention, "
        "weak scaling in tokens per rank: "
        "the sequence is P blocks; ideal = P block times\n%6s %9s %10s %10s %8s %10s %8s %10s "
        "%10s\n",
        static_cast<long long>(b), static_cast<long long>(h), static_cast<long long>(d), fwd * 1e3,
        bwd * 1e3, "ranks", "seq", "ideal ms", "ring ms", "ring eff", "a2a ms", "a2a eff",
        "ring MiB", "a2a MiB");
  for (int p = 1; p <= s.max_ranks; p *= 2) {
    const cost::Machine m = bench::fat_tree_machine(s.cluster, p);
    const double kv = cost::point_to_point(static_cast<std::int64_t>(2 * block_bytes), m).seconds;
    const double ideal = p * (fwd + bwd);
    const double ring = (p - 1) * std::max(fwd, kv) + fwd + (p - 1) * std::max(bwd, 2 * kv) + bwd;
    const bool a2a_fits = h >= p;
    const auto share = static_cast<std::int64_t>(block_bytes * (p - 1) / p);
    const double a2a =
        ideal + 8 * cost::alltoallv(share, share, p - 1, m).seconds * (p > 1 ? 1 : 0);
    // Memory per rank (MiB): the ring's q, k, v, output and their gradients' blocks, two
    // travelling [K | V] blocks and two gradient ones, two score tiles; the all-to-all's blocks
    // likewise and its heads' scores and weights over the whole sequence.
    const double tile = 4.0 * static_cast<double>(b * b);
    const double ring_mib = (8 * block_bytes + 8 * block_bytes + 2 * tile) / 1048576.0;
    const double seq = static_cast<double>(b) * p;
    const double a2a_mib =
        (12 * block_bytes + 2 * 4.0 * std::ceil(double(h) / p) * seq * seq) / 1048576.0;
    if (s.csv) {
      std::printf("projection,attention,weak-tokens,ring,%d,1,%lld,%.4f,%.4f,0,%.4f,%.4f,-\n", p,
                  static_cast<long long>(b * p), ideal * 1e3, (ring - ideal) * 1e3, ring * 1e3,
                  ideal / ring);
      if (a2a_fits)
        std::printf("projection,attention,weak-tokens,alltoall,%d,1,%lld,%.4f,%.4f,0,%.4f,%.4f,-\n",
                    p, static_cast<long long>(b * p), ideal * 1e3, (a2a - ideal) * 1e3, a2a * 1e3,
                    ideal / a2a);
      continue;
    }
    std::printf("%6d %9lld %10.3f %10.3f %8.3f ", p, static_cast<long long>(b * p), ideal * 1e3,
                ring * 1e3, ideal / ring);
    if (a2a_fits)
      std::printf("%10.3f %8.3f %10.1f %10.1f\n", a2a * 1e3, ideal / a2a, ring_mib, a2a_mib);
    else
      std::printf("%10s %8s %10.1f %10s\n", "H < P", "-", ring_mib, "-");
  }
}

}  // namespace

int main(int argc, char** argv) {
  Environment env(argc, argv);
  Settings s;
  double bandwidth_gbs = 25.0, leaf_us = 0.5, spine_us = 1.0, gamma_gbs = 10.0, copy_gbs = 20.0;
  CLI::App app{
      "A model of one training step of LeNet-5, examples/cnn and examples/unet3d, projected to "
      "1,024 ranks"};
  app.add_option("--programs", s.programs, "Which programs: lenet5, cnn, unet3d, attention")
      ->delimiter(',')
      ->check(CLI::IsMember({"lenet5", "cnn", "unet3d", "attention"}))
      ->capture_default_str();
  app.add_option("--attention-block", s.attention_block, "attention: tokens per rank")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--attention-heads", s.attention_heads, "attention: heads")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--attention-head-dim", s.attention_head_dim, "attention: head dimension")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--attention-speedup", s.attention_speedup,
                 "attention: divide the measured block times by this (a device this many times "
                 "faster than this host)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--unet-batch", s.unet_batch, "unet3d: volumes per replica")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--volume-per-rank", s.volume_per_rank,
                 "unet3d: each rank's block, S^3 voxels (a multiple of 4); the volume is S times "
                 "the grid")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--unet-model-ranks", s.unet_model_ranks,
                 "unet3d's hybrid projection: ranks per replica (a power of 2)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--batch", s.batch, "Weak scaling: examples per replica")->capture_default_str();
  app.add_option("--global-batch", s.global_batch, "Strong scaling: examples per step in all")
      ->capture_default_str();
  app.add_option("--max-ranks", s.max_ranks, "Largest projected rank count (a power of 2)")
      ->capture_default_str();
  app.add_option("--steps", s.steps, "Traced steps per batch")->capture_default_str();
  app.add_option("--warmup", s.warmup, "Untimed steps first, per batch")->capture_default_str();
  app.add_option(
         "--trace-file", s.trace_path,
         "The traces' path, less .lenet5.json and .cnn.json (each overwritten by the next batch)")
      ->capture_default_str();
  app.add_option("--hosts-per-leaf", s.cluster.hosts_per_leaf, "Fat tree: hosts (ranks) per leaf")
      ->capture_default_str();
  app.add_option("--leaf-latency-us", leaf_us, "Fat tree: latency within a leaf (us)")
      ->capture_default_str();
  app.add_option("--spine-latency-us", spine_us, "Fat tree: latency across the spines (us)")
      ->capture_default_str();
  app.add_option("--bandwidth-gbs", bandwidth_gbs, "Link bandwidth per direction (GB/s)")
      ->capture_default_str();
  app.add_option("--oversubscription", s.cluster.oversubscription,
                 "Fat tree: a leaf's hosts' bandwidth over its uplinks' (1: full bisection)")
      ->capture_default_str();
  app.add_option("--gamma-gbs", gamma_gbs, "Local reduction rate (GB/s)")->capture_default_str();
  app.add_option("--copy-gbs", copy_gbs, "Local copy rate (GB/s)")->capture_default_str();
  app.add_flag("--csv", s.csv, "Comma-separated output");
  if (auto code = bench::parse_args(app, argc, argv)) return *code;
  s.cluster.leaf_latency = leaf_us * 1e-6;
  s.cluster.spine_latency = spine_us * 1e-6;
  s.cluster.bandwidth = bandwidth_gbs * 1e9;
  s.cluster.gamma = 1e-9 / gamma_gbs;
  s.cluster.copy = 1e-9 / copy_gbs;
  int rank = 0, ranks = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  return bench::run_or_abort([&] {
    DISTOP_CHECK(ranks == 2, "bench_step_model", "runs at 2 ranks (LeNet-5's replica), not ",
                 ranks);
    DISTOP_CHECK(s.max_ranks >= 2 && (s.max_ranks & (s.max_ranks - 1)) == 0, "bench_step_model",
                 "--max-ranks must be a power of 2 >= 2, not ", s.max_ranks);
    DISTOP_CHECK(s.volume_per_rank % 4 == 0, "bench_step_model",
                 "--volume-per-rank must be a multiple of 4 (two 2x2x2 pools), not ",
                 s.volume_per_rank);
    DISTOP_CHECK(
        (s.unet_model_ranks & (s.unet_model_ranks - 1)) == 0 && s.unet_model_ranks <= s.max_ranks,
        "bench_step_model", "--unet-model-ranks must be a power of 2 up to --max-ranks, not ",
        s.unet_model_ranks);
    // The batches: weak scaling's, and the global batch over every replica count.
    std::vector<std::int64_t> lenet_batches{s.batch}, cnn_batches{s.batch};
    for (int r = 1; r <= s.max_ranks; r *= 2) {
      if (s.global_batch % r == 0) cnn_batches.push_back(s.global_batch / r);
      if (r <= s.max_ranks / 2 && s.global_batch % r == 0)
        lenet_batches.push_back(s.global_batch / r);
    }
    auto unique = [](std::vector<std::int64_t>& v) {
      std::sort(v.begin(), v.end());
      v.erase(std::unique(v.begin(), v.end()), v.end());
    };
    unique(lenet_batches);
    unique(cnn_batches);
    const cost::Machine in_leaf = bench::fat_tree_machine(s.cluster, 2);

    std::map<std::int64_t, Measured> lenet_m, cnn_m, unet_m;
    std::map<std::int64_t, double> lenet_comm;
    std::vector<std::pair<std::string, double>> lenet_ops;
    std::vector<std::int64_t> lenet_buckets;
    if (s.wants("lenet5")) {
      examples::LeNet5 lenet(1);
      for (const auto b : lenet_batches) {
        lenet_m[b] = measure_lenet5(s, lenet, b);
        lenet_comm[b] =
            lenet5_comm_seconds(lenet, b, in_leaf, b == s.batch ? &lenet_ops : nullptr) * 1e3;
      }
      const parallel::Replicas one_replica(MPI_COMM_WORLD, 1);
      const auto lenet_buckets_local = buckets_of(lenet, one_replica);
      // Every rank's buckets are its own parameters' shares; the slowest rank's bytes per bucket.
      for (const auto b : lenet_buckets_local)
        lenet_buckets.push_back(
            static_cast<std::int64_t>(bench::max_over_ranks(static_cast<double>(b))));
    }
    // unet3d: the halo model checked against the real operators on the 2 ranks, then the step
    // measured at one rank's block on rank 0 alone.
    if (s.wants("unet3d")) check_unet_halos(s, s.unet_batch);
    std::vector<std::int64_t> cnn_buckets, unet_buckets;
    std::pair<double, double> attention_block{0, 0};
    if (rank == 0 && s.wants("attention")) attention_block = measure_attention_block(s);
    if (rank == 0) {
      const parallel::Replicas self(MPI_COMM_SELF, 1);
      if (s.wants("cnn")) {
        examples::ConvNet cnn(1, 28, 28, 1, self.model_comm());
        for (const auto b : cnn_batches) cnn_m[b] = measure_cnn(s, cnn, b);
        cnn_buckets = buckets_of(cnn, self);
      }
      if (s.wants("unet3d")) {
        const Shape block{s.volume_per_rank, s.volume_per_rank, s.volume_per_rank};
        examples::UNet3d unet(block, {}, self.model_comm());
        unet_m[s.unet_batch] = measure_unet3d(s, unet, block, s.unet_batch);
        unet_buckets = buckets_of(unet, self);
      }
    }
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank != 0) return 0;

    // Per-layer tables.
    auto layer_table = [&](const char* program, const std::map<std::int64_t, Measured>& ms,
                           std::int64_t batch) {
      if (ms.empty()) return;
      const Measured& m = ms.at(batch);
      if (s.csv) {
        for (const auto& [key, v] : m.layer_ms)
          std::printf("layer,%s,%lld,%s,%.4f\n", program, static_cast<long long>(m.batch),
                      key.c_str(), v);
        for (const auto& [b, mb] : ms)
          std::printf("compute,%s,%lld,step,%.4f\n", program, static_cast<long long>(b),
                      mb.compute_ms);
        return;
      }
      std::printf("\n# %s: measured compute per layer at batch %lld (ms per step, slowest rank)\n",
                  program, static_cast<long long>(m.batch));
      for (const auto& [key, v] : m.layer_ms) std::printf("  %-32s %9.4f\n", key.c_str(), v);
      std::printf("  %-32s %9.4f  (operators measured: %.4f ms)\n", "step compute", m.compute_ms,
                  m.ops_ms);
      std::printf("# %s: step compute by batch (ms):", program);
      for (const auto& [b, mb] : ms)
        std::printf(" %lld:%.3f", static_cast<long long>(b), mb.compute_ms);
      std::printf("\n");
    };
    if (!s.csv)
      std::printf(
          "# bench_step_model: cluster: fat tree of %d hosts per leaf, %.2f us within a leaf, %.2f "
          "us across spines, %.1f GB/s, oversubscription %.2f, gamma %.1f GB/s, copy %.1f GB/s\n",
          s.cluster.hosts_per_leaf, leaf_us, spine_us, bandwidth_gbs, s.cluster.oversubscription,
          gamma_gbs, copy_gbs);
    if (s.csv) std::printf("record,program,batch,name,ms\n");
    layer_table("lenet5", lenet_m, s.batch);
    layer_table("cnn", cnn_m, s.batch);
    layer_table("unet3d", unet_m, s.unet_batch);
    if (!s.wants("lenet5")) {
    } else if (s.csv) {
      for (const auto& [name, v] : lenet_ops)
        std::printf("operator,lenet5,%lld,%s,%.5f\n", static_cast<long long>(s.batch), name.c_str(),
                    v * 1e3);
    } else {
      std::printf(
          "\n# lenet5: model-parallel operators at batch %lld, forward + adjoint, modelled "
          "on the cluster (2 ranks in one leaf), ms\n",
          static_cast<long long>(s.batch));
      for (const auto& [name, v] : lenet_ops) std::printf("  %-32s %9.5f\n", name.c_str(), v * 1e3);
      std::printf("  %-32s %9.5f\n", "total", lenet_comm.at(s.batch));
    }
    if (s.wants("unet3d")) unet3d_operator_tables(s);
    auto bucket_list = [](const std::vector<std::int64_t>& b) {
      std::string out;
      for (const auto v : b) out += (out.empty() ? "" : "+") + std::to_string(v);
      return out;
    };
    if (!s.csv)
      std::printf(
          "# buckets (bytes, ready order; the slowest rank's): lenet5 %s, cnn %s, unet3d %s\n",
          bucket_list(lenet_buckets).c_str(), bucket_list(cnn_buckets).c_str(),
          bucket_list(unet_buckets).c_str());

    // Projections.
    if (s.csv)
      std::printf(
          "projection,program,scaling,overlap,ranks,replicas,batch,compute_ms,comm_ms,"
          "reduction_ms,step_ms,efficiency,limit\n");
    for (const char* program : {"lenet5", "cnn"}) {
      if (!s.wants(program)) continue;
      const bool lenet5 = std::string(program) == "lenet5";
      const int model_ranks = lenet5 ? 2 : 1;
      const auto& ms = lenet5 ? lenet_m : cnn_m;
      const auto& buckets = lenet5 ? lenet_buckets : cnn_buckets;
      for (const bool strong : {false, true}) {
        for (const bool overlap : {true, false}) {
          if (!s.csv)
            std::printf(
                "\n# %s, %s scaling (%s), reduction %s\n%6s %8s %6s %10s %10s %10s %10s %6s  "
                "%s\n",
                program, strong ? "strong" : "weak",
                strong ? ("global batch " + std::to_string(s.global_batch)).c_str()
                       : ("batch " + std::to_string(s.batch) + " per replica").c_str(),
                overlap ? "overlapped (last bucket exposed)" : "after backward (all buckets)",
                "ranks", "replicas", "batch", "compute", "comm", "reduction", "step ms", "eff",
                "limited by");
          bench::StepTerms base;
          for (int r = 1; r * model_ranks <= s.max_ranks; r *= 2) {
            const std::int64_t b = strong ? s.global_batch / r : s.batch;
            if (strong && (s.global_batch % r != 0 || !ms.count(b))) continue;
            const auto& m = ms.at(b);
            const auto red = bench::reduction_seconds(
                buckets, r, bench::fat_tree_machine(s.cluster, r * model_ranks));
            bench::StepTerms t;
            t.replicas = r;
            t.batch = b;
            t.compute = m.compute_ms * 1e-3;
            t.comm = lenet5 ? lenet_comm.at(b) * 1e-3 : 0.0;
            t.reduction = overlap ? red.exposed : red.all;
            if (r == 1) base = t;
            const double eff =
                strong ? bench::strong_efficiency(base, t) : bench::weak_efficiency(base, t);
            const std::string limit = r == 1 ? "-" : bench::limiting_term(base, t, strong);
            if (s.csv)
              std::printf("projection,%s,%s,%s,%d,%d,%lld,%.4f,%.4f,%.4f,%.4f,%.4f,%s\n", program,
                          strong ? "strong" : "weak", overlap ? "overlap" : "none", r * model_ranks,
                          r, static_cast<long long>(b), t.compute * 1e3, t.comm * 1e3,
                          t.reduction * 1e3, t.step() * 1e3, eff, limit.c_str());
            else
              std::printf("%6d %8d %6lld %10.4f %10.4f %10.4f %10.4f %6.3f  %s\n", r * model_ranks,
                          r, static_cast<long long>(b), t.compute * 1e3, t.comm * 1e3,
                          t.reduction * 1e3, t.step() * 1e3, eff, limit.c_str());
          }
        }
      }
    }
    if (s.wants("unet3d")) project_unet3d(s, unet_m.at(s.unet_batch), unet_buckets);
    if (s.wants("attention")) project_attention(s, attention_block.first, attention_block.second);
    return 0;
  });
}
