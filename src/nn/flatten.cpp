#include "distop/nn/flatten.hpp"

#include <utility>

#include "common.hpp"
#include "distop/kernels/axpy.hpp"

namespace distop::nn {

namespace {

// [n, c, s...] -> [n, c s...]
Shape flat(const Shape& box) {
  const std::int64_t n = box[0];
  return Shape{n, n == 0 ? 0 : box.numel() / n};
}

}  // namespace

TensorSpace flatten_space(const TensorSpace& x) {
  const Decomposition& d = x.decomposition();
  DISTOP_CHECK(x.rank() >= 2, "flatten_space", "expected an input of rank 2 or more, found ",
               x.str());
  for (int a = 1; a < x.rank(); ++a)
    DISTOP_CHECK(d.parts(a) == 1, "flatten_space", "only the batch axis may be split, found axis ",
                 a, " split in ", x.str());
  const Shape global = flat(x.global_shape());
  std::vector<std::int64_t> batch;
  const auto& b = d.bounds(0);
  for (std::size_t i = 0; i + 1 < b.size(); ++i) batch.push_back(b[i + 1] - b[i]);
  return TensorSpace(x.partition(), Decomposition::blocks(global, d.grid(), {batch, {global[1]}},
                                                          {d.axis_map()[0], -1}));
}

template <class T>
Var<T> flatten(Tape& tape, const Var<T>& x, const TensorSpace& out_space) {
  const TensorSpace& xs = x.space();
  DISTOP_CHECK(xs.rank() >= 2 && out_space.rank() == 2, "flatten", "expected an input of rank 2 ",
               "or more and an output of rank 2, found ", xs.str(), " and ", out_space.str());
  // Metadata only, for every rank: each rank's box must flatten to its output box.
  for (int r = 0; r < xs.partition().parent_size(); ++r) {
    const Shape in = xs.local_shape_of_rank(r);
    const Shape out = out_space.local_shape_of_rank(r);
    DISTOP_CHECK(out == flat(in), "flatten", "rank ", r, " holds ", in.str(), " in ", xs.str(),
                 ", which flattens to ", flat(in).str(), ", but ", out.str(), " in ",
                 out_space.str());
  }
  return make_function<T>(tape, "flatten", {x}, [&] {
    auto y = DistTensor<T>::uninitialized(out_space);
    y.local() = x.value().local().reshaped(out_space.local_shape());
    return Computed{std::move(y), [](const DistTensor<T>& dy, Gradients<T>& grads) {
                      grads.accumulate(0, [&](T beta, Tensor<T>& dx) {
                        const Tensor<T> g = dy.local().reshaped(dx.shape());
                        if (beta == T(0))
                          dx.copy_from(g);
                        else
                          kernels::axpy(T(1), g, dx);
                      });
                    }};
  });
}

template <class T>
Var<T> flatten(Tape& tape, const Var<T>& x) {
  return flatten(tape, x, flatten_space(x.space()));
}

#define DISTOP_INSTANTIATE(T)                                        \
  template Var<T> flatten(Tape&, const Var<T>&, const TensorSpace&); \
  template Var<T> flatten(Tape&, const Var<T>&);
DISTOP_INSTANTIATE(float)
DISTOP_INSTANTIATE(double)
#undef DISTOP_INSTANTIATE

}  // namespace distop::nn
