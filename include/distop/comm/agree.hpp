#pragma once
// Collective agreement on errors, so that a check failing on some ranks fails on all of them.

#include <mpi.h>

#include <functional>
#include <string>

namespace distop::comm {

// Runs `action` on every rank of `comm` (collective), then agrees on the outcome: if it threw on
// any rank, every rank throws distop::Error(op, ...) carrying the message of the lowest failing
// rank, so no rank goes on to a collective that the others never reach. With MPI_COMM_NULL the
// action just runs.
void agree(MPI_Comm comm, const std::string& op, const std::function<void()>& action);

// Throws the same distop::Error on every rank of `comm` if `ok` is false on any of them. `message`
// is this rank's description of the failure; the lowest failing rank's message is used.
void agree_ok(MPI_Comm comm, const std::string& op, bool ok, const std::string& message);

}  // namespace distop::comm
