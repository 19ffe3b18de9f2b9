#pragma once
// Internal: the cuBLAS GEMM behind kernels::gemm for tensors in device memory. Plain C++ against
// the CUDA runtime, so it builds wherever the CUDA toolkit is present (DISTOP_HAVE_CUDA), whether
// or not Kokkos itself has a CUDA backend.

namespace distop::kernels::detail {

// Row-major c[m, n] = alpha op(a) op(b) + beta c on device pointers, where op(a) is [m, k] and
// op(b) is [k, n]; ta / tb say whether a / b are transposed; lda, ldb, ldc are the row lengths of
// the stored matrices. `stream` is a cudaStream_t (nullptr: the legacy default stream); the call
// is ordered on it and does not synchronise. Throws distop::Error when cuBLAS fails.
void gemm_cublas(bool ta, bool tb, int m, int n, int k, float alpha, const float* a, int lda,
                 const float* b, int ldb, float beta, float* c, int ldc, void* stream);
void gemm_cublas(bool ta, bool tb, int m, int n, int k, double alpha, const double* a, int lda,
                 const double* b, int ldb, double beta, double* c, int ldc, void* stream);

}  // namespace distop::kernels::detail
