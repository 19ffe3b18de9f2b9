// The examples' per-epoch metrics CSV: header, flushed rows, and resuming.
#include <gtest/gtest.h>
#include <mpi.h>

#include <fstream>
#include <sstream>
#include <string>

#include "distop/train/metrics.hpp"
#include "temp_dir.hpp"

namespace {

using distop::train::MetricsCsv;

std::string read(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

void write(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

const std::string kHeader = "epoch,train_loss,train_accuracy,test_accuracy,seconds\n";

TEST(MetricsCsv, WritesTheHeaderAndFlushesEachRow) {
  distop::test::TempDir dir;
  const auto path = dir.file("metrics.csv");
  write(path, "old contents\n");
  MetricsCsv csv(path);
  EXPECT_TRUE(csv.enabled());
  EXPECT_EQ(read(path), kHeader);  // a new run replaces an old file
  csv.append(1, 0.5, 0.75, 0.8, 1.25);
  // Readable while the writer is still open.
  EXPECT_EQ(read(path), kHeader + "1,0.500000,0.750000,0.800000,1.250\n");
  csv.append(2, 0.25, 0.875, 0.9, 2);
  EXPECT_EQ(read(path), kHeader + "1,0.500000,0.750000,0.800000,1.250\n" +
                            "2,0.250000,0.875000,0.900000,2.000\n");
}

TEST(MetricsCsv, ResumingKeepsEarlierEpochsAndDropsLaterOnes) {
  distop::test::TempDir dir;
  const auto path = dir.file("metrics.csv");
  write(path, kHeader + "1,0.9,0.5,0.6,1\n2,0.8,0.6,0.7,1\n3,0.7,0.7,0.8,1\n4,0.6,0.8");
  {
    MetricsCsv csv(path, 2);  // resumed from a checkpoint taken after epoch 2
    EXPECT_EQ(read(path), kHeader + "1,0.9,0.5,0.6,1\n2,0.8,0.6,0.7,1\n");
    csv.append(3, 0.5, 0.9, 0.85, 3);
  }
  EXPECT_EQ(read(path), kHeader + "1,0.9,0.5,0.6,1\n2,0.8,0.6,0.7,1\n" +
                            "3,0.500000,0.900000,0.850000,3.000\n");
  // A row cut short by a crash (no newline) is dropped even when its epoch would be kept.
  write(path, kHeader + "1,0.9,0.5,0.6,1\n2,0.8,0.6");
  { MetricsCsv csv(path, 5); }
  EXPECT_EQ(read(path), kHeader + "1,0.9,0.5,0.6,1\n");
  // Resuming before any epoch finished, and resuming without a file, start anew.
  { MetricsCsv csv(path, 0); }
  EXPECT_EQ(read(path), kHeader);
  { MetricsCsv csv(dir.file("new.csv"), 3); }
  EXPECT_EQ(read(dir.file("new.csv")), kHeader);
}

TEST(MetricsCsv, BadFilesAreErrors) {
  distop::test::TempDir dir;
  const auto path = dir.file("other.csv");
  write(path, "a,b\n1,2\n");
  EXPECT_THROW(MetricsCsv(path, 1), distop::Error);
  EXPECT_EQ(read(path), "a,b\n1,2\n");  // left alone
  EXPECT_THROW(MetricsCsv(dir.file("no/such/dir/m.csv")), distop::Error);
  EXPECT_THROW(MetricsCsv::open(MPI_COMM_SELF, dir.file("no/such/dir/m.csv")), distop::Error);
}

TEST(MetricsCsv, OpenWritesOnTheRootRankOnly) {
  distop::test::TempDir dir;
  auto csv = MetricsCsv::open(MPI_COMM_SELF, dir.file("m.csv"));
  EXPECT_TRUE(csv.enabled());
  csv.append(1, 1, 0, 0, 0);
  auto elsewhere = MetricsCsv::open(MPI_COMM_SELF, dir.file("n.csv"), std::nullopt, /*root=*/1);
  EXPECT_FALSE(elsewhere.enabled());
  elsewhere.append(1, 1, 0, 0, 0);  // does nothing
  EXPECT_FALSE(std::filesystem::exists(dir.file("n.csv")));
  MetricsCsv none;
  EXPECT_FALSE(none.enabled());
  EXPECT_FALSE(MetricsCsv::open(MPI_COMM_SELF, "").enabled());
}

}  // namespace
