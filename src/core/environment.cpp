#include "distop/core/environment.hpp"

#include <mpi.h>

#include <Kokkos_Core.hpp>
#include <cstdlib>

#include "distop/comm/collectives.hpp"
#include "distop/core/error.hpp"
#include "storage.hpp"

#include <malloc.h>

#include <cstdio>
#include <cstring>
#include <vector>

#ifdef DISTOP_HAVE_OPENBLAS
extern "C" void openblas_set_num_threads(int num_threads);
extern "C" char* openblas_get_corename(void);
#endif

namespace distop {

#ifdef DISTOP_HAVE_CUDA
namespace detail {
void select_cuda_device();
}
#endif

namespace {

// OpenBLAS picks its kernels when it loads; an older release that does not know the CPU falls back
// to pre-AVX kernels, several times slower. Too late to change here, but worth saying once.
void warn_about_slow_blas_kernels(int rank) {
#ifdef DISTOP_HAVE_OPENBLAS
  const char* core = openblas_get_corename();
  const bool old_kernels = core && (std::strcmp(core, "Prescott") == 0 ||
                                    std::strcmp(core, "Core2") == 0 ||
                                    std::strcmp(core, "Nehalem") == 0);
  if (rank == 0 && old_kernels && __builtin_cpu_supports("avx2") &&
      std::getenv("OPENBLAS_CORETYPE") == nullptr)
    std::fprintf(stderr,
                 "distop: OpenBLAS does not recognise this CPU and uses its %s kernels; set "
                 "OPENBLAS_CORETYPE=%s for several times faster GEMM (scripts/env.sh does)\n",
                 core, __builtin_cpu_supports("avx512f") ? "SkylakeX" : "Haswell");
#else
  (void)rank;
#endif
}

}  // namespace

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
    // Kokkos answers an unprefixed --help with its own text; leave --help to the program
    // (--kokkos-help still reaches Kokkos). Kokkos may rewrite its copy of the arguments.
    std::vector<char*> args, help;
    for (int i = 0; i < argc; ++i) {
      const bool is_help = i > 0 && (std::strcmp(argv[i], "--help") == 0 || std::strcmp(argv[i], "-h") == 0);
      (is_help ? help : args).push_back(argv[i]);
    }
    int n = static_cast<int>(args.size());
    args.push_back(nullptr);
    Kokkos::initialize(n, args.data());
    owns_kokkos_ = true;
    // The program sees its arguments without Kokkos' (as Kokkos would leave them), help included.
    argc = 0;
    for (int i = 0; i < n; ++i) argv[argc++] = args[i];
    for (char* h : help) argv[argc++] = h;
    argv[argc] = nullptr;
  }
  if (options.blas_threads > 0 && std::getenv("OPENBLAS_NUM_THREADS") == nullptr)
    set_blas_threads(options.blas_threads);
  // A training step frees what the previous one allocated; without these glibc returns the memory
  // to the system and page-faults it back in every step.
  mallopt(M_TRIM_THRESHOLD, 256 << 20);
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  warn_about_slow_blas_kernels(world_rank());
}

Environment::~Environment() {
  if (owns_kokkos_) Kokkos::finalize();
  detail::release_cached_host_storage();
  if (owns_mpi_) {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Finalize();
  }
}

}  // namespace distop
