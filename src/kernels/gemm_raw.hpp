#pragma once
// Internal: the GEMM behind kernels::gemm on raw pointers with explicit leading dimensions, for
// kernels that multiply blocks of larger tensors (a sample of a batch, say) without copying them
// into tensors of their own. cblas on the host, cuBLAS where MemSpace is device memory.

#include "distop/kernels/gemm.hpp"

namespace distop::kernels::detail {

// Row-major c[m, n] = alpha op(a) op(b) + beta c with op(a) [m, k] and op(b) [k, n]; lda, ldb and
// ldc are the row lengths (at least 1) of the stored a, b and c. Pointers into MemSpace. When beta
// is 0, c is not read. No shape checks beyond the BLAS index range: the caller owns them.
template <class T>
void gemm_raw(Op op_a, Op op_b, std::int64_t m, std::int64_t n, std::int64_t k, T alpha, const T* a,
              std::int64_t lda, const T* b, std::int64_t ldb, T beta, T* c, std::int64_t ldc);

}  // namespace distop::kernels::detail
