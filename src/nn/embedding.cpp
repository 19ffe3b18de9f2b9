#include "distop/nn/embedding.hpp"

#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "common.hpp"
#include "distop/autodiff/apply.hpp"
#include "distop/comm/agree.hpp"
#include "distop/core/trace.hpp"
#include "distop/kernels/embedding.hpp"
#include "distop/nn/init.hpp"
#include "spaces.hpp"

namespace distop::nn {

namespace {

constexpr const char* kOp = "Embedding";

// The lookup of this rank's indices in its block of rows (zeros for the others), in `out_space`.
template <class T>
Var<T> lookup(Tape& tape, const Var<T>& weight, const DistTensor<T>& indices,
              const TensorSpace& out_space, std::int64_t padding) {
  const std::int64_t offset =
      weight.space().local_shape().numel() > 0 ? weight.space().local_offset()[0] : 0;
  return make_function<T>(tape, "embedding", {weight}, [&] {
    auto y = DistTensor<T>::uninitialized(out_space);
    const std::int64_t d = out_space.global_shape()[out_space.rank() - 1];
    const Shape rows{indices.local_numel(), d};
    const Tensor<T> table = weight.value().local();
    if (rows.numel() > 0) {
      Tensor<T> y2 = y.local().reshaped(rows);
      kernels::embedding_forward(indices.local(), table, offset, y2);
    }
    return Computed{std::move(y), [idx = indices.local(), rows, offset, padding](
                                      const DistTensor<T>& dy, Gradients<T>& grads) {
                      grads.accumulate(0, [&](T beta, Tensor<T>& g) {
                        if (g.numel() == 0) return;
                        kernels::embedding_backward(idx, dy.local().reshaped(rows), offset, padding,
                                                    beta, g);
                      });
                    }};
  });
}

}  // namespace

template <class T>
Embedding<T>::Embedding(std::int64_t num_embeddings, std::int64_t embedding_dim,
                        EmbeddingOptions options)
    : Embedding(num_embeddings, embedding_dim, Partition::self(), std::move(options)) {}

template <class T>
Embedding<T>::Embedding(std::int64_t num_embeddings, std::int64_t embedding_dim,
                        Partition partition, EmbeddingOptions options)
    : num_(num_embeddings),
      dim_(embedding_dim),
      options_(std::move(options)),
      partition_(std::move(partition)) {
  DISTOP_CHECK(num_ > 0 && dim_ > 0, kOp,
               "num_embeddings and embedding_dim must be positive, found ", num_, " and ", dim_);
  const int g = options_.vocab_split_axis;
  DISTOP_CHECK(g >= -1 && g < partition_.dim(), kOp, "vocab_split_axis ", g,
               " is not -1 or a grid axis of ", partition_.str());
  if (options_.padding_idx) {
    const std::int64_t p = *options_.padding_idx;
    DISTOP_CHECK(p >= -num_ && p < num_, kOp, "padding_idx ", p, " must be within num_embeddings (",
                 num_, ")");
    padding_ = p < 0 ? p + num_ : p;
  }
  const TensorSpace space(partition_,
                          Decomposition::balanced(Shape{num_, dim_}, partition_.shape(), {g, -1}));
  DistTensor<T> w(space);
  normal_init(w, parameter_seed(options_.seed, "weight"));
  const std::int64_t first = w.local_numel() > 0 ? space.local_offset()[0] : 0;
  const std::int64_t rows = w.local_numel() > 0 ? space.local_shape()[0] : 0;
  if (padding_ >= first && padding_ < first + rows) {
    auto v = w.local().to_vector();
    for (std::int64_t j = 0; j < dim_; ++j)
      v[static_cast<std::size_t>((padding_ - first) * dim_ + j)] = T(0);
    w.local().copy_from(Tensor<T>::from_vector(w.local().shape(), v));
  }
  weight_ = this->register_parameter("weight", Var<T>(std::move(w), true));
}

template <class T>
TensorSpace Embedding<T>::output_space(const TensorSpace& indices) const {
  const Decomposition& d = indices.decomposition();
  auto extents = detail::block_extents(d);
  extents.push_back({dim_});
  std::vector<int> map = d.axis_map();
  map.push_back(-1);
  std::vector<std::int64_t> global;
  for (int a = 0; a < indices.rank(); ++a) global.push_back(indices.global_shape()[a]);
  global.push_back(dim_);
  return TensorSpace(indices.partition(),
                     Decomposition::blocks(Shape(global), d.grid(), extents, map));
}

template <class T>
Var<T> Embedding<T>::forward(Tape& tape, const DistTensor<T>& indices) {
  const trace::Compute span(kOp, this->registered_path());
  const TensorSpace& is = indices.space();
  const int g = options_.vocab_split_axis;
  if (g < 0) {
    detail::check_input_ranks(is, partition_, true, kOp);
  } else {
    DISTOP_CHECK(is.partition().same_as(partition_), kOp, "the indices live on ",
                 is.partition().str(), ", expected the layer's ", partition_.str());
    DISTOP_CHECK(is.decomposition().replicates(g) || partition_.shape()[g] == 1, kOp,
                 "the indices (", is.str(), ") must not be split over the vocabulary's grid axis ",
                 g, ": every rank of a group along it looks up the same indices");
  }
  // Every rank of the indices' partition agrees on whether any holds a bad index.
  const std::int64_t bad = kernels::first_invalid_index(indices.local(), num_);
  std::ostringstream problem;
  if (bad >= 0)
    problem << "index " << indices.local().to_vector()[static_cast<std::size_t>(bad)]
            << " at position " << bad << " of this rank's box of the indices (" << is.str()
            << ") is not an integer in [0, " << num_ << ")";
  comm::agree_ok(is.partition().comm(), kOp, bad < 0, problem.str());

  const TensorSpace out = output_space(is);
  Var<T> partial = lookup(tape, weight_, indices, out, padding_);
  if (g < 0 || partition_.shape()[g] == 1) return partial;
  if (!reduce_ || !(reduce_->domain() == out))
    reduce_ = std::make_shared<const AllSumReduce<T>>(out, std::vector<int>{g});
  return apply(tape, std::shared_ptr<const LinearOperator<T>>(reduce_), partial);
}

template class Embedding<float>;
template class Embedding<double>;

}  // namespace distop::nn
