#include "distop/nn/matmul.hpp"

#include <utility>
#include <vector>

#include "distop/autodiff/function.hpp"
#include "distop/kernels/gemm.hpp"
#include "spaces.hpp"

namespace distop::nn {

namespace {

using kernels::Op;

const char* name_of(Op ta, Op tb) {
  return ta == Op::T ? "matmul_tn" : tb == Op::T ? "matmul_nt" : "matmul";
}

// C's space from A's and B's (see the header), checked. Batched operands (rank > 2) have equal
// leading axes, split alike.
TensorSpace product_space(const TensorSpace& as, const TensorSpace& bs, Op ta, Op tb) {
  const char* op = name_of(ta, tb);
  const int r = as.rank();
  DISTOP_CHECK(r >= 2 && bs.rank() == r, op,
               "expected 2-D operands, or batched ones of one rank above 2, found ", as.str(),
               " and ", bs.str());
  DISTOP_CHECK(as.partition().same_as(bs.partition()), op,
               "the operands must live on one partition (or give the output space); found ",
               as.str(), " and ", bs.str());
  for (int i = 0; i + 2 < r; ++i)
    DISTOP_CHECK(as.global_shape()[i] == bs.global_shape()[i] && detail::same_blocks(as, i, bs, i),
                 op,
                 "the batch (leading) axes must be equal and split alike (the same blocks over ",
                 "the same grid axes); found ", as.str(), " and ", bs.str());
  const int a_rows = ta == Op::N ? r - 2 : r - 1, a_inner = 2 * r - 3 - a_rows;
  const int b_cols = tb == Op::N ? r - 1 : r - 2, b_inner = 2 * r - 3 - b_cols;
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
  std::vector<std::int64_t> global;
  std::vector<std::vector<std::int64_t>> extents;
  std::vector<int> map;
  for (int i = 0; i + 2 < r; ++i) {
    global.push_back(as.global_shape()[i]);
    extents.push_back(ea[static_cast<std::size_t>(i)]);
    map.push_back(detail::split(as, i) ? da.axis_map()[i] : -1);
  }
  global.push_back(as.global_shape()[a_rows]);
  global.push_back(bs.global_shape()[b_cols]);
  extents.push_back(ea[static_cast<std::size_t>(a_rows)]);
  extents.push_back(eb[static_cast<std::size_t>(b_cols)]);
  map.push_back(map_rows);
  map.push_back(map_cols);
  return TensorSpace(as.partition(), Decomposition::blocks(Shape(global), da.grid(), extents, map));
}

// The matrices of a local box [..., m, n]: `count` of them, matrix i a view of t's storage.
template <class T>
struct Matrices {
  std::int64_t count = 0;
  Shape shape;
  Tensor<T> t;
  Matrices(const Tensor<T>& box, int rank) : t(box) {
    if (box.rank() != rank || rank < 2) return;  // outside the partition: nothing
    count = 1;
    for (int i = 0; i + 2 < rank; ++i) count *= box.extent(i);
    shape = Shape{box.extent(rank - 2), box.extent(rank - 1)};
  }
  Tensor<T> operator[](std::int64_t i) const {
    return count == 1 && t.rank() == 2 ? t : t.slice(i * shape.numel(), shape);
  }
};

template <class T>
Var<T> product(Tape& tape, const Var<T>& a, const Var<T>& b, const TensorSpace& out_space, Op ta,
               Op tb) {
  const int r = a.space().rank();
  const char* op = name_of(ta, tb);
  return make_function<T>(tape, op, {a, b}, [&] {
    const Matrices<T> am(a.value().local(), r), bm(b.value().local(), r);
    // A product with nothing to contract is zero (which BLAS is not asked to write).
    const std::int64_t k = am.count > 0 ? am.shape[ta == Op::N ? 1 : 0] : 0;
    auto c = k == 0 ? DistTensor<T>(out_space) : DistTensor<T>::uninitialized(out_space);
    const Matrices<T> cm(c.local(), r);
    DISTOP_CHECK(bm.count == am.count && cm.count == am.count, op,
                 "the operands' and the output's boxes hold different numbers of matrices: ",
                 a.value().local().shape().str(), ", ", b.value().local().shape().str(), " and ",
                 c.local().shape().str());
    if (k > 0)
      for (std::int64_t i = 0; i < am.count; ++i) {
        Tensor<T> ci = cm[i];
        kernels::gemm(ta, tb, T(1), am[i], bm[i], T(0), ci);
      }
    return Computed{
        std::move(c), [ta, tb, r](const DistTensor<T>& dc, Gradients<T>& grads) {
          const Matrices<T> d(dc.local(), r);
          const Matrices<T> a_value(grads.input(0).value().local(), r);
          const Matrices<T> b_value(grads.input(1).value().local(), r);
          // Both gradients are linear in dC: zero when dC has no entries (BLAS is not
          // asked).
          const bool zero = dc.local().numel() == 0;
          grads.accumulate(0, [&](T beta, Tensor<T>& g_all) {
            if (zero) {
              if (beta == T(0)) g_all.fill(T(0));
              return;
            }
            const Matrices<T> gm(g_all, r);
            for (std::int64_t i = 0; i < gm.count; ++i) {
              Tensor<T> g = gm[i];
              if (ta == Op::N)  // dA = dC op(B)^T: dC B^T (nn), dC B (nt)
                kernels::gemm(Op::N, tb == Op::N ? Op::T : Op::N, T(1), d[i], b_value[i], beta, g);
              else  // matmul_tn: dA = B dC^T
                kernels::gemm(Op::N, Op::T, T(1), b_value[i], d[i], beta, g);
            }
          });
          grads.accumulate(1, [&](T beta, Tensor<T>& g_all) {
            if (zero) {
              if (beta == T(0)) g_all.fill(T(0));
              return;
            }
            const Matrices<T> gm(g_all, r);
            for (std::int64_t i = 0; i < gm.count; ++i) {
              Tensor<T> g = gm[i];
              if (tb == Op::N)  // dB = op(A)^T dC: A^T dC (nn), A dC (tn)
                kernels::gemm(ta == Op::N ? Op::T : Op::N, Op::N, T(1), a_value[i], d[i], beta, g);
              else  // matmul_nt: dB = dC^T A
                kernels::gemm(Op::T, Op::N, T(1), d[i], a_value[i], beta, g);
            }
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
