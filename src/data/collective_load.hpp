#pragma once
// Internal to the data layer: loading a data set on every rank of a communicator, agreed.

#include <mpi.h>

#include <functional>
#include <string>

#include "distop/data/idx.hpp"

namespace distop::data::detail {

// Runs `load` on every rank of `comm` (collective) and agrees on the outcome: a failure on any
// rank, or ranks whose data sets differ in shape or content (as by a checksum), makes every rank
// throw the same distop::Error (op `op`), with the message of the lowest failing rank, or else
// naming `dir` and the extents that differ; no rank is left waiting. With MPI_COMM_NULL it is
// load().
Dataset load_collective(MPI_Comm comm, const char* op, const std::string& dir,
                        const std::function<Dataset()>& load);

}  // namespace distop::data::detail
