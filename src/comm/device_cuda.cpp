// CUDA runtime glue of the communication backends (see device.hpp).
#include <cuda_runtime.h>

#include <Kokkos_Core.hpp>
#include <string>
#include <type_traits>

#include "../core/cuda_check.hpp"
#include "device.hpp"
#include "distop/comm/backend.hpp"
#include "distop/core/error.hpp"
#include "distop/core/tensor.hpp"

namespace distop::comm::device {

void* producer_stream() {
  if (void* chosen = ProducerStream::current()) return chosen;
#ifdef KOKKOS_ENABLE_CUDA
  if constexpr (std::is_same_v<ExecSpace, Kokkos::Cuda>) return ExecSpace().cuda_stream();
#endif
  return nullptr;
}

bool present() {
  static const bool found = [] {
    int count = 0;
    // Unchecked: a failure means no usable device, which is the answer.
    if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
      cudaGetLastError();  // clear the sticky error: host paths only
      return false;
    }
    return true;
  }();
  return found;
}

bool is_device_pointer(const void* ptr) {
  if (ptr == nullptr || !present()) return false;
  cudaPointerAttributes attributes{};
  // Unchecked: a failure is the answer, memory CUDA does not know.
  if (cudaPointerGetAttributes(&attributes, ptr) != cudaSuccess) {
    cudaGetLastError();  // memory CUDA does not know: plain host memory
    return false;
  }
  return attributes.type == cudaMemoryTypeDevice || attributes.type == cudaMemoryTypeManaged;
}

void* alloc_pinned(std::size_t bytes) noexcept {
  if (!present()) return nullptr;
  void* p = nullptr;
  // Unchecked (noexcept): a failure returns null, and the caller takes pageable memory.
  if (cudaMallocHost(&p, bytes) != cudaSuccess) {
    cudaGetLastError();
    return nullptr;
  }
  return p;
}

void free_pinned(void* ptr) noexcept {
  if (ptr) cudaFreeHost(ptr);  // unchecked (noexcept, on the destructors' path): nothing to do
}

void copy_to_host(void* dst, const void* src, std::size_t bytes, void* stream, const char* op) {
  if (bytes == 0) return;
  auto s = static_cast<cudaStream_t>(stream);
  DISTOP_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, s), op);
  DISTOP_CUDA_CHECK(cudaStreamSynchronize(s), op);
}

void copy_to_device(void* dst, const void* src, std::size_t bytes, void* stream, const char* op) {
  if (bytes == 0) return;
  auto s = static_cast<cudaStream_t>(stream);
  DISTOP_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, s), op);
  // The staging buffer goes back to the pool after this: the copy must have read it.
  DISTOP_CUDA_CHECK(cudaStreamSynchronize(s), op);
}

void synchronize(void* stream, const char* op) {
  DISTOP_CUDA_CHECK(cudaStreamSynchronize(static_cast<cudaStream_t>(stream)), op);
}

}  // namespace distop::comm::device
