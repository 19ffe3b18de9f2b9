#include "distop/core/environment.hpp"

#include <malloc.h>
#include <mpi.h>
#include <sched.h>

#include <Kokkos_Core.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "distop/core/error.hpp"
#include "distop/core/mpi_check.hpp"
#include "environment_hooks.hpp"
#include "scratch.hpp"
#include "storage.hpp"

#ifdef DISTOP_HAVE_OPENBLAS
extern "C" void openblas_set_num_threads(int num_threads);
extern "C" char* openblas_get_corename(void);
#endif

namespace distop {

#ifdef DISTOP_HAVE_CUDA
namespace detail {
// The device this rank took, or -1 where there is no GPU.
int select_cuda_device();
}  // namespace detail
#endif

namespace {

int yield_setting = -1;  // -1: not decided yet

// Collective over `world`: see yield_when_idle().
void decide_yield_when_idle(MPI_Comm world) {
  int mine = 0;
  if (const char* v = std::getenv("DISTOP_YIELD_WHEN_IDLE")) {
    mine = std::string(v) == "1" ? 1 : 0;
  } else {
    int local = 1;
    MPI_Comm node = MPI_COMM_NULL;
    // Unchecked: a hint; where the node cannot be asked, one rank per node is assumed.
    if (MPI_Comm_split_type(world, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node) == MPI_SUCCESS) {
      MPI_Comm_size(node, &local);
      MPI_Comm_free(&node);
    }
    const auto cores = std::thread::hardware_concurrency();
    mine = cores > 0 && static_cast<unsigned>(local) > cores ? 1 : 0;
  }
  // The setting picks between the blocking and the nonblocking forms of the collectives, which
  // never match each other: every rank must hold the same one. Any rank that yields (an
  // oversubscribed node, or DISTOP_YIELD_WHEN_IDLE=1 there) makes all of them yield.
  int all = mine;
  if (MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_MAX, world) != MPI_SUCCESS) all = 1;
  yield_setting = all;
}

// OpenBLAS picks its kernels when it loads; an older release that does not know the CPU falls back
// to pre-AVX kernels, several times slower. libdistop switches a DYNAMIC_ARCH OpenBLAS to faster
// ones when it loads (src/kernels/blas_kernels.hpp), so this says only what remains slow: an
// OpenBLAS built for one target, which no variable changes.
void warn_about_slow_blas_kernels(int rank) {
#ifdef DISTOP_HAVE_OPENBLAS
  const char* core = openblas_get_corename();
  const bool old_kernels =
      core && (std::strcmp(core, "Prescott") == 0 || std::strcmp(core, "Core2") == 0 ||
               std::strcmp(core, "Nehalem") == 0);
  if (rank == 0 && old_kernels && __builtin_cpu_supports("avx2") &&
      std::getenv("OPENBLAS_CORETYPE") == nullptr)
    std::fprintf(stderr,
                 "distop: OpenBLAS runs its %s kernels, several times slower than this CPU "
                 "allows, and was built for one target (without DYNAMIC_ARCH), so they cannot be "
                 "switched; link an OpenBLAS built with DYNAMIC_ARCH=1 or for this CPU\n",
                 core);
#else
  (void)rank;
#endif
}

#if defined(DISTOP_HAVE_CUDA) && defined(KOKKOS_ENABLE_CUDA)
// Whether the program chose Kokkos' device itself, on its command line or in Kokkos' environment
// variables. distop's choice then gives way: Kokkos makes its device current when it initialises,
// and cuBLAS and NCCL, set up later, use the current device.
bool kokkos_device_chosen(int argc, char** argv) {
  for (const char* var : {"KOKKOS_DEVICE_ID", "KOKKOS_MAP_DEVICE_ID_BY", "KOKKOS_NUM_DEVICES",
                          "KOKKOS_VISIBLE_DEVICES"})
    if (std::getenv(var) != nullptr) return true;
  for (int i = 1; i < argc; ++i)
    for (const char* flag :
         {"--kokkos-device-id", "--kokkos-map-device-id-by", "--kokkos-num-devices",
          "--kokkos-ndevices", "--kokkos-visible-devices", "--device-id"})
      if (std::strncmp(argv[i], flag, std::strlen(flag)) == 0) return true;
  return false;
}
#endif

}  // namespace

void set_blas_threads([[maybe_unused]] int threads) {
#ifdef DISTOP_HAVE_OPENBLAS
  if (threads > 0) openblas_set_num_threads(threads);
#endif
}

bool yield_when_idle() {
  if (yield_setting < 0) {
    // Without an Environment there is no agreement: take the nonblocking forms, which match
    // across ranks whatever each decides about waiting, unless DISTOP_YIELD_WHEN_IDLE=0 says
    // every rank waits in MPI.
    const char* v = std::getenv("DISTOP_YIELD_WHEN_IDLE");
    yield_setting = v && std::string(v) == "0" ? 0 : 1;
  }
  return yield_setting == 1;
}

Environment::Environment(int& argc, char**& argv, EnvironmentOptions options) {
  constexpr const char* op = "Environment";
  int initialized = 0;
  DISTOP_MPI_CHECK(MPI_Initialized(&initialized), op);
  int provided = 0;
  if (!initialized) {
    DISTOP_MPI_CHECK(MPI_Init_thread(&argc, &argv, options.mpi_thread_level, &provided), op);
    owns_mpi_ = true;
  } else {
    DISTOP_MPI_CHECK(MPI_Query_thread(&provided), op);
  }
  // Only a level above FUNNELED is checked: every MPI gives a single-threaded program what it needs
  // whatever it reports.
  DISTOP_CHECK(
      options.mpi_thread_level <= MPI_THREAD_FUNNELED || provided >= options.mpi_thread_level, op,
      "MPI provides thread support level ", provided, ", below the ", options.mpi_thread_level,
      " asked for (MPI_THREAD_SERIALIZED is ", MPI_THREAD_SERIALIZED, ")");
  DISTOP_MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN), op);
  DISTOP_MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &errors_), op);
  decide_yield_when_idle(MPI_COMM_WORLD);
  // The higher layers' set-up (comm: the hang watchdog's status board of the node, so that a
  // report can name the ranks of its node that have not arrived; comm/watchdog.hpp).
  detail::open_environment_hooks(MPI_COMM_WORLD);
#ifdef DISTOP_HAVE_CUDA
  [[maybe_unused]] const int device = detail::select_cuda_device();
#endif
  if (!Kokkos::is_initialized()) {
    // Kokkos answers an unprefixed --help with its own text; leave --help to the program
    // (--kokkos-help still reaches Kokkos). Kokkos may rewrite its copy of the arguments.
    std::vector<char*> args, help;
    for (int i = 0; i < argc; ++i) {
      const bool is_help =
          i > 0 && (std::strcmp(argv[i], "--help") == 0 || std::strcmp(argv[i], "-h") == 0);
      (is_help ? help : args).push_back(argv[i]);
    }
    std::string device_flag;  // an argument for Kokkos alone, never the program's
#if defined(DISTOP_HAVE_CUDA) && defined(KOKKOS_ENABLE_CUDA)
    // Kokkos picks a device again when it initialises (by the launcher's local rank where it
    // recognises the launcher, else device 0, which would put every rank of a node on one GPU and
    // make NCCL refuse the communicator). Kokkos, cuBLAS and NCCL must share the one distop chose.
    if (device >= 0 && !kokkos_device_chosen(argc, argv)) {
      device_flag = "--kokkos-device-id=" + std::to_string(device);
      args.push_back(device_flag.data());
    }
#endif
    int n = static_cast<int>(args.size());
    args.push_back(nullptr);
    Kokkos::initialize(n, args.data());
    owns_kokkos_ = true;
    // The program sees its arguments without Kokkos' (as Kokkos would leave them) and without the
    // device flag, help included.
    argc = 0;
    for (int i = 0; i < n; ++i)
      if (device_flag.empty() || args[i] != device_flag.data()) argv[argc++] = args[i];
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

int Environment::report_error(const std::exception& e, const char* program, int status,
                              double patience_s) const {
  // A barrier on a communicator of its own, so that it can never match a collective of the run
  // that the ranks without an error may be waiting in.
  const int rank = world_rank();
  MPI_Request barrier = MPI_REQUEST_NULL;
  int all_here = 0;
  if (errors_ != MPI_COMM_NULL && MPI_Ibarrier(errors_, &barrier) == MPI_SUCCESS) {
    const double deadline = MPI_Wtime() + patience_s;
    while (MPI_Test(&barrier, &all_here, MPI_STATUS_IGNORE) == MPI_SUCCESS && !all_here &&
           MPI_Wtime() < deadline)
      sched_yield();
  }
  if (all_here) {
    if (rank == 0) std::fprintf(stderr, "%s: error: %s\n", program, e.what());
    return status;
  }
  std::fprintf(stderr,
               "%s: error on rank %d: %s\n%s: not every rank reported an error within %g s; "
               "aborting the job, since the others would wait for this rank for ever\n",
               program, rank, e.what(), program, patience_s);
  std::fflush(stderr);
  // MPICH's launcher kills every process as soon as one calls MPI_Abort and drops what it has not
  // forwarded yet, this message included: a second's pause lets it forward the message first.
  std::this_thread::sleep_for(std::chrono::seconds(1));
  MPI_Abort(MPI_COMM_WORLD, status);
  return status;  // not reached
}

Environment::~Environment() {
  // Unchecked throughout: a destructor never throws, and each step is a query or a release.
  {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) detail::close_environment_hooks();
  }
  if (errors_ != MPI_COMM_NULL) {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Comm_free(&errors_);
  }
  if (owns_kokkos_) Kokkos::finalize();
  detail::release_cached_host_storage();
  detail::release_cached_scratch();
  if (owns_mpi_) {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Finalize();
  }
}

}  // namespace distop
