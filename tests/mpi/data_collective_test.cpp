// The collective data set loaders (CIFAR-10 and MNIST-like) agree over the ranks: the same data
// everywhere when every rank's files are the same, and the same error on every rank when one
// rank's files are missing or differ, never a hang. Each rank reads a directory of its own. And
// data::load_batch fills every rank's box of a batch split along any axes.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "cifar_files.hpp"
#include "distop/data/batch.hpp"
#include "distop/data/cifar.hpp"
#include "distop/data/idx.hpp"
#include "mpi_test_util.hpp"
#include "ramp_dataset.hpp"
#include "temp_dir.hpp"

using namespace distop;
using distop::test::error_of;
using distop::test::world_rank;
using distop::test::world_size;

namespace {

bool last_rank() { return world_rank() == world_size() - 1; }

::testing::AssertionResult contains(const std::string& s, const std::string& part) {
  if (s.find(part) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "\"" << s << "\" does not contain \"" << part << "\"";
}

}  // namespace

TEST(DataCollective, Cifar10SameFilesOnEveryRank) {
  test::TempDir dir("distop_data_collective");
  test::write_cifar10_dir(dir.path(), 2, 3, 42);
  const auto ds = data::load_cifar10_collective(MPI_COMM_WORLD, dir.str(), false);
  EXPECT_EQ(ds.size, 3);
  EXPECT_EQ(ds.images, data::load_cifar10(dir.str(), false).images);
}

TEST(DataCollective, Cifar10FileMissingOnOneRankFailsOnEvery) {
  test::TempDir dir("distop_data_collective");
  test::write_cifar10_dir(dir.path(), 2, 3, 42);
  if (last_rank()) std::filesystem::remove(dir.path() / "data_batch_5.bin");
  const std::string msg =
      error_of([&] { data::load_cifar10_collective(MPI_COMM_WORLD, dir.str(), true); });
  EXPECT_TRUE(contains(msg, "load_cifar10"));
  EXPECT_TRUE(contains(msg, "data_batch_5.bin does not exist"));
}

TEST(DataCollective, Cifar10ContentsDifferingBetweenRanks) {
  DISTOP_REQUIRE_RANKS(2);
  test::TempDir dir("distop_data_collective");
  test::write_cifar10_dir(dir.path(), 2, 3, last_rank() ? 7 : 42);
  const std::string msg =
      error_of([&] { data::load_cifar10_collective(MPI_COMM_WORLD, dir.str(), false); });
  EXPECT_TRUE(contains(msg, "ranks loaded different data sets from "));
  EXPECT_TRUE(contains(msg, "example counts 3..3, image channels 3..3, image rows 32..32"));
  EXPECT_TRUE(contains(msg, "and contents differ"));
}

TEST(DataCollective, MnistLikeShapesDifferingBetweenRanks) {
  DISTOP_REQUIRE_RANKS(2);
  test::TempDir dir("distop_data_collective");
  const std::int64_t rows = last_rank() ? 3 : 2;
  data::write_idx(dir.file("t10k-images-idx3-ubyte"),
                  {{2, rows, 2}, std::vector<std::uint8_t>(static_cast<std::size_t>(4 * rows), 9)},
                  false);
  data::write_idx(dir.file("t10k-labels-idx1-ubyte"), {{2}, {1, 2}}, false);
  const std::string msg =
      error_of([&] { data::load_mnist_like_collective(MPI_COMM_WORLD, dir.str(), false); });
  EXPECT_TRUE(contains(msg, "load_mnist_like"));
  EXPECT_TRUE(contains(msg, "image channels 1..1, image rows 2..3, image cols 2..2"));
}

// Each rank's box of a batch, split along the image's spatial axes, the batch axis or the
// flattened features, holds the entries of the whole batch (batch_images) at its global indices.
TEST(DataCollective, LoadBatchFillsEveryBox) {
  const data::Dataset d = test::ramp_dataset(7, 4, 3, 5, 0.5f, std::vector<std::int32_t>(7, 0));
  const std::vector<std::int64_t> examples{4, 0, 6, 2, 5};
  const auto whole = data::batch_images(d, examples).to_vector();
  const std::int64_t n = 5, p = world_size();
  const std::int64_t a = p % 2 == 0 ? 2 : 1;  // a x (p / a) spatial grid
  const std::vector<std::pair<Shape, Shape>> cases{
      {Shape{n, 4, 3, 5}, Shape{1, 1, a, p / a}},  // spatial blocks (LeNet-5's input)
      {Shape{n, 4, 3, 5}, Shape{p, 1, 1, 1}},      // batch rows (the CNN's)
      {Shape{n, 4, 3, 5}, Shape{1, p, 1, 1}},      // channels
      {Shape{n, 60}, Shape{1, p}},                 // flattened features (the MLP's)
      {Shape{n, 60}, Shape{a, p / a}}};
  for (const auto& [global, grid] : cases) {
    DistTensor<float> x(TensorSpace(global, Partition::world(grid)));
    x.local().fill(-1.0f);
    data::load_batch(d, examples, x);
    const auto idx = x.space().global_indices();
    const auto got = x.local().to_vector();
    ASSERT_EQ(got.size(), idx.size());
    for (std::size_t i = 0; i < got.size(); ++i)
      ASSERT_EQ(got[i], whole[static_cast<std::size_t>(idx[i])])
          << "global " << global.str() << " on grid " << grid.str() << ", local entry " << i;
  }
}
