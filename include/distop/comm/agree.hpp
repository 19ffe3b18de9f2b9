#pragma once
// Collective agreement on errors, so that a check failing on some ranks fails on all of them.

#include <mpi.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace distop::comm {

// Runs `action` on every rank of `comm` (collective), then agrees on the outcome: if it threw on
// any rank, every rank throws distop::Error(op, ...) carrying the message of the lowest failing
// rank, so no rank goes on to a collective that the others never reach. With MPI_COMM_NULL the
// action just runs.
void agree(MPI_Comm comm, const std::string& op, const std::function<void()>& action);

// Throws the same distop::Error on every rank of `comm` if `ok` is false on any of them. `message`
// is this rank's description of the failure; the lowest failing rank's message is used.
void agree_ok(MPI_Comm comm, const std::string& op, bool ok, const std::string& message);

// A hash of the arguments of a collective call, which every rank must pass alike.
class Fingerprint {
 public:
  Fingerprint& add(std::uint64_t v) noexcept;
  template <class Int>
  Fingerprint& add_all(const std::vector<Int>& v) noexcept {
    add(v.size());
    for (auto e : v) add(static_cast<std::uint64_t>(e));
    return *this;
  }
  std::uint64_t value() const noexcept { return h_; }

 private:
  std::uint64_t h_ = 0x646973f70617267ULL;
};

// The check at the start of a collective constructor: every rank of `comm` must have passed the
// same arguments (hashed to `fingerprint`) and found no `problem` (empty: none) with them.
// Otherwise every rank throws the same distop::Error(op, ...): the lowest failing rank's problem,
// or else `mine` (this rank's description of its arguments) from the lowest rank whose arguments
// differ from another's, followed by ", but another rank passed different arguments". One
// allreduce when all is well. With MPI_COMM_NULL only this rank's problem is checked.
void agree_on_arguments(MPI_Comm comm, const std::string& op, std::uint64_t fingerprint,
                        const std::string& problem, const std::string& mine);
// The same with `mismatch` as the whole message of a fingerprint that differs between ranks (from
// the lowest rank whose fingerprint differs from another's), for what ranks computed rather than
// passed.
void agree_on_fingerprint(MPI_Comm comm, const std::string& op, std::uint64_t fingerprint,
                          const std::string& problem, const std::string& mismatch);

}  // namespace distop::comm
