// layer_check: one of distop's layers or losses, forward and backward, on global tensors read from
// a safetensors file and split over a grid of ranks, for comparison with another implementation
// (PyTorch: docs/layer_check.md).
//
//   mpiexec -n N layer_check --layer NAME [layer flags] [--grid G0,G1,...] IN.safetensors
//       OUT.safetensors
//
// IN holds the global input `x` (F32 or F64), and as the layer needs them `target`, `pos_weight`,
// the output gradient `dy` (absent for a loss with a scalar output: the seed is then 1) and the
// parameters under their state_dict names (`weight`, `bias`, `in_proj_weight`, `out_proj.weight`,
// ...). --grid splits x's axes over the N ranks (one extent per axis of x, product N, or N / T with
// mha's --tp T; by default N,1,...,1), balanced (the first extent mod G blocks one longer). Every
// tensor is read as double and the layer runs in double; rank 0 writes OUT in F64, global: `y` (a
// loss as shape [1]), `x.grad` and `NAME.grad` for each parameter NAME (the sum over the ranks'
// copies where the layer replicates a parameter, as distop's sum convention defines its gradient).
//
// A layer is one entry of the registry below (layers()): its flags, the tensors it reads, which
// axes of x the grid may split, how to make it and how to run it. Errors (a bad or inapplicable
// flag, a grid that does not fit, a tensor that is missing, unexpected or of the wrong shape) are
// printed by rank 0 and end every rank with a non-zero status: 2 for a flag that does not parse or
// differs between the ranks (train::run_main), 1 otherwise.
#include <mpi.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <distop/distop.hpp>
#include <distop/loss/total.hpp>
#include <distop/nn/distributed_conv_transpose.hpp>
#include <distop/nn/interpolate.hpp>
#include <distop/train/cli.hpp>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace {

using namespace distop;

const char* kProgram = "layer_check";

// The flags, as parsed (the same on every rank: run_main agrees them).
struct Flags {
  std::string layer;
  std::vector<std::int64_t> grid;
  std::string reduction = "mean";
  int log_input = 1;
  bool full = false;
  bool log_target = false;
  double eps = 0;  // given: `given` holds "--eps"; else the layer's default
  std::string approximate = "none";
  std::int64_t heads = 0;
  bool causal = false;
  // mha: the heads split over a grid axis of `tp` ranks beyond --grid's (tensor parallelism), and
  // the strategy of a split sequence axis (ring or alltoall; empty: none)
  std::int64_t tp = 1;
  std::string sp_strategy;
  std::int64_t groups = 0;
  // conv_transpose: sizes, and per-axis values as given (V or V0,V1,..)
  std::int64_t dims = 0, in_channels = 0, out_channels = 0;
  std::string kernel, stride = "1", padding = "0", output_padding = "0", dilation = "1";
  // interpolate: the mode, and the size or the scale factors as given (V or V0,V1,..)
  std::string mode = "nearest", size, scale_factor;
  bool align_corners = false;
  std::set<std::string> given;  // the layer flags on the command line
  std::string in, out;
};

// The layer flags, each taken by some layers only.
const std::vector<std::string> kLayerFlags = {
    "--reduction", "--log-input",  "--full",       "--dims",         "--in",
    "--out",       "--kernel",     "--stride",     "--padding",      "--output-padding",
    "--dilation",  "--log-target", "--eps",        "--approximate",  "--heads",
    "--causal",    "--mode",       "--size",       "--scale-factor", "--align-corners",
    "--groups",    "--tp",         "--sp-strategy"};

[[noreturn]] void fail(const std::string& what) { throw Error(kProgram, what); }

std::string joined(const std::vector<std::int64_t>& v, const char* sep = ",") {
  std::string s;
  for (std::size_t i = 0; i < v.size(); ++i) s += (i ? sep : "") + std::to_string(v[i]);
  return s;
}

// IN's tensors other than the parameters, read as double: global values and shape.
struct Global {
  Shape shape;
  std::vector<double> values;
};

struct Inputs {
  TensorSpace x_space;
  std::map<std::string, Global> tensors;  // x, and what the layer reads (target, pos_weight, dy)

  bool has(const std::string& name) const { return tensors.count(name) != 0; }
  // IN's tensor `name` (of x's shape: checked when read) split over the ranks as x.
  DistTensor<double> like_x(const std::string& name) const {
    DistTensor<double> t(x_space);
    distribute(tensors.at(name).values, t);
    return t;
  }
  // IN's tensor `name`, whole on this rank.
  Tensor<double> whole(const std::string& name) const {
    const Global& g = tensors.at(name);
    return Tensor<double>::from_vector(g.shape, g.values);
  }
};

using ModulePtr = std::shared_ptr<nn::Module<double>>;

// One layer of the registry.
struct Layer {
  std::string name;
  std::string usage;               // its flags, as --help lists them
  std::string summary;             // what it computes
  std::vector<std::string> takes;  // the layer flags it accepts
  std::vector<std::string> needs;  // tensors IN must hold besides x, dy and the parameters
  std::vector<std::string> may;    // tensors IN may hold
  bool target_like_x = false;      // `target` has x's shape
  // Whether y is a loss in distop's convention ([1], seeded 1 when IN has no dy).
  std::function<bool(const Flags&)> scalar = [](const Flags&) { return false; };
  // What is wrong with x's shape or the grid for this layer (empty: nothing).
  std::function<std::string(const Shape& x, const Shape& grid)> problem =
      [](const Shape&, const Shape&) { return std::string(); };
  // The module holding the parameters (null: none). Collective over x's partition's parent.
  std::function<ModulePtr(const Shape& x, const Partition& grid, const Flags&)> make =
      [](const Shape&, const Partition&, const Flags&) { return ModulePtr(); };
  std::function<Var<double>(Tape&, const Var<double>& x, nn::Module<double>* m, const Inputs&,
                            const Flags&)>
      forward;
};

// A loss of torch's family (loss/*.hpp): x and target, the reduction, the options its `run` reads.
using LossFn = std::function<Var<double>(Tape&, const Var<double>&, const DistTensor<double>&,
                                         loss::Reduction, const Inputs&, const Flags&)>;

Layer loss_layer(std::string name, std::string usage, std::string summary,
                 std::vector<std::string> more_flags, std::vector<std::string> may, LossFn fn) {
  Layer l;
  l.name = std::move(name);
  l.usage = "--reduction none|sum|mean" + std::string(l.name == "kl_div" ? "|batchmean" : "") +
            (usage.empty() ? "" : " " + usage);
  l.summary = std::move(summary);
  l.takes = {"--reduction"};
  l.takes.insert(l.takes.end(), more_flags.begin(), more_flags.end());
  l.needs = {"target"};
  l.may = std::move(may);
  l.target_like_x = true;
  l.scalar = [](const Flags& f) {
    return loss::parse_reduction(f.reduction) != loss::Reduction::none;
  };
  l.forward = [fn](Tape& tape, const Var<double>& x, nn::Module<double>*, const Inputs& in,
                   const Flags& f) {
    return fn(tape, x, in.like_x("target"), loss::parse_reduction(f.reduction), in, f);
  };
  return l;
}

// A per-axis flag's text: one integer, or one per spatial axis, separated by commas, each at least
// `min`.
nn::AxisValues axis_values(const std::string& flag, const std::string& text, std::int64_t min) {
  std::vector<std::int64_t> v;
  std::size_t at = 0;
  while (true) {
    const std::size_t comma = std::min(text.find(',', at), text.size());
    const std::string part = text.substr(at, comma - at);
    std::size_t used = 0;
    long long value = 0;
    try {
      value = std::stoll(part, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (part.empty() || used != part.size() || part[0] == '+' || value < min)
      fail(flag + " " + text + ": expected integers of at least " + std::to_string(min) +
           ", one or one per spatial axis, separated by commas");
    v.push_back(value);
    if (comma == text.size()) break;
    at = comma + 1;
  }
  return nn::AxisValues(std::move(v));
}

// --scale-factor's text: positive numbers separated by commas (one, or one per spatial axis).
nn::AxisScales axis_scales(const std::string& flag, const std::string& text) {
  std::vector<double> v;
  std::size_t at = 0;
  while (true) {
    const std::size_t comma = std::min(text.find(',', at), text.size());
    const std::string part = text.substr(at, comma - at);
    std::size_t used = 0;
    double value = 0;
    try {
      value = std::stod(part, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (part.empty() || used != part.size() || !(value > 0) || !std::isfinite(value))
      fail(flag + " " + text +
           ": expected positive numbers, one or one per spatial axis, "
           "separated by commas");
    v.push_back(value);
    if (comma == text.size()) break;
    at = comma + 1;
  }
  return nn::AxisScales(std::move(v));
}

// The registry: one entry per layer. A new layer is one more entry: its flags (added to kLayerFlags
// and to main's options), its tensors, its grid rule, its module and its forward.
const std::vector<Layer>& layers() {
  static const std::vector<Layer> all = [] {
    std::vector<Layer> v;
    v.push_back(loss_layer("l1", "", "torch's l1_loss(x, target)", {}, {},
                           [](Tape& t, const Var<double>& x, const DistTensor<double>& y,
                              loss::Reduction r, const Inputs&, const Flags&) {
                             loss::L1Options o;
                             o.reduction = r;
                             return loss::l1(t, x, y, o);
                           }));
    v.push_back(loss_layer("mse", "", "torch's mse_loss(x, target)", {}, {},
                           [](Tape& t, const Var<double>& x, const DistTensor<double>& y,
                              loss::Reduction r, const Inputs&, const Flags&) {
                             loss::MSEOptions o;
                             o.reduction = r;
                             return loss::mse(t, x, y, o);
                           }));
    v.push_back(loss_layer("poisson_nll", "[--log-input 0|1] [--full] [--eps E (1e-8)]",
                           "torch's poisson_nll_loss(x, target, log_input, full, eps=E)",
                           {"--log-input", "--full", "--eps"}, {},
                           [](Tape& t, const Var<double>& x, const DistTensor<double>& y,
                              loss::Reduction r, const Inputs&, const Flags& f) {
                             loss::PoissonNLLOptions o;
                             o.reduction = r;
                             o.log_input = f.log_input != 0;
                             o.full = f.full;
                             if (f.given.count("--eps")) o.eps = f.eps;
                             return loss::poisson_nll(t, x, y, o);
                           }));
    v.push_back(loss_layer("bce", "", "torch's binary_cross_entropy(x, target)", {}, {},
                           [](Tape& t, const Var<double>& x, const DistTensor<double>& y,
                              loss::Reduction r, const Inputs&, const Flags&) {
                             loss::BCEOptions o;
                             o.reduction = r;
                             return loss::bce(t, x, y, o);
                           }));
    v.push_back(
        loss_layer("bce_with_logits", "(IN may hold pos_weight)",
                   "torch's binary_cross_entropy_with_logits(x, target, pos_weight=pos_weight)", {},
                   {"pos_weight"},
                   [](Tape& t, const Var<double>& x, const DistTensor<double>& y, loss::Reduction r,
                      const Inputs& in, const Flags&) {
                     loss::BCEWithLogitsOptions<double> o;
                     o.reduction = r;
                     if (in.has("pos_weight")) o.pos_weight = in.whole("pos_weight");
                     return loss::bce_with_logits(t, x, y, o);
                   }));
    v.push_back(loss_layer("kl_div", "[--log-target]",
                           "torch's kl_div(x, target, log_target), x log-probabilities",
                           {"--log-target"}, {},
                           [](Tape& t, const Var<double>& x, const DistTensor<double>& y,
                              loss::Reduction r, const Inputs&, const Flags& f) {
                             loss::KLDivOptions o;
                             o.reduction = r;
                             o.log_target = f.log_target;
                             return loss::kl_div(t, x, y, o);
                           }));
    {
      Layer l;
      l.name = "layer_norm";
      l.usage = "[--eps E (1e-5)]";
      l.summary = "torch.nn.LayerNorm(D, eps=E) over x's last axis (it may be split); weight, bias";
      l.takes = {"--eps"};
      l.make = [](const Shape& x, const Partition& grid, const Flags& f) {
        nn::LayerNormOptions o;
        if (f.given.count("--eps")) o.eps = f.eps;
        const int last = x.rank() - 1;
        if (grid.shape()[last] > 1) o.split_axis = last;
        return ModulePtr(std::make_shared<nn::LayerNorm<double>>(x[last], grid, o));
      };
      l.forward = [](Tape& t, const Var<double>& x, nn::Module<double>* m, const Inputs&,
                     const Flags&) {
        return static_cast<nn::LayerNorm<double>*>(m)->forward(t, x);
      };
      v.push_back(std::move(l));
    }
    {
      Layer l;
      l.name = "group_norm";
      l.usage = "--groups G [--eps E (1e-5)]";
      l.summary =
          "torch.nn.GroupNorm(G, C, eps=E) on x [N, C, s_1..s_d], d = 1-3; weight, bias; the grid "
          "keeps C whole and may split N and the spatial axes";
      l.takes = {"--groups", "--eps"};
      l.problem = [](const Shape& x, const Shape& grid) {
        if (x.rank() < 3 || x.rank() > 5)
          return "group_norm takes x [N, C, s_1..s_d] with d = 1-3, found " + x.str();
        if (grid[1] != 1)
          return "group_norm keeps the channels whole on each rank: --grid's second entry must "
                 "be 1, found " +
                 joined(grid.extents());
        return std::string();
      };
      l.make = [](const Shape& x, const Partition& grid, const Flags& f) {
        nn::GroupNormOptions o;
        if (f.given.count("--eps")) o.eps = f.eps;
        return ModulePtr(std::make_shared<nn::GroupNorm<double>>(f.groups, x[1], grid, o));
      };
      l.forward = [](Tape& t, const Var<double>& x, nn::Module<double>* m, const Inputs&,
                     const Flags&) {
        return static_cast<nn::GroupNorm<double>*>(m)->forward(t, x);
      };
      v.push_back(std::move(l));
    }
    {
      Layer l;
      l.name = "gelu";
      l.usage = "[--approximate none|tanh]";
      l.summary = "torch.nn.functional.gelu(x, approximate)";
      l.takes = {"--approximate"};
      l.forward = [](Tape& t, const Var<double>& x, nn::Module<double>*, const Inputs&,
                     const Flags& f) {
        return nn::gelu(
            t, x, f.approximate == "tanh" ? nn::GeluApproximate::tanh : nn::GeluApproximate::none);
      };
      v.push_back(std::move(l));
    }
    {
      Layer l;
      l.name = "mha";
      l.usage = "--heads H [--causal] [--tp T] [--sp-strategy ring|alltoall]";
      l.summary =
          "torch.nn.MultiheadAttention(E, H, batch_first=True) self-attention on x [N, S, E] "
          "(is_causal); in_proj_weight, in_proj_bias, out_proj.weight, out_proj.bias; the grid "
          "splits N, or S with --sp-strategy (then N whole), and --tp T splits the heads over T "
          "more ranks (T times the grid's ranks in all)";
      l.takes = {"--heads", "--causal", "--tp", "--sp-strategy"};
      l.problem = [](const Shape& x, const Shape& grid) {
        if (x.rank() != 3) return "mha takes x [N, S, E], found " + x.str();
        if (grid[2] != 1)
          return "mha keeps the feature axis whole: --grid must end in 1, found " +
                 joined(grid.extents());
        return std::string();
      };
      l.make = [](const Shape& x, const Partition& p, const Flags& f) {
        if (f.tp == 1 && f.sp_strategy.empty())
          return ModulePtr(std::make_shared<nn::MultiheadAttention<double>>(x[2], f.heads));
        std::optional<nn::SequenceParallel> sp;
        if (!f.sp_strategy.empty())
          sp = nn::SequenceParallel{
              .sequence_axis = 1, .strategy = nn::parse_sequence_parallel_strategy(f.sp_strategy)};
        return ModulePtr(std::make_shared<nn::TensorParallelMultiheadAttention<double>>(
            x[2], f.heads, p,
            nn::TensorParallelMultiheadAttentionOptions{.tensor_axis = 3,
                                                        .sequence_parallel = sp}));
      };
      l.forward = [](Tape& t, const Var<double>& x, nn::Module<double>* m, const Inputs&,
                     const Flags& f) {
        nn::AttentionMask<double> mask;
        mask.is_causal = f.causal;
        if (f.tp == 1 && f.sp_strategy.empty())
          return static_cast<nn::MultiheadAttention<double>*>(m)->forward(t, x, mask);
        return static_cast<nn::TensorParallelMultiheadAttention<double>*>(m)->forward(t, x, mask);
      };
      v.push_back(std::move(l));
    }
    {
      Layer l;
      l.name = "conv_transpose";
      l.usage =
          "--out O --kernel K [--stride S (1)] [--padding P (0)] [--output-padding Q (0)] "
          "[--dilation L (1)] [--dims D] [--in C]";
      l.summary =
          "torch.nn.ConvTranspose{D}d(C, O, K, stride=S, padding=P, output_padding=Q, "
          "dilation=L) on x [N, C, s_1..s_D] (D = 1-3; per-axis values as V or V0,V1,..); "
          "weight [C, O, K..], bias [O]; the grid splits C and the spatial axes (1,G_C,G_1,..)";
      l.takes = {"--dims",           "--in",      "--out", "--kernel", "--stride", "--padding",
                 "--output-padding", "--dilation"};
      l.problem = [](const Shape& x, const Shape& grid) {
        if (x.rank() < 3 || x.rank() > 5)
          return "conv_transpose takes x [N, C, s_1..s_D] with D = 1 to 3, found " + x.str();
        if (grid[0] != 1)
          return "conv_transpose keeps the batch axis whole: --grid must start with 1, found " +
                 joined(grid.extents());
        return std::string();
      };
      l.make = [](const Shape& x, const Partition& grid, const Flags& f) {
        const int dims = x.rank() - 2;
        if (f.given.count("--dims") && f.dims != dims)
          fail("--dims " + std::to_string(f.dims) + " does not match x " + x.str() + " (" +
               std::to_string(dims) + " spatial axes)");
        if (f.given.count("--in") && f.in_channels != x[1])
          fail("--in " + std::to_string(f.in_channels) + " does not match x " + x.str() + " (" +
               std::to_string(x[1]) + " channels)");
        nn::ConvTransposeOptions o;
        o.stride = axis_values("--stride", f.stride, 1);
        o.padding = axis_values("--padding", f.padding, 0);
        o.output_padding = axis_values("--output-padding", f.output_padding, 0);
        o.dilation = axis_values("--dilation", f.dilation, 1);
        // The grid [1, G_C, G_1..] is the weight partition [P_co = 1, P_ci, S..], whose input
        // partition it is.
        return ModulePtr(std::make_shared<nn::DistributedConvTranspose<double>>(
            dims, x[1], f.out_channels, axis_values("--kernel", f.kernel, 1), grid, o));
      };
      l.forward = [](Tape& t, const Var<double>& x, nn::Module<double>* m, const Inputs&,
                     const Flags&) {
        return static_cast<nn::DistributedConvTranspose<double>*>(m)->forward(t, x);
      };
      v.push_back(std::move(l));
    }
    {
      Layer l;
      l.name = "interpolate";
      l.usage =
          "[--mode nearest|nearest-exact|linear|bilinear|trilinear (nearest)] (--size S | "
          "--scale-factor F) [--align-corners]";
      l.summary =
          "torch.nn.functional.interpolate(x, size=S, scale_factor=F, mode, align_corners) on x "
          "[N, C, s_1..s_D] (D = 1-3; S and F as V or V0,V1,..); the grid may split any axis";
      l.takes = {"--mode", "--size", "--scale-factor", "--align-corners"};
      l.problem = [](const Shape& x, const Shape&) {
        if (x.rank() < 3 || x.rank() > 5)
          return "interpolate takes x [N, C, s_1..s_D] with D = 1 to 3, found " + x.str();
        return std::string();
      };
      l.make = [](const Shape&, const Partition&, const Flags& f) {
        nn::InterpolateOptions o;
        o.mode = nn::parse_interpolate_mode(f.mode);
        if (f.given.count("--size")) o.size = axis_values("--size", f.size, 1);
        if (f.given.count("--scale-factor"))
          o.scale_factor = axis_scales("--scale-factor", f.scale_factor);
        if (f.align_corners) o.align_corners = true;
        return ModulePtr(std::make_shared<nn::DistributedInterpolate<double>>(o));
      };
      l.forward = [](Tape& t, const Var<double>& x, nn::Module<double>* m, const Inputs&,
                     const Flags&) {
        return static_cast<nn::DistributedInterpolate<double>*>(m)->forward(t, x);
      };
      v.push_back(std::move(l));
    }
    return v;
  }();
  return all;
}

std::string layer_names() {
  std::string s;
  for (const Layer& l : layers()) s += (s.empty() ? "" : ", ") + l.name;
  return s;
}

std::string layers_help() {
  std::string s = "Layers (--layer NAME and its flags):\n";
  for (const Layer& l : layers()) {
    s += "  " + l.name + (l.usage.empty() ? "" : " " + l.usage) + "\n      " + l.summary + "\n";
  }
  s += "IN holds x and, as the layer needs them, target, pos_weight, dy (absent for a loss: the "
       "seed is 1) and the parameters by their state_dict names; OUT gets y, x.grad and NAME.grad "
       "for each parameter, F64.";
  return s;
}

const Layer& checked(Flags& f, int ranks) {
  const auto& all = layers();
  const auto it =
      std::find_if(all.begin(), all.end(), [&](const Layer& l) { return l.name == f.layer; });
  if (it == all.end()) fail("unknown layer '" + f.layer + "'; expected one of " + layer_names());
  const Layer& l = *it;
  for (const std::string& flag : kLayerFlags)
    if (f.given.count(flag) && std::find(l.takes.begin(), l.takes.end(), flag) == l.takes.end())
      fail(flag + " does not apply to --layer " + l.name +
           (l.usage.empty() ? " (it takes no layer flags)" : " (it takes " + l.usage + ")"));
  if (f.given.count("--reduction")) loss::parse_reduction(f.reduction);  // names the valid ones
  if (f.log_input != 0 && f.log_input != 1)
    fail("--log-input must be 0 or 1, found " + std::to_string(f.log_input));
  if (f.approximate != "none" && f.approximate != "tanh")
    fail("--approximate must be none or tanh, found '" + f.approximate + "'");
  if (l.name == "mha" && !f.given.count("--heads")) fail("--layer mha needs --heads H");
  if (l.name == "group_norm" && !f.given.count("--groups"))
    fail("--layer group_norm needs --groups G");
  if (f.given.count("--groups") && f.groups < 1)
    fail("--groups must be at least 1, found " + std::to_string(f.groups));
  if (f.given.count("--heads") && f.heads < 1)
    fail("--heads must be at least 1, found " + std::to_string(f.heads));
  if (l.name == "conv_transpose" && (!f.given.count("--out") || !f.given.count("--kernel")))
    fail("--layer conv_transpose needs --out O and --kernel K");
  if (f.given.count("--out") && f.out_channels < 1)
    fail("--out must be at least 1, found " + std::to_string(f.out_channels));
  if (!f.grid.empty()) {
    std::int64_t cells = 1;
    for (std::int64_t g : f.grid) {
      if (g < 1) fail("--grid " + joined(f.grid) + ": every extent must be at least 1");
      cells *= g;
    }
    if (cells * f.tp != ranks)
      fail("--grid " + joined(f.grid) + " has " + std::to_string(cells) + " cells" +
           (f.tp > 1 ? " (times --tp " + std::to_string(f.tp) + ")" : std::string()) +
           ", but the program runs on " + std::to_string(ranks) + " ranks");
  }
  if (f.tp < 1) fail("--tp must be at least 1, found " + std::to_string(f.tp));
  if (!f.sp_strategy.empty()) nn::parse_sequence_parallel_strategy(f.sp_strategy);
  if (l.name == "mha" && f.grid.size() == 3 && f.grid[1] > 1 && f.sp_strategy.empty())
    fail("--grid " + joined(f.grid) +
         " splits the sequence: mha then needs --sp-strategy ring or "
         "alltoall");
  if (l.name == "mha" && f.grid.size() == 3 && f.grid[1] > 1 && f.grid[0] > 1)
    fail("--grid " + joined(f.grid) +
         " splits both the batch and the sequence; with sequence "
         "parallelism the batch stays whole (--grid 1,G,1)");
  return l;
}

// --grid's text: positive integers separated by commas.
std::vector<std::int64_t> parse_grid(const std::string& text) {
  std::vector<std::int64_t> grid;
  std::size_t at = 0;
  while (true) {
    const std::size_t comma = std::min(text.find(',', at), text.size());
    const std::string part = text.substr(at, comma - at);
    std::size_t used = 0;
    long long g = 0;
    try {
      g = std::stoll(part, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (part.empty() || used != part.size() || part[0] == '+' || part[0] == '-' || g < 1)
      fail("--grid " + text + ": expected positive integers separated by commas (G0,G1,...)");
    grid.push_back(g);
    if (comma == text.size()) break;
    at = comma + 1;
  }
  return grid;
}

std::vector<std::string> file_arguments(const std::vector<std::string>& files) {
  if (files.size() != 2)
    fail("expected IN.safetensors and OUT.safetensors, found " + std::to_string(files.size()) +
         " file arguments");
  return files;
}

// IN's tensor `name`, F32 or F64, read as double.
Global read(const io::SafetensorsFile& file, const std::string& name, const std::string& why) {
  if (!file.contains(name)) fail("file " + file.path() + " has no tensor '" + name + "'" + why);
  const std::string& dt = file.dtype(name);
  if (dt != "F32" && dt != "F64")
    fail("tensor '" + name + "' in file " + file.path() + " is " + dt + "; expected F32 or F64");
  return Global{file.shape(name), file.read_as<double>(name)};
}

void check_shape(const std::string& name, const Shape& found, const Shape& expected,
                 const std::string& file, const std::string& what) {
  if (found != expected)
    fail("tensor '" + name + "' in file " + file + " has shape " + found.str() + "; expected " +
         expected.str() + " (" + what + ")");
}

// The sum over the ranks of every rank's box of `g`, placed in the global tensor, on rank 0: the
// gradient of a parameter, whose replicated copies each hold a component (the sum convention).
std::vector<double> summed_over_ranks(const DistTensor<double>& g, bool counted = true) {
  const std::int64_t n = g.space().global_shape().numel();
  std::vector<double> mine(static_cast<std::size_t>(n), 0.0), total(static_cast<std::size_t>(n));
  const std::vector<std::int64_t> idx = g.space().global_indices();
  if (counted && !idx.empty()) {
    const std::vector<double> local = g.local().to_vector();
    for (std::size_t i = 0; i < idx.size(); ++i) mine[static_cast<std::size_t>(idx[i])] += local[i];
  }
  DISTOP_MPI_CHECK(MPI_Reduce(mine.data(), total.data(), static_cast<int>(n), MPI_DOUBLE, MPI_SUM,
                              0, MPI_COMM_WORLD),
                   kProgram);
  return total;
}

int run(Flags& f, const std::vector<std::string>& files) {
  int ranks = 1, rank = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  const Layer& layer = checked(f, ranks);
  const auto io_files = file_arguments(files);
  f.in = io_files[0];
  f.out = io_files[1];

  // IN's x and the tensors the layer reads, checked and read on every rank (the same file: a
  // failure anywhere fails everywhere).
  Inputs in;
  Shape grid;
  std::set<std::string> names;
  comm::agree(MPI_COMM_WORLD, kProgram, [&] {
    const auto file = io::SafetensorsFile::open(f.in);
    const std::vector<std::string> all = file.names();
    names = std::set<std::string>(all.begin(), all.end());
    Global x = read(file, "x", "");
    const Shape& xs = x.shape;
    if (xs.rank() < 1 || xs.numel() < 1)
      fail("tensor 'x' in file " + f.in + " has shape " + xs.str() +
           "; expected a non-empty tensor");
    if (f.grid.empty()) {
      f.grid.assign(static_cast<std::size_t>(xs.rank()), 1);
      f.grid[0] = ranks;
    }
    if (static_cast<int>(f.grid.size()) != xs.rank())
      fail("--grid " + joined(f.grid) + " has " + std::to_string(f.grid.size()) +
           " extents, but x " + xs.str() + " has " + std::to_string(xs.rank()) + " axes");
    for (int d = 0; d < xs.rank(); ++d)
      if (f.grid[d] > xs[d])
        fail("--grid " + joined(f.grid) + " splits axis " + std::to_string(d) + " of x " +
             xs.str() + " into " + std::to_string(f.grid[d]) +
             " blocks: every rank must hold at least one entry along it");
    grid = Shape(f.grid);
    if (const std::string p = layer.problem(xs, grid); !p.empty()) fail(p);
    for (const std::string& name : layer.needs) {
      Global t = read(file, name, " (--layer " + layer.name + " needs it)");
      if (name == "target" && layer.target_like_x)
        check_shape(name, t.shape, xs, f.in, "x's shape");
      in.tensors.emplace(name, std::move(t));
    }
    for (const std::string& name : layer.may)
      if (file.contains(name)) in.tensors.emplace(name, read(file, name, ""));
    if (file.contains("dy")) in.tensors.emplace("dy", read(file, "dy", ""));
    in.tensors.emplace("x", std::move(x));
  });

  // With --tp T (or --sp-strategy), one more grid axis of T ranks holds the tensor-parallel
  // copies of x.
  std::vector<std::int64_t> extents = grid.extents();
  if (f.tp > 1 || !f.sp_strategy.empty()) extents.push_back(f.tp);
  const Partition partition = Partition::world(Shape(extents));
  const Shape x_shape = in.tensors.at("x").shape;
  std::vector<int> x_map(static_cast<std::size_t>(x_shape.rank()));
  for (int d = 0; d < x_shape.rank(); ++d) x_map[static_cast<std::size_t>(d)] = d;
  in.x_space =
      TensorSpace(partition, Decomposition::balanced(x_shape, partition.shape(), std::move(x_map)));
  ModulePtr module = layer.make(x_shape, partition, f);
  std::vector<nn::NamedParameter<double>> params;
  if (module) params = module->named_parameters();

  // The parameters from IN, and nothing in IN that the layer does not read.
  comm::agree(MPI_COMM_WORLD, kProgram, [&] {
    std::set<std::string> known = {"x", "dy"};
    known.insert(layer.needs.begin(), layer.needs.end());
    known.insert(layer.may.begin(), layer.may.end());
    const auto file = io::SafetensorsFile::open(f.in);
    for (const auto& p : params) {
      known.insert(p.name);
      const Global g = read(file, p.name, " (a parameter of --layer " + layer.name + ")");
      check_shape(p.name, g.shape, p.shape(), f.in, "the parameter's shape for x " + x_shape.str());
      distribute(g.values, p.var.value());
    }
    for (const std::string& name : names)
      if (!known.count(name))
        fail("file " + f.in + " holds a tensor '" + name + "' that --layer " + layer.name +
             " does not read");
  });

  Var<double> x(in.like_x("x"), true);
  Tape tape;
  Var<double> y = layer.forward(tape, x, module.get(), in, f);
  const bool scalar = layer.scalar(f);

  // The seed: dy split as y, or 1 (times a one-element dy) for a loss.
  DistTensor<double> seed(y.space());
  comm::agree(MPI_COMM_WORLD, kProgram, [&] {
    const Shape& ys = y.space().global_shape();
    if (scalar) {
      double s = 1;
      if (in.has("dy")) {
        const Global& dy = in.tensors.at("dy");
        if (dy.values.size() != 1)
          fail("tensor 'dy' in file " + f.in + " has shape " + dy.shape.str() +
               "; a loss's output gradient has one element (or leave it out: the seed is 1)");
        s = dy.values[0];
      }
      if (seed.local_numel() > 0) seed.local().fill(s);
    } else {
      if (!in.has("dy"))
        fail("file " + f.in + " has no tensor 'dy' (the output gradient, of y's shape " + ys.str() +
             ")");
      check_shape("dy", in.tensors.at("dy").shape, ys, f.in, "y's shape");
      distribute(in.tensors.at("dy").values, seed);
    }
  });
  const double loss_value = scalar ? loss::total(y) : 0.0;
  const std::vector<double> y_values =
      scalar ? std::vector<double>{loss_value} : assemble(y.value());
  backward(tape, y, seed);

  const std::vector<double> x_grad = assemble(x.grad());
  std::vector<std::vector<double>> p_grads;
  // The tensor-parallel layers tie a parameter's copies along the tensor axis (out_proj.bias) and,
  // with a split sequence, along the sequence axis (grid axis 1): one value there, each copy
  // holding its whole gradient, counted once, from the copies at coordinate 0.
  for (const auto& p : params) {
    const Decomposition& d = p.var.space().decomposition();
    bool counted = true;
    if (partition.active() && f.tp > 1 && d.replicates(grid.rank()))
      counted = counted && partition.coords()[static_cast<std::size_t>(grid.rank())] == 0;
    if (partition.active() && !f.sp_strategy.empty() && d.replicates(1))
      counted = counted && partition.coords()[1] == 0;
    p_grads.push_back(summed_over_ranks(p.var.grad(), counted));
  }

  comm::agree(MPI_COMM_WORLD, kProgram, [&] {
    if (rank != 0) return;
    const Shape y_shape = scalar ? Shape{1} : y.space().global_shape();
    std::vector<io::TensorEntry> out = {{"y", y_shape, y_values.data()},
                                        {"x.grad", x_shape, x_grad.data()}};
    for (std::size_t i = 0; i < params.size(); ++i)
      out.emplace_back(params[i].name + ".grad", params[i].shape(), p_grads[i].data());
    io::write_safetensors(f.out, out);
  });
  if (rank == 0) {
    std::printf("%s: %s on %d ranks (grid %s): x %s -> y %s", kProgram, layer.name.c_str(), ranks,
                joined(f.grid).c_str(), x_shape.str().c_str(),
                (scalar ? Shape{1} : y.space().global_shape()).str().c_str());
    if (scalar) std::printf(" = %.17g", loss_value);
    std::printf("; wrote %s\n", f.out.c_str());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Flags f;
  std::vector<std::string> files;
  CLI::App app{
      "One of distop's layers or losses, forward and backward, on global tensors from IN split "
      "over a grid of ranks; rank 0 writes y and the gradients to OUT (distop example)."};
  app.add_option("--layer", f.layer, "the layer: " + layer_names())->required();
  std::string grid;
  app.add_option("--grid", grid, "G0,G1,...: x's axes split over the ranks (default N,1,...,1)");
  app.add_option("--reduction", f.reduction, "losses: none, sum, mean (default) or batchmean");
  app.add_option("--log-input", f.log_input, "poisson_nll: x is the log of the rate (1, default)");
  app.add_flag("--full", f.full, "poisson_nll: add Stirling's term");
  app.add_flag("--log-target", f.log_target, "kl_div: the target is log-probabilities");
  app.add_option("--eps", f.eps, "layer_norm (1e-5), poisson_nll (1e-8)");
  app.add_option("--approximate", f.approximate, "gelu: none (default) or tanh");
  app.add_option("--heads", f.heads, "mha: the number of heads");
  app.add_option("--groups", f.groups, "group_norm: the number of groups (dividing C)");
  app.add_flag("--causal", f.causal, "mha: causal self-attention");
  app.add_option("--tp", f.tp, "mha: tensor-parallel ranks splitting the heads (1)");
  app.add_option("--sp-strategy", f.sp_strategy,
                 "mha: ring or alltoall, for a sequence split by --grid 1,G,1");
  app.add_option("--dims", f.dims, "conv_transpose: spatial axes (x's rank - 2; checked)");
  app.add_option("--in", f.in_channels, "conv_transpose: input channels (x's axis 1; checked)");
  app.add_option("--out", f.out_channels, "conv_transpose: output channels");
  app.add_option("--kernel", f.kernel, "conv_transpose: kernel K or K0,K1,..");
  app.add_option("--stride", f.stride, "conv_transpose: stride (1)");
  app.add_option("--padding", f.padding, "conv_transpose: padding (0)");
  app.add_option("--output-padding", f.output_padding, "conv_transpose: output padding (0)");
  app.add_option("--dilation", f.dilation, "conv_transpose: dilation (1)");
  app.add_option("--mode", f.mode,
                 "interpolate: nearest (default), nearest-exact, linear, bilinear, trilinear");
  app.add_option("--size", f.size, "interpolate: the output size S or S0,S1,..");
  app.add_option("--scale-factor", f.scale_factor, "interpolate: the scale factor F or F0,F1,..");
  app.add_flag("--align-corners", f.align_corners, "interpolate: align corners (linear modes)");
  app.add_option("files", files, "IN.safetensors OUT.safetensors");
  app.footer(layers_help());
  return train::run_main(argc, argv, app, kProgram, [&] {
    for (const std::string& flag : kLayerFlags)
      if (app.count(flag) > 0) f.given.insert(flag);
    if (app.count("--grid") > 0) f.grid = parse_grid(grid);
    return run(f, files);
  });
}
