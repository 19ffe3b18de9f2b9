#include "distop/comm/backend.hpp"

#include <mpi.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <utility>

#include "distop/core/error.hpp"
#include "distop/core/tensor.hpp"

#ifdef DISTOP_HAVE_CUDA
#include "device.hpp"
#endif

namespace distop::comm {

const char* to_string(Backend backend) noexcept {
  switch (backend) {
    case Backend::kMpi:
      return "mpi";
    case Backend::kStaging:
      return "staging";
    case Backend::kCudaAwareMpi:
      return "cuda-aware-mpi";
    case Backend::kNccl:
      return "nccl";
  }
  return "unknown";
}

Backend parse_backend(const char* name) {
  const std::string n = name ? name : "";
  for (Backend b : {Backend::kMpi, Backend::kStaging, Backend::kCudaAwareMpi, Backend::kNccl})
    if (n == to_string(b)) return b;
  throw Error("comm backend", "unknown communication backend '" + n +
                                  "' (expected mpi, staging, cuda-aware-mpi or nccl)");
}

namespace {

// Whether the MPI library moves CUDA device memory itself. MPICH (4.0 on) and other libraries
// that follow it declare MPIX_GPU_query_support with the MPIX_GPU_SUPPORT_CUDA constant; a
// library without it is taken not to.
bool mpi_is_cuda_aware() {
#if defined(DISTOP_HAVE_CUDA) && defined(MPIX_GPU_SUPPORT_CUDA)
  static const bool aware = [] {
    int initialized = 0;
    MPI_Initialized(&initialized);  // unchecked: a query; on a failure, not initialised (not aware)
    if (!initialized) return false;
    int supported = 0;
    if (MPIX_GPU_query_support(MPIX_GPU_SUPPORT_CUDA, &supported) != MPI_SUCCESS) return false;
    return supported != 0 && device::present();
  }();
  return aware;
#else
  return false;
#endif
}

std::string why_unavailable(Backend backend) {
  switch (backend) {
    case Backend::kCudaAwareMpi:
#ifdef DISTOP_HAVE_CUDA
      return "the MPI library does not report CUDA support (MPIX_GPU_query_support), or there is "
             "no CUDA device";
#else
      return "this build has no CUDA (configure with -DDISTOP_ENABLE_CUDA=ON)";
#endif
    case Backend::kNccl:
      return "this build has no NCCL (configure with -DDISTOP_ENABLE_CUDA=ON "
             "-DDISTOP_ENABLE_NCCL=ON)";
    default:
      return "";
  }
}

void check_selectable(Memory memory, Backend backend, const std::string& origin) {
  DISTOP_CHECK(backend_available(backend), "comm backend", origin, ": the ", to_string(backend),
               " backend is not available: ", why_unavailable(backend));
  DISTOP_CHECK(backend_serves(backend, memory), "comm backend", origin, ": the ",
               to_string(backend), " backend cannot move ",
               memory == Memory::kHost ? "host" : "device", " memory");
}

Backend default_backend(Memory memory) {
  if (memory == Memory::kHost) return Backend::kMpi;
  if (backend_available(Backend::kNccl)) return Backend::kNccl;
  if (backend_available(Backend::kCudaAwareMpi)) return Backend::kCudaAwareMpi;
  return Backend::kStaging;
}

struct Selection {
  std::once_flag read;
  std::atomic<int> host{-1};
  std::atomic<int> device{-1};
};
Selection& selection() {
  static Selection s;
  return s;
}

// DISTOP_COMM_BACKEND, applied to the memory (or memories) the backend it names serves.
void read_environment() {
  auto& s = selection();
  int host = static_cast<int>(default_backend(Memory::kHost));
  int dev = -1;  // decided on first use: the default needs MPI initialised
  if (const char* v = std::getenv("DISTOP_COMM_BACKEND"); v && *v) {
    const Backend b = parse_backend(v);
    const std::string origin = std::string("DISTOP_COMM_BACKEND=") + v;
    DISTOP_CHECK(backend_available(b), "comm backend", origin, ": the ", to_string(b),
                 " backend is not available: ", why_unavailable(b));
    if (backend_serves(b, Memory::kHost)) host = static_cast<int>(b);
    if (backend_serves(b, Memory::kDevice)) dev = static_cast<int>(b);
  }
  s.host.store(host);
  s.device.store(dev);
}

void ensure_read() {
  auto& s = selection();
  std::call_once(s.read, read_environment);
}

}  // namespace

bool backend_available(Backend backend) {
  switch (backend) {
    case Backend::kMpi:
    case Backend::kStaging:
      return true;
    case Backend::kCudaAwareMpi:
      return mpi_is_cuda_aware();
    case Backend::kNccl:
#ifdef DISTOP_HAVE_NCCL
      return true;
#else
      return false;
#endif
  }
  return false;
}

bool backend_serves(Backend backend, Memory memory) noexcept {
  switch (backend) {
    case Backend::kMpi:
      return memory == Memory::kHost;
    case Backend::kStaging:
      return true;
    case Backend::kCudaAwareMpi:
    case Backend::kNccl:
      return memory == Memory::kDevice;
  }
  return false;
}

Backend backend(Memory memory) {
  ensure_read();
  auto& s = selection();
  if (memory == Memory::kHost) return static_cast<Backend>(s.host.load());
  int d = s.device.load();
  if (d < 0) {
    d = static_cast<int>(default_backend(Memory::kDevice));
    s.device.store(d);
  }
  return static_cast<Backend>(d);
}

void select_backend(Memory memory, Backend backend) {
  ensure_read();
  check_selectable(memory, backend, "select_backend");
  auto& s = selection();
  (memory == Memory::kHost ? s.host : s.device).store(static_cast<int>(backend));
}

namespace {
thread_local void* producer_stream_override = nullptr;
}  // namespace

ProducerStream::ProducerStream(void* stream) noexcept
    : previous_(std::exchange(producer_stream_override, stream)) {}
ProducerStream::~ProducerStream() { producer_stream_override = previous_; }
void* ProducerStream::current() noexcept { return producer_stream_override; }

Memory memory_of([[maybe_unused]] const void* ptr) {
  // An empty buffer (a rank holding no entries) counts as memory of distop's default space, so
  // that it takes the same backend as its peers' buffers.
  if (kHostAccessible || ptr == nullptr) return kHostAccessible ? Memory::kHost : Memory::kDevice;
#ifdef DISTOP_HAVE_CUDA
  return device::is_device_pointer(ptr) ? Memory::kDevice : Memory::kHost;
#else
  return Memory::kDevice;
#endif
}

}  // namespace distop::comm
