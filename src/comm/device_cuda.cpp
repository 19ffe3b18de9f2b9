// CUDA runtime glue of the communication backends (see device.hpp).
#include <cuda_runtime.h>

#include <Kokkos_Core.hpp>
#include <string>
#include <type_traits>

#include "device.hpp"
#include "distop/comm/backend.hpp"
#include "distop/core/error.hpp"
#include "distop/core/tensor.hpp"

#define DISTOP_CUDA_RT_CHECK(call, op)                                                          \
  do {                                                                                          \
    const cudaError_t distop_rc_ = (call);                                                      \
    if (distop_rc_ != cudaSuccess)                                                              \
      throw ::distop::Error((op),                                                               \
                            std::string(#call) + " failed: " + cudaGetErrorString(distop_rc_)); \
  } while (0)

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
  if (cudaPointerGetAttributes(&attributes, ptr) != cudaSuccess) {
    cudaGetLastError();  // memory CUDA does not know: plain host memory
    return false;
  }
  return attributes.type == cudaMemoryTypeDevice || attributes.type == cudaMemoryTypeManaged;
}

void* alloc_pinned(std::size_t bytes) noexcept {
  if (!present()) return nullptr;
  void* p = nullptr;
  if (cudaMallocHost(&p, bytes) != cudaSuccess) {
    cudaGetLastError();
    return nullptr;
  }
  return p;
}

void free_pinned(void* ptr) noexcept {
  if (ptr) cudaFreeHost(ptr);
}

void copy_to_host(void* dst, const void* src, std::size_t bytes, void* stream, const char* op) {
  if (bytes == 0) return;
  auto s = static_cast<cudaStream_t>(stream);
  DISTOP_CUDA_RT_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, s), op);
  DISTOP_CUDA_RT_CHECK(cudaStreamSynchronize(s), op);
}

void copy_to_device(void* dst, const void* src, std::size_t bytes, void* stream, const char* op) {
  if (bytes == 0) return;
  auto s = static_cast<cudaStream_t>(stream);
  DISTOP_CUDA_RT_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, s), op);
  // The staging buffer goes back to the pool after this: the copy must have read it.
  DISTOP_CUDA_RT_CHECK(cudaStreamSynchronize(s), op);
}

void synchronize(void* stream, const char* op) {
  DISTOP_CUDA_RT_CHECK(cudaStreamSynchronize(static_cast<cudaStream_t>(stream)), op);
}

}  // namespace distop::comm::device
