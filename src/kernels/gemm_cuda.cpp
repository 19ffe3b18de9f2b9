// cuBLAS GEMM for tensors in device memory (compiled only with DISTOP_ENABLE_CUDA).

#include "gemm_cuda.hpp"

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <string>

#include "distop/core/error.hpp"

// Calls a cuBLAS function and throws distop::Error(op, ...) with cuBLAS' status when it fails.
#define DISTOP_CUBLAS_CHECK(call, op)                                                         \
  do {                                                                                        \
    const cublasStatus_t distop_cublas_st_ = (call);                                          \
    if (distop_cublas_st_ != CUBLAS_STATUS_SUCCESS)                                           \
      throw ::distop::Error((op), std::string(#call) +                                        \
                                      " failed: " + cublasGetStatusName(distop_cublas_st_) +  \
                                      " (" + cublasGetStatusString(distop_cublas_st_) + ")"); \
  } while (0)

namespace distop::kernels::detail {

namespace {

// One handle per process, for the device current when it is first used (distop runs one device
// per process). Created lazily and deliberately never destroyed: a static destructor may run after
// the CUDA runtime has shut down, and destructors must not fail. distop calls it from one thread.
cublasHandle_t handle() {
  static cublasHandle_t h = [] {
    cublasHandle_t created = nullptr;
    DISTOP_CUBLAS_CHECK(cublasCreate(&created), "gemm");
    return created;
  }();
  return h;
}

cublasOperation_t cublas_op(bool transposed) { return transposed ? CUBLAS_OP_T : CUBLAS_OP_N; }

// cuBLAS is column-major. A row-major matrix with row length ld is, read column-major, its
// transpose with leading dimension ld; so row-major C = op(A) op(B) is computed as the
// column-major C^T = op(B)^T op(A)^T, that is with the operands swapped and m, n exchanged.
template <class T, class Fn>
void run(Fn fn, bool ta, bool tb, int m, int n, int k, T alpha, const T* a, int lda, const T* b,
         int ldb, T beta, T* c, int ldc, void* stream) {
  cublasHandle_t h = handle();
  DISTOP_CUBLAS_CHECK(cublasSetStream(h, static_cast<cudaStream_t>(stream)), "gemm");
  DISTOP_CUBLAS_CHECK(
      fn(h, cublas_op(tb), cublas_op(ta), n, m, k, &alpha, b, ldb, a, lda, &beta, c, ldc), "gemm");
}

}  // namespace

void gemm_cublas(bool ta, bool tb, int m, int n, int k, float alpha, const float* a, int lda,
                 const float* b, int ldb, float beta, float* c, int ldc, void* stream) {
  run(cublasSgemm, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, stream);
}

void gemm_cublas(bool ta, bool tb, int m, int n, int k, double alpha, const double* a, int lda,
                 const double* b, int ldb, double beta, double* c, int ldc, void* stream) {
  run(cublasDgemm, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, stream);
}

}  // namespace distop::kernels::detail
