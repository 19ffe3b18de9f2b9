// Local attention with the batch split over ranks (each rank holding whole sequences): the
// MultiheadAttention and TransformerEncoderLayer outputs and input gradients equal, slice by
// slice, those of the whole batch on one rank, and their parameters' gradients summed over the
// ranks' copies equal the one-rank gradients; the dropout masks, keyed by global index, too.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <vector>

#include "distop/autodiff/apply.hpp"
#include "distop/nn/multihead_attention.hpp"
#include "distop/nn/transformer_encoder_layer.hpp"
#include "gradcheck.hpp"
#include "mpi_test_util.hpp"

using namespace distop;
using distop::test::world_rank;
using distop::test::world_size;

namespace {

constexpr std::int64_t kBatchPerRank = 2, kSeq = 3, kEmbed = 4;

std::vector<double> summed(std::vector<double> v) {
  MPI_Allreduce(MPI_IN_PLACE, v.data(), static_cast<int>(v.size()), MPI_DOUBLE, MPI_SUM,
                MPI_COMM_WORLD);
  return v;
}

void expect_near(const std::vector<double>& got, const std::vector<double>& want, double tol) {
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], tol) << "entry " << i;
}

// Runs `module` (made by `make`, twice alike) on the world's batch-split input and on the whole
// batch here, and compares.
template <class Make, class Forward>
void expect_batch_split_equals_one_rank(Make make, Forward forward) {
  const int n = world_size();
  const Shape global{kBatchPerRank * n, kSeq, kEmbed};
  const TensorSpace split(global, Partition::world(Shape{n, 1, 1}));
  const TensorSpace whole = test::local_space(global);
  auto split_module = make();
  auto whole_module = make();

  Tape tape;
  Var<double> x(test::random_tensor<double>(split, 1), true);
  Var<double> y = forward(*split_module, tape, x);
  ASSERT_TRUE(y.space() == split);
  backward(tape, y, test::random_tensor<double>(split, 2));

  Tape whole_tape;
  Var<double> xw(test::random_tensor<double>(whole, 1), true);
  Var<double> yw = forward(*whole_module, whole_tape, xw);
  backward(whole_tape, yw, test::random_tensor<double>(whole, 2));

  // This rank's slice of the whole batch: rows [r 2, r 2 + 2) of [N, S, E], contiguous.
  const std::size_t slice = static_cast<std::size_t>(kBatchPerRank * kSeq * kEmbed);
  const auto offset = static_cast<std::ptrdiff_t>(slice) * world_rank();
  auto part = [&](const std::vector<double>& v) {
    return std::vector<double>(v.begin() + offset,
                               v.begin() + offset + static_cast<std::ptrdiff_t>(slice));
  };
  expect_near(y.value().local().to_vector(), part(yw.value().local().to_vector()), 1e-12);
  expect_near(x.grad().local().to_vector(), part(xw.grad().local().to_vector()), 1e-12);
  const auto params = split_module->named_parameters();
  const auto whole_params = whole_module->named_parameters();
  ASSERT_EQ(params.size(), whole_params.size());
  for (std::size_t i = 0; i < params.size(); ++i) {
    SCOPED_TRACE(params[i].name);
    expect_near(summed(params[i].var.grad().local().to_vector()),
                whole_params[i].var.grad().local().to_vector(), 1e-11);
  }
}

TEST(BatchSplitAttention, MultiheadAttentionEqualsTheWholeBatch) {
  const auto mask = test::random_tensor<double>(test::local_space(Shape{kSeq, kSeq}), 3);
  expect_batch_split_equals_one_rank(
      [] {
        return std::make_shared<nn::MultiheadAttention<double>>(
            kEmbed, 2, nn::MultiheadAttentionOptions{.dropout = 0.3, .seed = 4});
      },
      [&](nn::MultiheadAttention<double>& m, Tape& tape, const Var<double>& x) {
        return m.forward(tape, x, {.attn_mask = mask, .is_causal = true});
      });
}

TEST(BatchSplitAttention, TransformerEncoderLayerEqualsTheWholeBatch) {
  expect_batch_split_equals_one_rank(
      [] {
        return std::make_shared<nn::TransformerEncoderLayer<double>>(
            kEmbed, 2, 6, nn::TransformerEncoderLayerOptions{.dropout = 0.2, .seed = 5});
      },
      [](nn::TransformerEncoderLayer<double>& m, Tape& tape, const Var<double>& x) {
        return m.forward(tape, x);
      });
}

}  // namespace
