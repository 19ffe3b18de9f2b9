// The collective data set loaders (CIFAR-10 and MNIST-like) agree over the ranks: the same data
// everywhere when every rank's files are the same, and the same error on every rank when one
// rank's files are missing or differ, never a hang. Each rank reads a directory of its own.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "cifar_files.hpp"
#include "distop/data/cifar.hpp"
#include "distop/data/idx.hpp"
#include "mpi_test_util.hpp"
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
