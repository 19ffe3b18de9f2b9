#include "distop/train/memory.hpp"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <utility>

#include "distop/core/error.hpp"
#include "distop/core/mpi_check.hpp"

namespace distop::train {

ModelFootprint& ModelFootprint::add(Layer layer) {
  layers_.push_back(std::move(layer));
  return *this;
}

ModelFootprint& ModelFootprint::input(double per_example, double share) {
  return add({"input", 0, per_example * share, 0});
}

ModelFootprint& ModelFootprint::conv(std::string name, std::int64_t in_channels,
                                     std::int64_t out_channels, std::int64_t kernel_numel,
                                     std::int64_t out_positions, double share) {
  const auto in = static_cast<double>(in_channels), out = static_cast<double>(out_channels);
  const auto k = static_cast<double>(kernel_numel), n = static_cast<double>(out_positions);
  return add({std::move(name), out * (in * k + 1) * share, out * n * share, in * k * n * share});
}

ModelFootprint& ModelFootprint::linear(std::string name, std::int64_t in, std::int64_t out,
                                       double share) {
  const auto i = static_cast<double>(in), o = static_cast<double>(out);
  return add({std::move(name), (i + 1) * o * share, o * share, 0});
}

ModelFootprint& ModelFootprint::elementwise(std::string name, double per_example, double share) {
  return add({std::move(name), 0, per_example * share, 0});
}

double ModelFootprint::parameters() const noexcept {
  double s = 0;
  for (const auto& l : layers_) s += l.parameters;
  return s;
}

double ModelFootprint::activations_per_example() const noexcept {
  double s = 0;
  for (const auto& l : layers_) s += l.activations_per_example;
  return s;
}

double ModelFootprint::peak_transient_per_example() const noexcept {
  double peak = 0;
  for (const auto& l : layers_)
    peak = std::max({peak, l.workspace_per_example, 2 * l.activations_per_example});
  return peak;
}

int optimizer_states_per_parameter(const TrainOptions& o) {
  if (o.optimizer == "sgd") return o.momentum.value_or(o.default_sgd_momentum) != 0 ? 1 : 0;
  if (o.optimizer == "adam" || o.optimizer == "adamw") return o.amsgrad ? 3 : 2;
  if (o.optimizer == "rmsprop")
    return 1 + (o.momentum.value_or(0) != 0 ? 1 : 0) + (o.centered ? 1 : 0);
  return 1;  // adagrad
}

TrainingBytes training_bytes(const ModelFootprint& model, std::int64_t examples,
                             const TrainOptions& o, int replicas, std::size_t element_bytes) {
  const double r = std::max(replicas, 1);
  const double states = optimizer_states_per_parameter(o);
  const double per_parameter =
      1 + (o.zero >= 2 ? 1 / r : 1) + (o.zero >= 1 ? states / r : states);
  const auto e = static_cast<double>(element_bytes);
  TrainingBytes b;
  b.parameters = e * model.parameters() * per_parameter;
  b.activations = e * static_cast<double>(examples) *
                  (model.activations_per_example() + model.peak_transient_per_example());
  return b;
}

double host_memory_bytes() {
  const char* v = std::getenv("DISTOP_HOST_MEMORY_BYTES");
  if (v != nullptr && *v != '\0') {
    char* end = nullptr;
    const double bytes = std::strtod(v, &end);
    if (end != v && *end == '\0' && std::isfinite(bytes) && bytes > 0) return bytes;
    std::fprintf(stderr,
                 "distop: DISTOP_HOST_MEMORY_BYTES='%s' is not a number of bytes > 0; using the "
                 "host's physical memory\n",
                 v);
  }
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? static_cast<double>(pages) * static_cast<double>(page) : 0;
}

std::int64_t examples_per_step(const TrainOptions& o, std::int64_t dataset_size) {
  const std::int64_t replicas = std::max(o.replicas, 1);
  const std::int64_t share = (std::max<std::int64_t>(dataset_size, 0) + replicas - 1) / replicas;
  return std::min((std::max<std::int64_t>(o.batch_size, 1) + replicas - 1) / replicas, share);
}

namespace {

std::string bytes_text(double bytes) {
  char buf[48];
  if (bytes >= 1e9)
    std::snprintf(buf, sizeof buf, "%.0f bytes (%.1f GB)", bytes, bytes / 1e9);
  else
    std::snprintf(buf, sizeof buf, "%.0f bytes", bytes);
  return buf;
}

}  // namespace

void check_training_fits(const std::string& program, const ModelFootprint& model,
                         std::int64_t examples, const TrainOptions& o, int replicas,
                         const std::string& model_setting, MPI_Comm comm) {
  constexpr const char* kOp = "check_training_fits";
  const TrainingBytes mine = training_bytes(model, examples, o, replicas);
  // The ranks of this host together, against its memory (0: unknown, not checked).
  const double memory = host_memory_bytes();
  MPI_Comm host = MPI_COMM_NULL;
  DISTOP_MPI_CHECK(MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &host), kOp);
  double local[3] = {mine.total(), mine.parameters, 1}, on_host[3] = {0, 0, 0};
  const int summed = MPI_Allreduce(local, on_host, 3, MPI_DOUBLE, MPI_SUM, host);
  MPI_Comm_free(&host);  // unchecked: releases a local handle; the sum's result is what counts
  DISTOP_MPI_CHECK(summed, kOp);
  // The host most over its memory, and that host's numbers, the same on every rank.
  struct {
    double ratio;
    int rank;
  } worst{memory > 0 ? on_host[0] / memory : 0, 0}, agreed{0, 0};
  DISTOP_MPI_CHECK(MPI_Comm_rank(comm, &worst.rank), kOp);
  DISTOP_MPI_CHECK(MPI_Allreduce(&worst, &agreed, 1, MPI_DOUBLE_INT, MPI_MAXLOC, comm), kOp);
  if (agreed.ratio <= 1) return;
  double numbers[8] = {mine.total(), mine.parameters, mine.activations,
                       on_host[0],   on_host[1],      on_host[2],
                       memory,       static_cast<double>(examples)};
  char name[MPI_MAX_PROCESSOR_NAME + 1] = {};
  int length = 0;
  DISTOP_MPI_CHECK(MPI_Get_processor_name(name, &length), kOp);
  DISTOP_MPI_CHECK(MPI_Bcast(numbers, 8, MPI_DOUBLE, agreed.rank, comm), kOp);
  DISTOP_MPI_CHECK(MPI_Bcast(name, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, agreed.rank, comm), kOp);
  name[MPI_MAX_PROCESSOR_NAME] = '\0';
  const bool model_too_large = numbers[4] > numbers[6];
  char ranks[32], count[32];
  std::snprintf(ranks, sizeof ranks, "%.0f", numbers[5]);
  std::snprintf(count, sizeof count, "%.0f", numbers[7]);
  throw Error(program,
              (model_too_large ? model_setting : "--batch-size " + std::to_string(o.batch_size)) +
                  " needs " + bytes_text(numbers[0]) + " per rank (" + bytes_text(numbers[1]) +
                  " for the parameters, their gradients and the optimizer's state, " +
                  bytes_text(numbers[2]) + " for the activations of " + count + " examples); the " +
                  ranks + (numbers[5] == 1 ? " rank" : " ranks") + " on host " + name +
                  (numbers[5] == 1 ? " needs " : " need ") + bytes_text(numbers[3]) +
                  ", more than its " + bytes_text(numbers[6]) + " of memory" +
                  (std::getenv("DISTOP_HOST_MEMORY_BYTES") ? " (DISTOP_HOST_MEMORY_BYTES)" : ""));
}

}  // namespace distop::train
