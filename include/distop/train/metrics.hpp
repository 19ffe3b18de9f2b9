#pragma once
// The files a training run appends to as it goes. MetricsCsv: a CSV file of per-epoch learning
// curves, written by rank 0 only, for scripts/plot-metrics.sh. For a classifier:
//
//   epoch,train_loss,train_accuracy,test_accuracy,seconds
//   1,0.612345,0.781250,0.823400,12.345
//
// epoch counts from 1 (the epoch just finished), accuracies are fractions in [0, 1], seconds is
// the epoch's wall-clock time. Other losses name their own metric columns (MetricsCsv::Columns).
// Each row is flushed when written, so the file is a valid CSV of the epochs done so far even if
// the run is killed. A run resumed from a checkpoint keeps the rows of the epochs the checkpoint
// had finished and drops the rest (which the resumed run does again).

#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "distop/comm/agree.hpp"
#include "distop/core/error.hpp"

namespace distop::train {

namespace detail {

// Replaces `path` by `lines` (each followed by a newline) atomically: written to a temporary file
// of this process, flushed to disk, then renamed over `path`, so a crash leaves either the old
// file or the new one. `op` names the caller in errors.
inline void rewrite_atomically(const std::string& path, const std::vector<std::string>& lines,
                               const char* op) {
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  std::FILE* f = std::fopen(tmp.c_str(), "w");
  DISTOP_CHECK(f != nullptr, op, "cannot write ", tmp, ": ", std::strerror(errno));
  bool ok = true;
  for (const auto& line : lines) ok = ok && std::fprintf(f, "%s\n", line.c_str()) >= 0;
  ok = ok && std::fflush(f) == 0 && ::fsync(::fileno(f)) == 0;
  const int error = errno;
  ok = std::fclose(f) == 0 && ok;
  std::error_code ec;
  if (ok) std::filesystem::rename(tmp, path, ec);
  if (!ok || ec) std::filesystem::remove(tmp);
  DISTOP_CHECK(ok, op, "cannot write ", tmp, ": ", std::strerror(error));
  DISTOP_CHECK(!ec, op, "cannot rename ", tmp, " to ", path, ": ", ec.message());
}

// The complete lines of a text file (a last line without its newline, cut short by a crash, is
// left out).
inline std::vector<std::string> complete_lines(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  std::string line;
  while (std::getline(in, line) && !in.eof()) lines.push_back(line);
  return lines;
}

}  // namespace detail

// A text file that one rank appends lines to, flushing each: the common part of MetricsCsv and
// LossLog. Writing never throws: a failed write is reported on stderr and ends the file, so that
// a log never stops (or, on one rank only, hangs) training.
class AppendedFile {
 public:
  AppendedFile() = default;
  // Replaces `path` atomically by `lines`, then opens it for appending. `op` names the caller.
  AppendedFile(const std::string& path, const std::vector<std::string>& lines, const char* op)
      : path_(path) {
    detail::rewrite_atomically(path, lines, op);
    file_ = std::fopen(path.c_str(), "a");
    DISTOP_CHECK(file_ != nullptr, op, "cannot open ", path, ": ", std::strerror(errno));
  }
  AppendedFile(AppendedFile&& other) noexcept { swap(other); }
  AppendedFile& operator=(AppendedFile&& other) noexcept {
    AppendedFile moved(std::move(other));
    swap(moved);
    return *this;
  }
  AppendedFile(const AppendedFile&) = delete;
  AppendedFile& operator=(const AppendedFile&) = delete;
  ~AppendedFile() {
    if (file_) std::fclose(file_);
  }

  bool enabled() const noexcept { return file_ != nullptr; }
  const std::string& path() const noexcept { return path_; }

  // Appends `line` and a newline, and flushes.
  void write_line(const char* line) noexcept {
    if (!file_) return;
    if (std::fprintf(file_, "%s\n", line) < 0 || std::fflush(file_) != 0) {
      std::fprintf(stderr, "warning: cannot write %s (%s); nothing more is written to it\n",
                   path_.c_str(), std::strerror(errno));
      std::fclose(file_);
      file_ = nullptr;
    }
  }

  // Rank `root` of `comm` makes the file with make() (when `path` is not empty); every other rank
  // gets one that writes nothing. Collective: a failure is the same Error on every rank.
  template <class File, class Make>
  static File open_on(MPI_Comm comm, int root, const std::string& path, const char* op, Make make) {
    int rank = 0;
    MPI_Comm_rank(comm, &rank);
    File f;
    comm::agree(comm, op, [&] {
      if (rank == root && !path.empty()) f = make();
    });
    return f;
  }

 private:
  void swap(AppendedFile& other) noexcept {
    std::swap(path_, other.path_);
    std::swap(file_, other.file_);
  }

  std::string path_;
  std::FILE* file_ = nullptr;
};

// The columns of a MetricsCsv: epoch, train_loss, then train_<metric> for a loss with a metric,
// then the test set's measure when there is one (test_<metric>, or test_loss for a loss without a
// metric), then seconds. The default is MetricsCsv::kHeader's.
struct MetricsColumns {
  std::string metric = "accuracy";  // empty: none
  bool test = true;
  std::string header() const {
    std::string h = "epoch,train_loss";
    if (!metric.empty()) h += ",train_" + metric;
    if (test) h += metric.empty() ? ",test_loss" : ",test_" + metric;
    return h + ",seconds";
  }
};

class MetricsCsv : public AppendedFile {
 public:
  // The classification header (a loss with the metric "accuracy" and a test set).
  static constexpr const char* kHeader = "epoch,train_loss,train_accuracy,test_accuracy,seconds";
  using Columns = MetricsColumns;

  // A writer that writes nothing (on ranks other than 0, or when no file was asked for).
  MetricsCsv() = default;
  // Opens `path` for appending rows. Without `resume_after`, it starts anew: any old file is
  // replaced by the header alone. With it, the run resumes after that many finished epochs: an
  // existing file keeps its header and the rows of epochs 1..*resume_after (a row cut short by a
  // crash, or one that does not parse, is dropped), and a missing file is started anew. Throws
  // distop::Error (op "MetricsCsv") when the file cannot be written or an existing file does not
  // start with the columns' header (it is then left as it was). Local: see open() for the
  // collective version.
  explicit MetricsCsv(const std::string& path, std::optional<int> resume_after = std::nullopt,
                      Columns columns = {})
      : AppendedFile(path, kept_lines(path, resume_after, columns.header()), "MetricsCsv"),
        columns_(std::move(columns)) {}
  // Rank `root` of `comm` opens `path` as above (when it is not empty); every other rank gets a
  // writer that writes nothing. Collective: a failure is the same Error on every rank.
  static MetricsCsv open(MPI_Comm comm, const std::string& path,
                         std::optional<int> resume_after = std::nullopt, int root = 0,
                         Columns columns = {}) {
    return open_on<MetricsCsv>(comm, root, path, "MetricsCsv",
                               [&] { return MetricsCsv(path, resume_after, columns); });
  }

  // Appends one epoch's row and flushes it: the values of the columns (train_metric and test are
  // written where the columns have them). Never throws (see AppendedFile).
  void append(int epoch, double train_loss, double train_metric, double test,
              double seconds) noexcept {
    char row[160];
    int n = std::snprintf(row, sizeof row, "%d,%.6f", epoch, train_loss);
    if (!columns_.metric.empty())
      n += std::snprintf(row + n, sizeof row - static_cast<std::size_t>(n), ",%.6f", train_metric);
    if (columns_.test)
      n += std::snprintf(row + n, sizeof row - static_cast<std::size_t>(n), ",%.6f", test);
    std::snprintf(row + n, sizeof row - static_cast<std::size_t>(n), ",%.3f", seconds);
    write_line(row);
  }

 private:
  static std::vector<std::string> kept_lines(const std::string& path,
                                             std::optional<int> resume_after,
                                             const std::string& header) {
    std::vector<std::string> kept{header};
    if (!resume_after || !std::filesystem::exists(path)) return kept;
    const auto lines = detail::complete_lines(path);
    DISTOP_CHECK(!lines.empty() && lines.front() == header, "MetricsCsv", "the existing file ",
                 path, " does not start with the header '", header, "'; not appending to it");
    const auto commas = std::count(header.begin(), header.end(), ',');
    for (std::size_t i = 1; i < lines.size(); ++i) {
      const std::string& line = lines[i];
      char* end = nullptr;
      const long epoch = std::strtol(line.c_str(), &end, 10);
      const bool whole =
          end != line.c_str() && *end == ',' && std::count(line.begin(), line.end(), ',') == commas;
      if (whole && epoch >= 1 && epoch <= *resume_after) kept.push_back(line);
    }
    return kept;
  }

  Columns columns_;
};

// The loss of every training step, written by rank 0 only: one line "step loss" per step, step
// counting from 1. Each line is flushed when written. A run resumed from a checkpoint taken after
// `resume_after` steps keeps the lines of steps 1..resume_after and drops the rest (which the
// resumed run does again), so the file never holds a step twice.
class LossLog : public AppendedFile {
 public:
  LossLog() = default;
  explicit LossLog(const std::string& path, std::optional<std::int64_t> resume_after = std::nullopt)
      : AppendedFile(path, kept_lines(path, resume_after), "LossLog") {}
  static LossLog open(MPI_Comm comm, const std::string& path,
                      std::optional<std::int64_t> resume_after = std::nullopt, int root = 0) {
    return open_on<LossLog>(comm, root, path, "LossLog",
                            [&] { return LossLog(path, resume_after); });
  }

  void append(std::int64_t step, double loss) noexcept {
    char line[64];
    std::snprintf(line, sizeof line, "%lld %.9g", static_cast<long long>(step), loss);
    write_line(line);
  }

 private:
  static std::vector<std::string> kept_lines(const std::string& path,
                                             std::optional<std::int64_t> resume_after) {
    std::vector<std::string> kept;
    if (!resume_after || !std::filesystem::exists(path)) return kept;
    for (const auto& line : detail::complete_lines(path)) {
      char* end = nullptr;
      const long long step = std::strtoll(line.c_str(), &end, 10);
      if (end != line.c_str() && *end == ' ' && step >= 1 && step <= *resume_after)
        kept.push_back(line);
    }
    return kept;
  }
};

}  // namespace distop::train
