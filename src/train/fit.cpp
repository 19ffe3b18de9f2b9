#include "distop/train/fit.hpp"

#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <system_error>
#include <tuple>
#include <vector>

#include "distop/autodiff/apply.hpp"
#include "distop/comm/agree.hpp"
#include "distop/comm/mpi.hpp"
#include "distop/comm/watchdog.hpp"
#include "distop/core/error.hpp"
#include "distop/core/timers.hpp"
#include "distop/core/trace.hpp"
#include "distop/data/distributed_sampler.hpp"
#include "distop/data/sampler.hpp"
#include "distop/io/checkpoint.hpp"
#include "distop/io/run_directory.hpp"
#include "distop/io/state_dict.hpp"
#include "distop/optim/lr_scheduler.hpp"
#include "distop/parallel/data_parallel.hpp"
#include "distop/parallel/sharded_optimizer.hpp"
#include "distop/train/metrics.hpp"
#include "distop/train/profile.hpp"
#include "distop/train/progress.hpp"
#include "distop/train/signals.hpp"

namespace distop::train {

namespace {

// The examples per replica of an evaluation batch.
constexpr std::int64_t kEvaluationBatch = 1000;

// The run's ranks, as the replicas see them (or one replica over the context's communicator).
struct Layout {
  MPI_Comm world = MPI_COMM_WORLD;
  const parallel::Replicas* replicas = nullptr;  // null: one replica over world
  int count = 1;                                 // R
  int index = 0;                                 // this rank's replica
  MPI_Comm model_comm = MPI_COMM_WORLD;          // this replica's ranks
};

// How many of the batch's rows this rank's loss component speaks for: the loss of a replica is the
// mean over its own rows; a loss that spans k of the R replicas is the mean over its group's
// rows (k shares of the global batch).
template <class T>
double loss_rows(const Var<T>& loss, const Layout& l, std::int64_t own_rows,
                 std::int64_t global_rows) {
  if (!l.replicas) return static_cast<double>(own_rows);
  const int k =
      loss.space().partition().active() ? l.replicas->spanned(loss.space().partition()) : 1;
  return k == 1 ? static_cast<double>(own_rows)
                : static_cast<double>(global_rows) * k / static_cast<double>(l.count);
}

// This rank's component of a loss (0 outside its partition).
template <class T>
double component(const Var<T>& loss) {
  return loss.value().local_numel() > 0 ? static_cast<double>(loss.value().local().to_vector()[0])
                                        : 0.0;
}

struct EpochTotals {
  double loss = 0;  // the mean loss of each step times its rows, summed
  double metric_numerator = 0;
  double metric_denominator = 0;
  std::int64_t seen = 0;
  double mean_loss() const { return seen > 0 ? loss / static_cast<double>(seen) : 0.0; }
  std::optional<double> metric(bool has) const {
    if (!has || metric_denominator <= 0) return std::nullopt;
    return metric_numerator / metric_denominator;
  }
};

// A step's loss (weighted as loss_rows says, summed over the ranks: the global batch's loss times
// its rows), its metric's sums and the stop signals the ranks have caught (StopSignals), summed
// over the ranks by a nonblocking all-reduce that completes while the next step computes: the
// driver consumes step s's totals at step s + 1 (or when it flushes, before a checkpoint or an
// evaluation), so that reading them costs the steps no wait.
class StepTotals {
 public:
  explicit StepTotals(MPI_Comm comm) : comm_(comm) {}
  StepTotals(const StepTotals&) = delete;
  StepTotals& operator=(const StepTotals&) = delete;
  ~StepTotals() {
    // A destructor does not throw: an unfinished sum is waited for, its failure let go (the run
    // is ending with an error already).
    if (request_ != MPI_REQUEST_NULL) MPI_Wait(&request_, MPI_STATUS_IGNORE);
  }
  void start(std::int64_t step, std::int64_t epoch, std::int64_t rows, double loss_times_rows,
             const MetricShare& metric) {
    const int signal = StopSignals::received();
    v_ = {loss_times_rows, metric.numerator, metric.denominator, static_cast<double>(signal),
          signal > 0 ? 1.0 : 0.0};
    step_ = step;
    epoch_ = epoch;
    rows_ = rows;
    DISTOP_MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, v_.data(), static_cast<int>(v_.size()),
                                    MPI_DOUBLE, MPI_SUM, comm_, &request_),
                     "train::fit");
  }
  bool pending() const noexcept { return request_ != MPI_REQUEST_NULL; }
  struct Totals {
    std::int64_t step, epoch, rows;
    double loss;  // the step's mean loss
    MetricShare metric;
    int signal;  // the signal some rank had caught, or 0: the same on every rank
  };
  Totals take() {
    DISTOP_MPI_CHECK(MPI_Wait(&request_, MPI_STATUS_IGNORE), "train::fit");
    int signal = 0;
    if (v_[4] > 0) {  // ranks that caught different signals: SIGTERM
      const double mean = v_[3] / v_[4];
      signal = mean == std::floor(mean) ? static_cast<int>(mean) : SIGTERM;
    }
    return {step_,          epoch_,
            rows_,          v_[0] / static_cast<double>(std::max<std::int64_t>(rows_, 1)),
            {v_[1], v_[2]}, signal};
  }

 private:
  MPI_Comm comm_;
  std::array<double, 5> v_{};
  std::int64_t step_ = 0, epoch_ = 0, rows_ = 0;
  MPI_Request request_ = MPI_REQUEST_NULL;
};

// Within a replica, a parameter held whole by several ranks on separate partitions (a local layer
// on each rank) gets one gradient per rank and nothing averages them: if those ranks read
// different examples, the copies drift apart. An Error on every rank of the replica naming the
// parameter; ranks that read the same examples compute the same update, which is fine.
template <class T>
void check_unreduced_copies(const Model<T>& model, const Layout& l, std::int64_t batch,
                            const char* program) {
  int size = 1;
  DISTOP_MPI_CHECK(MPI_Comm_size(l.model_comm, &size), program);
  if (size == 1) return;
  const auto params = model.module().named_parameters();
  MPI_Group world_group = MPI_GROUP_NULL;
  DISTOP_MPI_CHECK(MPI_Comm_group(l.world, &world_group), program);
  // Per parameter: whether this rank holds a box of it, and a hash of its partition's ranks (as
  // ranks of the run); then this rank's rows of the input.
  std::vector<std::uint64_t> mine;
  for (const auto& p : params) {
    const Partition& part = p.var.space().partition();
    std::vector<int> ranks(part.ranks().size());
    MPI_Group parent = MPI_GROUP_NULL;
    DISTOP_MPI_CHECK(MPI_Comm_group(part.parent(), &parent), program);
    const int translated = MPI_Group_translate_ranks(
        parent, static_cast<int>(ranks.size()), part.ranks().data(), world_group, ranks.data());
    MPI_Group_free(&parent);  // releases a local handle; nothing to report
    DISTOP_MPI_CHECK(translated, program);
    comm::Fingerprint fp;
    fp.add_all(ranks).add_all(part.shape().extents());
    mine.push_back(p.var.value().local_numel() > 0 ? 1 : 0);
    mine.push_back(fp.value());
  }
  MPI_Group_free(&world_group);
  const TensorSpace input = model.input_space(batch);
  const bool reads = input.local_shape().numel() > 0;
  mine.push_back(reads ? static_cast<std::uint64_t>(input.local_offset()[0]) : 0);
  mine.push_back(reads ? static_cast<std::uint64_t>(input.local_shape()[0]) : 0);
  std::vector<std::uint64_t> all(mine.size() * static_cast<std::size_t>(size));
  DISTOP_MPI_CHECK(
      MPI_Allgather(mine.data(), static_cast<int>(mine.size()), MPI_UINT64_T, all.data(),
                    static_cast<int>(mine.size()), MPI_UINT64_T, l.model_comm),
      program);
  const std::size_t stride = mine.size(), n = params.size();
  auto at = [&](int rank, std::size_t k) {
    return all[static_cast<std::size_t>(rank) * stride + k];
  };
  for (std::size_t i = 0; i < n; ++i) {
    int first = -1;
    for (int r = 0; r < size; ++r) {
      if (at(r, 2 * i) == 0) continue;
      if (first < 0) {
        first = r;
        continue;
      }
      const bool separate = at(r, 2 * i + 1) != at(first, 2 * i + 1);
      const bool different_rows =
          at(r, 2 * n) != at(first, 2 * n) || at(r, 2 * n + 1) != at(first, 2 * n + 1);
      DISTOP_CHECK(
          !(separate && different_rows), program, "parameter '", params[i].name,
          "' is held whole by ranks ", first, " and ", r,
          " of a replica, on separate partitions (a local layer on each rank), but they read "
          "different examples (rows ",
          at(first, 2 * n), "..", at(first, 2 * n) + at(first, 2 * n + 1), " and ", at(r, 2 * n),
          "..", at(r, 2 * n) + at(r, 2 * n + 1),
          " of a batch): nothing averages their gradients, so the copies would drift apart. Run "
          "one replica per rank (--replicas, data parallelism), or split the layer over the "
          "ranks (a distributed layer)");
    }
  }
}

// The evaluation batches of a data set of n examples for R replicas: global batches of
// kEvaluationBatch examples per replica, each shared out among the replicas (data::shard), the
// last one merged with the one before when it would leave a replica without an example. Every
// replica gets the same number of batches, as collective losses need.
std::vector<data::BatchRange> evaluation_batches(std::int64_t n, int replicas) {
  auto ranges = data::batch_ranges(n, kEvaluationBatch * replicas, false);
  if (ranges.size() > 1 && ranges.back().size() < replicas) {
    ranges[ranges.size() - 2].end = ranges.back().end;
    ranges.pop_back();
  }
  return ranges;
}

// The loss (and metric) over a whole data set, without recording gradients, on every rank; in
// evaluation mode (BatchNorm's running statistics, no dropout), the module's mode restored after.
template <class T>
EvaluationReport evaluate(const Model<T>& model, Loss<T>& loss, const data::Dataset& d,
                          const Layout& l, std::int64_t epoch, const char* program) {
  nn::Module<T>& net = model.module();
  const bool was_training = net.training();
  net.eval();
  std::array<double, 3> sums{0, 0, 0};  // loss times rows, metric numerator, denominator
  std::vector<std::int64_t> examples;
  for (const auto& range : evaluation_batches(d.size, l.count)) {
    const data::BatchRange mine = data::shard(range, l.index, l.count);
    examples.clear();
    for (std::int64_t e = mine.begin; e < mine.end; ++e) examples.push_back(e);
    Tape tape;
    const Var<T> value = loss.forward(tape, model, Batch{d, examples, epoch, false});
    tape.clear();
    sums[0] += component(value) * loss_rows(value, l, mine.size(), range.size());
    const MetricShare m = loss.metric();
    sums[1] += m.numerator;
    sums[2] += m.denominator;
  }
  DISTOP_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, sums.data(), static_cast<int>(sums.size()),
                                 MPI_DOUBLE, MPI_SUM, l.world),
                   program);
  net.train(was_training);
  EvaluationReport r;
  r.epoch = epoch;
  r.examples = d.size;
  r.loss = sums[0] / static_cast<double>(std::max<std::int64_t>(d.size, 1));
  if (!loss.metric_name().empty() && sums[2] > 0) r.metric = sums[1] / sums[2];
  return r;
}

// A count or number written by std::to_string / %.17g, read back; an error naming the checkpoint
// otherwise.
double parse_number(const io::Metadata& metadata, const char* key, const std::string& dir,
                    const char* program) {
  const auto it = metadata.find(key);
  DISTOP_CHECK(it != metadata.end(), program, "the checkpoint in ", dir,
               " has metadata user.epoch_loss_sum but not user.", key);
  char* end = nullptr;
  const double v = std::strtod(it->second.c_str(), &end);
  DISTOP_CHECK(!it->second.empty() && *end == '\0' && std::isfinite(v) && v >= 0, program,
               "the checkpoint in ", dir, " has metadata user.", key, " '", it->second,
               "', expected a non-negative number");
  return v;
}

std::string exact(double v) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

// The checkpoint metadata of an epoch's totals before a checkpoint taken inside it, so that the
// resumed run's metrics row covers the whole epoch.
void put_partial_epoch(io::Metadata& metadata, const EpochTotals& m, double seconds) {
  metadata["epoch_loss_sum"] = exact(m.loss);
  metadata["epoch_metric_numerator"] = exact(m.metric_numerator);
  metadata["epoch_metric_denominator"] = exact(m.metric_denominator);
  metadata["epoch_seen"] = std::to_string(m.seen);
  metadata["epoch_seconds"] = exact(seconds);
}

// Reads put_partial_epoch's totals into `m` and returns the seconds.
double get_partial_epoch(const io::Metadata& metadata, EpochTotals& m, const std::string& dir,
                         const char* program) {
  if (metadata.find("epoch_loss_sum") == metadata.end()) return 0.0;
  m.loss = parse_number(metadata, "epoch_loss_sum", dir, program);
  m.metric_numerator = parse_number(metadata, "epoch_metric_numerator", dir, program);
  m.metric_denominator = parse_number(metadata, "epoch_metric_denominator", dir, program);
  m.seen = static_cast<std::int64_t>(parse_number(metadata, "epoch_seen", dir, program));
  return parse_number(metadata, "epoch_seconds", dir, program);
}

// Found out before the first step rather than after the whole run: `path` must name a file (not a
// directory) in a writable directory. Collective over `comm`; rank 0 looks.
void check_writable_file(MPI_Comm comm, const std::string& path, const char* flag,
                         const char* program) {
  if (path.empty()) return;
  int rank = 0;
  DISTOP_MPI_CHECK(MPI_Comm_rank(comm, &rank), program);
  comm::agree(comm, program, [&] {
    if (rank != 0) return;
    const auto dir = std::filesystem::absolute(path).parent_path();
    DISTOP_CHECK(!std::filesystem::is_directory(path), program, "cannot write ", flag, " ", path,
                 ": it is a directory; name a file");
    DISTOP_CHECK(std::filesystem::is_directory(dir) && ::access(dir.c_str(), W_OK) == 0, program,
                 "cannot write ", flag, " ", path, ": ", dir.string(),
                 " is not a writable directory");
  });
}

}  // namespace

template <class T>
int fit(const Model<T>& model, Loss<T>& loss, const data::Dataset& train, const data::Dataset* test,
        const TrainOptions& o, const FitContext& context) {
  const std::string& program = context.program;
  const char* name = program.c_str();
  Layout l;
  l.replicas = context.replicas;
  l.world = l.replicas ? l.replicas->world() : context.comm;
  l.count = l.replicas ? l.replicas->count() : 1;
  l.index = l.replicas ? l.replicas->index() : 0;
  l.model_comm = l.replicas ? l.replicas->model_comm() : l.world;
  int rank = 0, ranks = 0;
  DISTOP_MPI_CHECK(MPI_Comm_rank(l.world, &rank), name);
  DISTOP_MPI_CHECK(MPI_Comm_size(l.world, &ranks), name);
  const bool talk = rank == 0 && !o.quiet;
  nn::Module<T>& module = model.module();
  check_options(o, program);
  DISTOP_CHECK(o.replicas == l.count, name, "--replicas ", o.replicas, " but the program laid out ",
               l.count, " replica", l.count == 1 ? "" : "s");
  DISTOP_CHECK(o.batch_size % l.count == 0, name, "--batch-size ", o.batch_size,
               " is the global batch; ", l.count,
               " replicas do not divide it (each replica takes batch-size / replicas examples)");
  const std::int64_t local_batch = o.batch_size / l.count;
  const bool writer = l.index == 0;  // replica 0 writes the weights
  if (test)
    DISTOP_CHECK(
        test->channels == train.channels && test->rows == train.rows && test->cols == train.cols,
        name, "the test images are ", test->channels, " x ", test->rows, " x ", test->cols,
        " but the training images ", train.channels, " x ", train.rows, " x ", train.cols);
  check_writable_file(l.world, o.save, "--save", name);
  check_writable_file(l.world, o.trace, "--trace", name);
  // The checkpoint directory: made, writable, and this run's alone (an advisory lock held by rank
  // 0 until fit returns); the temporary files of a run killed while writing are removed.
  std::optional<io::DirectoryLock> directory_lock;
  if (!o.checkpoint_dir.empty()) {
    comm::agree(l.world, name, [&] {
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
  {
    // A batch's input on this rank must fit in memory, with room to spare (the activations are
    // several times the input).
    const TensorSpace input = model.input_space(std::min(local_batch, train.size));
    check_fits_in_memory(program, "--batch-size " + std::to_string(o.batch_size),
                         4.0 * static_cast<double>(input.local_shape().numel()) * sizeof(T));
  }
  check_unreduced_copies(model, l, std::min(local_batch, train.size), name);
  if (!o.init.empty()) {
    io::load_state_dict(o.init, module);
    // NaN or infinite initial weights would only show as a NaN loss later.
    comm::agree(l.world, name, [&] {
      for (const auto& p : module.named_parameters())
        for (const T v : p.var.value().local().to_vector())
          DISTOP_CHECK(std::isfinite(v), name, "--init ", o.init, ": tensor '", p.name, "' holds ",
                       v, ", not a finite number");
    });
  }
  if (talk)
    std::fprintf(stderr, "distop %s: %d rank%s, %lld training%s images\n%s", name, ranks,
                 ranks == 1 ? "" : "s", static_cast<long long>(train.size),
                 test ? (" and " + std::to_string(test->size) + " test").c_str() : "",
                 model.describe().c_str());

  // Data parallelism (and --zero, at one replica too): the DataParallel broadcasts replica 0's
  // state, so every replica starts alike.
  std::optional<parallel::Replicas> one_replica;
  if (o.zero > 0 && !l.replicas) l.replicas = &one_replica.emplace(l.world, 1);
  std::unique_ptr<parallel::DataParallel<T>> dp;
  if (l.replicas && (l.count > 1 || o.zero > 0))
    dp = std::make_unique<parallel::DataParallel<T>>(module, *l.replicas);
  std::unique_ptr<optim::Optimizer<T>> opt;
  if (o.zero > 0)
    opt = std::make_unique<parallel::ShardedOptimizer<T>>(
        *dp, o.zero,
        [&o](std::vector<Var<T>> shards) { return make_optimizer<T>(o, std::move(shards)); });
  else
    opt = make_optimizer<T>(o, module.parameters());

  data::DistributedSampler sampler(train.size, l.count, l.index,
                                   {.shuffle = !o.no_shuffle, .drop_last = false, .seed = o.seed});
  const auto batches = data::batch_ranges(sampler.num_samples(), local_batch, false);
  const auto per_epoch = static_cast<std::int64_t>(batches.size());
  // The learning rate of step t is a function of t and of the run's --epochs (not of --steps,
  // which only stops early), so that a resumed run continues the schedule exactly.
  const std::int64_t total_steps = o.epochs * per_epoch;
  optim::LRScheduler<T> scheduler(*opt, make_schedule(o, total_steps));
  // The settings a checkpoint's position and schedule depend on; a resumed run must repeat them.
  io::Metadata settings{{"batch_size", std::to_string(o.batch_size)},
                        {"shuffle", o.no_shuffle ? "false" : "true"},
                        {"epochs", std::to_string(o.epochs)},
                        {"lr_schedule", scheduler.schedule().str()}};
  for (const auto& [key, value] : loss.settings()) settings.emplace(key, value);
  for (const auto& [key, value] : context.checkpoint_settings) settings.emplace(key, value);
  io::CheckpointInfo position;
  position.seed = o.seed;
  if (o.resume) {
    const optim::Hyperparameters given = opt->group_options(0);
    position = dp ? io::load_checkpoint(o.checkpoint_dir, *dp, *opt)
                  : io::load_checkpoint(o.checkpoint_dir, module, *opt);
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
    // The learning rate is the schedule's base rate: another --lr would be dropped by the
    // schedule's state, so it is refused like the other settings.
    const auto& base = position.scheduler->base_lrs;
    DISTOP_CHECK(base.empty() || base.front() == o.lr, name, from, "--lr ",
                 base.empty() ? 0.0 : base.front(), ", not ", o.lr,
                 "; resume with the settings of the run");
    scheduler.load_state(*position.scheduler);
    if (talk)
      std::fprintf(stderr, "resuming at epoch %lld, step %lld of it (%lld steps done)\n",
                   static_cast<long long>(position.epoch + 1),
                   static_cast<long long>(position.step_in_epoch),
                   static_cast<long long>(position.global_step));
  }
  const bool has_metric = !loss.metric_name().empty();
  std::string metrics_path = o.metrics;
  if (metrics_path.empty() && !o.checkpoint_dir.empty())
    metrics_path = o.checkpoint_dir + "/metrics.csv";
  const std::optional<int> resumed_epochs =
      o.resume ? std::optional<int>(static_cast<int>(position.epoch)) : std::nullopt;
  auto csv = MetricsCsv::open(l.world, metrics_path, resumed_epochs, 0,
                              MetricsCsv::Columns{loss.metric_name(), test != nullptr});
  auto log =
      LossLog::open(l.world, o.loss_log,
                    o.resume ? std::optional<std::int64_t>(position.global_step) : std::nullopt);
  auto checkpoint = [&](std::int64_t epoch, std::int64_t in_epoch, const EpochTotals& m,
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
    if (in_epoch > 0) put_partial_epoch(info.metadata, m, seconds);
    if (dp)
      io::save_checkpoint(o.checkpoint_dir, *dp, *opt, info);
    else
      io::save_checkpoint(o.checkpoint_dir, module, *opt, info);
  };

  std::int64_t& step = position.global_step;
  bool stop = o.steps > 0 && step >= o.steps;
  // SIGTERM or SIGINT: noted by the handler, agreed through the step totals' all-reduce, acted on
  // after the step that learns of it (a checkpoint, then exit status 128 + the signal's number).
  StopSignals signals;
  int stop_signal = 0;
  if (!o.trace.empty()) trace::start(l.world);
  if (o.profile) {
    timers::reset();
    timers::enable(true);
  }
  const std::int64_t first_step = step;
  auto finish_timeline = [&] {
    if (!o.trace.empty()) {
      trace::stop_and_write(o.trace, l.world);
      if (talk) std::fprintf(stderr, "wrote the trace %s\n", o.trace.c_str());
    }
    if (o.profile) print_profile(l.world, step - first_step, stderr);
    if (!o.trace.empty() || o.profile) timers::enable(false);
  };
  std::vector<std::int64_t> examples;
  for (std::int64_t epoch = position.epoch; epoch < o.epochs && !stop; ++epoch) {
    sampler.set_epoch(static_cast<std::uint64_t>(epoch));
    const auto order = sampler.indices();
    const std::int64_t first = epoch == position.epoch ? position.step_in_epoch : 0;
    const std::int64_t last =
        o.steps > 0 ? std::min<std::int64_t>(per_epoch, first + (o.steps - step)) : per_epoch;
    Progress progress(talk, static_cast<int>(epoch + 1), o.epochs, per_epoch);
    auto start = std::chrono::steady_clock::now();
    EpochTotals m;
    if (epoch == position.epoch && first > 0) {
      // Resumed inside this epoch: its totals before the checkpoint.
      const double before = get_partial_epoch(position.metadata, m, o.checkpoint_dir, name);
      start -= std::chrono::duration_cast<std::chrono::steady_clock::duration>(
          std::chrono::duration<double>(before));
    }
    const auto elapsed = [&] {
      return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    };
    StepTotals totals(l.world);
    bool interrupted = false;  // by a signal, inside the epoch (and checkpointed there)
    // Adds a finished step's totals to the epoch's, the loss log and the callbacks.
    auto consume = [&] {
      if (!totals.pending()) return;
      const auto t = totals.take();
      if (t.signal != 0 && stop_signal == 0) stop_signal = t.signal;
      // The sums are all-reduced: every rank sees the same loss and stops alike, before the next
      // checkpoint could save the weights this step made.
      DISTOP_CHECK(std::isfinite(t.loss) || o.allow_nonfinite, name, "the loss of step ", t.step,
                   " is ", t.loss, ": training stopped",
                   o.checkpoint_dir.empty()
                       ? std::string()
                       : "; the last checkpoint in " + o.checkpoint_dir + " is as it was",
                   " (--allow-nonfinite goes on regardless)");
      m.loss += t.loss * static_cast<double>(t.rows);
      m.metric_numerator += t.metric.numerator;
      m.metric_denominator += t.metric.denominator;
      m.seen += t.rows;
      if (rank == 0) log.append(t.step, t.loss);
      if (context.callbacks.on_step) context.callbacks.on_step({t.step, t.epoch, t.loss});
    };
    for (std::int64_t b = first; b < last; ++b) {
      comm::set_watchdog_step(step + 1);  // named by the hang watchdog's report
      trace::Span step_span("step", "step");
      const auto& range = batches[static_cast<std::size_t>(b)];
      examples.assign(order.begin() + range.begin, order.begin() + range.end);
      Tape tape;
      Var<T> value;
      {
        trace::Span phase("phase", "forward");
        value = loss.forward(tape, model, Batch{train, examples, epoch, true});
      }
      {
        trace::Span phase("phase", "backward");
        if (dp)
          dp->backward(tape, value);
        else
          backward(tape, value);
      }
      {
        trace::Span phase("phase", "optimizer");
        opt->step();
        opt->zero_grad();
      }
      scheduler.step();
      ++step;
      consume();  // the previous step's totals, which this step's compute has hidden
      const std::int64_t rows = range.size() * l.count;
      totals.start(step, epoch + 1, rows,
                   component(value) * loss_rows(value, l, range.size(), rows), loss.metric());
      progress.update(b + 1, m.seen, m.mean_loss(), m.metric(has_metric));
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
    if (finished) {
      // The epoch's row is written before the checkpoint that moves past the epoch: a run that
      // dies between the two resumes inside the epoch, and the resumed run writes the row again.
      const double seconds = elapsed();
      const EpochReport report{epoch + 1, m.mean_loss(), m.metric(has_metric), seconds};
      if (context.callbacks.on_epoch) context.callbacks.on_epoch(report);
      double test_value = 0;
      if (test) {
        const auto t = evaluate(model, loss, *test, l, epoch + 1, name);
        if (context.callbacks.on_evaluation) context.callbacks.on_evaluation(t);
        test_value = has_metric ? t.metric.value_or(0.0) : t.loss;
        if (talk) {
          if (t.metric)
            std::fprintf(stderr, "epoch %lld: test %s %.2f%% (loss %.4f)\n",
                         static_cast<long long>(epoch + 1), loss.metric_name().c_str(),
                         100.0 * *t.metric, t.loss);
          else
            std::fprintf(stderr, "epoch %lld: test loss %.4f\n", static_cast<long long>(epoch + 1),
                         t.loss);
        }
      }
      csv.append(static_cast<int>(epoch + 1), report.loss, report.metric.value_or(0.0), test_value,
                 seconds);
    }
    checkpoint(finished ? epoch + 1 : epoch, finished ? 0 : last, m, elapsed());
    if (stop_signal != 0) break;
  }
  // A trace that cannot be written is an error, raised once the weights are safe (after --save).
  std::optional<Error> timeline_error;
  try {
    finish_timeline();
  } catch (const Error& e) {  // raised on every rank alike (trace::stop_and_write agrees)
    timeline_error = e;
  }
  if (stop_signal != 0) {
    if (timeline_error) throw *timeline_error;
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
  if (test) {
    const auto t = evaluate(model, loss, *test, l, o.epochs, name);
    if (context.callbacks.on_evaluation) context.callbacks.on_evaluation(t);
    if (talk) {
      if (t.metric)
        std::fprintf(stderr, "test %s %.2f%% (loss %.4f) after %lld steps\n",
                     loss.metric_name().c_str(), 100.0 * *t.metric, t.loss,
                     static_cast<long long>(step));
      else
        std::fprintf(stderr, "test loss %.4f after %lld steps\n", t.loss,
                     static_cast<long long>(step));
    }
  } else if (talk) {
    std::fprintf(stderr, "trained %lld steps\n", static_cast<long long>(step));
  }
  if (!o.save.empty()) {
    io::Metadata save_metadata = context.save_metadata;
    save_metadata.emplace("steps", std::to_string(step));
    comm::agree(l.world, name, [&] {
      if (writer) io::save_state_dict(o.save, module, save_metadata);
    });
    if (talk) std::fprintf(stderr, "saved %s\n", o.save.c_str());
  }
  if (timeline_error) throw *timeline_error;
  return 0;
}

template int fit(const Model<float>&, Loss<float>&, const data::Dataset&, const data::Dataset*,
                 const TrainOptions&, const FitContext&);
template int fit(const Model<double>&, Loss<double>&, const data::Dataset&, const data::Dataset*,
                 const TrainOptions&, const FitContext&);

}  // namespace distop::train
