#pragma once
// distop's training driver: the loop of a classification model over an image data set, with
// progress, a loss log, a metrics CSV, checkpoints that resume bit-identically, evaluation and the
// final weights, driven by TrainOptions (train/options.hpp, flags in train/cli.hpp).
//
// A model is an nn::Module<float> that also provides
//   TensorSpace input_space(std::int64_t batch) const;   // where a batch of images lives
//   Var<float> forward(Tape&, const Var<float>& x);      // logits [batch, classes], the batch
//                                                         // axis whole or split, not replicated
//   std::string describe() const;                         // one line per layer, for the log
// and a batch loader fills this rank's box of a batch:
//   void load(const data::Dataset&, const std::vector<std::int64_t>& order,
//             const data::BatchRange&, const TensorSpace&, DistTensor<float>& x);

#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <concepts>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <system_error>
#include <tuple>
#include <vector>

#include "distop/autodiff/apply.hpp"
#include "distop/comm/agree.hpp"
#include "distop/comm/watchdog.hpp"
#include "distop/core/timers.hpp"
#include "distop/core/trace.hpp"
#include "distop/data/distributed_sampler.hpp"
#include "distop/data/idx.hpp"
#include "distop/data/sampler.hpp"
#include "distop/io/checkpoint.hpp"
#include "distop/io/run_directory.hpp"
#include "distop/io/state_dict.hpp"
#include "distop/loss/cross_entropy.hpp"
#include "distop/nn/arithmetic.hpp"
#include "distop/nn/dropout.hpp"
#include "distop/nn/module.hpp"
#include "distop/optim/lr_scheduler.hpp"
#include "distop/parallel/data_parallel.hpp"
#include "distop/parallel/replicas.hpp"
#include "distop/parallel/sharded_optimizer.hpp"
#include "distop/train/metrics.hpp"
#include "distop/train/options.hpp"
#include "distop/train/profile.hpp"
#include "distop/train/progress.hpp"
#include "distop/train/signals.hpp"

namespace distop::train {

// What train::fit needs of a model.
template <class M>
concept ClassificationModel = std::derived_from<M, nn::Module<float>> &&
    requires(M& m, const M& cm, Tape& t, const Var<float>& x, std::int64_t batch) {
  { cm.input_space(batch) } -> std::convertible_to<TensorSpace>;
  { m.forward(t, x) } -> std::same_as<Var<float>>;
  { cm.describe() } -> std::convertible_to<std::string>;
};

// train::fit's extension point for a model trained by a loss of its own instead of the
// cross-entropy of its logits against the labels (examples/simclr's contrastive losses). fit keeps
// the rest: sampling, optimizer, schedule, gradient reducer and --zero, checkpoints and --resume,
// the checkpoint directory's lock, signals, the loss log, --trace and --profile, --save.
template <class Model>
struct CustomLoss {
  // The loss of the step whose batch is `range` of the epoch's example `order` (this replica's
  // share), recorded on `tape`. It is the global batch's loss, the same value on every rank (the
  // convention of loss/contrastive.hpp), not a replica's share: fit seeds backward with the
  // replica count R, so that the reducer's average of the replicas' gradients is the loss's
  // gradient, and logs the loss as it is.
  std::function<Var<float>(Tape& tape, Model& model, const data::Dataset& train,
                           const std::vector<std::int64_t>& order, const data::BatchRange& range,
                           std::int64_t epoch)>
      loss;
  // Settings a checkpoint depends on beyond fit's own; a resumed run must repeat them.
  io::Metadata settings;
  // There is no test evaluation and fit writes no metrics CSV: on_start (before the first step,
  // with the epoch a resumed run continues after, nullopt for a fresh run) and on_epoch (after
  // each finished epoch, with its mean training loss per example and its seconds) let the program
  // keep its own per-epoch record. Called on every rank; either may be empty.
  std::function<void(std::optional<int> resumed_after)> on_start;
  std::function<void(int epoch, double train_loss, double seconds)> on_epoch;
};

namespace detail {

struct EpochMetrics {
  double loss = 0;
  std::int64_t correct = 0;
  std::int64_t seen = 0;
  double accuracy() const {
    return seen > 0 ? static_cast<double>(correct) / static_cast<double>(seen) : 0.0;
  }
};

// The labels of the batch rows that this rank's box of the logits holds (none outside the logits'
// partition): the classes of examples order[range.begin + offset ...].
inline void box_labels(const TensorSpace& logits, const data::Dataset& d,
                       const std::vector<std::int64_t>& order, const data::BatchRange& range,
                       std::vector<std::int32_t>& labels) {
  labels.clear();
  const std::int64_t first = logits.local_offset()[0], rows = logits.local_shape()[0];
  for (std::int64_t i = 0; i < rows; ++i)
    labels.push_back(d.labels[static_cast<std::size_t>(
        order[static_cast<std::size_t>(range.begin + first + i)])]);
}

// A step's loss (the sum of every rank's component, the sum convention), its number of correctly
// classified rows and the stop signals the ranks have caught (StopSignals), summed over the ranks
// by a nonblocking all-reduce that completes
// while the next step computes: the driver consumes step s's totals at step s + 1 (or when it
// flushes, before a checkpoint or an evaluation), so that reading them costs the steps no wait.
class StepTotals {
 public:
  StepTotals() = default;
  StepTotals(const StepTotals&) = delete;
  StepTotals& operator=(const StepTotals&) = delete;
  ~StepTotals() {
    if (request_ != MPI_REQUEST_NULL) MPI_Wait(&request_, MPI_STATUS_IGNORE);
  }
  // Starts the sums of this step (after taking() the previous one's).
  void start(std::int64_t step, std::int64_t rows, const Var<float>& loss, const Var<float>& logits,
             const std::vector<std::int32_t>& labels) {
    v_[0] = loss.value().local_numel() > 0 ? loss.value().local().to_vector()[0] : 0.0;
    v_[1] = labels.empty() ? 0.0 : static_cast<double>(loss::count_correct(logits.value(), labels));
    const int signal = StopSignals::received();
    v_[2] = signal;
    v_[3] = signal > 0 ? 1.0 : 0.0;
    step_ = step;
    rows_ = rows;
    MPI_Iallreduce(MPI_IN_PLACE, v_, 4, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD, &request_);
  }
  bool pending() const noexcept { return request_ != MPI_REQUEST_NULL; }
  // Waits for the started sums: (step, rows, summed loss, correct rows, the signal some rank had
  // caught by then or 0: the same on every rank; SIGTERM for ranks that caught different ones).
  std::tuple<std::int64_t, std::int64_t, double, std::int64_t, int> take() {
    MPI_Wait(&request_, MPI_STATUS_IGNORE);
    int signal = 0;
    if (v_[3] > 0) {
      const double mean = v_[2] / v_[3];
      signal = mean == std::floor(mean) ? static_cast<int>(mean) : SIGTERM;
    }
    return {step_, rows_, v_[0], static_cast<std::int64_t>(v_[1]), signal};
  }

 private:
  double v_[4] = {0, 0, 0, 0};
  std::int64_t step_ = 0, rows_ = 0;
  MPI_Request request_ = MPI_REQUEST_NULL;
};

// The checkpoint metadata key of the call count of the Dropout named `module` (nn::named_dropouts).
inline std::string dropout_calls_key(const std::string& module) {
  return "dropout_calls." + module;
}

// A count written by std::to_string, read back; an error naming the checkpoint otherwise.
inline std::uint64_t parse_count(const std::string& text, const std::string& dir,
                                 const std::string& key, const char* program) {
  std::uint64_t v = 0;
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, v);
  DISTOP_CHECK(!text.empty() && ec == std::errc() && ptr == end, program, "the checkpoint in ", dir,
               " has metadata user.", key, " '", text, "', expected a count");
  return v;
}

// A batch's input on this rank must fit in memory, with room to spare (the activations are
// several times the input): an error naming --batch-size and the bytes otherwise, rather than a
// std::bad_alloc without context or a rank killed by the kernel.
inline void check_batch_fits(const char* program, const TensorSpace& input,
                             std::int64_t batch_size) {
  const double bytes =
      static_cast<double>(input.local_shape().numel()) * static_cast<double>(sizeof(float));
  check_fits_in_memory(program, "--batch-size " + std::to_string(batch_size), 4 * bytes);
}

// The checkpoint metadata of an epoch's totals before a checkpoint taken inside it: the loss
// summed over its rows (17 digits, so it reads back exactly), the correct and seen rows, seconds.
inline void put_partial_epoch(io::Metadata& metadata, const EpochMetrics& m, double seconds) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.17g", m.loss);
  metadata["epoch_loss_sum"] = buf;
  metadata["epoch_correct"] = std::to_string(m.correct);
  metadata["epoch_seen"] = std::to_string(m.seen);
  std::snprintf(buf, sizeof buf, "%.17g", seconds);
  metadata["epoch_seconds"] = buf;
}

// Reads put_partial_epoch's totals into `m` and returns the seconds; a checkpoint without them
// (written before they existed) gives zeros.
inline double get_partial_epoch(const io::Metadata& metadata, EpochMetrics& m,
                                const std::string& dir, const char* program) {
  const auto loss = metadata.find("epoch_loss_sum");
  if (loss == metadata.end()) return 0.0;
  const auto number = [&](const char* key) {
    const auto it = metadata.find(key);
    DISTOP_CHECK(it != metadata.end(), program, "the checkpoint in ", dir,
                 " has metadata user.epoch_loss_sum but not user.", key);
    char* end = nullptr;
    const double v = std::strtod(it->second.c_str(), &end);
    DISTOP_CHECK(!it->second.empty() && *end == '\0' && std::isfinite(v) && v >= 0, program,
                 "the checkpoint in ", dir, " has metadata user.", key, " '", it->second,
                 "', expected a non-negative number");
    return v;
  };
  m.loss = number("epoch_loss_sum");
  m.correct = static_cast<std::int64_t>(number("epoch_correct"));
  m.seen = static_cast<std::int64_t>(number("epoch_seen"));
  return number("epoch_seconds");
}

// Loss and accuracy over a whole data set, without recording gradients, on every rank. With R
// replicas, replica r evaluates its contiguous share of the examples (shard), so every example
// counts once; the sums meet in one all-reduce at the end.
template <class Model, class Load>
EpochMetrics evaluate(Model& model, const data::Dataset& d, Load& load, int replicas, int replica) {
  // Evaluation mode for the pass (BatchNorm's running statistics, no dropout), then back.
  const bool was_training = model.training();
  model.eval();
  const std::int64_t batch = 1000;
  std::vector<std::int64_t> order(static_cast<std::size_t>(d.size));
  for (std::int64_t i = 0; i < d.size; ++i) order[static_cast<std::size_t>(i)] = i;
  const data::BatchRange mine = data::shard({0, d.size}, replica, replicas);
  std::vector<std::int32_t> labels;
  double sums[2] = {0, 0};  // loss summed over the examples, correct examples
  for (auto range : data::batch_ranges(mine.size(), batch, false)) {
    range = {range.begin + mine.begin, range.end + mine.begin};
    const auto space = model.input_space(range.size());
    auto x = DistTensor<float>::uninitialized(space);
    load(d, order, range, space, x);
    Tape tape;
    auto logits = model.forward(tape, Var<float>(x));
    box_labels(logits.space(), d, order, range, labels);
    auto loss = loss::cross_entropy(tape, logits, labels);
    tape.clear();
    if (loss.value().local_numel() > 0)
      sums[0] += loss.value().local().to_vector()[0] * static_cast<double>(range.size());
    if (!labels.empty())
      sums[1] += static_cast<double>(loss::count_correct(logits.value(), labels));
  }
  MPI_Allreduce(MPI_IN_PLACE, sums, 2, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  EpochMetrics m;
  m.seen = d.size;
  m.loss = sums[0] / static_cast<double>(std::max<std::int64_t>(d.size, 1));
  m.correct = static_cast<std::int64_t>(sums[1]);
  model.train(was_training);
  return m;
}

}  // namespace detail

// Trains `model` on `train` with the optimizer and schedule of `o` (cross-entropy of its logits
// against the labels), evaluates it on `test` after each epoch and at the end, and keeps the
// checkpoints, logs and weights `o` asks for. `program` names the program in messages, errors and
// the checkpoint's metadata; `save_metadata` goes into the --save file. A checkpoint holds, beside
// the model's state_dict and the optimizer's and schedule's state, the call count of each
// nn::Dropout of the model (metadata "dropout_calls.<module name>"), which --resume restores so
// that the resumed run draws the masks the uninterrupted one would have. Collective over
// MPI_COMM_WORLD: every rank calls it with the same options (and the errors it raises are raised
// on every rank). Returns 0.
//
// Long runs: rank 0 holds an advisory lock on the checkpoint directory (a second run on it is an
// error) and removes the temporary files a killed run left there; --save, --checkpoint-dir,
// --metrics and --loss-log are checked before the first step; a checkpoint inside an epoch
// carries the epoch's totals so far, so the resumed run's metrics row covers the whole epoch. A
// step whose loss is not finite stops the run with an error naming the step (unless
// o.allow_nonfinite). SIGTERM or SIGINT (StopSignals) stops the run at the next step boundary the
// ranks agree on, with a checkpoint when o.checkpoint_dir is set: fit then returns 128 + the
// signal's number, rank 0 saying so.
//
// Data parallelism: with `replicas` (R replicas of the model, each built on
// replicas->model_comm()), each replica trains on its share of every global batch of
// o.batch_size examples (data::DistributedSampler's: replica r takes entries r, r + R, ... of the
// epoch's order, batch_size / R of them per step), the replicas start from replica 0's state, and
// a parallel::GradientReducer averages the gradients during each backward pass. Only replica 0
// writes checkpoints and the --save file; every replica reads them. With o.zero (--zero 1 or 2)
// the optimizer is a parallel::ShardedOptimizer over the reducer's buckets; its checkpoints are
// in the unsharded layout, so a run resumes with any replica count and --zero.
//
// With `custom` (see CustomLoss), each step's loss is custom->loss's instead, with no test
// evaluation, no metrics CSV and no test accuracy at the end; `load` is then not called.
template <ClassificationModel Model, class Load>
int fit(const std::string& program, Model& model, const TrainOptions& o, const data::Dataset& train,
        const data::Dataset& test, Load load, io::Metadata save_metadata = {},
        const parallel::Replicas* replicas = nullptr, const CustomLoss<Model>* custom = nullptr) {
  const char* name = program.c_str();
  int rank = 0, ranks = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  const bool talk = rank == 0 && !o.quiet;
  check_options(o, program);
  const int r_count = replicas ? replicas->count() : 1;
  const int r_index = replicas ? replicas->index() : 0;
  DISTOP_CHECK(o.replicas == r_count, name, "--replicas ", o.replicas, " but the program laid out ",
               r_count, " replica", r_count == 1 ? "" : "s");
  DISTOP_CHECK(o.batch_size % r_count == 0, name, "--batch-size ", o.batch_size,
               " is the global batch; ", r_count,
               " replicas do not divide it (each replica takes batch-size / replicas examples)");
  const std::int64_t local_batch = o.batch_size / r_count;
  const bool writer = r_index == 0;  // replica 0 writes the checkpoints and the weights
  DISTOP_CHECK(
      test.channels == train.channels && test.rows == train.rows && test.cols == train.cols, name,
      "the test images are ", test.channels, " x ", test.rows, " x ", test.cols,
      " but the training images ", train.channels, " x ", train.rows, " x ", train.cols);
  if (!o.save.empty()) {
    // Found out now rather than after the whole run: --save must name a file (not a directory)
    // in a writable directory.
    comm::agree(MPI_COMM_WORLD, name, [&] {
      if (rank != 0) return;
      const auto dir = std::filesystem::absolute(o.save).parent_path();
      DISTOP_CHECK(!std::filesystem::is_directory(o.save), name, "cannot write --save ", o.save,
                   ": it is a directory; name the weights file");
      DISTOP_CHECK(std::filesystem::is_directory(dir) && ::access(dir.c_str(), W_OK) == 0, name,
                   "cannot write --save ", o.save, ": ", dir.string(),
                   " is not a writable directory");
    });
  }
  if (!o.trace.empty()) {
    comm::agree(MPI_COMM_WORLD, name, [&] {
      if (rank != 0) return;
      const auto dir = std::filesystem::absolute(o.trace).parent_path();
      DISTOP_CHECK(!std::filesystem::is_directory(o.trace) && std::filesystem::is_directory(dir) &&
                       ::access(dir.c_str(), W_OK) == 0,
                   name, "cannot write --trace ", o.trace, ": not a file in a writable directory");
    });
  }
  // The checkpoint directory: made, writable, and this run's alone (an advisory lock held by rank
  // 0, which writes there, until fit returns); the temporary files of a run killed while writing
  // are removed.
  std::optional<io::DirectoryLock> directory_lock;
  if (!o.checkpoint_dir.empty()) {
    comm::agree(MPI_COMM_WORLD, name, [&] {
      if (rank != 0) return;
      std::error_code ec;
      std::filesystem::create_directories(o.checkpoint_dir, ec);
      DISTOP_CHECK(!ec && std::filesystem::is_directory(o.checkpoint_dir) &&
                       ::access(o.checkpoint_dir.c_str(), W_OK) == 0,
                   name, "cannot write --checkpoint-dir ", o.checkpoint_dir, ": ",
                   ec ? ec.message() : std::string("not a writable directory"));
      directory_lock = io::DirectoryLock::acquire(o.checkpoint_dir, program);
      const std::size_t stale = io::remove_stale_temporaries(o.checkpoint_dir);
      if (stale > 0 && talk)
        std::fprintf(stderr, "removed %zu temporary file%s left in %s by a run that was stopped\n",
                     stale, stale == 1 ? "" : "s", o.checkpoint_dir.c_str());
    });
  }
  DISTOP_CHECK(train.size > 0, name, "the training set in ", o.data,
               " has no examples: nothing to train on");
  detail::check_batch_fits(name, model.input_space(std::min(local_batch, train.size)),
                           o.batch_size);
  if (!o.init.empty()) {
    io::load_state_dict(o.init, model);
    // NaN or infinite initial weights would only show as a NaN loss later.
    comm::agree(MPI_COMM_WORLD, name, [&] {
      for (const auto& p : model.named_parameters())
        for (const float v : p.var.value().local().to_vector())
          DISTOP_CHECK(std::isfinite(v), name, "--init ", o.init, ": tensor '", p.name, "' holds ",
                       v, ", not a finite number");
    });
  }
  if (talk)
    std::fprintf(stderr, "distop %s: %d rank%s, %lld training and %lld test images\n%s", name,
                 ranks, ranks == 1 ? "" : "s", static_cast<long long>(train.size),
                 static_cast<long long>(test.size), model.describe().c_str());

  auto opt = make_optimizer(o, model.parameters());
  data::DistributedSampler sampler(train.size, r_count, r_index,
                                   {.shuffle = !o.no_shuffle, .drop_last = false, .seed = o.seed});
  const auto batches = data::batch_ranges(sampler.num_samples(), local_batch, false);
  const auto per_epoch = static_cast<std::int64_t>(batches.size());
  std::unique_ptr<parallel::DataParallel<float>> reducer;
  // --zero: the optimizer state sharded over the replicas' chunks of the reducer's buckets (at one
  // replica too, which holds every chunk; a checkpoint then loads with or without sharding).
  std::optional<parallel::Replicas> one_replica;
  if (o.zero > 0 && !replicas) replicas = &one_replica.emplace(MPI_COMM_WORLD, 1);
  if (r_count > 1 || o.zero > 0)
    reducer = std::make_unique<parallel::DataParallel<float>>(model, *replicas);
  if (o.zero > 0) {
    auto s = std::make_unique<parallel::ShardedOptimizer<float>>(
        *reducer, o.zero,
        [&o](std::vector<Var<float>> shards) { return make_optimizer(o, std::move(shards)); });
    opt = std::move(s);
  }
  // The learning rate of step t is a function of t and of the run's --epochs (not of --steps,
  // which only stops early), so that a resumed run continues the schedule exactly.
  const std::int64_t total_steps = o.epochs * per_epoch;
  optim::LRScheduler<float> scheduler(*opt, make_schedule(o, total_steps));
  // The settings a checkpoint's position and schedule depend on; a resumed run must repeat them.
  io::Metadata settings{{"batch_size", std::to_string(o.batch_size)},
                        {"shuffle", o.no_shuffle ? "false" : "true"},
                        {"epochs", std::to_string(o.epochs)},
                        {"lr_schedule", scheduler.schedule().str()}};
  if (custom) settings.insert(custom->settings.begin(), custom->settings.end());
  io::CheckpointInfo position;
  position.seed = o.seed;
  if (o.resume) {
    const optim::Hyperparameters given = opt->group_options(0);
    position = reducer ? io::load_checkpoint(o.checkpoint_dir, *reducer, *opt)
                       : io::load_checkpoint(o.checkpoint_dir, model, *opt);
    // The same on every rank (load_checkpoint agrees on what it read), so are these checks.
    const std::string from = "the checkpoint in " + o.checkpoint_dir + " was made with ";
    DISTOP_CHECK(position.seed == o.seed, name, from, "--seed ", position.seed, ", not ", o.seed);
    for (const auto& [key, value] : settings) {
      const auto it = position.metadata.find(key);
      DISTOP_CHECK(it == position.metadata.end() || it->second == value, name, from, key, " ",
                   it->second, ", not ", value, "; resume with the settings of the run");
    }
    // The optimizer's options but the (scheduled) learning rate must be the flags' too.
    for (const auto& [key, value] : opt->group_options(0)) {
      if (key == "lr") continue;
      const auto it = given.find(key);
      DISTOP_CHECK(it != given.end() && it->second == value, name, from, opt->name(), " ", key, " ",
                   value, ", not ", it == given.end() ? 0.0 : it->second,
                   "; resume with the settings of the run");
    }
    DISTOP_CHECK(position.epoch >= 0 && position.step_in_epoch >= 0 &&
                     position.step_in_epoch < per_epoch &&
                     position.global_step == position.epoch * per_epoch + position.step_in_epoch,
                 name, "the checkpoint in ", o.checkpoint_dir, " is at epoch ", position.epoch,
                 ", step ", position.step_in_epoch, " of it, ", position.global_step,
                 " steps in all, which does not fit ", per_epoch, " steps per epoch");
    DISTOP_CHECK(position.scheduler.has_value(), name, "the checkpoint in ", o.checkpoint_dir,
                 " has no learning-rate schedule state");
    scheduler.load_state(*position.scheduler);
    if (talk)
      std::fprintf(stderr, "resuming at epoch %lld, step %lld of it (%lld steps done)\n",
                   static_cast<long long>(position.epoch + 1),
                   static_cast<long long>(position.step_in_epoch),
                   static_cast<long long>(position.global_step));
  }
  std::string metrics_path = o.metrics;
  if (metrics_path.empty() && !o.checkpoint_dir.empty())
    metrics_path = o.checkpoint_dir + "/metrics.csv";
  if (custom) metrics_path.clear();  // the program keeps its own record (CustomLoss)
  auto csv = MetricsCsv::open(
      MPI_COMM_WORLD, metrics_path,
      o.resume ? std::optional<int>(static_cast<int>(position.epoch)) : std::nullopt);

  auto log =
      LossLog::open(MPI_COMM_WORLD, o.loss_log,
                    o.resume ? std::optional<std::int64_t>(position.global_step) : std::nullopt);
  if (custom && custom->on_start)
    custom->on_start(o.resume ? std::optional<int>(static_cast<int>(position.epoch))
                              : std::nullopt);
  // A checkpoint inside an epoch carries the epoch's totals so far (train loss, accuracy, time),
  // so that a run resumed from it writes the epoch's metrics row over all of its steps.
  auto checkpoint = [&](std::int64_t epoch, std::int64_t in_epoch, const detail::EpochMetrics& m,
                        double seconds) {
    if (o.checkpoint_dir.empty()) return;
    io::CheckpointInfo info;
    info.epoch = epoch;
    info.step_in_epoch = in_epoch;
    info.global_step = position.global_step;
    info.seed = o.seed;
    info.metadata = settings;
    info.metadata.emplace("model", program);
    info.scheduler = scheduler.state();
    if (in_epoch > 0) detail::put_partial_epoch(info.metadata, m, seconds);
    if (reducer)
      io::save_checkpoint(o.checkpoint_dir, *reducer, *opt, info);
    else
      io::save_checkpoint(o.checkpoint_dir, model, *opt, info);
  };

  std::int64_t& step = position.global_step;
  bool stop = o.steps > 0 && step >= o.steps;
  // SIGTERM or SIGINT: noted by the handler, agreed through the step totals' all-reduce, acted on
  // after the step that learns of it (a checkpoint, then exit status 128 + the signal's number).
  StopSignals signals;
  int stop_signal = 0;
  // --trace and --profile: from the first step on.
  if (!o.trace.empty()) trace::start(MPI_COMM_WORLD);
  if (o.profile) {
    timers::reset();
    timers::enable(true);
  }
  const std::int64_t first_step = step;
  // Ends the trace and the profile (collective), when the training loop ends or stops.
  auto finish_timeline = [&] {
    if (!o.trace.empty()) {
      trace::stop_and_write(o.trace, MPI_COMM_WORLD);
      if (talk) std::fprintf(stderr, "wrote the trace %s\n", o.trace.c_str());
    }
    if (o.profile) print_profile(MPI_COMM_WORLD, step - first_step, stderr);
    if (!o.trace.empty() || o.profile) timers::enable(false);
  };
  std::vector<std::int32_t> labels;
  for (std::int64_t epoch = position.epoch; epoch < o.epochs && !stop; ++epoch) {
    sampler.set_epoch(static_cast<std::uint64_t>(epoch));
    const auto order = sampler.indices();
    const std::int64_t first = epoch == position.epoch ? position.step_in_epoch : 0;
    const std::int64_t last =
        o.steps > 0 ? std::min<std::int64_t>(per_epoch, first + (o.steps - step)) : per_epoch;
    Progress progress(talk, static_cast<int>(epoch + 1), o.epochs, per_epoch);
    auto start = std::chrono::steady_clock::now();
    detail::EpochMetrics m;
    if (epoch == position.epoch && first > 0) {
      // Resumed inside this epoch: its totals before the checkpoint (none in older checkpoints).
      const double before = detail::get_partial_epoch(position.metadata, m, o.checkpoint_dir, name);
      start -= std::chrono::duration_cast<std::chrono::steady_clock::duration>(
          std::chrono::duration<double>(before));
    }
    const auto elapsed = [&] {
      return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    };
    detail::StepTotals totals;
    bool interrupted = false;  // by a signal, inside the epoch (and checkpointed there)
    // Adds a finished step's totals to the epoch's and the loss log. The replicas' losses are
    // each the mean over their share: their mean is the step's.
    auto consume = [&] {
      if (!totals.pending()) return;
      const auto [s, rows, sum, correct, signal] = totals.take();
      if (signal != 0 && stop_signal == 0) stop_signal = signal;
      const double l = sum / r_count;
      // The sums are all-reduced: every rank sees the same loss and stops alike, before the next
      // checkpoint could save the weights this step made.
      DISTOP_CHECK(std::isfinite(l) || o.allow_nonfinite, name, "the loss of step ", s, " is ", l,
                   ": training stopped",
                   o.checkpoint_dir.empty()
                       ? std::string()
                       : "; the last checkpoint in " + o.checkpoint_dir + " is as it was",
                   " (--allow-nonfinite goes on regardless)");
      m.loss += l * static_cast<double>(rows);
      m.correct += correct;
      m.seen += rows;
      if (rank == 0) log.append(s, l);
    };
    for (std::int64_t b = first; b < last; ++b) {
      comm::set_watchdog_step(step + 1);  // named by the hang watchdog's report
      trace::Span step_span("step", "step");
      const auto& range = batches[static_cast<std::size_t>(b)];
      Tape tape;
      Var<float> logits, loss;
      if (custom) {
        trace::Span phase("phase", "forward");
        labels.clear();  // no accuracy
        loss = custom->loss(tape, model, train, order, range, epoch);
      } else {
        const auto space = model.input_space(range.size());
        auto x = DistTensor<float>::uninitialized(space);
        {
          trace::Span phase("phase", "load");
          load(train, order, range, space, x);
        }
        trace::Span phase("phase", "forward");
        logits = model.forward(tape, Var<float>(x));
        detail::box_labels(logits.space(), train, order, range, labels);
        loss = loss::cross_entropy(tape, logits, labels);
      }
      {
        trace::Span phase("phase", "backward");
        // A custom loss is the global batch's on every replica: seed R, so that the reducer's
        // average over the R replicas is its gradient.
        Var<float> seeded;
        if (custom && r_count > 1) seeded = nn::scale(tape, loss, static_cast<double>(r_count));
        Var<float>& root = custom && r_count > 1 ? seeded : loss;
        if (reducer)
          reducer->backward(tape, root);
        else
          backward(tape, root);
      }
      {
        trace::Span phase("phase", "optimizer");
        opt->step();
        opt->zero_grad();
      }
      scheduler.step();
      ++step;
      consume();  // the previous step's totals, which this step's compute has hidden
      totals.start(step, range.size() * r_count, loss, logits, labels);
      progress.update(b + 1, m.seen, m.seen > 0 ? m.loss / static_cast<double>(m.seen) : 0.0,
                      custom ? std::nullopt : std::optional<double>(m.accuracy()));
      if (o.checkpoint_every > 0 && step % o.checkpoint_every == 0 && b + 1 < per_epoch) {
        consume();  // the loss log reaches the checkpoint's step first
        checkpoint(epoch, b + 1, m, elapsed());
      }
      if (stop_signal != 0 && b + 1 < last) {
        consume();
        checkpoint(epoch, b + 1, m, elapsed());
        interrupted = true;
        break;
      }
    }
    consume();
    if (interrupted) break;
    stop = o.steps > 0 && step >= o.steps;
    const bool finished = last == per_epoch;
    if (finished && custom) {
      if (custom->on_epoch)
        custom->on_epoch(static_cast<int>(epoch + 1),
                         m.loss / static_cast<double>(std::max<std::int64_t>(m.seen, 1)),
                         elapsed());
    } else if (finished) {
      // The epoch's row is written before the checkpoint that moves past the epoch: a run that
      // dies between the two resumes inside the epoch, and the resumed run writes the row again.
      const double seconds = elapsed();
      const auto t = detail::evaluate(model, test, load, r_count, r_index);
      csv.append(static_cast<int>(epoch + 1),
                 m.loss / static_cast<double>(std::max<std::int64_t>(m.seen, 1)), m.accuracy(),
                 t.accuracy(), seconds);
      if (talk)
        std::fprintf(stderr, "epoch %lld: test accuracy %.2f%% (loss %.4f)\n",
                     static_cast<long long>(epoch + 1), 100.0 * t.accuracy(), t.loss);
    }
    checkpoint(finished ? epoch + 1 : epoch, finished ? 0 : last, m, elapsed());
    if (stop_signal != 0) break;
  }
  finish_timeline();
  if (stop_signal != 0) {
    if (rank == 0)
      std::fprintf(
          stderr, "%s: stopped by signal %d (%s) after step %lld; %s\n", name, stop_signal,
          stop_signal == SIGINT ? "SIGINT" : "SIGTERM", static_cast<long long>(step),
          o.checkpoint_dir.empty()
              ? "no checkpoint kept (no --checkpoint-dir)"
              : ("checkpoint in " + o.checkpoint_dir + ", continue with --resume").c_str());
    return 128 + stop_signal;
  }

  comm::set_watchdog_step(-1);
  if (!custom) {
    const auto t = detail::evaluate(model, test, load, r_count, r_index);
    if (talk)
      std::fprintf(stderr, "test accuracy %.2f%% (loss %.4f) after %lld steps\n",
                   100.0 * t.accuracy(), t.loss, static_cast<long long>(step));
  } else if (talk) {
    std::fprintf(stderr, "trained %lld steps\n", static_cast<long long>(step));
  }
  if (!o.save.empty()) {
    save_metadata.emplace("steps", std::to_string(step));
    if (writer) io::save_state_dict(o.save, model, save_metadata);
    if (talk) std::fprintf(stderr, "saved %s\n", o.save.c_str());
  }
  return 0;
}

}  // namespace distop::train
