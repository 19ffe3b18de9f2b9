#pragma once
// The CUDA runtime calls the communication backends need (internal; CUDA builds only, defined in
// device_cuda.cpp). Streams and events travel as void* so that callers need no CUDA header.

#ifdef DISTOP_HAVE_CUDA

#include <cstddef>

namespace distop::comm::device {

// The stream of the innermost ProducerStream on this thread, else that of Kokkos' default
// execution space instance, on which distop's kernels (and cuBLAS GEMMs) produce and consume data;
// the legacy default stream (null) where Kokkos has no CUDA.
void* producer_stream();
// Whether a CUDA device is usable (decided once).
bool present();
// Whether ptr is device (or managed) memory, as the CUDA runtime reports it.
bool is_device_pointer(const void* ptr);
// Page-locked host memory, or null where it cannot be had (no device); never throws.
void* alloc_pinned(std::size_t bytes) noexcept;
void free_pinned(void* ptr) noexcept;
// Copies on `stream`, after the work already enqueued on it; returns once the copy is complete
// (the staging buffer is then free to reuse, or the host copy ready for MPI).
void copy_to_host(void* dst, const void* src, std::size_t bytes, void* stream, const char* op);
void copy_to_device(void* dst, const void* src, std::size_t bytes, void* stream, const char* op);
// Blocks until the work enqueued on `stream` has completed.
void synchronize(void* stream, const char* op);

}  // namespace distop::comm::device

#endif
