#pragma once
// Environment: the scope inside which distop may be used.

#include <mpi.h>

#include <exception>

namespace distop {

struct EnvironmentOptions {
  // Threads for BLAS inside each rank. Ranks are the parallelism, so the default is 1; 0 leaves
  // BLAS as configured (for example by OPENBLAS_NUM_THREADS, which is also honoured when set).
  int blas_threads = 1;
  // The thread support distop asks MPI_Init_thread for, where it initialises MPI itself. distop
  // calls MPI from one thread at a time; FUNNELED says the main thread. A program whose MPI calls
  // come from another thread at times (torch's autograd runs the backward pass of GPU tensors on
  // a device thread of its own) asks for MPI_THREAD_SERIALIZED; an MPI that provides less is an
  // Error. Where the program initialised MPI, the level it got must be at least this one.
  int mpi_thread_level = MPI_THREAD_FUNNELED;
};

// Initialises MPI (unless the program already did; then it is left to the program to finalise)
// and Kokkos, sets MPI_COMM_WORLD to return errors so that distop can report them, and runs BLAS
// single-threaded inside each rank. The destructor finalises in reverse order. Construct exactly
// one, at the top of main, and let every distop object die before it does.
class Environment {
 public:
  Environment(int& argc, char**& argv, EnvironmentOptions options = {});
  ~Environment();
  Environment(const Environment&) = delete;
  Environment& operator=(const Environment&) = delete;

  // For main's catch of an error, on the ranks that caught one. distop raises its errors on bad
  // input alike on every rank; then rank 0 prints "program: error: <what>" and every rank gets
  // `status` back to return from main. An error raised on some ranks only (a rank's local batch
  // too small for its BatchNorm, a file one node could not write, a bad_alloc) would leave the
  // other ranks waiting in their next collective for ever: when not every rank has reported
  // within `patience_s` seconds, each rank that caught one prints it with its rank and the whole
  // job is aborted (MPI_Abort with `status`). Collective in that sense; waits yield the processor.
  int report_error(const std::exception& e, const char* program, int status = 1,
                   double patience_s = 10) const;

 private:
  bool owns_mpi_ = false;
  bool owns_kokkos_ = false;
  MPI_Comm errors_ = MPI_COMM_NULL;  // a copy of MPI_COMM_WORLD for report_error alone
};

// Sets the number of BLAS threads of this process (OpenBLAS); a no-op for other BLAS libraries.
void set_blas_threads(int threads);

// Whether waits yield the processor between tests of a nonblocking request instead of spinning:
// true when a node runs more MPI ranks than it has cores (MPICH polls, so spinning ranks would
// take the cores from the ranks doing the work), or as DISTOP_YIELD_WHEN_IDLE=1/0 says. Where it
// is true the collectives take their nonblocking forms, which do not match blocking ones, so the
// setting is the same on every rank. Decided once: by Environment's constructor (collective over
// MPI_COMM_WORLD: true everywhere if it is true on any rank), or else, without an Environment,
// true unless DISTOP_YIELD_WHEN_IDLE=0.
bool yield_when_idle();

}  // namespace distop
