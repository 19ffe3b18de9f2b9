#include "distop/kernels/gemm.hpp"

#include <cblas.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <string>
#include <type_traits>

#include "blas_kernels.hpp"
#include "gemm_raw.hpp"
#ifdef DISTOP_HAVE_CUDA
#include "gemm_cuda.hpp"
#endif

namespace distop::kernels {

namespace {

// When libdistop loads, after the BLAS it links (a dependency's constructors run first) and before
// any GEMM: OpenBLAS's kernels as fast as the CPU allows, whatever the program's environment
// (blas_kernels.hpp). Here, beside the GEMM, so that a static libdistop links it in too.
[[gnu::constructor]] void choose_blas_kernels_on_load() { detail::choose_blas_kernels(); }

std::string describe(const char* name, Op op, const Shape& s) {
  return std::string(op == Op::T ? "op(" : "") + name + (op == Op::T ? ") = " : " = ") +
         (op == Op::T ? Shape{s[1], s[0]}.str() + " (transposed " + s.str() + ")" : s.str());
}

// BLAS takes int extents.
int blas_int(std::int64_t v, const char* what) {
  DISTOP_CHECK(v <= INT_MAX, "gemm", what, " = ", v, " exceeds the BLAS index range");
  return static_cast<int>(v);
}

CBLAS_TRANSPOSE cblas_op(Op op) { return op == Op::T ? CblasTrans : CblasNoTrans; }

// Unused in a device build, whose operands are device memory.
[[maybe_unused]] void host_gemm(Op ta, Op tb, int m, int n, int k, float alpha, const float* a,
                                int lda, const float* b, int ldb, float beta, float* c, int ldc) {
  cblas_sgemm(CblasRowMajor, cblas_op(ta), cblas_op(tb), m, n, k, alpha, a, lda, b, ldb, beta, c,
              ldc);
}
[[maybe_unused]] void host_gemm(Op ta, Op tb, int m, int n, int k, double alpha, const double* a,
                                int lda, const double* b, int ldb, double beta, double* c,
                                int ldc) {
  cblas_dgemm(CblasRowMajor, cblas_op(ta), cblas_op(tb), m, n, k, alpha, a, lda, b, ldb, beta, c,
              ldc);
}

#ifdef DISTOP_HAVE_CUDA
// The stream Kokkos runs its kernels on, so that the GEMM is ordered after the kernels that
// produced its operands and before those that consume its result, without a device-wide sync.
void* kokkos_stream() {
#ifdef KOKKOS_ENABLE_CUDA
  if constexpr (std::is_same_v<ExecSpace, Kokkos::Cuda>) return ExecSpace().cuda_stream();
#endif
  return nullptr;
}
#endif

}  // namespace

template <class T>
void gemm(Op op_a, Op op_b, T alpha, const Tensor<T>& a, const Tensor<T>& b, T beta, Tensor<T>& c) {
  DISTOP_CHECK(a.rank() == 2 && b.rank() == 2 && c.rank() == 2, "gemm",
               "expected 2-D tensors, found a ", a.shape().str(), ", b ", b.shape().str(), ", c ",
               c.shape().str());
  const std::int64_t m = op_a == Op::N ? a.extent(0) : a.extent(1);
  const std::int64_t k = op_a == Op::N ? a.extent(1) : a.extent(0);
  const std::int64_t kb = op_b == Op::N ? b.extent(0) : b.extent(1);
  const std::int64_t n = op_b == Op::N ? b.extent(1) : b.extent(0);
  DISTOP_CHECK(k == kb, "gemm", "inner dimensions differ: ", describe("a", op_a, a.shape()),
               " but ", describe("b", op_b, b.shape()));
  DISTOP_CHECK(c.extent(0) == m && c.extent(1) == n, "gemm", "c is ", c.shape().str(),
               ", expected ", Shape{m, n}.str(), " for ", describe("a", op_a, a.shape()), " and ",
               describe("b", op_b, b.shape()));
  if (m == 0 || n == 0) return;
  DISTOP_CHECK(c.data() != a.data() && c.data() != b.data(), "gemm",
               "the output c aliases an input");
  detail::gemm_raw(op_a, op_b, m, n, k, alpha, a.data(), a.extent(1), b.data(), b.extent(1), beta,
                   c.data(), c.extent(1));
}

namespace detail {

template <class T>
void gemm_raw(Op op_a, Op op_b, std::int64_t m, std::int64_t n, std::int64_t k, T alpha, const T* a,
              std::int64_t lda, const T* b, std::int64_t ldb, T beta, T* c, std::int64_t ldc) {
  if (m == 0 || n == 0) return;
  const int mi = blas_int(m, "m"), ni = blas_int(n, "n"), ki = blas_int(k, "k");
  const int ldai = std::max(1, blas_int(lda, "a row length"));
  const int ldbi = std::max(1, blas_int(ldb, "a row length"));
  const int ldci = std::max(1, blas_int(ldc, "a row length"));
  if constexpr (kHostAccessible) {
    host_gemm(op_a, op_b, mi, ni, ki, alpha, a, ldai, b, ldbi, beta, c, ldci);
  } else {
#ifdef DISTOP_HAVE_CUDA
    gemm_cublas(op_a == Op::T, op_b == Op::T, mi, ni, ki, alpha, a, ldai, b, ldbi, beta, c, ldci,
                kokkos_stream());
#else
    throw Error("gemm",
                "the tensors live in device memory, but distop was built without CUDA, so there "
                "is no device GEMM (configure with -DDISTOP_ENABLE_CUDA=ON for cuBLAS)");
#endif
  }
}

template void gemm_raw(Op, Op, std::int64_t, std::int64_t, std::int64_t, float, const float*,
                       std::int64_t, const float*, std::int64_t, float, float*, std::int64_t);
template void gemm_raw(Op, Op, std::int64_t, std::int64_t, std::int64_t, double, const double*,
                       std::int64_t, const double*, std::int64_t, double, double*, std::int64_t);

}  // namespace detail

template void gemm(Op, Op, float, const Tensor<float>&, const Tensor<float>&, float,
                   Tensor<float>&);
template void gemm(Op, Op, double, const Tensor<double>&, const Tensor<double>&, double,
                   Tensor<double>&);

}  // namespace distop::kernels
