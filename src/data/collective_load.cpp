#include "collective_load.hpp"

#include <array>
#include <cstdint>
#include <cstring>

#include "distop/comm/agree.hpp"
#include "distop/comm/mpi.hpp"
#include "distop/core/error.hpp"

namespace distop::data::detail {

namespace {

// A content checksum of a data set, for comparing what ranks loaded.
std::uint64_t checksum(const Dataset& ds) {
  std::uint64_t h = 0xcbf29ce484222325ULL;
  auto add = [&h](std::uint64_t v) { h = (h ^ v) * 0x100000001b3ULL; };
  for (std::int32_t label : ds.labels) add(static_cast<std::uint32_t>(label));
  for (float pixel : ds.images) {
    std::uint32_t b;
    std::memcpy(&b, &pixel, sizeof b);
    add(b);
  }
  return h;
}

}  // namespace

Dataset load_collective(MPI_Comm comm, const char* op, const std::string& dir,
                        const std::function<Dataset()>& load) {
  Dataset ds;
  comm::agree(comm, op, [&] { ds = load(); });
  if (comm == MPI_COMM_NULL) return ds;

  // One MIN-reduction of each value and its complement gives every value's minimum and maximum.
  constexpr std::size_t n = 5;
  const std::array<std::uint64_t, n> local{
      static_cast<std::uint64_t>(ds.size), static_cast<std::uint64_t>(ds.channels),
      static_cast<std::uint64_t>(ds.rows), static_cast<std::uint64_t>(ds.cols), checksum(ds)};
  std::array<std::uint64_t, 2 * n> both{};
  for (std::size_t i = 0; i < n; ++i) {
    both[i] = local[i];
    both[i + n] = ~local[i];
  }
  DISTOP_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, both.data(), static_cast<int>(both.size()),
                                 MPI_UINT64_T, MPI_MIN, comm),
                   op);
  bool same = true;
  for (std::size_t i = 0; i < n; ++i) same = same && both[i] == ~both[i + n];
  // Every rank sees the same reduction, so every rank takes this branch alike and throws the same
  // message.
  DISTOP_CHECK(same, op, "ranks loaded different data sets from ", dir, ": example counts ",
               both[0], "..", ~both[n], ", image channels ", both[1], "..", ~both[n + 1],
               ", image rows ", both[2], "..", ~both[n + 2], ", image cols ", both[3], "..",
               ~both[n + 3], (both[4] != ~both[n + 4] ? ", and contents differ" : ""),
               "; expected identical files on every rank");
  return ds;
}

}  // namespace distop::data::detail
