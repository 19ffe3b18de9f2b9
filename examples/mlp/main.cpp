// A model-parallel MLP trained on Fashion-MNIST: every weight matrix is split over a 2-D grid of
// ranks (DistributedLinear), and the forward and backward passes move data with Broadcast and
// SumReduce only.
//
//   mpiexec -n 4 build/examples/mlp/mlp --epochs 5
//
// With the same --init file and --no-shuffle the losses agree across rank counts (1, 2, 4) to
// float rounding: the partitioning changes where the arithmetic happens, not what it computes.
#include <CLI/CLI.hpp>
#include <distop/distop.hpp>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "model.hpp"
#include "progress.hpp"

namespace {

using namespace distop;

struct Options {
  std::string data = data::kFashionMnistDir;
  int epochs = 5;
  std::int64_t steps = 0;  // 0: no limit
  std::int64_t batch_size = 32;
  double lr = 0.01;
  double momentum = 0.9;
  double weight_decay = 0.0;
  std::uint64_t seed = 1;
  bool no_shuffle = false;
  std::string hidden = "256,128";
  std::string init;
  std::string save;
  std::string loss_log;
  bool quiet = false;
};

std::vector<std::int64_t> parse_sizes(const std::string& hidden, std::int64_t in, std::int64_t out) {
  std::vector<std::int64_t> sizes{in};
  std::stringstream ss(hidden);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item.empty()) continue;
    std::size_t used = 0;
    long long v = 0;
    try {
      v = std::stoll(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    DISTOP_CHECK(used == item.size() && v > 0, "mlp", "--hidden expects positive integers "
                 "separated by commas, found '", hidden, "'");
    sizes.push_back(v);
  }
  sizes.push_back(out);
  return sizes;
}

// Copies the batch's pixels for this rank's feature block of the input space, and its labels.
void load_batch(const data::Dataset& d, const std::vector<std::int64_t>& order,
                const data::BatchRange& range, const TensorSpace& space, DistTensor<float>& x,
                std::vector<std::int32_t>& labels) {
  const auto& local = space.local_shape();
  labels.resize(static_cast<std::size_t>(range.size()));
  for (std::int64_t i = 0; i < range.size(); ++i)
    labels[i] = d.labels[static_cast<std::size_t>(order[range.begin + i])];
  if (local.numel() == 0) return;
  const auto cols = local[1];
  const auto first = space.local_offset()[1];
  std::vector<float> v(static_cast<std::size_t>(local.numel()));
  for (std::int64_t i = 0; i < range.size(); ++i) {
    const float* img = d.image(order[range.begin + i]);
    std::copy(img + first, img + first + cols, v.begin() + i * cols);
  }
  x.local().copy_from(Tensor<float>::from_vector(local, v));
}

struct Metrics {
  double loss = 0;
  std::int64_t correct = 0;
  std::int64_t seen = 0;
};

// Loss and accuracy over a whole data set, without recording gradients. Result on rank 0.
Metrics evaluate(examples::ModelParallelMlp& model, const data::Dataset& d) {
  Metrics m;
  const std::int64_t batch = 1000;
  std::vector<std::int64_t> order(static_cast<std::size_t>(d.size));
  for (std::int64_t i = 0; i < d.size; ++i) order[i] = i;
  std::vector<std::int32_t> labels;
  for (const auto& range : data::batch_ranges(d.size, batch, false)) {
    const auto space = model.input_space(range.size());
    auto x = DistTensor<float>::uninitialized(space);
    load_batch(d, order, range, space, x, labels);
    Tape tape;
    auto logits = model.forward(tape, Var<float>(x));
    if (!model.holds_output()) labels.clear();
    auto loss = loss::cross_entropy(tape, logits, labels);
    tape.clear();
    if (model.holds_output()) {
      m.loss += loss.value().local().to_vector()[0] * static_cast<double>(range.size());
      m.correct += loss::count_correct(logits.value(), labels);
    }
    m.seen += range.size();
  }
  m.loss /= static_cast<double>(m.seen);
  return m;
}

int run(const Options& o) {
  int rank = 0, ranks = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  const bool talk = rank == 0 && !o.quiet;
  DISTOP_CHECK(o.batch_size >= 1 && o.epochs >= 0 && o.steps >= 0, "mlp",
               "--batch-size must be positive and --epochs, --steps non-negative");

  auto train = data::load_mnist_like_collective(MPI_COMM_WORLD, o.data, true);
  auto test = data::load_mnist_like_collective(MPI_COMM_WORLD, o.data, false);
  const auto sizes = parse_sizes(o.hidden, train.pixels(), 10);
  examples::ModelParallelMlp model(sizes, o.seed);
  if (!o.init.empty()) io::load_parameters(o.init, model.named_parameters());
  if (talk) {
    std::fprintf(stderr, "distop mlp: %d rank%s, %lld training and %lld test images\n%s", ranks,
                 ranks == 1 ? "" : "s", static_cast<long long>(train.size),
                 static_cast<long long>(test.size), model.describe().c_str());
  }

  optim::SGDOptions sgd;
  sgd.lr = o.lr;
  sgd.momentum = o.momentum;
  sgd.weight_decay = o.weight_decay;
  optim::SGD<float> opt(model.parameters(), sgd);
  data::Sampler sampler(train.size, o.batch_size, {!o.no_shuffle, false, o.seed});
  std::FILE* log = nullptr;
  if (rank == 0 && !o.loss_log.empty()) {
    log = std::fopen(o.loss_log.c_str(), "w");
    DISTOP_CHECK(log != nullptr, "mlp", "cannot write the loss log ", o.loss_log);
  }

  std::int64_t step = 0;
  bool stop = o.steps > 0 && step >= o.steps;
  std::vector<std::int32_t> labels;
  for (int epoch = 0; epoch < o.epochs && !stop; ++epoch) {
    const auto order = sampler.order(static_cast<std::uint64_t>(epoch));
    const auto batches = sampler.batches();
    const auto planned =
        o.steps > 0 ? std::min<std::int64_t>(static_cast<std::int64_t>(batches.size()), o.steps - step)
                    : static_cast<std::int64_t>(batches.size());
    examples::Progress progress(talk, epoch + 1, o.epochs, planned);
    Metrics m;
    for (std::int64_t b = 0; b < planned; ++b) {
      const auto& range = batches[static_cast<std::size_t>(b)];
      const auto space = model.input_space(range.size());
      auto x = DistTensor<float>::uninitialized(space);
      load_batch(train, order, range, space, x, labels);
      if (!model.holds_output()) labels.clear();
      Tape tape;
      auto logits = model.forward(tape, Var<float>(x));
      auto loss = loss::cross_entropy(tape, logits, labels);
      backward(tape, loss);
      opt.step();
      opt.zero_grad();
      ++step;
      if (model.holds_output()) {
        const double l = loss.value().local().to_vector()[0];
        m.loss += l * static_cast<double>(range.size());
        m.correct += loss::count_correct(logits.value(), labels);
        if (log) std::fprintf(log, "%lld %.9g\n", static_cast<long long>(step), l);
      }
      m.seen += range.size();
      progress.update(b + 1, m.seen, m.loss / static_cast<double>(m.seen),
                      static_cast<double>(m.correct) / static_cast<double>(m.seen));
    }
    stop = o.steps > 0 && step >= o.steps;
  }
  if (log) std::fclose(log);

  const auto t = evaluate(model, test);
  if (talk)
    std::fprintf(stderr, "test accuracy %.2f%% (loss %.4f) after %lld steps\n",
                 100.0 * static_cast<double>(t.correct) / static_cast<double>(t.seen), t.loss,
                 static_cast<long long>(step));
  if (!o.save.empty()) {
    io::save_parameters(o.save, model.named_parameters(),
                        {{"model", "mlp"}, {"hidden", o.hidden}, {"steps", std::to_string(step)}});
    if (talk) std::fprintf(stderr, "saved %s\n", o.save.c_str());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"Model-parallel MLP on Fashion-MNIST (distop example). Run under mpiexec -n N."};
  app.add_option("--data", o.data, "Directory of the Fashion-MNIST IDX files")->capture_default_str();
  app.add_option("--epochs", o.epochs, "Passes over the training set")->capture_default_str();
  app.add_option("--steps", o.steps, "Stop after this many steps (0: no limit)")->capture_default_str();
  app.add_option("--batch-size", o.batch_size, "Examples per step")->capture_default_str();
  app.add_option("--lr", o.lr, "SGD learning rate")->capture_default_str();
  app.add_option("--momentum", o.momentum, "SGD momentum (PyTorch's definition)")->capture_default_str();
  app.add_option("--weight-decay", o.weight_decay, "L2 weight decay")->capture_default_str();
  app.add_option("--seed", o.seed, "Seed of the initial weights and the shuffling")->capture_default_str();
  app.add_flag("--no-shuffle", o.no_shuffle, "Visit the training set in file order");
  app.add_option("--hidden", o.hidden, "Hidden layer sizes, comma separated")->capture_default_str();
  app.add_option("--init", o.init, "Initial weights (safetensors, PyTorch state_dict names)");
  app.add_option("--save", o.save, "Write the trained weights here (safetensors)");
  app.add_option("--loss-log", o.loss_log, "Write each step's loss here (rank 0)");
  app.add_flag("--quiet", o.quiet, "No progress output");
  int rank = 0;
  distop::Environment env(argc, argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // Every rank parses the same arguments, so every rank leaves here alike.
    return rank == 0 ? app.exit(e) : (e.get_exit_code() == 0 ? 0 : 2);
  }
  try {
    return run(o);
  } catch (const distop::Error& e) {
    // distop agrees on errors collectively, so every rank is here with the same message.
    if (rank == 0) std::fprintf(stderr, "mlp: error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mlp: error on rank %d: %s\n", rank, e.what());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  return 1;
}
