#pragma once
// The training driver shared by the example programs: command-line options, the SGD loop with
// progress, loss log, metrics CSV and checkpoints, evaluation, and main()'s error handling.
//
// A Model provides
//   TensorSpace input_space(std::int64_t batch) const;
//   bool holds_output() const;                       // this rank holds the logits
//   Var<float> forward(Tape&, const Var<float>&);
//   std::vector<Var<float>> parameters() const;
//   io::NamedParameters<float> named_parameters() const;
//   std::string describe() const;
// and a batch loader fills this rank's box of a batch:
//   void load(const data::Dataset&, const std::vector<std::int64_t>& order,
//             const data::BatchRange&, const TensorSpace&, DistTensor<float>& x);

#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <distop/distop.hpp>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "metrics.hpp"
#include "progress.hpp"

namespace distop::examples {

struct TrainOptions {
  std::string data = data::kFashionMnistDir;
  int epochs = 5;
  std::int64_t steps = 0;  // 0: no limit
  std::int64_t batch_size = 32;
  double lr = 0.01;
  std::string lr_schedule = "constant";  // or "cosine"
  double momentum = 0.9;
  double weight_decay = 0.0;
  std::uint64_t seed = 1;
  bool no_shuffle = false;
  std::string init;
  std::string save;
  std::string loss_log;
  std::string metrics;
  std::string checkpoint_dir;
  std::int64_t checkpoint_every = 0;  // steps; 0: at the end of each epoch (and at a --steps stop)
  bool resume = false;
  bool quiet = false;
};

inline void add_training_options(CLI::App& app, TrainOptions& o) {
  app.add_option("--data", o.data, "Directory of the Fashion-MNIST IDX files")
      ->capture_default_str();
  app.add_option("--epochs", o.epochs, "Passes over the training set")->capture_default_str();
  app.add_option("--steps", o.steps, "Stop after this many steps in all (0: no limit)")
      ->capture_default_str();
  app.add_option("--batch-size", o.batch_size, "Examples per step")->capture_default_str();
  app.add_option("--lr", o.lr, "SGD learning rate")->capture_default_str();
  app.add_option(
         "--lr-schedule", o.lr_schedule,
         "constant, or cosine: at step t of the T steps of --epochs, lr (1 + cos(pi t / T)) / 2")
      ->check(CLI::IsMember({"constant", "cosine"}))
      ->capture_default_str();
  app.add_option("--momentum", o.momentum, "SGD momentum (PyTorch's definition)")
      ->capture_default_str();
  app.add_option("--weight-decay", o.weight_decay, "L2 weight decay")->capture_default_str();
  app.add_option("--seed", o.seed, "Seed of the initial weights and the shuffling")
      ->capture_default_str();
  app.add_flag("--no-shuffle", o.no_shuffle, "Visit the training set in file order");
  app.add_option("--init", o.init, "Initial weights (safetensors, PyTorch state_dict names)");
  app.add_option("--save", o.save, "Write the trained weights here (safetensors)");
  app.add_option("--loss-log", o.loss_log, "Write each step's loss here (rank 0)");
  app.add_option("--metrics", o.metrics,
                 "Write per-epoch loss, accuracies and time here as CSV (rank 0; default "
                 "<checkpoint-dir>/metrics.csv when --checkpoint-dir is given)");
  app.add_option("--checkpoint-dir", o.checkpoint_dir,
                 "Keep the latest checkpoint (weights, optimizer state, position) here");
  app.add_option("--checkpoint-every", o.checkpoint_every,
                 "Also checkpoint every this many steps (0: only at the end of each epoch)")
      ->capture_default_str();
  app.add_flag("--resume", o.resume, "Continue from the checkpoint in --checkpoint-dir");
  app.add_flag("--quiet", o.quiet, "No progress output");
}

namespace detail {

struct EpochMetrics {
  double loss = 0;
  std::int64_t correct = 0;
  std::int64_t seen = 0;
  double accuracy() const {
    return seen > 0 ? static_cast<double>(correct) / static_cast<double>(seen) : 0.0;
  }
};

// Loss and accuracy over a whole data set, without recording gradients. Result on rank 0.
template <class Model, class Load>
EpochMetrics evaluate(Model& model, const data::Dataset& d, Load& load) {
  EpochMetrics m;
  const std::int64_t batch = 1000;
  std::vector<std::int64_t> order(static_cast<std::size_t>(d.size));
  for (std::int64_t i = 0; i < d.size; ++i) order[static_cast<std::size_t>(i)] = i;
  std::vector<std::int32_t> labels;
  for (const auto& range : data::batch_ranges(d.size, batch, false)) {
    const auto space = model.input_space(range.size());
    auto x = DistTensor<float>::uninitialized(space);
    load(d, order, range, space, x);
    labels.clear();
    if (model.holds_output())
      for (std::int64_t i = 0; i < range.size(); ++i)
        labels.push_back(
            d.labels[static_cast<std::size_t>(order[static_cast<std::size_t>(range.begin + i)])]);
    Tape tape;
    auto logits = model.forward(tape, Var<float>(x));
    auto loss = loss::cross_entropy(tape, logits, labels);
    tape.clear();
    if (model.holds_output()) {
      m.loss += loss.value().local().to_vector()[0] * static_cast<double>(range.size());
      m.correct += loss::count_correct(logits.value(), labels);
    }
    m.seen += range.size();
  }
  m.loss /= static_cast<double>(std::max<std::int64_t>(m.seen, 1));
  return m;
}

}  // namespace detail

// Trains `model` with SGD on `train` and evaluates it on `test`. Collective over MPI_COMM_WORLD.
template <class Model, class Load>
int train_and_evaluate(const char* name, Model& model, const TrainOptions& o,
                       const data::Dataset& train, const data::Dataset& test, Load load,
                       io::Metadata save_metadata) {
  int rank = 0, ranks = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  const bool talk = rank == 0 && !o.quiet;
  DISTOP_CHECK(o.batch_size >= 1 && o.epochs >= 0 && o.steps >= 0 && o.checkpoint_every >= 0, name,
               "--batch-size must be positive and --epochs, --steps, --checkpoint-every "
               "non-negative");
  DISTOP_CHECK(!o.resume || !o.checkpoint_dir.empty(), name, "--resume needs --checkpoint-dir");
  DISTOP_CHECK(!(o.resume && !o.init.empty()), name,
               "--resume and --init both set the weights; give one of them");
  DISTOP_CHECK(test.rows == train.rows && test.cols == train.cols, name, "the test images are ",
               test.rows, " x ", test.cols, " but the training images ", train.rows, " x ",
               train.cols);
  if (!o.save.empty()) {
    // Found out now rather than after the whole run: --save must name a writable directory.
    comm::agree(MPI_COMM_WORLD, name, [&] {
      if (rank != 0) return;
      const auto dir = std::filesystem::absolute(o.save).parent_path();
      DISTOP_CHECK(std::filesystem::is_directory(dir) && ::access(dir.c_str(), W_OK) == 0, name,
                   "cannot write --save ", o.save, ": ", dir.string(),
                   " is not a writable directory");
    });
  }
  if (!o.init.empty()) io::load_parameters(o.init, io::named_parameters(model));
  if (talk)
    std::fprintf(stderr, "distop %s: %d rank%s, %lld training and %lld test images\n%s", name,
                 ranks, ranks == 1 ? "" : "s", static_cast<long long>(train.size),
                 static_cast<long long>(test.size), model.describe().c_str());

  optim::SGDOptions sgd;
  sgd.lr = o.lr;
  sgd.momentum = o.momentum;
  sgd.weight_decay = o.weight_decay;
  optim::SGD<float> opt(model.parameters(), sgd);
  const auto named = io::named_parameters(model);
  data::Sampler sampler(train.size, o.batch_size, {!o.no_shuffle, false, o.seed});
  const auto batches = sampler.batches();
  const auto per_epoch = static_cast<std::int64_t>(batches.size());
  // The settings a checkpoint's position and schedule depend on; a resumed run must repeat them.
  const io::Metadata settings{{"batch_size", std::to_string(o.batch_size)},
                              {"shuffle", o.no_shuffle ? "false" : "true"},
                              {"epochs", std::to_string(o.epochs)},
                              {"lr_schedule", o.lr_schedule}};
  io::CheckpointInfo position;
  position.seed = o.seed;
  if (o.resume) {
    position = io::load_checkpoint(o.checkpoint_dir, named, opt);
    // The same on every rank (load_checkpoint agrees on what it read), so are these checks.
    const std::string from = "the checkpoint in " + o.checkpoint_dir + " was made with ";
    DISTOP_CHECK(position.seed == o.seed, name, from, "--seed ", position.seed, ", not ", o.seed);
    for (const auto& [key, value] : settings) {
      const auto it = position.metadata.find(key);
      DISTOP_CHECK(it == position.metadata.end() || it->second == value, name, from, key, " ",
                   it->second, ", not ", value, "; resume with the settings of the run");
    }
    DISTOP_CHECK(
        opt.options().momentum == o.momentum && opt.options().weight_decay == o.weight_decay, name,
        from, "--momentum ", opt.options().momentum, " and --weight-decay ",
        opt.options().weight_decay, ", not ", o.momentum, " and ", o.weight_decay);
    DISTOP_CHECK(position.epoch >= 0 && position.step_in_epoch >= 0 &&
                     position.step_in_epoch < per_epoch &&
                     position.global_step == position.epoch * per_epoch + position.step_in_epoch,
                 name, "the checkpoint in ", o.checkpoint_dir, " is at epoch ", position.epoch,
                 ", step ", position.step_in_epoch, " of it, ", position.global_step,
                 " steps in all, which does not fit ", per_epoch, " steps per epoch");
    if (talk)
      std::fprintf(stderr, "resuming at epoch %lld, step %lld of it (%lld steps done)\n",
                   static_cast<long long>(position.epoch + 1),
                   static_cast<long long>(position.step_in_epoch),
                   static_cast<long long>(position.global_step));
  }
  if (rank == 0 && !o.checkpoint_dir.empty()) {
    std::error_code ec;  // a failure shows when the metrics or the checkpoint are written
    std::filesystem::create_directories(o.checkpoint_dir, ec);
  }
  std::string metrics_path = o.metrics;
  if (metrics_path.empty() && !o.checkpoint_dir.empty())
    metrics_path = o.checkpoint_dir + "/metrics.csv";
  auto csv = MetricsCsv::open(
      MPI_COMM_WORLD, metrics_path,
      o.resume ? std::optional<int>(static_cast<int>(position.epoch)) : std::nullopt);

  auto log =
      LossLog::open(MPI_COMM_WORLD, o.loss_log,
                    o.resume ? std::optional<std::int64_t>(position.global_step) : std::nullopt);
  auto checkpoint = [&](std::int64_t epoch, std::int64_t in_epoch) {
    if (o.checkpoint_dir.empty()) return;
    io::CheckpointInfo info;
    info.epoch = epoch;
    info.step_in_epoch = in_epoch;
    info.global_step = position.global_step;
    info.seed = o.seed;
    info.metadata = settings;
    info.metadata.emplace("model", name);
    io::save_checkpoint(o.checkpoint_dir, named, opt, info);
  };

  std::int64_t& step = position.global_step;
  bool stop = o.steps > 0 && step >= o.steps;
  // The learning rate of step t (0-based) of the run's --epochs: a function of t alone (not of
  // --steps, which only stops early), so that a resumed run continues the schedule exactly.
  const std::int64_t total_steps = o.epochs * static_cast<std::int64_t>(sampler.batches().size());
  auto lr_at = [&](std::int64_t t) {
    if (o.lr_schedule != "cosine" || total_steps <= 0) return o.lr;
    constexpr double kPi = 3.14159265358979323846;
    return o.lr * 0.5 *
           (1.0 + std::cos(kPi * static_cast<double>(t) / static_cast<double>(total_steps)));
  };
  std::vector<std::int32_t> labels;
  for (std::int64_t epoch = position.epoch; epoch < o.epochs && !stop; ++epoch) {
    const auto order = sampler.order(static_cast<std::uint64_t>(epoch));
    const std::int64_t first = epoch == position.epoch ? position.step_in_epoch : 0;
    const std::int64_t last =
        o.steps > 0 ? std::min<std::int64_t>(per_epoch, first + (o.steps - step)) : per_epoch;
    Progress progress(talk, static_cast<int>(epoch + 1), o.epochs, per_epoch);
    const auto start = std::chrono::steady_clock::now();
    detail::EpochMetrics m;
    for (std::int64_t b = first; b < last; ++b) {
      const auto& range = batches[static_cast<std::size_t>(b)];
      const auto space = model.input_space(range.size());
      auto x = DistTensor<float>::uninitialized(space);
      load(train, order, range, space, x);
      labels.clear();
      if (model.holds_output())
        for (std::int64_t i = 0; i < range.size(); ++i)
          labels.push_back(train.labels[static_cast<std::size_t>(
              order[static_cast<std::size_t>(range.begin + i)])]);
      Tape tape;
      auto logits = model.forward(tape, Var<float>(x));
      auto loss = loss::cross_entropy(tape, logits, labels);
      backward(tape, loss);
      opt.set_lr(lr_at(step));
      opt.step();
      opt.zero_grad();
      ++step;
      if (model.holds_output()) {
        const double l = loss.value().local().to_vector()[0];
        m.loss += l * static_cast<double>(range.size());
        m.correct += loss::count_correct(logits.value(), labels);
        log.append(step, l);
      }
      m.seen += range.size();
      progress.update(b + 1, m.seen, m.loss / static_cast<double>(m.seen), m.accuracy());
      if (o.checkpoint_every > 0 && step % o.checkpoint_every == 0 && b + 1 < per_epoch)
        checkpoint(epoch, b + 1);
    }
    stop = o.steps > 0 && step >= o.steps;
    const bool finished = last == per_epoch;
    if (finished) {
      // The epoch's row is written before the checkpoint that moves past the epoch: a run that
      // dies between the two resumes inside the epoch, and the resumed run writes the row again.
      const double seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      const auto t = detail::evaluate(model, test, load);
      csv.append(static_cast<int>(epoch + 1),
                 m.loss / static_cast<double>(std::max<std::int64_t>(m.seen, 1)), m.accuracy(),
                 t.accuracy(), seconds);
      if (talk)
        std::fprintf(stderr, "epoch %lld: test accuracy %.2f%% (loss %.4f)\n",
                     static_cast<long long>(epoch + 1), 100.0 * t.accuracy(), t.loss);
    }
    checkpoint(finished ? epoch + 1 : epoch, finished ? 0 : last);
  }

  const auto t = detail::evaluate(model, test, load);
  if (talk)
    std::fprintf(stderr, "test accuracy %.2f%% (loss %.4f) after %lld steps\n",
                 100.0 * t.accuracy(), t.loss, static_cast<long long>(step));
  if (!o.save.empty()) {
    save_metadata.emplace("steps", std::to_string(step));
    io::save_parameters(o.save, named, save_metadata);
    if (talk) std::fprintf(stderr, "saved %s\n", o.save.c_str());
  }
  return 0;
}

// main() of an example: sets up distop, parses the options (every rank parses the same arguments,
// so every rank leaves alike on a bad flag) and runs `run`. An error raised on every rank (as
// distop's are) becomes a message from rank 0 and exit status 1; one raised on some ranks only
// aborts the job with each such rank's message (Environment::report_error).
inline int example_main(int argc, char** argv, CLI::App& app, const char* name,
                        const std::function<int()>& run) {
  distop::Environment env(argc, argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return rank == 0 ? app.exit(e) : (e.get_exit_code() == 0 ? 0 : 2);
  }
  try {
    return run();
  } catch (const std::exception& e) {
    return env.report_error(e, name);
  }
}

}  // namespace distop::examples
