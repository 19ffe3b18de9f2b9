#include "distop/core/environment.hpp"

#include <mpi.h>

#include <Kokkos_Core.hpp>
#include <cstdlib>

#include "distop/comm/collectives.hpp"

#ifdef DISTOP_HAVE_OPENBLAS
extern "C" void openblas_set_num_threads(int num_threads);
#endif

namespace distop {

#ifdef DISTOP_HAVE_CUDA
namespace detail {
void select_cuda_device();
}
#endif

void set_blas_threads([[maybe_unused]] int threads) {
#ifdef DISTOP_HAVE_OPENBLAS
  if (threads > 0) openblas_set_num_threads(threads);
#endif
}

Environment::Environment(int& argc, char**& argv, EnvironmentOptions options) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
    int provided = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
    owns_mpi_ = true;
  }
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  comm::decide_yield_when_idle(MPI_COMM_WORLD);
#ifdef DISTOP_HAVE_CUDA
  detail::select_cuda_device();
#endif
  if (!Kokkos::is_initialized()) {
    Kokkos::initialize(argc, argv);
    owns_kokkos_ = true;
  }
  if (options.blas_threads > 0 && std::getenv("OPENBLAS_NUM_THREADS") == nullptr)
    set_blas_threads(options.blas_threads);
}

Environment::~Environment() {
  if (owns_kokkos_) Kokkos::finalize();
  if (owns_mpi_) {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Finalize();
  }
}

}  // namespace distop
