// Training checkpoints: weights, the state and options of every optimizer (SGD, Adam, AdamW,
// RMSprop, Adagrad, with parameter groups), a scheduler's state and the loop position round-trip
// exactly, training resumed from a checkpoint continues bit for bit as an uninterrupted run, and
// bad files, another model's or another optimizer's checkpoint give the same Error on every rank
// with nothing changed.
#include "distop/io/checkpoint.hpp"

#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "distop/io/state_dict.hpp"
#include "distop/nn/distributed_linear.hpp"
#include "distop/optim/adagrad.hpp"
#include "distop/optim/adam.hpp"
#include "distop/optim/adamw.hpp"
#include "distop/optim/lr_scheduler.hpp"
#include "distop/optim/rmsprop.hpp"
#include "distop/optim/sgd.hpp"
#include "mpi_test_util.hpp"
#include "temp_dir.hpp"

using namespace distop;
using distop::test::world_rank;
using distop::test::world_size;

namespace {

// A directory that every rank sees: made by rank 0, its path broadcast. Removed after a barrier.
class SharedDir {
 public:
  SharedDir() {
    if (world_rank() == 0) dir_ = std::make_unique<test::TempDir>("distop_checkpoint");
    std::string path = dir_ ? dir_->str() : std::string();
    int size = static_cast<int>(path.size());
    MPI_Bcast(&size, 1, MPI_INT, 0, MPI_COMM_WORLD);
    path.resize(static_cast<std::size_t>(size));
    MPI_Bcast(path.data(), size, MPI_CHAR, 0, MPI_COMM_WORLD);
    path_ = path;
  }
  ~SharedDir() { MPI_Barrier(MPI_COMM_WORLD); }
  const std::string& str() const { return path_; }
  std::string file(const std::string& name) const {
    return (std::filesystem::path(path_) / name).string();
  }

 private:
  std::unique_ptr<test::TempDir> dir_;
  std::string path_;
};

// Runs `action` on rank 0 only, then waits for it on every rank.
template <class F>
void on_rank0(F action) {
  if (world_rank() == 0) action();
  MPI_Barrier(MPI_COMM_WORLD);
}

// A grid for each rank count, some leaving ranks idle (rank 0 itself at 4 ranks, so the rank that
// writes holds no box).
Partition weight_partition() {
  switch (world_size()) {
    case 1:
      return Partition::world({1, 1}, {0});
    case 2:
      return Partition::world({1, 2}, {0, 1});
    case 3:
      return Partition::world({2, 1}, {2, 0});
    default:
      return Partition::world({1, 3}, {1, 2, 3});
  }
}

// Two distributed linear layers and a parameter that the optimizer holds but never steps
// ("frozen"), optionally without fc2 or with one more parameter ("extra"). Its parameters, in
// named_parameters() order: frozen, [extra,] fc1.weight, fc1.bias[, fc2.weight, fc2.bias].
template <class T>
class Model : public nn::Module<T> {
 public:
  Model(std::uint64_t seed, std::int64_t fc2_out = 3, bool with_fc2 = true,
        bool with_extra = false) {
    const Partition p = weight_partition();
    this->register_module("fc1", std::make_shared<nn::DistributedLinear<T>>(
                                     7, 5, p, nn::LinearOptions{.seed = seed}));
    this->register_parameter("frozen", Var<T>(DistTensor<T>(TensorSpace(Shape{4, 6}, p)), true));
    if (with_fc2)
      this->register_module("fc2", std::make_shared<nn::DistributedLinear<T>>(
                                       5, fc2_out, p, nn::LinearOptions{.seed = seed + 1}));
    if (with_extra)
      this->register_parameter("extra", Var<T>(DistTensor<T>(TensorSpace(Shape{2, 3}, p)), true));
  }
  // This rank's boxes, in named_parameters() order.
  std::vector<std::vector<T>> local() const {
    std::vector<std::vector<T>> v;
    for (const auto& p : this->named_parameters()) v.push_back(p.var.value().local().to_vector());
    return v;
  }
};

// A model whose parameters' names start with "optimizer." (a child module registered under that
// name), which checkpoints reserve for the optimizer's state.
template <class T>
class ReservedNames : public nn::Module<T> {
 public:
  ReservedNames() {
    this->register_module("optimizer", std::make_shared<nn::DistributedLinear<T>>(
                                           7, 5, weight_partition(), nn::LinearOptions{.seed = 1}));
  }
};

// `steps` optimizer steps with made-up gradients that depend on the current values and the step
// (on every rank, as backward gives ranks outside a parameter's partition empty gradients), each
// followed by a scheduler step when there is a scheduler.
template <class T>
void train(const Model<T>& model, optim::Optimizer<T>& opt, int first_step, int steps,
           optim::LRScheduler<T>* scheduler = nullptr) {
  for (int s = first_step; s < first_step + steps; ++s) {
    for (const auto& named : model.named_parameters()) {
      if (named.name == "frozen") continue;
      const Var<T>& p = named.var;
      auto v = p.value().local().to_vector();
      for (std::size_t k = 0; k < v.size(); ++k)
        v[k] =
            static_cast<T>(std::cos(static_cast<double>(v[k]) * (s + 1) + static_cast<double>(k)));
      p.grad().local().copy_from(Tensor<T>::from_vector(p.value().local().shape(), v));
    }
    opt.step();
    opt.zero_grad();
    if (scheduler) scheduler->step();
  }
}

// This rank's optimizer state: every state tensor and scalar, by parameter and key.
template <class T>
std::vector<std::pair<std::string, std::vector<double>>> state_of(const optim::Optimizer<T>& opt) {
  std::vector<std::pair<std::string, std::vector<double>>> out;
  const auto state = opt.state_dict();
  for (std::size_t j = 0; j < state.params.size(); ++j) {
    for (const auto& [key, t] : state.params[j].tensors) {
      const auto v = t.to_vector();
      out.emplace_back(std::to_string(j) + "." + key, std::vector<double>(v.begin(), v.end()));
    }
    for (const auto& [key, v] : state.params[j].scalars)
      out.emplace_back(std::to_string(j) + "." + key, std::vector<double>{v});
  }
  return out;
}

template <class T>
std::vector<optim::Hyperparameters> options_of(const optim::Optimizer<T>& opt) {
  std::vector<optim::Hyperparameters> out;
  for (std::size_t g = 0; g < opt.group_count(); ++g) out.push_back(opt.group_options(g));
  return out;
}

const optim::SGDOptions kOptions{
    .lr = 0.05, .momentum = 0.9, .dampening = 0.1, .weight_decay = 1e-3};

// Makes an optimizer of a model, with the options a run uses (`other`: other options, which a
// checkpoint's replace).
template <class T>
using Factory = std::function<std::unique_ptr<optim::Optimizer<T>>(const Model<T>&, bool other)>;

// Two groups: fc1's parameters, and the others.
template <class T, class Opt>
std::unique_ptr<optim::Optimizer<T>> two_groups(const Model<T>& m,
                                                const typename Opt::Options& first,
                                                const typename Opt::Options& second) {
  std::vector<typename Opt::Group> groups(2);
  groups[0].options = first;
  groups[1].options = second;
  for (const auto& p : m.named_parameters())
    groups[p.name.rfind("fc1.", 0) == 0 ? 0 : 1].params.push_back(p.var);
  return std::make_unique<Opt>(std::move(groups));
}

template <class T>
std::vector<std::pair<std::string, Factory<T>>> optimizers() {
  using Ptr = std::unique_ptr<optim::Optimizer<T>>;
  return {
      {"SGD",
       [](const Model<T>& m, bool other) -> Ptr {
         return std::make_unique<optim::SGD<T>>(m.parameters(),
                                                other ? optim::SGDOptions{.lr = 1} : kOptions);
       }},
      {"SGD with Nesterov momentum in two groups",
       [](const Model<T>& m, bool other) -> Ptr {
         const optim::SGDOptions o{.lr = other ? 0.5 : 0.05, .momentum = 0.8, .nesterov = true};
         return two_groups<T, optim::SGD<T>>(m, o, {.lr = 0.01, .weight_decay = 0.1});
       }},
      {"Adam in two groups",
       [](const Model<T>& m, bool other) -> Ptr {
         if (other) return two_groups<T, optim::Adam<T>>(m, {}, {});
         return two_groups<T, optim::Adam<T>>(m, {.lr = 0.01, .amsgrad = true},
                                              {.lr = 0.02, .weight_decay = 0.01, .maximize = true});
       }},
      {"AdamW",
       [](const Model<T>& m, bool other) -> Ptr {
         return std::make_unique<optim::AdamW<T>>(
             m.parameters(),
             other ? optim::AdamWOptions{} : optim::AdamWOptions{.lr = 0.01, .betas = {0.8, 0.99}});
       }},
      {"RMSprop",
       [](const Model<T>& m, bool other) -> Ptr {
         return std::make_unique<optim::RMSprop<T>>(
             m.parameters(),
             other ? optim::RMSpropOptions{}
                   : optim::RMSpropOptions{.lr = 0.01, .momentum = 0.5, .centered = true});
       }},
      {"Adagrad",
       [](const Model<T>& m, bool other) -> Ptr {
         return std::make_unique<optim::Adagrad<T>>(
             m.parameters(),
             other ? optim::AdagradOptions{}
                   : optim::AdagradOptions{
                         .lr = 0.1, .lr_decay = 0.01, .initial_accumulator_value = 0.1});
       }},
  };
}

template <class T>
void expect_resumed_run_is_bit_identical() {
  for (const auto& [label, make] : optimizers<T>()) {
    SCOPED_TRACE(label);
    SharedDir dir;
    Model<T> a(1);
    auto opt_a = make(a, false);
    optim::LRScheduler<T> sched_a(*opt_a, optim::LRSchedule::cosine(10).with_warmup(2));
    train(a, *opt_a, 0, 3, &sched_a);
    io::CheckpointInfo info{.epoch = 2,
                            .step_in_epoch = 17,
                            .global_step = 3,
                            .seed = 18446744073709551615ull,
                            .metadata = {{"model", "two layers"}},
                            .scheduler = sched_a.state()};
    io::save_checkpoint(dir.str(), a, *opt_a, info);
    const auto saved_values = a.local();
    const auto saved_state = state_of(*opt_a);
    const auto saved_options = options_of(*opt_a);
    train(a, *opt_a, 3, 4, &sched_a);

    // Another initialisation, other options and another scheduler base, all replaced by the
    // checkpoint's.
    Model<T> b(99);
    auto opt_b = make(b, true);
    optim::LRScheduler<T> sched_b(*opt_b, optim::LRSchedule::cosine(10).with_warmup(2));
    const auto loaded = io::load_checkpoint(dir.str(), b, *opt_b);
    EXPECT_EQ(loaded.epoch, 2);
    EXPECT_EQ(loaded.step_in_epoch, 17);
    EXPECT_EQ(loaded.global_step, 3);
    EXPECT_EQ(loaded.seed, info.seed);
    EXPECT_EQ(loaded.metadata, info.metadata);
    ASSERT_TRUE(loaded.scheduler.has_value());
    EXPECT_EQ(loaded.scheduler->last_step, 3);
    EXPECT_EQ(loaded.scheduler->base_lrs, info.scheduler->base_lrs);
    sched_b.load_state(*loaded.scheduler);
    EXPECT_EQ(b.local(), saved_values);
    EXPECT_EQ(state_of(*opt_b), saved_state);
    EXPECT_EQ(options_of(*opt_b), saved_options);

    train(b, *opt_b, 3, 4, &sched_b);
    EXPECT_EQ(b.local(), a.local());
    EXPECT_EQ(state_of(*opt_b), state_of(*opt_a));
    EXPECT_EQ(options_of(*opt_b), options_of(*opt_a));
  }
}

TEST(Checkpoint, ResumedTrainingIsBitIdenticalToAnUninterruptedRun) {
  expect_resumed_run_is_bit_identical<double>();
}

TEST(Checkpoint, ResumedTrainingIsBitIdenticalInFloat) {
  expect_resumed_run_is_bit_identical<float>();
}

TEST(Checkpoint, IsASafetensorsFileOfGlobalTensors) {
  SharedDir dir;
  Model<float> a(1);
  optim::SGD<float> opt(a.parameters(), kOptions);
  train(a, opt, 0, 1);
  io::save_checkpoint(dir.str(), a, opt, {});
  const auto file = io::SafetensorsFile::open(io::checkpoint_path(dir.str()));
  EXPECT_EQ(io::checkpoint_path(dir.str()), dir.file("checkpoint.safetensors"));
  EXPECT_EQ(file.names(),
            (std::vector<std::string>{
                "fc1.bias", "fc1.weight", "fc2.bias", "fc2.weight", "frozen",
                "optimizer.momentum_buffer.fc1.bias", "optimizer.momentum_buffer.fc1.weight",
                "optimizer.momentum_buffer.fc2.bias", "optimizer.momentum_buffer.fc2.weight"}));
  EXPECT_EQ(file.shape("optimizer.momentum_buffer.fc1.weight"), (Shape{5, 7}));
  EXPECT_EQ(file.dtype("fc2.weight"), "F32");
  const auto& m = file.metadata();
  EXPECT_EQ(m.at("format"), "distop.checkpoint");
  EXPECT_EQ(m.at("format_version"), "2");
  EXPECT_EQ(m.at("optimizer"), "SGD");
  EXPECT_EQ(m.at("optimizer.groups"), "1");
  EXPECT_EQ(m.at("optimizer.group.0.params"),
            "[\"frozen\",\"fc1.weight\",\"fc1.bias\",\"fc2.weight\",\"fc2.bias\"]");
  EXPECT_EQ(m.at("optimizer.group.0.lr"), "0.050000000000000003");  // 17 digits: reads back exactly
  EXPECT_EQ(m.at("optimizer.group.0.nesterov"), "0");
  EXPECT_EQ(m.count("scheduler.last_step"), 0u);

  // Adam's state: its moments as tensors, its step counts as metadata; a scheduler's state.
  SharedDir adam_dir;
  Model<double> b(1);
  optim::Adam<double> adam(b.parameters(), {.lr = 0.01, .amsgrad = true});
  optim::LRScheduler<double> scheduler(adam, optim::LRSchedule::step(1, 0.5));
  train(b, adam, 0, 2, &scheduler);
  io::save_checkpoint(adam_dir.str(), b, adam, {.scheduler = scheduler.state()});
  const auto adam_file = io::SafetensorsFile::open(io::checkpoint_path(adam_dir.str()));
  for (const char* key : {"exp_avg", "exp_avg_sq", "max_exp_avg_sq"}) {
    EXPECT_TRUE(adam_file.contains(std::string("optimizer.") + key + ".fc2.weight")) << key;
    EXPECT_FALSE(adam_file.contains(std::string("optimizer.") + key + ".frozen")) << key;
  }
  EXPECT_EQ(adam_file.shape("optimizer.exp_avg.fc2.weight"), (Shape{3, 5}));
  const auto& am = adam_file.metadata();
  EXPECT_EQ(am.at("optimizer"), "Adam");
  EXPECT_EQ(am.at("optimizer.step.fc1.bias"), "2");
  EXPECT_EQ(am.count("optimizer.step.frozen"), 0u);
  EXPECT_EQ(am.at("optimizer.group.0.lr"), "0.0025000000000000001");  // 0.01 halved twice
  EXPECT_EQ(am.at("optimizer.group.0.amsgrad"), "1");
  EXPECT_EQ(am.at("optimizer.group.0.beta2"), "0.999");
  EXPECT_EQ(am.at("scheduler.last_step"), "2");
  EXPECT_EQ(am.at("scheduler.base_lr.0"), "0.01");
}

// The parameters, optimizer options and state of `model`, to check that a failed load changed
// nothing.
template <class T>
struct Snapshot {
  Snapshot(const Model<T>& m, const optim::Optimizer<T>& opt)
      : values(m.local()), state(state_of(opt)), options(options_of(opt)) {}
  std::vector<std::vector<T>> values;
  std::vector<std::pair<std::string, std::vector<double>>> state;
  std::vector<optim::Hyperparameters> options;
  void expect_unchanged(const Model<T>& m, const optim::Optimizer<T>& opt) const {
    EXPECT_EQ(m.local(), values);
    EXPECT_EQ(state_of(opt), state);
    EXPECT_EQ(options_of(opt), options);
  }
};

// Expects load_checkpoint to throw distop::Error mentioning `what` on this rank (so on all).
template <class T>
void expect_load_error(const std::string& dir, Model<T>& m, optim::Optimizer<T>& opt,
                       const std::string& what) {
  try {
    io::load_checkpoint(dir, m, opt);
    ADD_FAILURE() << "load_checkpoint did not throw (expected: " << what << ")";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("load_checkpoint"), std::string::npos) << e.what();
  }
}

TEST(Checkpoint, BadFilesAreErrorsOnEveryRankAndChangeNothing) {
  SharedDir dir;
  Model<double> a(1);
  optim::SGD<double> opt_a(a.parameters(), kOptions);
  train(a, opt_a, 0, 2);
  Model<double> b(7);
  optim::SGD<double> opt_b(b.parameters(), {.lr = 0.5, .momentum = 0.5});
  train(b, opt_b, 0, 1);
  const Snapshot<double> before(b, opt_b);

  expect_load_error(dir.str(), b, opt_b, "does not exist");
  before.expect_unchanged(b, opt_b);

  io::save_checkpoint(dir.str(), a, opt_a, {});
  const std::string path = io::checkpoint_path(dir.str());
  const auto size = std::filesystem::file_size(path);
  on_rank0([&] { std::filesystem::resize_file(path, size - 9); });
  expect_load_error(dir.str(), b, opt_b, "outside the data buffer");
  before.expect_unchanged(b, opt_b);

  on_rank0([&] { std::filesystem::resize_file(path, 20); });
  expect_load_error(dir.str(), b, opt_b, "declares a header of");
  before.expect_unchanged(b, opt_b);

  on_rank0([&] {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    const std::string header = "{\"fc1.weight\": {";
    const char length[8] = {static_cast<char>(header.size()), 0, 0, 0, 0, 0, 0, 0};
    out.write(length, 8);
    out << header;
  });
  expect_load_error(dir.str(), b, opt_b, "not valid JSON");
  before.expect_unchanged(b, opt_b);

  // A valid safetensors file that is not a checkpoint (the model's weights, as save_state_dict
  // writes them).
  io::save_state_dict(path, a);
  expect_load_error(dir.str(), b, opt_b, "not a distop checkpoint");
  before.expect_unchanged(b, opt_b);
}

TEST(Checkpoint, AnotherModelsCheckpointIsAnErrorAndChangesNothing) {
  SharedDir dir;
  Model<double> a(1);
  optim::SGD<double> opt_a(a.parameters(), kOptions);
  train(a, opt_a, 0, 2);
  io::save_checkpoint(dir.str(), a, opt_a, {});

  Model<double> wrong_shape(3, /*fc2_out=*/4);
  optim::SGD<double> opt_ws(wrong_shape.parameters(), kOptions);
  train(wrong_shape, opt_ws, 0, 1);
  const Snapshot<double> ws(wrong_shape, opt_ws);
  expect_load_error(dir.str(), wrong_shape, opt_ws, "has shape [3, 5]");
  ws.expect_unchanged(wrong_shape, opt_ws);

  Model<double> missing_layer(3, 3, /*with_fc2=*/false);
  optim::SGD<double> opt_ml(missing_layer.parameters(), kOptions);
  expect_load_error(dir.str(), missing_layer, opt_ml, "which the model (or its optimizer) lacks");

  Model<double> more(3, 3, true, /*with_extra=*/true);
  optim::SGD<double> opt_more(more.parameters(), kOptions);
  const Snapshot<double> m(more, opt_more);
  expect_load_error(dir.str(), more, opt_more, "has no tensor 'extra'");
  m.expect_unchanged(more, opt_more);

  Model<float> single(1);
  optim::SGD<float> opt_f(single.parameters(), kOptions);
  expect_load_error(dir.str(), single, opt_f, "has dtype F64");
}

TEST(Checkpoint, AnotherOptimizersCheckpointIsAnErrorNamingBothAndChangesNothing) {
  SharedDir dir;
  Model<double> a(1);
  optim::Adam<double> adam(a.parameters(), {.lr = 0.01});
  train(a, adam, 0, 2);
  io::save_checkpoint(dir.str(), a, adam, {});

  Model<double> b(7);
  optim::SGD<double> sgd(b.parameters(), kOptions);
  train(b, sgd, 0, 1);
  const Snapshot<double> before(b, sgd);
  expect_load_error(dir.str(), b, sgd,
                    "holds the state of optimizer Adam, which cannot be loaded into optimizer SGD");
  before.expect_unchanged(b, sgd);

  // The same optimizer with other parameter groups.
  auto grouped = two_groups<double, optim::Adam<double>>(b, {}, {});
  const Snapshot<double> before_grouped(b, *grouped);
  expect_load_error(dir.str(), b, *grouped, "holds 1 parameter groups of its optimizer");
  before_grouped.expect_unchanged(b, *grouped);
  const auto ps = b.parameters();
  optim::Adam<double> reordered(std::vector<Var<double>>(ps.rbegin(), ps.rend()));
  expect_load_error(dir.str(), b, reordered, "parameter group 0 holds the parameters");
}

// Rewrites the checkpoint of a double model on rank 0: `edit` changes its metadata, `drop` names a
// tensor to leave out.
void tamper(const std::string& dir, const std::function<void(io::Metadata&)>& edit,
            const std::string& drop = "") {
  on_rank0([&] {
    const std::string path = io::checkpoint_path(dir);
    std::vector<std::string> names;
    std::vector<Shape> shapes;
    std::vector<std::vector<double>> data;
    io::Metadata metadata;
    {
      const auto file = io::SafetensorsFile::open(path);
      metadata = file.metadata();
      for (const auto& name : file.names()) {
        if (name == drop) continue;
        names.push_back(name);
        shapes.push_back(file.shape(name));
        data.push_back(file.read<double>(name));
      }
    }
    std::vector<io::TensorEntry> entries;
    for (std::size_t i = 0; i < names.size(); ++i)
      entries.emplace_back(names[i], shapes[i], data[i].data());
    edit(metadata);
    // Without the metadata's own checksum, which the edit would break: the checks under test are
    // the loader's.
    metadata.erase(io::checksum_key("__metadata__"));
    io::write_safetensors(path, entries, metadata);
  });
}

TEST(Checkpoint, StateTheOptimizerWouldRejectIsAnErrorAndChangesNothing) {
  SharedDir dir;
  Model<double> a(1);
  optim::Adam<double> adam(a.parameters(), {.lr = 0.01});
  train(a, adam, 0, 2);
  Model<double> b(7);
  optim::Adam<double> opt_b(b.parameters());
  train(b, opt_b, 0, 1);
  const Snapshot<double> before(b, opt_b);
  const auto expect_rejected = [&](const std::function<void(io::Metadata&)>& edit,
                                   const std::string& drop, const std::string& what) {
    io::save_checkpoint(dir.str(), a, adam, {});
    tamper(dir.str(), edit, drop);
    expect_load_error(dir.str(), b, opt_b, what);
    before.expect_unchanged(b, opt_b);
  };
  expect_rejected([](io::Metadata& m) { m["optimizer.group.0.lr"] = "-1"; }, "",
                  "learning rate must be finite and >= 0 (option lr)");
  expect_rejected([](io::Metadata& m) { m["optimizer.group.0.beta1"] = "x"; }, "",
                  "expected a number");
  expect_rejected([](io::Metadata& m) { m.erase("optimizer.group.0.eps"); }, "",
                  "has no option 'eps'");
  expect_rejected([](io::Metadata& m) { m["optimizer.group.0.momentum"] = "0.9"; }, "",
                  "has option 'momentum'");
  expect_rejected([](io::Metadata& m) { m["optimizer.group.0.amsgrad"] = "1"; }, "",
                  "max_exp_avg_sq");
  expect_rejected([](io::Metadata& m) { m["optimizer.step.fc1.weight"] = "1.5"; }, "",
                  "whole number");
  expect_rejected([](io::Metadata& m) { m["optimizer.step.nothing"] = "1"; }, "",
                  "of a parameter 'nothing' that the optimizer lacks");
  expect_rejected([](io::Metadata& m) { m["optimizer.group.3.lr"] = "1"; }, "",
                  "of a parameter group it does not have");
  expect_rejected([](io::Metadata&) {}, "optimizer.exp_avg_sq.fc2.bias", "expected tensors");
  expect_rejected([](io::Metadata& m) { m["format_version"] = "1"; }, "",
                  "has format version 1, this distop reads version 2");
  expect_rejected([](io::Metadata& m) { m["scheduler.last_step"] = "4"; }, "",
                  "no metadata 'scheduler.base_lr.0'");
}

// A tensor's bytes changed on disk (a bit flip, a bad block): its CRC-32 no longer matches, and
// every rank raises an error naming it before anything changes. A file without checksums (as
// PyTorch writes them) still loads.
TEST(Checkpoint, ACorruptTensorIsAnErrorNamingItAndChangesNothing) {
  SharedDir dir;
  Model<double> a(1);
  optim::SGD<double> opt_a(a.parameters(), kOptions);
  train(a, opt_a, 0, 2);
  Model<double> b(7);
  optim::SGD<double> opt_b(b.parameters(), kOptions);
  train(b, opt_b, 0, 1);
  const Snapshot<double> before(b, opt_b);
  io::save_checkpoint(dir.str(), a, opt_a, {});
  const std::string path = io::checkpoint_path(dir.str());
  on_rank0([&] {
    const auto file = io::SafetensorsFile::open(path);
    EXPECT_EQ(file.metadata().count(io::checksum_key("fc2.weight")), 1u);
    // Flip the bytes of the last 8 bytes of the file: the last tensor in the data buffer.
    std::fstream f(path, std::ios::binary | std::ios::in | std::ios::out);
    f.seekg(-8, std::ios::end);
    char bytes[8];
    f.read(bytes, 8);
    for (char& c : bytes) c = static_cast<char>(~c);
    f.seekp(-8, std::ios::end);
    f.write(bytes, 8);
  });
  expect_load_error(dir.str(), b, opt_b, "is corrupt: the CRC-32 of its");
  before.expect_unchanged(b, opt_b);

  // Without checksums (PyTorch's files have none) the same bytes load as they are.
  io::save_checkpoint(dir.str(), a, opt_a, {});
  tamper(dir.str(), [](io::Metadata& m) {
    for (auto it = m.begin(); it != m.end();)
      it = it->first.rfind("distop.crc32.", 0) == 0 ? m.erase(it) : std::next(it);
  });
  on_rank0([&] {
    EXPECT_EQ(io::SafetensorsFile::open(path).metadata().count(io::checksum_key("fc2.weight")), 0u);
  });
  EXPECT_EQ(io::load_checkpoint(dir.str(), b, opt_b).epoch, 0);
  EXPECT_EQ(b.local(), a.local());
}

TEST(Checkpoint, ALeftoverTemporaryFileFromACrashedWriteIsIgnored) {
  SharedDir dir;
  Model<double> a(1);
  optim::SGD<double> opt(a.parameters(), kOptions);
  train(a, opt, 0, 1);
  io::save_checkpoint(dir.str(), a, opt, {.epoch = 1});
  const auto first = a.local();
  // What a writer killed half way leaves: the first half of a newer checkpoint under its
  // temporary name.
  const std::string path = io::checkpoint_path(dir.str());
  on_rank0([&] {
    const std::string tmp = path + ".tmp.999999";
    std::filesystem::copy_file(path, tmp);
    std::filesystem::resize_file(tmp, std::filesystem::file_size(tmp) / 2);
  });
  train(a, opt, 1, 1);
  Model<double> b(5);
  optim::SGD<double> opt_b(b.parameters(), kOptions);
  EXPECT_EQ(io::load_checkpoint(dir.str(), b, opt_b).epoch, 1);
  EXPECT_EQ(b.local(), first);

  // And the next save replaces the checkpoint as usual.
  io::save_checkpoint(dir.str(), a, opt, {.epoch = 2});
  EXPECT_EQ(io::load_checkpoint(dir.str(), b, opt_b).epoch, 2);
  EXPECT_EQ(b.local(), a.local());
}

// Every rank reads the file on its own; if ranks read different contents (the file replaced
// between their reads, here two directories), they all raise an error rather than train apart.
TEST(Checkpoint, RanksThatReadDifferentContentsAllFail) {
  DISTOP_REQUIRE_RANKS(2);
  SharedDir one, two;
  Model<double> a(1);
  optim::SGD<double> opt(a.parameters(), kOptions);
  io::save_checkpoint(one.str(), a, opt, {.epoch = 1});
  train(a, opt, 0, 1);
  io::save_checkpoint(two.str(), a, opt, {.epoch = 1});
  Model<double> b(5);
  optim::SGD<double> opt_b(b.parameters(), kOptions);
  const Snapshot<double> before(b, opt_b);
  expect_load_error(world_rank() == 0 ? one.str() : two.str(), b, opt_b,
                    "changed while it was read");
  before.expect_unchanged(b, opt_b);
}

TEST(Checkpoint, SaveErrorsAreRaisedOnEveryRank) {
  SharedDir dir;
  Model<double> a(1);
  optim::SGD<double> opt(a.parameters(), kOptions);
  // The checkpoint directory is a file.
  on_rank0([&] { std::ofstream(dir.file("not_a_dir")) << "x"; });
  EXPECT_THROW(io::save_checkpoint(dir.file("not_a_dir"), a, opt, {}), Error);
  // A parameter name in the optimizer's namespace.
  ReservedNames<double> reserved;
  optim::SGD<double> reserved_opt(reserved.parameters(), kOptions);
  EXPECT_THROW(io::save_checkpoint(dir.str(), reserved, reserved_opt, {}), Error);
  // An optimizer parameter that is none of the model's, so without a name.
  auto params = a.parameters();
  params.push_back(
      Var<double>(DistTensor<double>(TensorSpace(Shape{2, 3}, weight_partition())), true));
  optim::SGD<double> stray(params, kOptions);
  EXPECT_THROW(io::save_checkpoint(dir.str(), a, stray, {}), Error);
  // A scheduler state that is not one base learning rate per group.
  EXPECT_THROW(
      io::save_checkpoint(dir.str(), a, opt, {.scheduler = optim::LRSchedulerState{1, {0.1, 0.2}}}),
      Error);
}

}  // namespace
