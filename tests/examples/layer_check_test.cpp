// The layer_check program: for each layer and loss it runs, the outputs and gradients it writes at
// 1, 2 and 3 ranks over different grids equal the layer computed here on this process alone
// through the library (and, for mse, the closed form); an F32 input is read as double; bad flags,
// grids and files are clear errors on every rank.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "distop/autodiff/apply.hpp"
#include "distop/dist/assemble.hpp"
#include "distop/io/safetensors.hpp"
#include "distop/loss/bce.hpp"
#include "distop/loss/kl_div.hpp"
#include "distop/loss/l1.hpp"
#include "distop/loss/mse.hpp"
#include "distop/loss/poisson_nll.hpp"
#include "distop/loss/total.hpp"
#include "distop/nn/activation.hpp"
#include "distop/nn/conv_transpose.hpp"
#include "distop/nn/group_norm.hpp"
#include "distop/nn/interpolate.hpp"
#include "distop/nn/layer_norm.hpp"
#include "distop/nn/multihead_attention.hpp"
#include "run_example.hpp"
#include "temp_dir.hpp"

namespace {

using namespace distop;
using distop::io::SafetensorsFile;
using distop::io::TensorEntry;
using distop::test::expect_clean_failure;
using distop::test::Outcome;
using distop::test::TempDir;

Outcome run(int ranks, const std::string& args) {
  return distop::test::run_example(DISTOP_MPIEXEC, DISTOP_LAYER_CHECK, ranks, args);
}

struct Global {
  Shape shape;
  std::vector<double> values;
};
using Tensors = std::map<std::string, Global>;

// A tensor of `shape` with entries f(i), i its row-major index.
Global make(Shape shape, const std::function<double(std::int64_t)>& f) {
  std::vector<double> v(static_cast<std::size_t>(shape.numel()));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = f(static_cast<std::int64_t>(i));
  return {std::move(shape), std::move(v)};
}
double wave(std::int64_t i, double a, double b) { return std::sin(a * double(i) + b); }

void write_in(const std::string& path, const Tensors& t, bool as_float = false) {
  std::vector<std::vector<float>> f32;
  f32.reserve(t.size());
  std::vector<TensorEntry> e;
  for (const auto& [name, g] : t) {
    if (as_float) {
      f32.emplace_back(g.values.begin(), g.values.end());
      e.emplace_back(name, g.shape, f32.back().data());
    } else {
      e.emplace_back(name, g.shape, g.values.data());
    }
  }
  io::write_safetensors(path, e);
}

// This process alone.
DistTensor<double> local(const Global& g) {
  const Partition self = Partition::self(Shape(std::vector<std::int64_t>(g.shape.rank(), 1)));
  DistTensor<double> t(TensorSpace(g.shape, self));
  distribute(g.values, t);
  return t;
}

// The layer run here: y, x.grad and each parameter's gradient, by OUT's names.
using Build = std::function<Var<double>(Tape&, const Var<double>&)>;
Tensors reference(const Tensors& in, bool scalar, const Build& build,
                  const std::vector<nn::NamedParameter<double>>& params = {}) {
  for (const auto& p : params) distribute(in.at(p.name).values, p.var.value());
  Var<double> x(local(in.at("x")), true);
  Tape tape;
  Var<double> y = build(tape, x);
  Tensors out;
  if (scalar) {
    out["y"] = {Shape{1}, {loss::total(y)}};
    backward(tape, y);
  } else {
    out["y"] = {y.space().global_shape(), assemble(y.value())};
    DistTensor<double> dy(y.space());
    distribute(in.at("dy").values, dy);
    backward(tape, y, dy);
  }
  out["x.grad"] = {x.space().global_shape(), assemble(x.grad())};
  for (const auto& p : params)
    out[p.name + ".grad"] = {p.var.space().global_shape(), assemble(p.var.grad())};
  return out;
}

void expect_outputs(const std::string& path, const Tensors& expected, double tol = 1e-12) {
  const auto f = SafetensorsFile::open(path);
  EXPECT_EQ(f.names().size(), expected.size());
  for (const auto& [name, g] : expected) {
    SCOPED_TRACE(name);
    ASSERT_TRUE(f.contains(name));
    EXPECT_EQ(f.dtype(name), "F64");
    EXPECT_EQ(f.shape(name), g.shape);
    const std::vector<double> v = f.read<double>(name);
    ASSERT_EQ(v.size(), g.values.size());
    for (std::size_t i = 0; i < v.size(); ++i)
      EXPECT_NEAR(v[i], g.values[i], tol * (1 + std::abs(g.values[i]))) << "entry " << i;
  }
}

// Runs layer_check at each (ranks, grid) and compares OUT with `expected`.
void check_runs(TempDir& dir, const std::string& tag, const std::string& args, const Tensors& in,
                const Tensors& expected, const std::vector<std::pair<int, std::string>>& runs,
                bool as_float = false) {
  const std::string in_path = dir.file(tag + ".in.safetensors");
  write_in(in_path, in, as_float);
  for (const auto& [ranks, grid] : runs) {
    SCOPED_TRACE(tag + " at " + std::to_string(ranks) + " ranks, grid " + grid);
    const std::string out = dir.file(tag + "." + std::to_string(ranks) + ".out.safetensors");
    const Outcome o = run(ranks, args + " --grid " + grid + " " + in_path + " " + out);
    ASSERT_EQ(o.status, 0) << o.output;
    expect_outputs(out, expected);
  }
}

const Shape kLossShape{5, 3, 4};

TEST(LayerCheckProgram, LossesEqualTheOneRankLossAndTheClosedForm) {
  TempDir dir("layer_check_losses");
  const Global x = make(kLossShape, [](std::int64_t i) { return wave(i, 0.7, 0.1); });
  const Global t = make(kLossShape, [](std::int64_t i) { return wave(i, 1.3, 0.5); });
  const Global dy = make(kLossShape, [](std::int64_t i) { return wave(i, 0.4, 0.9); });
  {  // mse, sum: sum (x - t)^2, gradient 2 (x - t)
    Tensors in = {{"x", x}, {"target", t}};
    Tensors closed = {{"y", {Shape{1}, {0.0}}}, {"x.grad", {kLossShape, {}}}};
    for (std::size_t i = 0; i < x.values.size(); ++i) {
      const double d = x.values[i] - t.values[i];
      closed["y"].values[0] += d * d;
      closed["x.grad"].values.push_back(2 * d);
    }
    const Tensors ref = reference(in, true, [&](Tape& tape, const Var<double>& v) {
      loss::MSEOptions o;
      o.reduction = loss::Reduction::sum;
      return loss::mse(tape, v, local(t), o);
    });
    check_runs(dir, "mse", "--layer mse --reduction sum", in, closed, {{1, "1,1,1"}, {2, "1,1,2"}});
    check_runs(dir, "mse_ref", "--layer mse --reduction sum", in, ref, {{3, "1,3,1"}});
  }
  {  // l1, mean (the default)
    Tensors in = {{"x", x}, {"target", t}};
    const Tensors ref = reference(
        in, true, [&](Tape& tape, const Var<double>& v) { return loss::l1(tape, v, local(t)); });
    check_runs(dir, "l1", "--layer l1", in, ref, {{2, "2,1,1"}});
  }
  {  // poisson_nll, none, on rates, full, eps: dy seeds it
    const Global rate = make(kLossShape, [](std::int64_t i) { return 0.2 + 0.1 * double(i % 7); });
    const Global count = make(kLossShape, [](std::int64_t i) { return double(i % 4); });
    Tensors in = {{"x", rate}, {"target", count}, {"dy", dy}};
    const Tensors ref = reference(in, false, [&](Tape& tape, const Var<double>& v) {
      loss::PoissonNLLOptions o;
      o.reduction = loss::Reduction::none;
      o.log_input = false;
      o.full = true;
      o.eps = 1e-6;
      return loss::poisson_nll(tape, v, local(count), o);
    });
    check_runs(dir, "poisson",
               "--layer poisson_nll --reduction none --log-input 0 --full --eps 1e-6", in, ref,
               {{3, "1,3,1"}});
  }
  {  // bce, sum, on probabilities
    const Global p =
        make(kLossShape, [](std::int64_t i) { return 0.05 + 0.9 * double(i % 11) / 10; });
    const Global q = make(kLossShape, [](std::int64_t i) { return double(i % 5) / 4; });
    Tensors in = {{"x", p}, {"target", q}};
    const Tensors ref = reference(in, true, [&](Tape& tape, const Var<double>& v) {
      loss::BCEOptions o;
      o.reduction = loss::Reduction::sum;
      return loss::bce(tape, v, local(q), o);
    });
    check_runs(dir, "bce", "--layer bce --reduction sum", in, ref, {{2, "1,1,2"}});
  }
  {  // bce_with_logits, mean, pos_weight [4] over the last axis
    const Global z = make(kLossShape, [](std::int64_t i) { return double(i % 3) / 2; });
    const Global w = make(Shape{4}, [](std::int64_t i) { return 0.5 + 0.75 * double(i); });
    Tensors in = {{"x", x}, {"target", z}, {"pos_weight", w}};
    const Tensors ref = reference(in, true, [&](Tape& tape, const Var<double>& v) {
      loss::BCEWithLogitsOptions<double> o;
      o.pos_weight = Tensor<double>::from_vector(w.shape, w.values);
      return loss::bce_with_logits(tape, v, local(z), o);
    });
    check_runs(dir, "bcel", "--layer bce_with_logits --reduction mean", in, ref, {{3, "3,1,1"}});
  }
  {  // kl_div, batchmean, log_target
    Tensors in = {{"x", x}, {"target", t}};
    const Tensors ref = reference(in, true, [&](Tape& tape, const Var<double>& v) {
      loss::KLDivOptions o;
      o.reduction = loss::Reduction::batchmean;
      o.log_target = true;
      return loss::kl_div(tape, v, local(t), o);
    });
    check_runs(dir, "kl", "--layer kl_div --reduction batchmean --log-target", in, ref,
               {{2, "2,1,1"}});
  }
}

TEST(LayerCheckProgram, NormsGeluAndAttentionEqualTheOneRankLayer) {
  TempDir dir("layer_check_layers");
  {  // layer_norm over a last axis of 5, whole, split 2 ways (3 + 2) and with rows split 3 ways
    const Shape s{3, 5};
    Tensors in = {{"x", make(s, [](std::int64_t i) { return wave(i, 0.9, 0.2) * (1 + i % 3); })},
                  {"weight", make(Shape{5}, [](std::int64_t i) { return 1 + 0.1 * double(i); })},
                  {"bias", make(Shape{5}, [](std::int64_t i) { return 0.05 * double(i) - 0.1; })},
                  {"dy", make(s, [](std::int64_t i) { return wave(i, 0.5, 1.1); })}};
    nn::LayerNormOptions o;
    o.eps = 1e-3;
    nn::LayerNorm<double> m(5, o);
    const Tensors ref = reference(
        in, false, [&](Tape& tape, const Var<double>& v) { return m.forward(tape, v); },
        m.named_parameters());
    check_runs(dir, "ln", "--layer layer_norm --eps 1e-3", in, ref,
               {{1, "1,1"}, {2, "1,2"}, {3, "3,1"}});
  }
  {  // group_norm, 2 groups of 2 channels, on [3, 4, 5, 4]: whole, the rows split 2 ways (3 + 2),
     // and the batch split 3 ways with the columns 1 way
    const Shape s{3, 4, 5, 4};
    Tensors in = {{"x", make(s, [](std::int64_t i) { return wave(i, 0.7, 0.3) * (1 + i % 5); })},
                  {"weight", make(Shape{4}, [](std::int64_t i) { return 1 - 0.2 * double(i); })},
                  {"bias", make(Shape{4}, [](std::int64_t i) { return 0.1 * double(i); })},
                  {"dy", make(s, [](std::int64_t i) { return wave(i, 0.4, 0.9); })}};
    nn::GroupNormOptions o;
    o.eps = 1e-4;
    nn::GroupNorm<double> m(2, 4, o);
    const Tensors ref = reference(
        in, false, [&](Tape& tape, const Var<double>& v) { return m.forward(tape, v); },
        m.named_parameters());
    check_runs(dir, "gn", "--layer group_norm --groups 2 --eps 1e-4", in, ref,
               {{1, "1,1,1,1"}, {2, "1,1,2,1"}, {3, "3,1,1,1"}});
  }
  {  // gelu, tanh and erf
    const Shape s{2, 3, 4};
    Tensors in = {{"x", make(s, [](std::int64_t i) { return 3 * wave(i, 0.8, 0.3); })},
                  {"dy", make(s, [](std::int64_t i) { return wave(i, 0.6, 0.7); })}};
    const Tensors by_tanh = reference(in, false, [](Tape& tape, const Var<double>& v) {
      return nn::gelu(tape, v, nn::GeluApproximate::tanh);
    });
    check_runs(dir, "gelu_tanh", "--layer gelu --approximate tanh", in, by_tanh, {{2, "1,2,1"}});
    const Tensors by_erf =
        reference(in, false, [](Tape& tape, const Var<double>& v) { return nn::gelu(tape, v); });
    check_runs(dir, "gelu", "--layer gelu", in, by_erf, {{1, "1,1,1"}});
  }
  {  // mha, 2 heads of 2, causal, the batch of 3 split over 2 ranks (2 + 1)
    const Shape s{3, 4, 4};
    nn::MultiheadAttention<double> m(4, 2);
    Tensors in = {{"x", make(s, [](std::int64_t i) { return wave(i, 0.7, 0.4); })},
                  {"dy", make(s, [](std::int64_t i) { return wave(i, 1.1, 0.2); })}};
    int k = 0;
    for (const auto& p : m.named_parameters()) {
      ++k;
      in[p.name] = make(p.var.space().global_shape(),
                        [k](std::int64_t i) { return 0.3 * wave(i, 0.37 * k, 0.1 * k); });
    }
    nn::AttentionMask<double> mask;
    mask.is_causal = true;
    const Tensors ref = reference(
        in, false, [&](Tape& tape, const Var<double>& v) { return m.forward(tape, v, mask); },
        m.named_parameters());
    check_runs(dir, "mha", "--layer mha --heads 2 --causal", in, ref, {{2, "2,1,1"}});
    // The heads over 2 ranks; the sequence over 2 by each strategy; both at 4 ranks.
    check_runs(dir, "mha_tp", "--layer mha --heads 2 --causal --tp 2", in, ref, {{2, "1,1,1"}});
    check_runs(dir, "mha_ring", "--layer mha --heads 2 --causal --sp-strategy ring", in, ref,
               {{2, "1,2,1"}});
    check_runs(dir, "mha_alltoall", "--layer mha --heads 2 --causal --sp-strategy alltoall", in,
               ref, {{2, "1,2,1"}});
    check_runs(dir, "mha_tp_ring", "--layer mha --heads 2 --causal --tp 2 --sp-strategy ring", in,
               ref, {{4, "1,2,1"}});
  }
}

// conv_transpose (ConvTranspose2d(2, 3, 3, stride=2, padding=1, output_padding=1)) on x [2, 2, 5,
// 4] whole, with the channels split 2 ways and the last axis 3 ways (halos), equals the one-rank
// layer; and a 1-D layer with per-axis flags given as single values.
TEST(LayerCheckProgram, ConvTransposeEqualsTheOneRankLayer) {
  TempDir dir("layer_check_conv_transpose");
  const Shape s{2, 2, 5, 4};
  nn::ConvTranspose<double> m(2, 2, 3, {3}, {.stride = 2, .padding = 1, .output_padding = 1});
  Tensors in = {{"x", make(s, [](std::int64_t i) { return wave(i, 0.7, 0.3); })},
                {"dy", make(Shape{2, 3, 10, 8}, [](std::int64_t i) { return wave(i, 0.4, 0.9); })}};
  int k = 0;
  for (const auto& p : m.named_parameters()) {
    ++k;
    in[p.name] = make(p.var.space().global_shape(),
                      [k](std::int64_t i) { return 0.5 * wave(i, 0.29 * k, 0.2 * k); });
  }
  const Tensors ref = reference(
      in, false, [&](Tape& tape, const Var<double>& v) { return m.forward(tape, v); },
      m.named_parameters());
  check_runs(dir, "convt",
             "--layer conv_transpose --dims 2 --in 2 --out 3 --kernel 3 --stride 2 --padding 1 "
             "--output-padding 1",
             in, ref, {{1, "1,1,1,1"}, {2, "1,2,1,1"}, {3, "1,1,1,3"}});

  nn::ConvTranspose<double> m1(1, 2, 2, {4}, {.stride = 3, .padding = 2, .dilation = 2});
  Tensors in1 = {{"x", make(Shape{1, 2, 6}, [](std::int64_t i) { return wave(i, 0.3, 0.1); })},
                 {"dy", make(Shape{1, 2, 18}, [](std::int64_t i) { return wave(i, 0.8, 0.5); })}};
  for (const auto& p : m1.named_parameters())
    in1[p.name] =
        make(p.var.space().global_shape(), [](std::int64_t i) { return wave(i, 1.3, 0); });
  const Tensors ref1 = reference(
      in1, false, [&](Tape& tape, const Var<double>& v) { return m1.forward(tape, v); },
      m1.named_parameters());
  check_runs(dir, "convt1",
             "--layer conv_transpose --out 2 --kernel 4 --stride 3 --padding 2 --dilation 2", in1,
             ref1, {{2, "1,1,2"}});
}

// interpolate: bilinear with fractional per-axis scales and align_corners split over the channels
// and over the last axis (halos), and 1-D nearest-exact by size over the last axis; torch's rules
// for its flags are errors on every rank.
TEST(LayerCheckProgram, InterpolateEqualsTheOneRankLayer) {
  TempDir dir("layer_check_interpolate");
  const Shape s{2, 2, 5, 6};
  Tensors in = {{"x", make(s, [](std::int64_t i) { return wave(i, 0.7, 0.3); })},
                {"dy", make(Shape{2, 2, 7, 3}, [](std::int64_t i) { return wave(i, 0.4, 0.9); })}};
  nn::Interpolate<double> m(
      {.scale_factor = {1.5, 0.5}, .mode = nn::InterpolateMode::bilinear, .align_corners = true});
  const Tensors ref =
      reference(in, false, [&](Tape& tape, const Var<double>& v) { return m.forward(tape, v); });
  check_runs(dir, "bilinear",
             "--layer interpolate --mode bilinear --scale-factor 1.5,0.5 --align-corners", in, ref,
             {{2, "1,2,1,1"}, {3, "1,1,1,3"}});

  Tensors in1 = {{"x", make(Shape{2, 1, 7}, [](std::int64_t i) { return wave(i, 0.9, 0.1); })},
                 {"dy", make(Shape{2, 1, 12}, [](std::int64_t i) { return wave(i, 0.6, 0.5); })}};
  nn::Interpolate<double> m1({.size = 12, .mode = nn::InterpolateMode::nearest_exact});
  const Tensors ref1 =
      reference(in1, false, [&](Tape& tape, const Var<double>& v) { return m1.forward(tape, v); });
  check_runs(dir, "nearest", "--layer interpolate --mode nearest-exact --size 12", in1, ref1,
             {{3, "1,1,3"}});

  const std::string files =
      " " + dir.file("nearest.in.safetensors") + " " + dir.file("bad.out.safetensors");
  struct Case {
    int ranks;
    std::string args, needle;
  };
  const std::vector<Case> bad = {
      {1, "--layer interpolate --scale-factor 2 --align-corners" + files,
       "align_corners option can only be set with the interpolating modes"},
      {2, "--layer interpolate --mode bilinear --size 4" + files, "bilinear mode needs 4D input"},
      {1, "--layer interpolate --scale-factor 0,5" + files, "expected positive numbers"},
  };
  for (const Case& c : bad) {
    SCOPED_TRACE(c.args);
    expect_clean_failure(run(c.ranks, c.args), c.needle);
  }
}

TEST(LayerCheckProgram, FloatInputIsReadAsDouble) {
  TempDir dir("layer_check_f32");
  Global x = make(kLossShape, [](std::int64_t i) { return wave(i, 0.7, 0.1); });
  Global t = make(kLossShape, [](std::int64_t i) { return wave(i, 1.3, 0.5); });
  for (Global* g : {&x, &t})
    for (double& v : g->values) v = static_cast<float>(v);  // what the program reads
  const Tensors in = {{"x", x}, {"target", t}};
  const Tensors ref = reference(
      in, true, [&](Tape& tape, const Var<double>& v) { return loss::mse(tape, v, local(t)); });
  check_runs(dir, "f32", "--layer mse", in, ref, {{2, "2,1,1"}}, true);
}

TEST(LayerCheckProgram, BadFlagsGridsAndFilesAreClearErrors) {
  TempDir dir("layer_check_errors");
  const Global x = make(kLossShape, [](std::int64_t i) { return wave(i, 0.7, 0.1); });
  const std::string in = dir.file("in.safetensors"), out = dir.file("out.safetensors");
  write_in(in, {{"x", x}, {"target", x}});
  const std::string no_target = dir.file("no_target.safetensors");
  write_in(no_target, {{"x", x}});
  const std::string bad_target = dir.file("bad_target.safetensors");
  write_in(bad_target, {{"x", x}, {"target", make(Shape{5, 3}, [](std::int64_t) { return 0.0; })}});
  const std::string extra = dir.file("extra.safetensors");
  write_in(extra, {{"x", x}, {"target", x}, {"weight", x}});
  const Global row = make(Shape{2, 4}, [](std::int64_t i) { return double(i); });
  const Global d4 = make(Shape{4}, [](std::int64_t) { return 1.0; });
  const std::string ln_no_weight = dir.file("ln_no_weight.safetensors");
  write_in(ln_no_weight, {{"x", row}, {"dy", row}, {"bias", d4}});
  const std::string ln_bad_weight = dir.file("ln_bad_weight.safetensors");
  write_in(ln_bad_weight, {{"x", row}, {"dy", row}, {"bias", d4}, {"weight", row}});
  const std::string gelu_no_dy = dir.file("gelu_no_dy.safetensors");
  write_in(gelu_no_dy, {{"x", row}});
  const std::string gelu_bad_dy = dir.file("gelu_bad_dy.safetensors");
  write_in(gelu_bad_dy, {{"x", row}, {"dy", d4}});
  struct Case {
    int ranks;
    std::string args, needle;
  };
  const std::string files = " " + in + " " + out;
  const std::vector<Case> cases = {
      {2, "--layer nope" + files, "unknown layer 'nope'; expected one of l1, mse"},
      {1, "--layer gelu --reduction sum" + files, "--reduction does not apply to --layer gelu"},
      {1, "--layer mse --reduction avg" + files, "unknown reduction 'avg'"},
      {1, "--layer mse --bogus 1" + files, "--bogus"},
      {2, "--layer mse --grid 1,1,1" + files, "has 1 cells, but the program runs on 2 ranks"},
      {2, "--layer mse --grid 2,1" + files, "has 2 extents, but x [5, 3, 4] has 3 axes"},
      {2, "--layer gelu --grid 2,1 " + gelu_no_dy + " " + out, "has no tensor 'dy'"},
      {1, "--layer gelu " + gelu_bad_dy + " " + out, "tensor 'dy' in file"},
      {2, "--layer mse --grid 1,1,2 " + no_target + " " + out, "has no tensor 'target'"},
      {2, "--layer mse --grid 2,1,1 " + bad_target + " " + out,
       "has shape [5, 3]; expected [5, 3, 4]"},
      {1, "--layer mse " + extra + " " + out, "holds a tensor 'weight' that --layer mse"},
      {2, "--layer layer_norm --grid 1,2 " + ln_no_weight + " " + out, "has no tensor 'weight'"},
      {1, "--layer layer_norm " + ln_bad_weight + " " + out, "tensor 'weight' in file"},
      {2, "--layer mha --heads 2 --grid 1,2,1" + files, "mha then needs --sp-strategy"},
      {4, "--layer mha --heads 2 --grid 2,2,1 --sp-strategy ring" + files,
       "with sequence parallelism the batch stays whole"},
      {2, "--layer mha --heads 2 --grid 1,1,1 --tp 3" + files, "(times --tp 3)"},
      {2, "--layer mha --heads 2 --grid 1,2,1 --sp-strategy ulysses" + files,
       "expected ring or alltoall"},
      {1, "--layer mha" + files, "--layer mha needs --heads H"},
      {1, "--layer group_norm" + files, "--layer group_norm needs --groups G"},
      {2, "--layer group_norm --groups 1 --grid 1,2,1" + files, "keeps the channels whole"},
      {1, "--layer conv_transpose --kernel 3" + files,
       "--layer conv_transpose needs --out O and --kernel K"},
      {2, "--layer conv_transpose --out 2 --kernel 3 --grid 2,1,1" + files,
       "conv_transpose keeps the batch axis whole"},
      {1, "--layer conv_transpose --out 2 --kernel 3 --output-padding 1" + files,
       "output_padding 1"},
      {1, "--layer conv_transpose --out 2 --kernel 3 --stride 2,x" + files, "--stride 2,x"},
      {1, "--layer conv_transpose --out 2 --kernel 3 --in 4" + files, "--in 4 does not match"},
      {1, "--layer gelu --kernel 3" + files, "--kernel does not apply to --layer gelu"},
      {1, "--layer mse " + in, "expected IN.safetensors and OUT.safetensors"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.args);
    expect_clean_failure(run(c.ranks, c.args), c.needle);
  }
}

TEST(LayerCheckProgram, HelpListsTheLayers) {
  const Outcome o = run(1, "--help");
  EXPECT_EQ(o.status, 0) << o.output;
  for (const char* name : {"l1", "mse", "poisson_nll", "bce_with_logits", "kl_div", "layer_norm",
                           "gelu [--approximate none|tanh]",
                           "mha --heads H [--causal] [--tp T] [--sp-strategy ring|alltoall]",
                           "interpolate [--mode nearest|nearest-exact"})
    EXPECT_NE(o.output.find(name), std::string::npos) << name << " in:\n" << o.output;
}

}  // namespace
