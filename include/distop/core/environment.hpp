#pragma once
// Environment: the scope inside which distop may be used.

namespace distop {

struct EnvironmentOptions {
  // Threads for BLAS inside each rank. Ranks are the parallelism, so the default is 1; 0 leaves
  // BLAS as configured (for example by OPENBLAS_NUM_THREADS, which is also honoured when set).
  int blas_threads = 1;
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

 private:
  bool owns_mpi_ = false;
  bool owns_kokkos_ = false;
};

// Sets the number of BLAS threads of this process (OpenBLAS); a no-op for other BLAS libraries.
void set_blas_threads(int threads);

}  // namespace distop
