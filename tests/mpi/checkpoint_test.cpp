// Training checkpoints: weights, momentum buffers, options and loop position round-trip exactly,
// training resumed from a checkpoint continues bit for bit as an uninterrupted run, and bad files
// or another model's checkpoint give the same Error on every rank with nothing changed.
#include "distop/io/checkpoint.hpp"

#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "distop/nn/distributed_linear.hpp"
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

// Two distributed linear layers and a parameter that the optimizer holds but never steps.
template <class T>
struct Model {
  Model(std::uint64_t seed, std::int64_t fc2_out = 3, bool with_fc2 = true, bool with_extra = false)
      : fc1(7, 5, weight_partition(), {.seed = seed}),
        frozen(DistTensor<T>(TensorSpace(Shape{4, 6}, fc1.weight_partition())), true) {
    if (with_fc2)
      fc2 = std::make_unique<nn::DistributedLinear<T>>(5, fc2_out, fc1.weight_partition(),
                                                       nn::LinearOptions{.seed = seed + 1});
    if (with_extra)
      extra = Var<T>(DistTensor<T>(TensorSpace(Shape{2, 3}, fc1.weight_partition())), true);
  }
  io::NamedParameters<T> named() const {
    io::NamedParameters<T> n{{"fc1.weight", fc1.parameters()[0]},
                             {"fc1.bias", fc1.parameters()[1]}};
    if (fc2) {
      n.emplace_back("fc2.weight", fc2->parameters()[0]);
      n.emplace_back("fc2.bias", fc2->parameters()[1]);
    }
    n.emplace_back("frozen", frozen);
    if (extra.defined()) n.emplace_back("extra", extra);
    return n;
  }
  std::vector<Var<T>> parameters() const {
    std::vector<Var<T>> ps;
    for (const auto& [name, p] : named()) ps.push_back(p);
    return ps;
  }
  // This rank's boxes, in named() order.
  std::vector<std::vector<T>> local() const {
    std::vector<std::vector<T>> v;
    for (const auto& [name, p] : named()) v.push_back(p.value().local().to_vector());
    return v;
  }

  nn::DistributedLinear<T> fc1;
  std::unique_ptr<nn::DistributedLinear<T>> fc2;
  Var<T> frozen;
  Var<T> extra;
};

// `steps` SGD steps with made-up gradients that depend on the current values and the step (on
// every rank, as backward gives ranks outside a parameter's partition empty gradients).
template <class T>
void train(const Model<T>& model, optim::SGD<T>& opt, int first_step, int steps) {
  for (int s = first_step; s < first_step + steps; ++s) {
    for (const auto& [name, p] : model.named()) {
      if (name == "frozen") continue;
      auto v = p.value().local().to_vector();
      for (std::size_t k = 0; k < v.size(); ++k)
        v[k] =
            static_cast<T>(std::cos(static_cast<double>(v[k]) * (s + 1) + static_cast<double>(k)));
      p.grad().local().copy_from(Tensor<T>::from_vector(p.value().local().shape(), v));
    }
    opt.step();
    opt.zero_grad();
  }
}

template <class T>
std::vector<std::optional<std::vector<T>>> buffers(const optim::SGD<T>& opt) {
  std::vector<std::optional<std::vector<T>>> out;
  for (const auto& b : opt.momentum_buffers())
    out.push_back(b ? std::optional<std::vector<T>>(b->to_vector()) : std::nullopt);
  return out;
}

const optim::SGDOptions kOptions{
    .lr = 0.05, .momentum = 0.9, .dampening = 0.1, .weight_decay = 1e-3};

TEST(Checkpoint, ResumedTrainingIsBitIdenticalToAnUninterruptedRun) {
  SharedDir dir;
  Model<double> a(1);
  optim::SGD<double> opt_a(a.parameters(), kOptions);
  train(a, opt_a, 0, 3);
  io::CheckpointInfo info{.epoch = 2,
                          .step_in_epoch = 17,
                          .global_step = 123,
                          .seed = 18446744073709551615ull,
                          .metadata = {{"model", "two layers"}}};
  io::save_checkpoint(dir.str(), a.named(), opt_a, info);
  const auto saved_values = a.local();
  const auto saved_buffers = buffers(opt_a);
  EXPECT_FALSE(saved_buffers.back().has_value());  // "frozen" was never stepped
  train(a, opt_a, 3, 4);

  // Another initialisation and other options, all replaced by the checkpoint's.
  Model<double> b(99);
  optim::SGD<double> opt_b(b.parameters(), {.lr = 1});
  const auto loaded = io::load_checkpoint(dir.str(), b.named(), opt_b);
  EXPECT_EQ(loaded.epoch, 2);
  EXPECT_EQ(loaded.step_in_epoch, 17);
  EXPECT_EQ(loaded.global_step, 123);
  EXPECT_EQ(loaded.seed, info.seed);
  EXPECT_EQ(loaded.metadata, info.metadata);
  EXPECT_EQ(opt_b.options().lr, kOptions.lr);
  EXPECT_EQ(opt_b.options().momentum, kOptions.momentum);
  EXPECT_EQ(opt_b.options().dampening, kOptions.dampening);
  EXPECT_EQ(opt_b.options().weight_decay, kOptions.weight_decay);
  EXPECT_EQ(opt_b.options().nesterov, kOptions.nesterov);
  EXPECT_EQ(b.local(), saved_values);
  EXPECT_EQ(buffers(opt_b), saved_buffers);

  train(b, opt_b, 3, 4);
  EXPECT_EQ(b.local(), a.local());
  EXPECT_EQ(buffers(opt_b), buffers(opt_a));
}

TEST(Checkpoint, IsASafetensorsFileOfGlobalTensors) {
  SharedDir dir;
  Model<float> a(1);
  optim::SGD<float> opt(a.parameters(), kOptions);
  train(a, opt, 0, 1);
  io::save_checkpoint(dir.str(), a.named(), opt, {});
  const auto file = io::SafetensorsFile::open(io::checkpoint_path(dir.str()));
  EXPECT_EQ(io::checkpoint_path(dir.str()), dir.file("checkpoint.safetensors"));
  EXPECT_EQ(file.names(), (std::vector<std::string>{
                              "fc1.bias", "fc1.weight", "fc2.bias", "fc2.weight", "frozen",
                              "optimizer.momentum.fc1.bias", "optimizer.momentum.fc1.weight",
                              "optimizer.momentum.fc2.bias", "optimizer.momentum.fc2.weight"}));
  EXPECT_EQ(file.shape("optimizer.momentum.fc1.weight"), (Shape{5, 7}));
  EXPECT_EQ(file.dtype("fc2.weight"), "F32");
  EXPECT_EQ(file.metadata().at("format"), "distop.checkpoint");
}

// The parameters and momentum buffers of `model`, to check that a failed load changed nothing.
template <class T>
struct Snapshot {
  Snapshot(const Model<T>& m, const optim::SGD<T>& opt)
      : values(m.local()), momenta(buffers(opt)), lr(opt.options().lr) {}
  std::vector<std::vector<T>> values;
  std::vector<std::optional<std::vector<T>>> momenta;
  double lr;
  void expect_unchanged(const Model<T>& m, const optim::SGD<T>& opt) const {
    EXPECT_EQ(m.local(), values);
    EXPECT_EQ(buffers(opt), momenta);
    EXPECT_EQ(opt.options().lr, lr);
  }
};

// Expects load_checkpoint to throw distop::Error mentioning `what` on this rank (so on all).
template <class T>
void expect_load_error(const std::string& dir, const Model<T>& m, optim::SGD<T>& opt,
                       const std::string& what) {
  try {
    io::load_checkpoint(dir, m.named(), opt);
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

  io::save_checkpoint(dir.str(), a.named(), opt_a, {});
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

  // A valid safetensors file that is not a checkpoint (as save_parameters writes).
  io::save_parameters(path, a.named());
  expect_load_error(dir.str(), b, opt_b, "not a distop checkpoint");
  before.expect_unchanged(b, opt_b);
}

TEST(Checkpoint, AnotherModelsCheckpointIsAnErrorAndChangesNothing) {
  SharedDir dir;
  Model<double> a(1);
  optim::SGD<double> opt_a(a.parameters(), kOptions);
  train(a, opt_a, 0, 2);
  io::save_checkpoint(dir.str(), a.named(), opt_a, {});

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

TEST(Checkpoint, ALeftoverTemporaryFileFromACrashedWriteIsIgnored) {
  SharedDir dir;
  Model<double> a(1);
  optim::SGD<double> opt(a.parameters(), kOptions);
  train(a, opt, 0, 1);
  io::save_checkpoint(dir.str(), a.named(), opt, {.epoch = 1});
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
  EXPECT_EQ(io::load_checkpoint(dir.str(), b.named(), opt_b).epoch, 1);
  EXPECT_EQ(b.local(), first);

  // And the next save replaces the checkpoint as usual.
  io::save_checkpoint(dir.str(), a.named(), opt, {.epoch = 2});
  EXPECT_EQ(io::load_checkpoint(dir.str(), b.named(), opt_b).epoch, 2);
  EXPECT_EQ(b.local(), a.local());
}

// Every rank reads the file on its own; if ranks read different contents (the file replaced
// between their reads, here two directories), they all raise an error rather than train apart.
TEST(Checkpoint, RanksThatReadDifferentContentsAllFail) {
  DISTOP_REQUIRE_RANKS(2);
  SharedDir one, two;
  Model<double> a(1);
  optim::SGD<double> opt(a.parameters(), kOptions);
  io::save_checkpoint(one.str(), a.named(), opt, {.epoch = 1});
  train(a, opt, 0, 1);
  io::save_checkpoint(two.str(), a.named(), opt, {.epoch = 1});
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
  EXPECT_THROW(io::save_checkpoint(dir.file("not_a_dir"), a.named(), opt, {}), Error);
  // A parameter name in the optimizer's namespace.
  auto named = a.named();
  named[0].first = "optimizer.momentum.x";
  EXPECT_THROW(io::save_checkpoint(dir.str(), named, opt, {}), Error);
  // An optimizer parameter without a name.
  named = a.named();
  named.pop_back();
  EXPECT_THROW(io::save_checkpoint(dir.str(), named, opt, {}), Error);
}

}  // namespace
