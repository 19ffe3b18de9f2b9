#include "distop/core/trace.hpp"

#include <fcntl.h>
#include <mpi.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <nlohmann/json.hpp>
#include <string_view>
#include <vector>

#include "distop/core/error.hpp"
#include "distop/core/mpi_check.hpp"
#include "distop/core/timers.hpp"

namespace distop::trace {

namespace {

struct Event {
  const char* category;
  std::string name;
  double begin_us;
  double dur_us;
  int tid;
};

using detail::g_active;
std::chrono::steady_clock::time_point g_origin;
std::vector<Event> g_events;
std::size_t g_max = 0;
std::size_t g_dropped = 0;

// Runs `action` on rank 0 of `comm` and tells every rank how it went (collective: one broadcast,
// two on failure): if it threw, every rank throws Error("trace", ...) with rank 0's message, so
// that no rank goes on to a collective the others never reach.
template <class F>
void on_root_agreed(MPI_Comm comm, int rank, F&& action) {
  std::string message;
  if (rank == 0) {
    try {
      action();
    } catch (const Error& e) {
      message = e.detail().empty() ? "failed" : e.detail();
    } catch (const std::exception& e) {
      message = *e.what() ? e.what() : "failed";
    }
  }
  long long length = static_cast<long long>(message.size());
  DISTOP_MPI_CHECK(MPI_Bcast(&length, 1, MPI_LONG_LONG, 0, comm), "trace");
  if (length == 0) return;
  message.resize(static_cast<std::size_t>(length));
  DISTOP_MPI_CHECK(MPI_Bcast(message.data(), static_cast<int>(length), MPI_CHAR, 0, comm), "trace");
  throw Error("trace", rank == 0 ? message : "on rank 0: " + message);
}

// Writes `parts` to `path` through a temporary file beside it ("<path>.tmp.<pid>"), flushed to
// disk and renamed over `path`, as checkpoints and metrics are written: a failure (a full disk, a
// file system that refuses the file) leaves `path` as it was and no partial file, and throws
// distop::Error naming the OS's reason (strerror).
void write_replacing(const std::string& path, const std::vector<std::string_view>& parts) {
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
  DISTOP_CHECK(fd >= 0, "trace", "cannot write the trace ", path, ": cannot create ", tmp, ": ",
               std::strerror(errno));
  int error = 0;
  for (std::size_t i = 0; i < parts.size() && error == 0; ++i) {
    for (std::size_t done = 0; done < parts[i].size();) {
      const ssize_t n = ::write(fd, parts[i].data() + done, parts[i].size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        error = n < 0 ? errno : EIO;
        break;
      }
      done += static_cast<std::size_t>(n);
    }
  }
  if (error == 0 && ::fsync(fd) != 0) error = errno;
  if (::close(fd) != 0 && error == 0) error = errno;
  const bool written = error == 0;
  if (written && ::rename(tmp.c_str(), path.c_str()) != 0) error = errno;
  if (error == 0) return;
  ::unlink(tmp.c_str());
  throw Error("trace",
              distop::detail::concat("cannot write the trace ", path, ": ",
                                     written ? "cannot rename " + tmp + " to it: " : "",
                                     std::strerror(error), "; ", path, " is left as it was"));
}

double us(std::chrono::steady_clock::duration d) {
  return std::chrono::duration<double, std::micro>(d).count();
}

}  // namespace

void start(MPI_Comm comm, std::size_t max_events) {
  g_events.clear();
  detail::g_label = nullptr;
  g_dropped = 0;
  g_max = max_events;
  timers::enable(true);
  DISTOP_MPI_CHECK(MPI_Barrier(comm), "trace");
  g_origin = std::chrono::steady_clock::now();
  g_active = true;
}

void record(const char* category, const std::string& name,
            std::chrono::steady_clock::time_point begin, std::chrono::steady_clock::time_point end,
            int tid) {
  if (!g_active) return;
  if (g_events.size() >= g_max) {
    ++g_dropped;
    return;
  }
  g_events.push_back({category, name, us(begin - g_origin), us(end - begin), tid});
}

void stop_and_write(const std::string& path, MPI_Comm comm) {
  g_active = false;
  detail::g_label = nullptr;
  int rank = 0, size = 1;
  DISTOP_MPI_CHECK(MPI_Comm_rank(comm, &rank), "trace");
  DISTOP_MPI_CHECK(MPI_Comm_size(comm, &size), "trace");
  // This rank's events as JSON objects separated by commas: its track.
  std::string mine;
  {
    nlohmann::json meta = {{"name", "process_name"},
                           {"ph", "M"},
                           {"pid", rank},
                           {"args", {{"name", "rank " + std::to_string(rank)}}}};
    mine += meta.dump();
    nlohmann::json order = {{"name", "process_sort_index"},
                            {"ph", "M"},
                            {"pid", rank},
                            {"args", {{"sort_index", rank}}}};
    mine.push_back(',');
    mine += order.dump();
    if (g_dropped > 0) {
      nlohmann::json dropped = {
          {"name", "dropped_events"}, {"ph", "M"}, {"pid", rank}, {"args", {{"count", g_dropped}}}};
      mine.push_back(',');
      mine += dropped.dump();
    }
    // The rows' names: row 1 only where it holds events.
    bool buckets = false;
    for (const Event& e : g_events) buckets = buckets || e.tid == 1;
    for (int tid = 0; tid < (buckets ? 2 : 1); ++tid) {
      nlohmann::json row = {{"name", "thread_name"},
                            {"ph", "M"},
                            {"pid", rank},
                            {"tid", tid},
                            {"args", {{"name", tid == 0 ? "steps" : "gradient buckets"}}}};
      mine.push_back(',');
      mine += row.dump();
    }
    char buf[112];
    for (const Event& e : g_events) {
      mine += ",{\"name\":";
      mine += nlohmann::json(e.name).dump();
      mine += ",\"cat\":\"";
      mine += e.category;
      mine.push_back('"');
      std::snprintf(buf, sizeof buf,
                    ",\"ph\":\"X\",\"pid\":%d,\"tid\":%d,\"ts\":%.3f,\"dur\":%.3f}", rank, e.tid,
                    e.begin_us, e.dur_us);
      mine += buf;
    }
  }
  g_events.clear();
  g_events.shrink_to_fit();
  const long long length = static_cast<long long>(mine.size());
  std::vector<long long> lengths(static_cast<std::size_t>(size));
  DISTOP_MPI_CHECK(MPI_Gather(&length, 1, MPI_LONG_LONG, lengths.data(), 1, MPI_LONG_LONG, 0, comm),
                   "trace");
  on_root_agreed(comm, rank, [&] {
    long long total = 0;
    for (long long l : lengths) total += l;
    DISTOP_CHECK(total < (1LL << 31), "trace", "the trace of ", total,
                 " bytes is too large to gather; trace fewer steps");
  });
  std::vector<int> counts(static_cast<std::size_t>(size)), displs(static_cast<std::size_t>(size));
  std::string all;
  if (rank == 0) {
    int offset = 0;
    for (int r = 0; r < size; ++r) {
      counts[static_cast<std::size_t>(r)] = static_cast<int>(lengths[static_cast<std::size_t>(r)]);
      displs[static_cast<std::size_t>(r)] = offset;
      offset += counts[static_cast<std::size_t>(r)];
    }
    all.resize(static_cast<std::size_t>(offset));
  }
  DISTOP_MPI_CHECK(MPI_Gatherv(mine.data(), static_cast<int>(mine.size()), MPI_CHAR, all.data(),
                               counts.data(), displs.data(), MPI_CHAR, 0, comm),
                   "trace");
  on_root_agreed(comm, rank, [&] {
    std::vector<std::string_view> parts{"{\"displayTimeUnit\":\"ms\",\"traceEvents\":["};
    for (int r = 0; r < size; ++r) {
      if (r > 0) parts.emplace_back(",");
      parts.emplace_back(all.data() + displs[static_cast<std::size_t>(r)],
                         static_cast<std::size_t>(counts[static_cast<std::size_t>(r)]));
    }
    parts.emplace_back("]}\n");
    write_replacing(path, parts);
  });
}

Span::Span(const char* category, std::string name)
    : category_(category), on_(g_active || timers::enabled()) {
  if (!on_) return;
  name_ = std::move(name);
  begin_ = std::chrono::steady_clock::now();
}

Span::~Span() {
  if (!on_) return;
  const auto end = std::chrono::steady_clock::now();
  if (timers::enabled()) timers::add(name_, std::chrono::duration<double>(end - begin_).count());
  record(category_, name_, begin_, end);
}

void Compute::open(const char* name, bool labels) {
  name_ = name;
  labels_ = labels || detail::g_label == nullptr;
  outer_ = detail::g_label;
  if (labels_) detail::g_label = name_.c_str();
  begin_ = std::chrono::steady_clock::now();
}

void Compute::open(const char* type, const std::string& path) {
  if (path.empty()) {
    name_ = type;
  } else {
    const auto dot = path.rfind('.');
    const auto last = dot == std::string::npos ? 0 : dot + 1;
    bool number = last < path.size();
    for (auto i = last; i < path.size(); ++i) number = number && path[i] >= '0' && path[i] <= '9';
    name_ = number ? path + " " + type : path;
  }
  labels_ = true;
  outer_ = detail::g_label;
  detail::g_label = name_.c_str();
  begin_ = std::chrono::steady_clock::now();
}

void Compute::close() {
  const auto end = std::chrono::steady_clock::now();
  if (labels_) detail::g_label = outer_;
  record("compute", name_, begin_, end);
}

}  // namespace distop::trace
