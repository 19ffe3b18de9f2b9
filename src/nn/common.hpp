#pragma once
// Internal to the nn layer: helpers its layers share.

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "distop/autodiff/var.hpp"

namespace distop::nn::detail {

// Every rank that holds a box of the input (any rank of its partition, or with `boxes_only` only
// those whose box is not empty) must be in the layer's partition `layer`. From metadata alone, so
// that the check holds or fails alike on every rank.
inline void check_input_ranks(const TensorSpace& xs, const Partition& layer, bool boxes_only,
                              const char* op) {
  const Partition& p = xs.partition();
  if (p.same_as(layer)) return;
  std::vector<int> members = layer.ranks();
  std::sort(members.begin(), members.end());
  for (int i = 0; i < p.size(); ++i) {
    const int r = p.ranks()[static_cast<std::size_t>(i)];
    if (std::binary_search(members.begin(), members.end(), r)) continue;
    if (boxes_only && xs.local_shape_at(p.coords_of(i)).numel() == 0) continue;
    DISTOP_CHECK(false, op, "rank ", r, " holds a box of the input (", xs.str(),
                 ") but is not in the layer's ", layer.str());
  }
}

// The space of a parameter of global shape `shape` replicated over every rank of the partition.
inline TensorSpace replicated(const Partition& p, const Shape& shape) {
  return TensorSpace(
      p, Decomposition::balanced(shape, p.shape(),
                                 std::vector<int>(static_cast<std::size_t>(shape.rank()), -1)));
}

// v.grad += (what `write` computes): written straight into the existing gradient (beta = 1), or
// into a fresh tensor (beta = 0) that becomes the gradient. `write(beta, g)` must overwrite g with
// beta g + the contribution.
template <class T, class Write>
void accumulate(const Var<T>& v, Write write) {
  if (v.has_grad()) {
    write(T(1), v.grad().local());
  } else {
    DistTensor<T>& g = v.new_grad_for_overwrite();
    try {
      write(T(0), g.local());
    } catch (...) {
      v.zero_grad();  // no half-written gradient
      throw;
    }
  }
}

// x.grad += y.grad for an operation whose output y holds x's entries as they are (y's space has
// x's local boxes; only the global view differs). Called by y's adjoint, after which nothing reads
// y's gradient: when x has no gradient yet, x takes y's gradient storage instead of a copy (y is
// left without one) unless something else still refers to that storage.
template <class T>
void pass_grad_on(const Var<T>& y, const Var<T>& x) {
  const bool same_space = y.space() == x.space();
  auto as_x = [&](DistTensor<T> g) { return same_space ? g : g.reinterpreted(x.space()); };
  if (x.has_grad())
    x.accumulate_grad(as_x(y.grad()));  // added in place, y's gradient only read
  else if (!y.grad().local().shares_storage())
    x.accumulate_grad(as_x(y.take_grad()));
  else
    x.accumulate_grad(as_x(y.grad().clone()));
}

}  // namespace distop::nn::detail
