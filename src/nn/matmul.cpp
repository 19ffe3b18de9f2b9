#include "distop/nn/matmul.hpp"

#include <utility>

#include "distop/autodiff/function.hpp"
#include "distop/kernels/gemm.hpp"
#include "spaces.hpp"

namespace distop::nn {

namespace {

using kernels::Op;

const char* name_of(Op ta, Op tb) {
  return ta == Op::T ? "matmul_tn" : tb == Op::T ? "matmul_nt" : "matmul";
}

// C's space from A's and B's (see the header), checked.
TensorSpace product_space(const TensorSpace& as, const TensorSpace& bs, Op ta, Op tb) {
  const char* op = name_of(ta, tb);
  DISTOP_CHECK(as.rank() == 2 && bs.rank() == 2, op, "expected 2-D operands, found ", as.str(),
               " and ", bs.str());
  DISTOP_CHECK(as.partition().same_as(bs.partition()), op,
               "the operands must live on one partition (or give the output space); found ",
               as.str(), " and ", bs.str());
  const int a_rows = ta == Op::N ? 0 : 1, a_inner = 1 - a_rows;
  const int b_cols = tb == Op::N ? 1 : 0, b_inner = 1 - b_cols;
  DISTOP_CHECK(as.global_shape()[a_inner] == bs.global_shape()[b_inner], op,
               "the contracted extents differ: ", as.str(), " and ", bs.str());
  DISTOP_CHECK(!detail::split(as, a_inner) && !detail::split(bs, b_inner), op,
               "the contracted axis is split in ", as.str(), " or ", bs.str(),
               "; each rank would hold a partial product: give the output space and add the "
               "partial products with a SumReduce");
  const Decomposition& da = as.decomposition();
  const Decomposition& db = bs.decomposition();
  const int map_rows = detail::split(as, a_rows) ? da.axis_map()[a_rows] : -1;
  const int map_cols = detail::split(bs, b_cols) ? db.axis_map()[b_cols] : -1;
  DISTOP_CHECK(map_rows < 0 || map_rows != map_cols, op,
               "the product's rows and columns would both be split by grid axis ", map_rows,
               ", so a rank's boxes would not meet: ", as.str(), " and ", bs.str());
  const auto ea = detail::block_extents(da);
  const auto eb = detail::block_extents(db);
  return TensorSpace(
      as.partition(),
      Decomposition::blocks(
          Shape{as.global_shape()[a_rows], bs.global_shape()[b_cols]}, da.grid(),
          {ea[static_cast<std::size_t>(a_rows)], eb[static_cast<std::size_t>(b_cols)]},
          {map_rows, map_cols}));
}

template <class T>
Var<T> product(Tape& tape, const Var<T>& a, const Var<T>& b, const TensorSpace& out_space, Op ta,
               Op tb) {
  return make_function<T>(tape, name_of(ta, tb), {a, b}, [&] {
    const Tensor<T>& av = a.value().local();
    const Tensor<T>& bv = b.value().local();
    // A product with nothing to contract is zero (which BLAS is not asked to write).
    const std::int64_t k = av.rank() == 2 ? av.extent(ta == Op::N ? 1 : 0) : 0;
    auto c = k == 0 ? DistTensor<T>(out_space) : DistTensor<T>::uninitialized(out_space);
    if (k > 0) kernels::gemm(ta, tb, T(1), av, bv, T(0), c.local());
    return Computed{
        std::move(c), [ta, tb](const DistTensor<T>& dc, Gradients<T>& grads) {
          const Tensor<T>& d = dc.local();
          const Tensor<T>& a_value = grads.input(0).value().local();
          const Tensor<T>& b_value = grads.input(1).value().local();
          // Both gradients are linear in dC: zero when dC has no entries (BLAS is not
          // asked).
          const bool zero = d.numel() == 0;
          grads.accumulate(0, [&](T beta, Tensor<T>& g) {
            if (zero) {
              if (beta == T(0)) g.fill(T(0));
            } else if (ta == Op::N)  // dA = dC op(B)^T: dC B^T (nn), dC B (nt)
              kernels::gemm(Op::N, tb == Op::N ? Op::T : Op::N, T(1), d, b_value, beta, g);
            else  // matmul_tn: dA = B dC^T
              kernels::gemm(Op::N, Op::T, T(1), b_value, d, beta, g);
          });
          grads.accumulate(1, [&](T beta, Tensor<T>& g) {
            if (zero) {
              if (beta == T(0)) g.fill(T(0));
            } else if (tb == Op::N)  // dB = op(A)^T dC: A^T dC (nn), A dC (tn)
              kernels::gemm(ta == Op::N ? Op::T : Op::N, Op::N, T(1), a_value, d, beta, g);
            else  // matmul_nt: dB = dC^T A
              kernels::gemm(Op::T, Op::N, T(1), d, a_value, beta, g);
          });
        }};
  });
}

}  // namespace

template <class T>
Var<T> matmul(Tape& tape, const Var<T>& a, const Var<T>& b) {
  return product(tape, a, b, product_space(a.space(), b.space(), Op::N, Op::N), Op::N, Op::N);
}
template <class T>
Var<T> matmul_nt(Tape& tape, const Var<T>& a, const Var<T>& b) {
  return product(tape, a, b, product_space(a.space(), b.space(), Op::N, Op::T), Op::N, Op::T);
}
template <class T>
Var<T> matmul_tn(Tape& tape, const Var<T>& a, const Var<T>& b) {
  return product(tape, a, b, product_space(a.space(), b.space(), Op::T, Op::N), Op::T, Op::N);
}
template <class T>
Var<T> matmul(Tape& tape, const Var<T>& a, const Var<T>& b, const TensorSpace& out_space) {
  return product(tape, a, b, out_space, Op::N, Op::N);
}
template <class T>
Var<T> matmul_nt(Tape& tape, const Var<T>& a, const Var<T>& b, const TensorSpace& out_space) {
  return product(tape, a, b, out_space, Op::N, Op::T);
}
template <class T>
Var<T> matmul_tn(Tape& tape, const Var<T>& a, const Var<T>& b, const TensorSpace& out_space) {
  return product(tape, a, b, out_space, Op::T, Op::N);
}

#define DISTOP_INSTANTIATE(T)                                                         \
  template Var<T> matmul(Tape&, const Var<T>&, const Var<T>&);                        \
  template Var<T> matmul_nt(Tape&, const Var<T>&, const Var<T>&);                     \
  template Var<T> matmul_tn(Tape&, const Var<T>&, const Var<T>&);                     \
  template Var<T> matmul(Tape&, const Var<T>&, const Var<T>&, const TensorSpace&);    \
  template Var<T> matmul_nt(Tape&, const Var<T>&, const Var<T>&, const TensorSpace&); \
  template Var<T> matmul_tn(Tape&, const Var<T>&, const Var<T>&, const TensorSpace&);
DISTOP_INSTANTIATE(float)
DISTOP_INSTANTIATE(double)
#undef DISTOP_INSTANTIATE

}  // namespace distop::nn
