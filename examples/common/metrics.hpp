#pragma once
// A CSV file of per-epoch learning curves, written by rank 0 only, for scripts/plot-metrics.sh:
//
//   epoch,train_loss,train_accuracy,test_accuracy,seconds
//   1,0.612345,0.781250,0.823400,12.345
//
// epoch counts from 1 (the epoch just finished), accuracies are fractions in [0, 1], seconds is
// the epoch's wall-clock time. Each row is flushed when written, so the file is a valid CSV of the
// epochs done so far even if the run is killed. A run resumed from a checkpoint keeps the rows of
// the epochs the checkpoint had finished and drops the rest (which the resumed run does again).

#include <mpi.h>

#include <algorithm>
#include <cerrno>
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

namespace distop::examples {

class MetricsCsv {
 public:
  static constexpr const char* kHeader = "epoch,train_loss,train_accuracy,test_accuracy,seconds";

  // A writer that writes nothing (on ranks other than 0, or when no file was asked for).
  MetricsCsv() = default;

  // Opens `path` for appending rows. Without `resume_after`, it starts anew: any old file is
  // replaced by the header alone. With it, the run resumes after that many finished epochs: an
  // existing file keeps its header and the rows of epochs 1..*resume_after (a row cut short by a
  // crash, or one that does not parse, is dropped), and a missing file is started anew. Throws
  // distop::Error (op "MetricsCsv") when the file cannot be written or an existing file does not
  // start with kHeader (it is then left as it was). Local: see open() for the collective version.
  explicit MetricsCsv(const std::string& path, std::optional<int> resume_after = std::nullopt)
      : path_(path) {
    std::vector<std::string> kept;
    if (resume_after && std::filesystem::exists(path)) kept = rows_to_keep(path, *resume_after);
    // The kept rows are rewritten atomically, so a crash here cannot lose them.
    const std::string tmp = path + ".tmp";
    {
      std::ofstream out(tmp, std::ios::trunc);
      out << kHeader << '\n';
      for (const auto& row : kept) out << row << '\n';
      out.flush();
      DISTOP_CHECK(out.good(), "MetricsCsv", "cannot write the metrics file ", tmp, ": ",
                   std::strerror(errno));
    }
    std::error_code ec;
    std::filesystem::rename(tmp, path, ec);
    if (ec) std::filesystem::remove(tmp);
    DISTOP_CHECK(!ec, "MetricsCsv", "cannot rename ", tmp, " to ", path, ": ", ec.message());
    file_ = std::fopen(path.c_str(), "a");
    DISTOP_CHECK(file_ != nullptr, "MetricsCsv", "cannot open the metrics file ", path, ": ",
                 std::strerror(errno));
  }

  // Rank `root` of `comm` opens `path` as above (when it is not empty); every other rank gets a
  // writer that writes nothing. Collective: a failure is the same Error on every rank.
  static MetricsCsv open(MPI_Comm comm, const std::string& path,
                         std::optional<int> resume_after = std::nullopt, int root = 0) {
    int rank = 0;
    MPI_Comm_rank(comm, &rank);
    MetricsCsv csv;
    comm::agree(comm, "MetricsCsv", [&] {
      if (rank == root && !path.empty()) csv = MetricsCsv(path, resume_after);
    });
    return csv;
  }

  MetricsCsv(MetricsCsv&& other) noexcept { swap(other); }
  MetricsCsv& operator=(MetricsCsv&& other) noexcept {
    MetricsCsv moved(std::move(other));
    swap(moved);
    return *this;
  }
  MetricsCsv(const MetricsCsv&) = delete;
  MetricsCsv& operator=(const MetricsCsv&) = delete;
  ~MetricsCsv() {
    if (file_) std::fclose(file_);
  }

  bool enabled() const noexcept { return file_ != nullptr; }
  const std::string& path() const noexcept { return path_; }

  // Appends one epoch's row and flushes it. Never throws: a failed write is reported on stderr
  // and ends the file, so that the metrics never stop (or, on one rank only, hang) training.
  void append(int epoch, double train_loss, double train_accuracy, double test_accuracy,
              double seconds) noexcept {
    if (!file_) return;
    const int n = std::fprintf(file_, "%d,%.6f,%.6f,%.6f,%.3f\n", epoch, train_loss, train_accuracy,
                               test_accuracy, seconds);
    if (n < 0 || std::fflush(file_) != 0) {
      std::fprintf(stderr, "warning: cannot write the metrics file %s (%s); no more rows\n",
                   path_.c_str(), std::strerror(errno));
      std::fclose(file_);
      file_ = nullptr;
    }
  }

 private:
  static std::vector<std::string> rows_to_keep(const std::string& path, int resume_after) {
    std::ifstream in(path);
    std::string line;
    DISTOP_CHECK(in.good() && std::getline(in, line) && line == kHeader, "MetricsCsv",
                 "the existing file ", path, " does not start with the header '", kHeader,
                 "'; not appending to it");
    std::vector<std::string> kept;
    while (std::getline(in, line)) {
      if (in.eof()) break;  // the last line lacks its newline: a row cut short
      char* end = nullptr;
      const long epoch = std::strtol(line.c_str(), &end, 10);
      const bool whole =
          end != line.c_str() && *end == ',' && std::count(line.begin(), line.end(), ',') == 4;
      if (whole && epoch >= 1 && epoch <= resume_after) kept.push_back(line);
    }
    return kept;
  }
  void swap(MetricsCsv& other) noexcept {
    std::swap(path_, other.path_);
    std::swap(file_, other.file_);
  }

  std::string path_;
  std::FILE* file_ = nullptr;
};

}  // namespace distop::examples
