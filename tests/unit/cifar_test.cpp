// The CIFAR-10 binary reader, on batch files written here: record layout and values, the splits'
// files in order, the released archive's subdirectory, and clear errors naming the file for
// missing, truncated, empty and mislabelled files.
#include "distop/data/cifar.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "cifar_files.hpp"
#include "distop/core/error.hpp"
#include "temp_dir.hpp"

namespace fs = std::filesystem;
using distop::Error;
using distop::data::Dataset;
using distop::test::cifar10_records;
using distop::test::write_bytes;
using distop::test::write_cifar10_dir;
using Bytes = std::vector<std::uint8_t>;

namespace {

struct TempDir : distop::test::TempDir {
  TempDir() : distop::test::TempDir("distop_cifar_test") {}
};

// The Error that `f` throws (op and message); fails the test if it throws none.
template <class F>
Error error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e;
  }
  ADD_FAILURE() << "expected a distop::Error";
  return Error("none", "");
}

// Expects the values of `ds` to be the records `bytes`: labels, then each image's bytes / 255.
void expect_records(const Dataset& ds, const Bytes& bytes) {
  const auto n = static_cast<std::int64_t>(bytes.size()) / distop::data::kCifar10RecordBytes;
  ASSERT_EQ(ds.size, n);
  ASSERT_EQ(ds.labels.size(), static_cast<std::size_t>(n));
  ASSERT_EQ(ds.images.size(), static_cast<std::size_t>(n * 3072));
  for (std::int64_t i = 0; i < n; ++i) {
    const std::uint8_t* rec = bytes.data() + i * 3073;
    EXPECT_EQ(ds.labels[static_cast<std::size_t>(i)], rec[0]);
    const float* img = ds.image(i);
    for (int j = 0; j < 3072; ++j) ASSERT_EQ(img[j], static_cast<float>(rec[1 + j]) / 255.0f);
  }
}

}  // namespace

TEST(Cifar10Test, ReadsRecordsChannelMajor) {
  TempDir dir;
  // Two records whose bytes say where they are: red 10, green 20, blue 30 (+ the row), labels 7, 0.
  Bytes bytes;
  for (std::uint8_t label : {7, 0}) {
    bytes.push_back(label);
    for (int c = 0; c < 3; ++c)
      for (int r = 0; r < 32; ++r)
        for (int col = 0; col < 32; ++col)
          bytes.push_back(static_cast<std::uint8_t>(10 * (c + 1) + r + label));
  }
  write_bytes(dir.file("b.bin"), bytes);
  const Dataset ds = distop::data::read_cifar10_batch(dir.file("b.bin"));
  EXPECT_EQ(ds.size, 2);
  EXPECT_EQ(ds.channels, 3);
  EXPECT_EQ(ds.rows, 32);
  EXPECT_EQ(ds.cols, 32);
  EXPECT_EQ(ds.pixels(), 3072);
  EXPECT_EQ(ds.labels, (std::vector<std::int32_t>{7, 0}));
  // Image 1 (label 0), channel 2 (blue), row 5, column 9: [3, 32, 32] row-major.
  EXPECT_EQ(ds.image(1)[2 * 1024 + 5 * 32 + 9], static_cast<float>(30 + 5) / 255.0f);
  // Image 0 (label 7), green, row 31.
  EXPECT_EQ(ds.image(0)[1 * 1024 + 31 * 32], static_cast<float>(20 + 31 + 7) / 255.0f);
  expect_records(ds, bytes);
}

TEST(Cifar10Test, LoadsBothSplitsInFileOrder) {
  TempDir dir;
  write_cifar10_dir(dir.path(), 3, 4, 100);
  const Dataset test = distop::data::load_cifar10(dir.str(), false);
  expect_records(test, cifar10_records(4, 100));
  const Dataset train = distop::data::load_cifar10(dir.str(), true);
  Bytes all;
  for (std::uint64_t i = 1; i <= 5; ++i) {
    const Bytes b = cifar10_records(3, 100 + i);
    all.insert(all.end(), b.begin(), b.end());
  }
  expect_records(train, all);
  EXPECT_EQ(train.channels, 3);
  // The collective loader, over every rank, this process, and none.
  for (MPI_Comm comm : {MPI_COMM_WORLD, MPI_COMM_SELF, MPI_COMM_NULL}) {
    const Dataset c = distop::data::load_cifar10_collective(comm, dir.str(), true);
    EXPECT_EQ(c.images, train.images);
    EXPECT_EQ(c.labels, train.labels);
  }
}

TEST(Cifar10Test, FindsTheReleasedArchivesSubdirectory) {
  TempDir dir;
  write_cifar10_dir(dir.path() / "cifar-10-batches-bin", 1, 2, 5);
  EXPECT_EQ(distop::data::cifar10_files(dir.str(), false),
            std::vector<std::string>{(dir.path() / "cifar-10-batches-bin" / "test_batch.bin")});
  EXPECT_EQ(distop::data::load_cifar10(dir.str(), true).size, 5);
}

TEST(Cifar10Test, MissingBatchFileIsNamed) {
  TempDir dir;
  write_cifar10_dir(dir.path(), 1, 1, 1);
  fs::remove(dir.path() / "data_batch_3.bin");
  const Error e = error_of([&] { distop::data::load_cifar10(dir.str(), true); });
  EXPECT_EQ(e.op(), "load_cifar10");
  EXPECT_NE(e.detail().find("CIFAR-10 file " + dir.file("data_batch_3.bin") + " does not exist"),
            std::string::npos)
      << e.what();
  // The test split is whole.
  EXPECT_EQ(distop::data::load_cifar10(dir.str(), false).size, 1);
  // An empty directory names the first file.
  TempDir empty;
  const Error e2 =
      error_of([&] { distop::data::load_cifar10_collective(MPI_COMM_WORLD, empty.str(), false); });
  EXPECT_EQ(e2.op(), "load_cifar10");
  EXPECT_NE(e2.detail().find(empty.file("test_batch.bin")), std::string::npos) << e2.what();
}

TEST(Cifar10Test, TruncatedRecordIsNamed) {
  TempDir dir;
  write_cifar10_dir(dir.path(), 2, 2, 3);
  fs::resize_file(dir.path() / "data_batch_2.bin", 2 * 3073 - 100);
  const Error e = error_of([&] { distop::data::load_cifar10(dir.str(), true); });
  EXPECT_EQ(e.op(), "load_cifar10");
  EXPECT_NE(e.detail().find("file " + dir.file("data_batch_2.bin") +
                            " has 6046 bytes, not a whole number of 3073-byte records"),
            std::string::npos)
      << e.what();
  EXPECT_NE(e.detail().find("1 records and 2973 bytes of a record cut short"), std::string::npos)
      << e.what();
  // A file shorter than one record.
  write_bytes(dir.file("short.bin"), Bytes(3072, 1));
  const Error s = error_of([&] { distop::data::read_cifar10_batch(dir.file("short.bin")); });
  EXPECT_EQ(s.op(), "read_cifar10");
  EXPECT_NE(s.detail().find("has 3072 bytes, not a whole number"), std::string::npos) << s.what();
}

TEST(Cifar10Test, LabelAboveNineIsNamed) {
  TempDir dir;
  Bytes bytes = cifar10_records(3, 9);
  bytes[3073] = 10;  // record 1's label
  write_bytes(dir.file("bad.bin"), bytes);
  const Error e = error_of([&] { distop::data::read_cifar10_batch(dir.file("bad.bin")); });
  EXPECT_EQ(e.op(), "read_cifar10");
  EXPECT_NE(e.detail().find("label 10 of record 1 (byte offset 3073) in file " +
                            dir.file("bad.bin") + " is out of range [0, 9]"),
            std::string::npos)
      << e.what();
  bytes[3073] = 255;
  write_bytes(dir.file("bad.bin"), bytes);
  EXPECT_NE(
      std::string(error_of([&] { distop::data::read_cifar10_batch(dir.file("bad.bin")); }).what())
          .find("label 255 of record 1"),
      std::string::npos);
  bytes[3073] = 9;
  write_bytes(dir.file("bad.bin"), bytes);
  EXPECT_EQ(distop::data::read_cifar10_batch(dir.file("bad.bin")).labels[1], 9);
}

TEST(Cifar10Test, EmptyMissingAndDirectoryFilesAreErrors) {
  TempDir dir;
  write_bytes(dir.file("empty.bin"), {});
  const Error e = error_of([&] { distop::data::read_cifar10_batch(dir.file("empty.bin")); });
  EXPECT_NE(e.detail().find("file " + dir.file("empty.bin") + " is empty"), std::string::npos)
      << e.what();
  // An empty split file makes the whole split an error, not an empty data set.
  write_cifar10_dir(dir.path(), 1, 1, 1);
  write_bytes(dir.path() / "test_batch.bin", {});
  const Error split = error_of([&] { distop::data::load_cifar10(dir.str(), false); });
  EXPECT_EQ(split.op(), "load_cifar10");
  EXPECT_NE(split.detail().find("test_batch.bin is empty"), std::string::npos) << split.what();
  const Error missing =
      error_of([&] { distop::data::read_cifar10_batch(dir.file("nowhere.bin")); });
  EXPECT_NE(missing.detail().find("file " + dir.file("nowhere.bin") + " does not exist"),
            std::string::npos)
      << missing.what();
  fs::create_directories(dir.path() / "sub.bin");
  const Error isdir = error_of([&] { distop::data::read_cifar10_batch(dir.file("sub.bin")); });
  EXPECT_NE(isdir.detail().find("is a directory"), std::string::npos) << isdir.what();
}
