#pragma once
// Hooks of the layers above core in distop::Environment (internal). core cannot call them: a layer
// whose per-process set-up needs MPI running (comm's hang watchdog board) installs a hook, which
// every Environment then runs.

#include <mpi.h>

namespace distop::detail {

struct EnvironmentHook {
  // Once MPI is initialised and MPI_COMM_WORLD returns errors; collective over `world`.
  void (*open)(MPI_Comm world) noexcept;
  // When the Environment ends, before MPI is finalised (not where it already is).
  void (*close)() noexcept;
};

// Installs a hook: call during static initialisation (before any Environment exists).
void add_environment_hook(EnvironmentHook hook);
// Runs the hooks' open in the order they were added, their close in the reverse order.
void open_environment_hooks(MPI_Comm world) noexcept;
void close_environment_hooks() noexcept;

}  // namespace distop::detail
