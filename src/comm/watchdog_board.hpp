#pragma once
// The hang watchdog's status board (comm/watchdog.hpp): one slot per rank of a node in memory the
// node's ranks share, where each rank publishes what it waits in, so that a rank whose wait passes
// the limit can name the ranks of its node that have not arrived. Opened by distop::Environment.

#include <mpi.h>

namespace distop::comm::detail {

// Opens the board of the node: collective over `world` (MPI_Comm_split_type of the ranks that
// share memory, then MPI_Win_allocate_shared). Without one (not opened, a failure, or the SMPI
// build, where it is compiled out) the watchdog reports only its own rank's wait.
void open_watchdog_board(MPI_Comm world) noexcept;
// Marks this rank's slot as ending and frees the board: collective over the node's ranks; before
// MPI_Finalize.
void close_watchdog_board() noexcept;

}  // namespace distop::comm::detail
