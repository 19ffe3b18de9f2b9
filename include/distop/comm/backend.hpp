#pragma once
// The communication backends behind the call surface (comm/collectives.hpp, comm/exchange.hpp),
// after LLNL Aluminum: each is a class of static operations, and the call surface picks one by
// where a buffer lives (host or device memory) and what this build and this run select.
//
//   mpi             MPI on host buffers.
//   staging         MPI on host staging buffers: device data is copied into reused (pinned, where
//                   CUDA is present) host buffers, sent by MPI, and copied back; no allocation per
//                   call once the buffers have grown to the sizes a program uses. It also serves
//                   host memory when selected, so that its logic runs in host-only builds (CI).
//   cuda-aware-mpi  MPI directly on device buffers, where the MPI library reports CUDA support
//                   (MPIX_GPU_query_support) in a CUDA build.
//   nccl            NCCL on device buffers (DISTOP_ENABLE_NCCL builds): collectives and
//                   point-to-point (grouped ncclSend/ncclRecv), enqueued on the NCCL stream after
//                   an event of the Kokkos stream that produced the data; completion is an event
//                   the Kokkos stream (or the request) waits on, not a fence.
//
// Defaults: host memory takes mpi; device memory takes nccl where built, else cuda-aware-mpi where
// the MPI library reports it, else staging. The environment variable DISTOP_COMM_BACKEND (mpi,
// staging, cuda-aware-mpi or nccl), read at the first communication call, overrides the default
// for the memory it can serve: mpi for host memory, cuda-aware-mpi and nccl for device memory,
// staging for both. select_backend does the same from code. Every rank of a communicator must
// select alike (mpi and staging match each other's messages; nccl matches only nccl).

#include <cstdint>

namespace distop::comm {

enum class Backend { kMpi, kStaging, kCudaAwareMpi, kNccl };
// Where a buffer lives: memory the host can read, or device memory it cannot.
enum class Memory { kHost, kDevice };

// "mpi", "staging", "cuda-aware-mpi", "nccl".
const char* to_string(Backend backend) noexcept;
// The backend named `name` (as to_string spells it); distop::Error for any other name.
Backend parse_backend(const char* name);

// Whether `backend` can run in this build and with this MPI library: mpi and staging always,
// cuda-aware-mpi in CUDA builds whose MPI library reports CUDA support, nccl in NCCL builds.
bool backend_available(Backend backend);
// Whether `backend` can move buffers in `memory` (mpi: host only; cuda-aware-mpi, nccl: device
// only; staging: both).
bool backend_serves(Backend backend, Memory memory) noexcept;

// The backend buffers in `memory` go through (the default, DISTOP_COMM_BACKEND, or
// select_backend; see above).
Backend backend(Memory memory);
// Makes `backend` the one for buffers in `memory`, from the next call on. Throws distop::Error
// (nothing changed) if this build lacks it or it cannot serve that memory. Not collective: every
// rank must make the same selection, between operations.
void select_backend(Memory memory, Backend backend);

// Where `ptr` lives: kHost in builds whose Kokkos runs on the host; in CUDA builds, as the CUDA
// runtime reports it (device and managed memory count as device memory).
Memory memory_of(const void* ptr);

// The stream that operations on device buffers are ordered after, and whose later work sees their
// results: by default that of Kokkos' default execution space instance, on which distop's kernels
// and GEMMs run. A ProducerStream makes `stream` (a cudaStream_t, such as a Kokkos::Cuda
// instance's cuda_stream()) the one for the calls this thread makes while it lives, so that data a
// kernel produced on another instance is sent after that kernel without a fence. Scopes nest. In
// builds without CUDA there are no streams: it only changes what current() reports.
class ProducerStream {
 public:
  explicit ProducerStream(void* stream) noexcept;
  ~ProducerStream();
  ProducerStream(const ProducerStream&) = delete;
  ProducerStream& operator=(const ProducerStream&) = delete;
  // The innermost scope's stream on this thread; null outside every scope (the default instance).
  static void* current() noexcept;

 private:
  void* previous_;
};

// Statistics of the staging backend's buffers, for tests and diagnostics: how many times a
// staging buffer was allocated or grown (the count stays put once the buffers have reached the
// sizes a program uses), how many buffers it holds, and their bytes; whether they are pinned.
struct StagingStats {
  std::int64_t growths = 0;
  std::int64_t buffers = 0;
  std::int64_t bytes = 0;
  bool pinned = false;
};
StagingStats staging_stats();

}  // namespace distop::comm
