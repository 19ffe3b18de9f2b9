#include "distop/comm/agree.hpp"

#include <climits>
#include <vector>

#include "distop/comm/mpi.hpp"
#include "distop/core/error.hpp"
#include "distop/core/random.hpp"

namespace distop::comm {

void agree_ok(MPI_Comm comm, const std::string& op, bool ok, const std::string& message) {
  if (comm == MPI_COMM_NULL) {
    if (!ok) throw Error(op, message);
    return;
  }
  int rank = 0;
  DISTOP_MPI_CHECK(MPI_Comm_rank(comm, &rank), op);
  int first_failing = ok ? INT_MAX : rank;
  DISTOP_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &first_failing, 1, MPI_INT, MPI_MIN, comm), op);
  if (first_failing == INT_MAX) return;
  long long length = rank == first_failing ? static_cast<long long>(message.size()) : 0;
  DISTOP_MPI_CHECK(MPI_Bcast(&length, 1, MPI_LONG_LONG, first_failing, comm), op);
  std::vector<char> text(static_cast<std::size_t>(length));
  if (rank == first_failing) text.assign(message.begin(), message.end());
  DISTOP_MPI_CHECK(MPI_Bcast(text.data(), static_cast<int>(length), MPI_CHAR, first_failing, comm),
                   op);
  std::string agreed(text.begin(), text.end());
  if (rank != first_failing) {
    // Unchecked: naming the rank must not replace the agreed error, thrown below either way.
    int world = world_rank();
    MPI_Group g_comm, g_world;
    MPI_Comm_group(comm, &g_comm);
    MPI_Comm_group(MPI_COMM_WORLD, &g_world);
    MPI_Group_translate_ranks(g_comm, 1, &first_failing, g_world, &world);
    MPI_Group_free(&g_comm);
    MPI_Group_free(&g_world);
    agreed = "on rank " + std::to_string(world) + ": " + agreed;
  }
  throw Error(op, agreed);
}

void agree(MPI_Comm comm, const std::string& op, const std::function<void()>& action) {
  std::string message;
  bool ok = true;
  try {
    action();
  } catch (const Error& e) {
    ok = false;
    message = e.detail();
  } catch (const std::exception& e) {
    ok = false;
    message = e.what();
  }
  agree_ok(comm, op, ok, message);
}

Fingerprint& Fingerprint::add(std::uint64_t v) noexcept {
  h_ = random::mix(h_ ^ v);
  return *this;
}

void agree_on_arguments(MPI_Comm comm, const std::string& op, std::uint64_t fingerprint,
                        const std::string& problem, const std::string& mine) {
  agree_on_fingerprint(comm, op, fingerprint, problem,
                       mine + ", but another rank passed different arguments");
}

void agree_on_fingerprint(MPI_Comm comm, const std::string& op, std::uint64_t fingerprint,
                          const std::string& problem, const std::string& mismatch) {
  if (comm == MPI_COMM_NULL) {
    if (!problem.empty()) throw Error(op, problem);
    return;
  }
  std::uint64_t v[3] = {fingerprint, ~fingerprint, problem.empty() ? 0U : 1U};
  DISTOP_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, v, 3, MPI_UINT64_T, MPI_MAX, comm), op);
  const bool differ = v[0] != ~v[1];
  if (!differ && v[2] == 0) return;
  const bool ok = problem.empty() && !(differ && fingerprint != v[0]);
  agree_ok(comm, op, ok, problem.empty() ? mismatch : problem);
  throw Error(op, "ranks disagree on the arguments");  // not reached: agree_ok threw
}

}  // namespace distop::comm
