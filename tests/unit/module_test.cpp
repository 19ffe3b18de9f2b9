// Module, Sequential and state_dicts on one process.

#include "distop/nn/module.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "distop/autodiff/apply.hpp"
#include "distop/core/trace.hpp"
#include "distop/io/safetensors.hpp"
#include "distop/io/state_dict.hpp"
#include "distop/nn/activation.hpp"
#include "distop/nn/batch_norm.hpp"
#include "distop/nn/conv.hpp"
#include "distop/nn/flatten.hpp"
#include "distop/nn/linear.hpp"
#include "distop/nn/sequential.hpp"
#include "gradcheck.hpp"
#include "temp_dir.hpp"

namespace distop {
namespace {

using nn::GradientReduction;
using test::local_batch_space;
using test::random_tensor;

std::vector<std::string> names_of(const std::vector<nn::NamedParameter<double>>& ps) {
  std::vector<std::string> n;
  for (const auto& p : ps) n.push_back(p.name);
  return n;
}

std::vector<std::string> names_of(const std::vector<nn::NamedBuffer<double>>& bs) {
  std::vector<std::string> n;
  for (const auto& b : bs) n.push_back(b.name);
  return n;
}

// A model of its own, as a user writes one: a child Sequential and a BatchNorm.
class TwoBlocks : public nn::Module<double> {
 public:
  explicit TwoBlocks(std::uint64_t seed)
      : features_(register_module("features", std::make_shared<nn::Sequential<double>>())),
        norm_(register_module("norm", std::make_shared<nn::BatchNorm<double>>(3))),
        head_(register_module("head",
                              std::make_shared<nn::Linear<double>>(
                                  3, 2, nn::LinearOptions{.bias = false, .seed = seed + 2}))) {
    features_->add(std::make_shared<nn::Linear<double>>(4, 5, nn::LinearOptions{.seed = seed}))
        .add(nn::relu<double>)
        .add(std::make_shared<nn::Linear<double>>(5, 3, nn::LinearOptions{.seed = seed + 1}));
  }
  Var<double> forward(Tape& tape, const Var<double>& x) {
    return head_->forward(tape, norm_->forward(tape, features_->forward(tape, x)));
  }
  nn::BatchNorm<double>& norm() { return *norm_; }

 private:
  std::shared_ptr<nn::Sequential<double>> features_;
  std::shared_ptr<nn::BatchNorm<double>> norm_;
  std::shared_ptr<nn::Linear<double>> head_;
};

TEST(Module, NamesAreHierarchicalInRegistrationOrderAsPyTorchNamesThem) {
  TwoBlocks m(1);
  EXPECT_EQ(
      names_of(m.named_parameters()),
      (std::vector<std::string>{"features.0.weight", "features.0.bias", "features.2.weight",
                                "features.2.bias", "norm.weight", "norm.bias", "head.weight"}));
  EXPECT_EQ(names_of(m.named_buffers()),
            (std::vector<std::string>{"norm.running_mean", "norm.running_var",
                                      "norm.num_batches_tracked"}));
  ASSERT_EQ(m.named_children().size(), 3u);
  EXPECT_EQ(m.named_children()[0].first, "features");
  const auto params = m.parameters();
  const auto named = m.named_parameters();
  ASSERT_EQ(params.size(), named.size());
  for (std::size_t i = 0; i < params.size(); ++i) EXPECT_TRUE(params[i].same_as(named[i].var));
  for (const auto& p : named) EXPECT_EQ(p.reduction, GradientReduction::per_replica) << p.name;
}

// A trace names each layer's forward by the path it is registered under (a Sequential's steps
// with their type; a function by its name, a function inside a layer nested in the layer's
// event), and backward's replay of each layer's tape entries after the layer, in reverse order.
TEST(Module, TraceNamesLayersByTheirPathsForwardAndBackward) {
  TwoBlocks m(1);
  const Var<double> x(random_tensor<double>(local_batch_space(6, 4), 3));
  test::TempDir dir;
  const auto path = dir.file("trace.json");
  trace::start(MPI_COMM_SELF);
  {
    Tape tape;
    auto y = m.forward(tape, x);
    DistTensor<double> dy(y.space());
    dy.local().fill(1.0);
    const trace::Span phase("phase", "backward");
    backward(tape, y, dy);
  }
  trace::stop_and_write(path, MPI_COMM_SELF);
  std::ifstream in(path);
  const auto events = nlohmann::json::parse(in)["traceEvents"];
  double backward_begin = -1;
  for (const auto& e : events)
    if (e["ph"] == "X" && e["name"] == "backward") backward_begin = e["ts"].get<double>();
  ASSERT_GE(backward_begin, 0.0);
  std::vector<std::pair<double, std::string>> forward, back;
  for (const auto& e : events) {
    if (e["ph"] != "X" || e["cat"] != "compute") continue;
    EXPECT_EQ(e["tid"], 0);
    auto& list = e["ts"].get<double>() < backward_begin ? forward : back;
    list.emplace_back(e["ts"].get<double>(), e["name"].get<std::string>());
  }
  std::sort(forward.begin(), forward.end());
  std::sort(back.begin(), back.end());
  std::vector<std::string> forward_names, backward_names;
  for (const auto& [ts, name] : forward) forward_names.push_back(name);
  for (const auto& [ts, name] : back)
    if (backward_names.empty() || backward_names.back() != name) backward_names.push_back(name);
  EXPECT_EQ(forward_names,
            (std::vector<std::string>{"features.0 Linear", "Linear", "relu", "features.2 Linear",
                                      "Linear", "norm", "batch_norm", "head", "Linear"}));
  EXPECT_EQ(backward_names, (std::vector<std::string>{"head", "norm", "features.2 Linear", "relu",
                                                      "features.0 Linear"}));
}

TEST(Module, TrainAndEvalReachEveryDescendant) {
  TwoBlocks m(1);
  EXPECT_TRUE(m.training());
  EXPECT_TRUE(m.norm().training());
  m.eval();
  EXPECT_FALSE(m.norm().training());
  EXPECT_FALSE(m.named_children()[0].second->training());
  m.train();
  EXPECT_TRUE(m.norm().training());
}

TEST(Module, BatchNormCountsTrainingBatchesOnly) {
  TwoBlocks m(1);
  const Var<double> x(random_tensor<double>(local_batch_space(6, 4), 3));
  for (int i = 0; i < 2; ++i) {
    Tape t;
    m.forward(t, x);
  }
  EXPECT_EQ(m.norm().num_batches_tracked(), 2);
  m.eval();
  Tape t;
  m.forward(t, x);
  EXPECT_EQ(m.norm().num_batches_tracked(), 2);
}

TEST(Module, SequentialNamesItsStepsByIndexAsPyTorchDoes) {
  // [sequential]
  auto mlp = std::make_shared<nn::Sequential<float>>();
  mlp->add(std::make_shared<nn::Linear<float>>(784, 128, nn::LinearOptions{.seed = 1}))
      .add(nn::relu<float>)
      .add(std::make_shared<nn::Linear<float>>(128, 10, nn::LinearOptions{.seed = 2}));
  // named_parameters(): "0.weight" [128, 784], "0.bias", "2.weight" [10, 128], "2.bias"
  // [sequential]
  std::vector<std::string> names;
  for (const auto& p : mlp->named_parameters()) names.push_back(p.name);
  EXPECT_EQ(names, (std::vector<std::string>{"0.weight", "0.bias", "2.weight", "2.bias"}));
  EXPECT_EQ(mlp->named_parameters()[2].var.space().global_shape(), (Shape{10, 128}));
}

TEST(Module, SequentialIsTheCompositionOfItsSteps) {
  auto a = std::make_shared<nn::Linear<double>>(4, 5, nn::LinearOptions{.seed = 3});
  auto b = std::make_shared<nn::Linear<double>>(5, 2, nn::LinearOptions{.seed = 4});
  nn::Sequential<double> seq;
  seq.add(a).add(nn::tanh<double>).add(b);
  EXPECT_EQ(seq.size(), 3u);
  const Var<double> x(random_tensor<double>(local_batch_space(3, 4), 5));
  Tape t1, t2;
  const auto y1 = seq.forward(t1, x).value().local().to_vector();
  const auto y2 = b->forward(t2, nn::tanh(t2, a->forward(t2, x))).value().local().to_vector();
  EXPECT_EQ(y1, y2);
  EXPECT_THROW(seq.add(nn::Sequential<double>::Function()), Error);
}

TEST(Module, GradientsReachEveryParameterAndMatchFiniteDifferences) {
  TwoBlocks m(5);
  const Var<double> x(random_tensor<double>(local_batch_space(6, 4), 3));
  m.eval();  // running statistics fixed, so repeated evaluations see the same function
  Tape probe;
  const auto r = random_tensor<double>(m.forward(probe, x).space(), 1);
  probe.clear();
  test::expect_gradients_match([&](Tape& t) { return test::weighted_sum(t, m.forward(t, x), r); },
                               m.parameters());
}

TEST(Module, StateDictRoundTripMakesTwoModelsAgree) {
  TwoBlocks a(1), b(100);
  const Var<double> x(random_tensor<double>(local_batch_space(6, 4), 3));
  {
    Tape t;
    a.forward(t, x);  // running statistics and the batch count move away from their start
  }
  const auto state = a.state_dict();
  ASSERT_EQ(state.size(), 10u);
  EXPECT_EQ(state.at("features.0.weight").shape, (Shape{5, 4}));
  EXPECT_TRUE(state.at("norm.num_batches_tracked").is_count());
  EXPECT_EQ(state.at("norm.num_batches_tracked").shape, Shape{});
  const auto result = b.load_state_dict(state);
  EXPECT_TRUE(result.missing_keys.empty());
  EXPECT_TRUE(result.unexpected_keys.empty());
  EXPECT_EQ(b.norm().num_batches_tracked(), 1);
  a.eval();
  b.eval();
  Tape ta, tb;
  EXPECT_EQ(a.forward(ta, x).value().local().to_vector(),
            b.forward(tb, x).value().local().to_vector());
}

TEST(Module, StrictLoadingNamesWhatIsMissingUnexpectedOrMisshapen) {
  TwoBlocks a(1), b(2);
  const auto before = b.state_dict();
  auto expect_error = [&](const nn::StateDict<double>& s, const std::string& needle) {
    try {
      b.load_state_dict(s);
      ADD_FAILURE() << "no error for " << needle;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
    EXPECT_EQ(b.state_dict().at("head.weight").values, before.at("head.weight").values)
        << "a failed load changed the module";
  };
  auto missing = a.state_dict();
  missing.erase("norm.running_var");
  expect_error(missing, "norm.running_var");
  auto unexpected = a.state_dict();
  unexpected["extra.weight"] = unexpected.at("head.weight");
  expect_error(unexpected, "extra.weight");
  auto misshapen = a.state_dict();
  misshapen.at("head.weight").shape = Shape{3, 2};
  expect_error(misshapen, "head.weight");
  auto count_as_tensor = a.state_dict();
  count_as_tensor.at("norm.num_batches_tracked") = count_as_tensor.at("norm.bias");
  expect_error(count_as_tensor, "norm.num_batches_tracked");

  // Not strict: the unmatched names come back and the rest is loaded.
  auto partial = a.state_dict();
  partial.erase("head.weight");
  partial["extra"] = partial.at("norm.bias");
  const auto r = b.load_state_dict(partial, false);
  EXPECT_EQ(r.missing_keys, std::vector<std::string>{"head.weight"});
  EXPECT_EQ(r.unexpected_keys, std::vector<std::string>{"extra"});
  EXPECT_EQ(b.state_dict().at("features.0.weight").values,
            a.state_dict().at("features.0.weight").values);
  EXPECT_EQ(b.state_dict().at("head.weight").values, before.at("head.weight").values);
  // A wrong shape is an error even when not strict.
  EXPECT_THROW(b.load_state_dict(misshapen, false), Error);
}

class Registrar : public nn::Module<double> {
 public:
  void parameter(const std::string& name, Var<double> v) { register_parameter(name, v); }
  void child(const std::string& name) {
    register_module(name, std::make_shared<nn::Linear<double>>(1, 1));
  }
};

TEST(Module, RegistrationRejectsBadOrRepeatedNames) {
  Registrar r;
  Var<double> p(DistTensor<double>(local_batch_space(1, 2)), true);
  r.parameter("w", p);
  EXPECT_THROW(r.parameter("w", p), Error);
  EXPECT_THROW(r.child("w"), Error);
  EXPECT_THROW(r.parameter("", p), Error);
  EXPECT_THROW(r.parameter("a.b", p), Error);
  EXPECT_THROW(r.parameter("u", Var<double>()), Error);
  EXPECT_THROW(r.parameter("frozen", Var<double>(DistTensor<double>(local_batch_space(1, 2)))),
               Error);
}

TEST(Module, LayersUsePyTorchNamesAndLayouts) {
  nn::Conv<double> conv(2, 3, 4, 5, {.padding = 2, .seed = 1});
  const auto s = conv.state_dict();
  EXPECT_EQ(s.at("weight").shape, (Shape{4, 3, 5, 5}));
  EXPECT_EQ(s.at("bias").shape, (Shape{4}));
  nn::Linear<double> fc(6, 2, {.bias = false});
  EXPECT_EQ(fc.state_dict().size(), 1u);
  nn::BatchNorm<double> bn(3, {.affine = false});
  EXPECT_EQ(names_of(bn.named_buffers()),
            (std::vector<std::string>{"running_mean", "running_var", "num_batches_tracked"}));
  EXPECT_TRUE(bn.named_parameters().empty());
}

TEST(StateDictFile, SavedAndLoadedAsSafetensorsWithCountsAsI64) {
  test::TempDir dir;
  const std::string path = dir.path().string() + "/model.safetensors";
  TwoBlocks a(1), b(2);
  {
    Tape t;
    a.forward(t, Var<double>(random_tensor<double>(local_batch_space(6, 4), 3)));
  }
  io::save_state_dict(path, a, {{"note", "test"}});
  auto file = io::SafetensorsFile::open(path);
  EXPECT_EQ(file.dtype("features.0.weight"), "F64");
  EXPECT_EQ(file.dtype("norm.num_batches_tracked"), "I64");
  EXPECT_EQ(file.shape("norm.num_batches_tracked"), Shape{});
  EXPECT_EQ(file.metadata().at("note"), "test");
  io::load_state_dict(path, b);
  EXPECT_EQ(b.state_dict().at("features.2.weight").values,
            a.state_dict().at("features.2.weight").values);
  EXPECT_EQ(b.norm().num_batches_tracked(), 1);

  // The double file read into a float model rounds each value.
  nn::Linear<float> f(4, 5);
  nn::Linear<double> d(4, 5, {.seed = 9});
  io::save_state_dict(dir.path().string() + "/d.safetensors", d);
  io::load_state_dict(dir.path().string() + "/d.safetensors", f);
  const auto fw = f.weight().value().local().to_vector();
  const auto dw = d.weight().value().local().to_vector();
  for (std::size_t i = 0; i < fw.size(); ++i) EXPECT_EQ(fw[i], static_cast<float>(dw[i]));

  // Errors name the file and the tensor.
  try {
    io::load_state_dict(path, f);
    ADD_FAILURE() << "loaded a file of another model";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
  }
  EXPECT_THROW(io::load_state_dict(dir.path().string() + "/missing.safetensors", f), Error);
}

}  // namespace
}  // namespace distop
