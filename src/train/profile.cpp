#include "distop/train/profile.hpp"

#include <algorithm>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "distop/core/mpi_check.hpp"
#include "distop/core/timers.hpp"

namespace distop::train {

namespace {

constexpr const char* kOp = "print_profile";

struct Total {
  double sum = 0;  // seconds over the ranks
  double max = 0;  // seconds on the slowest rank
  long long calls = 0;
};

bool is_phase(const std::string& name) {
  return name == "step" || name == "load" || name == "forward" || name == "backward" ||
         name == "optimizer";
}

}  // namespace

void print_profile(MPI_Comm comm, std::int64_t steps, std::FILE* out) {
  int rank = 0, size = 1;
  DISTOP_MPI_CHECK(MPI_Comm_rank(comm, &rank), kOp);
  DISTOP_MPI_CHECK(MPI_Comm_size(comm, &size), kOp);
  std::string mine;
  for (const auto& [name, e] : timers::snapshot()) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "\t%.9e\t%lld\n", e.seconds, e.calls);
    mine += name + buf;
  }
  int length = static_cast<int>(mine.size());
  std::vector<int> lengths(static_cast<std::size_t>(size)), displs(static_cast<std::size_t>(size));
  DISTOP_MPI_CHECK(MPI_Gather(&length, 1, MPI_INT, lengths.data(), 1, MPI_INT, 0, comm), kOp);
  std::string all;
  if (rank == 0) {
    int offset = 0;
    for (int r = 0; r < size; ++r) {
      displs[static_cast<std::size_t>(r)] = offset;
      offset += lengths[static_cast<std::size_t>(r)];
    }
    all.resize(static_cast<std::size_t>(offset));
  }
  DISTOP_MPI_CHECK(MPI_Gatherv(mine.data(), length, MPI_CHAR, all.data(), lengths.data(),
                               displs.data(), MPI_CHAR, 0, comm),
                   kOp);
  if (rank != 0) return;

  std::map<std::string, Total> totals;
  std::istringstream in(all);
  for (std::string line; std::getline(in, line);) {
    const auto tab = line.find('\t');
    if (tab == std::string::npos) continue;
    double seconds = 0;
    long long calls = 0;
    std::istringstream fields(line.substr(tab + 1));
    fields >> seconds >> calls;
    Total& t = totals[line.substr(0, tab)];
    t.sum += seconds;
    t.max = std::max(t.max, seconds);
    t.calls = std::max(t.calls, calls);
  }
  const double per = steps > 0 ? 1e3 / static_cast<double>(steps) : 0.0;
  std::fprintf(out,
               "profile: %lld step%s at %d rank%s; ms per step (mean over the ranks, slowest "
               "rank) and calls per step\n",
               static_cast<long long>(steps), steps == 1 ? "" : "s", size, size == 1 ? "" : "s");
  const auto group = [&](const char* title, auto keep) {
    std::vector<std::pair<std::string, Total>> rows;
    for (const auto& [name, t] : totals)
      if (keep(name)) rows.emplace_back(name, t);
    if (rows.empty()) return;
    std::sort(rows.begin(), rows.end(),
              [](const auto& a, const auto& b) { return a.second.max > b.second.max; });
    std::fprintf(out, "  %s\n", title);
    for (const auto& [name, t] : rows)
      std::fprintf(out, "    %-40s %10.3f %10.3f %8.1f\n", name.c_str(),
                   t.sum / static_cast<double>(size) * per, t.max * per,
                   static_cast<double>(t.calls) * per / 1e3);
  };
  const auto ends_with = [](const std::string& s, const std::string& tail) {
    return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
  };
  group("phases", [](const std::string& n) { return is_phase(n); });
  group("operators, forward", [&](const std::string& n) {
    return !is_phase(n) && !ends_with(n, ".adjoint") && n.rfind("wait ", 0) != 0;
  });
  group("operators, adjoint", [&](const std::string& n) { return ends_with(n, ".adjoint"); });
  group("waits (within the above)", [](const std::string& n) { return n.rfind("wait ", 0) == 0; });
}

}  // namespace distop::train
