// The CNN example's model is data parallel as the gradient reducer will need it: with the batch
// split over R ranks, each rank's logits are its rows of the one-rank logits (dropout included),
// and the replicas' parameter gradients summed over the ranks are the one-rank gradients.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <cstdint>
#include <distop/distop.hpp>
#include <string>
#include <vector>

#include "model.hpp"

using namespace distop;

namespace {

constexpr std::int64_t kBatch = 7;  // not a multiple of 2 or 3: unequal shares
constexpr std::uint64_t kSeed = 5;

// The batch's values at the global indices of `space` (any split of the batch axis).
DistTensor<float> batch_values(const TensorSpace& space) {
  DistTensor<float> x(space);
  std::vector<float> v;
  for (std::int64_t g : space.global_indices())
    v.push_back(static_cast<float>(random::uniform(3, static_cast<std::uint64_t>(g))));
  x.local().copy_from(Tensor<float>::from_vector(space.local_shape(), v));
  return x;
}

std::int32_t label(std::int64_t row) { return static_cast<std::int32_t>((row * 3) % 10); }

// The network on this process alone, from the library's layers with the model's seeds: the
// one-rank computation. Returns the logits; the parameters' gradients are in `params`.
std::vector<float> reference(std::vector<Var<float>>& params) {
  nn::Conv<float> c1(2, 1, 32, 3, {.padding = 1, .seed = kSeed});
  nn::Conv<float> c2(2, 32, 64, 3, {.padding = 1, .seed = kSeed + 1});
  nn::Conv<float> c3(2, 64, 128, 3, {.padding = 1, .seed = kSeed + 2});
  nn::Linear<float> f1(1152, 1024, {.seed = kSeed + 3});
  nn::Linear<float> f2(1024, 10, {.seed = kSeed + 4});
  nn::Dropout<float> drop(0.5, {.seed = kSeed + 5});
  nn::Pool<float> pool(nn::PoolKind::max, 2, 2);
  const Partition self = Partition::self(Shape{1, 1, 1, 1});
  Tape tape;
  Var<float> x(batch_values(TensorSpace(Shape{kBatch, 1, 28, 28}, self)));
  auto h = pool.forward(tape, nn::relu(tape, c1.forward(tape, x)));
  h = pool.forward(tape, nn::relu(tape, c2.forward(tape, h)));
  h = pool.forward(tape, nn::relu(tape, c3.forward(tape, h)));
  auto logits =
      f2.forward(tape, drop.forward(tape, nn::relu(tape, f1.forward(tape, nn::flatten(tape, h)))));
  std::vector<std::int32_t> labels;
  for (std::int64_t r = 0; r < kBatch; ++r) labels.push_back(label(r));
  auto loss = loss::cross_entropy(tape, logits, labels);
  backward(tape, loss);
  for (nn::Module<float>* m : std::vector<nn::Module<float>*>{&c1, &c2, &c3, &f1, &f2})
    for (const auto& p : m->parameters()) params.push_back(p);
  return logits.value().local().to_vector();
}

void expect_close(const std::vector<float>& got, const std::vector<float>& want,
                  const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  float scale = 0;
  for (float w : want) scale = std::max(scale, std::abs(w));
  for (std::size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], want[i], 1e-5f * std::max(scale, 1e-3f)) << what << " entry " << i;
}

}  // namespace

TEST(CnnModel, BatchSplitOverTheRanksComputesTheOneRankNetwork) {
  examples::ConvNet model(1, 28, 28, kSeed);
  const TensorSpace space = model.input_space(kBatch);
  const std::int64_t r0 = space.local_offset()[0], rows = space.local_shape()[0];
  Tape tape;
  auto logits = model.forward(tape, Var<float>(batch_values(space)));
  std::vector<std::int32_t> labels;
  for (std::int64_t r = r0; r < r0 + rows; ++r) labels.push_back(label(r));
  auto loss = loss::cross_entropy(tape, logits, labels);
  backward(tape, loss);

  std::vector<Var<float>> ref_params;
  const auto ref_logits = reference(ref_params);
  // This rank's rows of the logits.
  expect_close(
      logits.value().local().to_vector(),
      std::vector<float>(ref_logits.begin() + r0 * 10, ref_logits.begin() + (r0 + rows) * 10),
      "logits");
  // The per-replica gradients summed over the replicas: what the reducer will do.
  const auto named = model.named_parameters();
  ASSERT_EQ(named.size(), ref_params.size());
  for (std::size_t i = 0; i < named.size(); ++i) {
    EXPECT_EQ(named[i].reduction, nn::GradientReduction::per_replica) << named[i].name;
    auto g = named[i].var.grad().local().to_vector();
    MPI_Allreduce(MPI_IN_PLACE, g.data(), static_cast<int>(g.size()), MPI_FLOAT, MPI_SUM,
                  MPI_COMM_WORLD);
    expect_close(g, ref_params[i].grad().local().to_vector(), named[i].name);
  }
}
