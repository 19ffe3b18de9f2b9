// IDX reading and the MNIST-like loader, on small files written here (plain, gzip by zlib, and
// gzip built by hand) and, where installed, on the real Fashion-MNIST test and training sets.
#include "distop/data/idx.hpp"

#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "distop/core/error.hpp"
#include "temp_dir.hpp"

namespace fs = std::filesystem;
using distop::Error;
using distop::data::Dataset;
using distop::data::IdxArray;
using Bytes = std::vector<std::uint8_t>;

namespace {

struct TempDir : distop::test::TempDir {
  TempDir() : distop::test::TempDir("distop_idx_test") {}
};

// An IDX file's bytes: magic (0, 0, type, ndim), big-endian extents, then `data`.
Bytes idx_bytes(std::uint8_t type, const std::vector<std::uint32_t>& extents, const Bytes& data) {
  Bytes out{0, 0, type, static_cast<std::uint8_t>(extents.size())};
  for (std::uint32_t e : extents)
    for (int shift = 24; shift >= 0; shift -= 8)
      out.push_back(static_cast<std::uint8_t>(e >> shift));
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

Bytes iota_bytes(std::size_t n, std::uint8_t start = 0) {
  Bytes out(n);
  for (std::size_t i = 0; i < n; ++i) out[i] = static_cast<std::uint8_t>(start + i * 7);
  return out;
}

void write_plain(const std::string& path, const Bytes& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << path;
}

std::uint32_t crc32_of(const Bytes& bytes) {
  std::uint32_t crc = 0xffffffffu;
  for (std::uint8_t b : bytes) {
    crc ^= b;
    for (int k = 0; k < 8; ++k) crc = (crc >> 1) ^ (0xedb88320u & (0u - (crc & 1u)));
  }
  return ~crc;
}

// A gzip file of arbitrary (also corrupt) contents, compressed by zlib.
void write_gzip(const std::string& path, const Bytes& bytes) {
  gzFile f = gzopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr) << path;
  if (!bytes.empty()) {
    ASSERT_EQ(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())),
              static_cast<int>(bytes.size()));
  }
  ASSERT_EQ(gzclose(f), Z_OK);
}

// A gzip file made without zlib: RFC 1952 around stored deflate blocks (RFC 1951), so that reading
// is also checked against an encoder other than the one it decodes with.
void write_gzip_by_hand(const std::string& path, const Bytes& bytes) {
  Bytes out{0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff};
  std::size_t pos = 0;
  do {
    const std::size_t n = std::min<std::size_t>(bytes.size() - pos, 65535);
    const bool last = pos + n == bytes.size();
    out.push_back(last ? 1 : 0);
    out.push_back(static_cast<std::uint8_t>(n & 0xff));
    out.push_back(static_cast<std::uint8_t>(n >> 8));
    out.push_back(static_cast<std::uint8_t>(~n & 0xff));
    out.push_back(static_cast<std::uint8_t>((~n >> 8) & 0xff));
    out.insert(out.end(), bytes.begin() + static_cast<std::ptrdiff_t>(pos),
               bytes.begin() + static_cast<std::ptrdiff_t>(pos + n));
    pos += n;
  } while (pos < bytes.size());
  for (std::uint32_t v : {crc32_of(bytes), static_cast<std::uint32_t>(bytes.size())})
    for (int shift = 0; shift < 32; shift += 8)
      out.push_back(static_cast<std::uint8_t>(v >> shift));
  write_plain(path, out);
}

// The Error that `f` throws; fails the test if it throws none.
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected a distop::Error";
  return {};
}

// Writes the four files of an MNIST-like split into `dir`.
void write_split(const TempDir& dir, bool train, const Bytes& images_file, const Bytes& labels_file,
                 bool gz = true) {
  const std::string prefix = train ? "train" : "t10k";
  const std::string suffix = gz ? ".gz" : "";
  if (gz) {
    write_gzip(dir.file(prefix + "-images-idx3-ubyte" + suffix), images_file);
    write_gzip(dir.file(prefix + "-labels-idx1-ubyte" + suffix), labels_file);
  } else {
    write_plain(dir.file(prefix + "-images-idx3-ubyte"), images_file);
    write_plain(dir.file(prefix + "-labels-idx1-ubyte"), labels_file);
  }
}

}  // namespace

TEST(IdxTest, ReadsPlainFile) {
  TempDir dir;
  const Bytes data = iota_bytes(24);
  write_plain(dir.file("a.idx"), idx_bytes(0x08, {2, 3, 4}, data));
  const IdxArray a = distop::data::read_idx(dir.file("a.idx"));
  EXPECT_EQ(a.shape, (std::vector<std::int64_t>{2, 3, 4}));
  EXPECT_EQ(a.numel(), 24);
  EXPECT_EQ(a.data, data);
}

TEST(IdxTest, ReadsGzipFileFromZlib) {
  TempDir dir;
  const IdxArray written{{3000, 1000}, iota_bytes(3000000, 3)};  // several of the reader's chunks
  distop::data::write_idx(dir.file("a.idx.gz"), written, true);
  EXPECT_LT(fs::file_size(dir.file("a.idx.gz")), 1000000u);  // really compressed
  const IdxArray a = distop::data::read_idx(dir.file("a.idx.gz"));
  EXPECT_EQ(a.shape, written.shape);
  EXPECT_EQ(a.data, written.data);
}

TEST(IdxTest, ReadsGzipFileBuiltByHand) {
  TempDir dir;
  const Bytes data = iota_bytes(70000 * 2, 1);  // more than one stored block
  write_gzip_by_hand(dir.file("b.gz"), idx_bytes(0x08, {70000, 2}, data));
  const IdxArray a = distop::data::read_idx(dir.file("b.gz"));
  EXPECT_EQ(a.shape, (std::vector<std::int64_t>{70000, 2}));
  EXPECT_EQ(a.data, data);
}

TEST(IdxTest, ReadsEmptyArray) {
  TempDir dir;
  write_plain(dir.file("e"), idx_bytes(0x08, {0, 28, 28}, {}));
  const IdxArray a = distop::data::read_idx(dir.file("e"));
  EXPECT_EQ(a.shape, (std::vector<std::int64_t>{0, 28, 28}));
  EXPECT_TRUE(a.data.empty());
}

TEST(IdxTest, WriteIdxRoundTripsPlainAndCompressed) {
  TempDir dir;
  IdxArray a{{4, 5}, iota_bytes(20, 9)};
  for (bool compress : {false, true}) {
    const std::string path = dir.file(compress ? "w.gz" : "w");
    distop::data::write_idx(path, a, compress);
    std::ifstream in(path, std::ios::binary);
    std::array<unsigned char, 4> head{};
    in.read(reinterpret_cast<char*>(head.data()), 4);
    if (compress) {
      EXPECT_EQ(head[0], 0x1f);
      EXPECT_EQ(head[1], 0x8b);
    } else {
      EXPECT_EQ(head, (std::array<unsigned char, 4>{0, 0, 8, 2}));
      EXPECT_EQ(fs::file_size(path), 4u + 8u + 20u);
    }
    const IdxArray b = distop::data::read_idx(path);
    EXPECT_EQ(b.shape, a.shape);
    EXPECT_EQ(b.data, a.data);
  }
}

TEST(IdxTest, WriteIdxRejectsInconsistentArray) {
  TempDir dir;
  const std::string msg = error_of([&] {
    distop::data::write_idx(dir.file("x"), IdxArray{{2, 2}, Bytes(3)}, false);
  });
  EXPECT_NE(msg.find("has 4 elements, data has 3"), std::string::npos) << msg;
}

TEST(IdxTest, MissingFile) {
  TempDir dir;
  const std::string path = dir.file("nothing.gz");
  const std::string msg = error_of([&] { distop::data::read_idx(path); });
  EXPECT_NE(msg.find(path), std::string::npos) << msg;
  EXPECT_NE(msg.find("does not exist"), std::string::npos) << msg;
}

TEST(IdxTest, TruncatedMagic) {
  TempDir dir;
  write_plain(dir.file("t"), {0, 0});
  const std::string msg = error_of([&] { distop::data::read_idx(dir.file("t")); });
  EXPECT_NE(msg.find("truncated header"), std::string::npos) << msg;
  EXPECT_NE(msg.find("expected a 4-byte magic number, found 2 bytes"), std::string::npos) << msg;
  EXPECT_NE(msg.find(dir.file("t")), std::string::npos) << msg;
}

TEST(IdxTest, TruncatedExtents) {
  TempDir dir;
  Bytes bytes = idx_bytes(0x08, {10, 28, 28}, {});
  bytes.resize(4 + 5);
  write_gzip(dir.file("t.gz"), bytes);
  const std::string msg = error_of([&] { distop::data::read_idx(dir.file("t.gz")); });
  EXPECT_NE(msg.find("truncated header"), std::string::npos) << msg;
  EXPECT_NE(msg.find("promises 3 big-endian uint32 extents (12 bytes), found 5 bytes"),
            std::string::npos)
      << msg;
}

TEST(IdxTest, WrongMagic) {
  TempDir dir;
  write_plain(dir.file("zip"), {'P', 'K', 3, 4, 0, 0, 0, 0});
  const std::string msg = error_of([&] { distop::data::read_idx(dir.file("zip")); });
  EXPECT_NE(msg.find("wrong magic number 0x504b0304"), std::string::npos) << msg;
  EXPECT_NE(msg.find("not an IDX file"), std::string::npos) << msg;
}

TEST(IdxTest, UnsupportedTypeCode) {
  TempDir dir;
  write_plain(dir.file("f"), idx_bytes(0x0D, {2}, Bytes(8)));
  const std::string msg = error_of([&] { distop::data::read_idx(dir.file("f")); });
  EXPECT_NE(msg.find("element type code 0x0d (float, magic 0x00000d01)"), std::string::npos) << msg;
  EXPECT_NE(msg.find("expected 0x08 (unsigned byte)"), std::string::npos) << msg;
}

TEST(IdxTest, ZeroDimensions) {
  TempDir dir;
  write_plain(dir.file("z"), idx_bytes(0x08, {}, {1}));
  const std::string msg = error_of([&] { distop::data::read_idx(dir.file("z")); });
  EXPECT_NE(msg.find("dimension count 0"), std::string::npos) << msg;
}

TEST(IdxTest, DataShorterThanHeader) {
  TempDir dir;
  write_gzip(dir.file("s.gz"), idx_bytes(0x08, {2, 3}, iota_bytes(5)));
  const std::string msg = error_of([&] { distop::data::read_idx(dir.file("s.gz")); });
  EXPECT_NE(msg.find("shorter than its header says: shape [2, 3] needs 6 bytes of data, found 5"),
            std::string::npos)
      << msg;
}

TEST(IdxTest, HugeExtentsAreShortDataNotAnAllocationFailure) {
  TempDir dir;
  write_plain(dir.file("h"), idx_bytes(0x08, {0xffffffffu, 0xffffu}, iota_bytes(10)));
  const std::string msg = error_of([&] { distop::data::read_idx(dir.file("h")); });
  EXPECT_NE(msg.find("shorter than its header says"), std::string::npos) << msg;
  EXPECT_NE(msg.find("found 10"), std::string::npos) << msg;
  write_plain(dir.file("o"), idx_bytes(0x08, {0xffffffffu, 0xffffffffu}, iota_bytes(10)));
  const std::string overflow = error_of([&] { distop::data::read_idx(dir.file("o")); });
  EXPECT_NE(overflow.find("more than 2^62 elements"), std::string::npos) << overflow;
}

TEST(IdxTest, DataLongerThanHeader) {
  TempDir dir;
  write_plain(dir.file("l"), idx_bytes(0x08, {2, 3}, iota_bytes(8)));
  const std::string msg = error_of([&] { distop::data::read_idx(dir.file("l")); });
  EXPECT_NE(msg.find("longer than its header says: shape [2, 3] needs 6 bytes of data, found 8"),
            std::string::npos)
      << msg;
}

TEST(IdxTest, TruncatedGzipStream) {
  TempDir dir;
  const std::string path = dir.file("cut.gz");
  IdxArray a{{200, 100}, Bytes(20000)};
  for (std::size_t i = 0; i < a.data.size(); ++i)
    a.data[i] = static_cast<std::uint8_t>((i * 2654435761u) >> 13);  // poorly compressible
  distop::data::write_idx(path, a, true);
  fs::resize_file(path, fs::file_size(path) / 2);
  const std::string msg = error_of([&] { distop::data::read_idx(path); });
  EXPECT_NE(msg.find(path), std::string::npos) << msg;
  EXPECT_NE(msg.find("cannot read the data"), std::string::npos) << msg;
}

TEST(MnistLikeTest, LoadsGzipSplit) {
  TempDir dir;
  const Bytes pixels = iota_bytes(5 * 3 * 4, 11);
  write_split(dir, true, idx_bytes(0x08, {5, 3, 4}, pixels), idx_bytes(0x08, {5}, {0, 9, 3, 3, 7}));
  const Dataset ds = distop::data::load_mnist_like(dir.str(), true);
  EXPECT_EQ(ds.size, 5);
  EXPECT_EQ(ds.rows, 3);
  EXPECT_EQ(ds.cols, 4);
  EXPECT_EQ(ds.pixels(), 12);
  ASSERT_EQ(ds.images.size(), pixels.size());
  for (std::size_t i = 0; i < pixels.size(); ++i)
    EXPECT_FLOAT_EQ(ds.images[i], static_cast<float>(pixels[i]) / 255.0f);
  EXPECT_EQ(ds.image(2), ds.images.data() + 24);
  EXPECT_EQ(ds.labels, (std::vector<std::int32_t>{0, 9, 3, 3, 7}));
}

TEST(MnistLikeTest, LoadsTestSplitUncompressed) {
  TempDir dir;
  write_split(dir, false, idx_bytes(0x08, {2, 1, 1}, {0, 255}), idx_bytes(0x08, {2}, {4, 5}),
              false);
  const Dataset ds = distop::data::load_mnist_like(dir.str(), false);
  EXPECT_EQ(ds.size, 2);
  EXPECT_EQ(ds.images, (std::vector<float>{0.0f, 1.0f}));
  EXPECT_EQ(ds.labels, (std::vector<std::int32_t>{4, 5}));
}

TEST(MnistLikeTest, PrefersGzipName) {
  TempDir dir;
  write_split(dir, true, idx_bytes(0x08, {1, 1, 1}, {1}), idx_bytes(0x08, {1}, {1}), true);
  write_split(dir, true, idx_bytes(0x08, {1, 1, 1}, {2}), idx_bytes(0x08, {1}, {2}), false);
  EXPECT_EQ(distop::data::mnist_like_path(dir.str(), true, true),
            dir.file("train-images-idx3-ubyte.gz"));
  EXPECT_EQ(distop::data::load_mnist_like(dir.str(), true).labels, std::vector<std::int32_t>{1});
  fs::remove(dir.file("train-labels-idx1-ubyte.gz"));
  EXPECT_EQ(distop::data::mnist_like_path(dir.str(), true, false),
            dir.file("train-labels-idx1-ubyte"));
}

TEST(MnistLikeTest, MissingFiles) {
  TempDir dir;
  const std::string msg = error_of([&] { distop::data::load_mnist_like(dir.str(), false); });
  EXPECT_NE(msg.find("load_mnist_like"), std::string::npos) << msg;
  EXPECT_NE(msg.find("has neither " + dir.file("t10k-images-idx3-ubyte.gz") + " nor " +
                     dir.file("t10k-images-idx3-ubyte")),
            std::string::npos)
      << msg;
}

TEST(MnistLikeTest, CorruptFileIsReportedUnderLoaderName) {
  TempDir dir;
  write_split(dir, true, idx_bytes(0x08, {2, 2, 2}, iota_bytes(7)), idx_bytes(0x08, {2}, {1, 2}));
  try {
    distop::data::load_mnist_like(dir.str(), true);
    ADD_FAILURE() << "expected a distop::Error";
  } catch (const Error& e) {
    EXPECT_EQ(e.op(), "load_mnist_like");
    EXPECT_NE(e.detail().find(dir.file("train-images-idx3-ubyte.gz")), std::string::npos)
        << e.what();
    EXPECT_NE(e.detail().find("needs 8 bytes of data, found 7"), std::string::npos) << e.what();
  }
}

TEST(MnistLikeTest, ImagesWithWrongDimensionCount) {
  TempDir dir;
  write_split(dir, true, idx_bytes(0x08, {2, 4}, iota_bytes(8)), idx_bytes(0x08, {2}, {1, 2}));
  const std::string msg = error_of([&] { distop::data::load_mnist_like(dir.str(), true); });
  EXPECT_NE(msg.find("images file " + dir.file("train-images-idx3-ubyte.gz") +
                     " has 2 dimensions (magic 0x00000802, shape [2, 4]), expected 3 (magic "
                     "0x00000803"),
            std::string::npos)
      << msg;
}

TEST(MnistLikeTest, LabelsWithWrongDimensionCount) {
  TempDir dir;
  write_split(dir, true, idx_bytes(0x08, {2, 1, 1}, {1, 2}), idx_bytes(0x08, {2, 1}, {1, 2}));
  const std::string msg = error_of([&] { distop::data::load_mnist_like(dir.str(), true); });
  EXPECT_NE(msg.find("has 2 dimensions (magic 0x00000802, shape [2, 1]), expected 1 (magic "
                     "0x00000801"),
            std::string::npos)
      << msg;
}

TEST(MnistLikeTest, MismatchedCounts) {
  TempDir dir;
  write_split(dir, true, idx_bytes(0x08, {5, 1, 2}, iota_bytes(10)),
              idx_bytes(0x08, {4}, {1, 2, 3, 4}));
  const std::string msg = error_of([&] { distop::data::load_mnist_like(dir.str(), true); });
  EXPECT_NE(msg.find("holds 5 examples but labels file " + dir.file("train-labels-idx1-ubyte.gz") +
                     " holds 4"),
            std::string::npos)
      << msg;
}

TEST(MnistLikeTest, LabelOutOfRange) {
  TempDir dir;
  write_split(dir, true, idx_bytes(0x08, {3, 1, 1}, {1, 2, 3}), idx_bytes(0x08, {3}, {9, 0, 10}));
  const std::string msg = error_of([&] { distop::data::load_mnist_like(dir.str(), true); });
  EXPECT_NE(msg.find("label 10 of example 2 in labels file " +
                     dir.file("train-labels-idx1-ubyte.gz") + " is out of range [0, 9]"),
            std::string::npos)
      << msg;
  EXPECT_EQ(distop::data::load_mnist_like(dir.str(), true, 11).labels,
            (std::vector<std::int32_t>{9, 0, 10}));
  const std::string msg3 = error_of([&] { distop::data::load_mnist_like(dir.str(), true, 3); });
  EXPECT_NE(msg3.find("label 9 of example 0"), std::string::npos) << msg3;
  EXPECT_NE(msg3.find("out of range [0, 2]"), std::string::npos) << msg3;
}

TEST(MnistLikeTest, CollectiveLoadAgreesOnSuccessAndFailure) {
  TempDir dir;
  write_split(dir, false, idx_bytes(0x08, {2, 2, 1}, {0, 51, 102, 255}),
              idx_bytes(0x08, {2}, {8, 1}));
  for (MPI_Comm comm : {MPI_COMM_WORLD, MPI_COMM_SELF, MPI_COMM_NULL}) {
    const Dataset ds = distop::data::load_mnist_like_collective(comm, dir.str(), false);
    EXPECT_EQ(ds.size, 2);
    EXPECT_EQ(ds.images, (std::vector<float>{0.0f, 0.2f, 0.4f, 1.0f}));
    EXPECT_EQ(ds.labels, (std::vector<std::int32_t>{8, 1}));
  }
  try {
    distop::data::load_mnist_like_collective(MPI_COMM_WORLD, dir.str(), true);
    ADD_FAILURE() << "expected a distop::Error";
  } catch (const Error& e) {
    EXPECT_EQ(e.op(), "load_mnist_like");
    EXPECT_NE(e.detail().find("has neither"), std::string::npos) << e.what();
  }
}

namespace {

// Whether Fashion-MNIST is installed in kFashionMnistDir.
bool fashion_mnist_installed() {
  std::error_code ec;
  return fs::exists(fs::path(distop::data::kFashionMnistDir) / "t10k-images-idx3-ubyte.gz", ec) ||
         fs::exists(fs::path(distop::data::kFashionMnistDir) / "t10k-images-idx3-ubyte", ec);
}

void check_fashion_mnist(const Dataset& ds, std::int64_t size) {
  EXPECT_EQ(ds.size, size);
  EXPECT_EQ(ds.rows, 28);
  EXPECT_EQ(ds.cols, 28);
  ASSERT_EQ(ds.images.size(), static_cast<std::size_t>(size * 28 * 28));
  ASSERT_EQ(ds.labels.size(), static_cast<std::size_t>(size));
  // Fashion-MNIST is balanced: a tenth of each split in each class.
  std::array<std::int64_t, 10> counts{};
  for (std::int32_t label : ds.labels) {
    ASSERT_GE(label, 0);
    ASSERT_LE(label, 9);
    ++counts[static_cast<std::size_t>(label)];
  }
  for (std::int64_t c : counts) EXPECT_EQ(c, size / 10);
  float lo = 1.0f, hi = 0.0f;
  double sum = 0.0;
  for (float v : ds.images) {
    lo = std::min(lo, v);
    hi = std::max(hi, v);
    sum += v;
  }
  EXPECT_EQ(lo, 0.0f);
  EXPECT_EQ(hi, 1.0f);
  // The mean pixel of Fashion-MNIST is about 0.286.
  EXPECT_NEAR(sum / static_cast<double>(ds.images.size()), 0.286, 0.01);
}

}  // namespace

TEST(MnistLikeTest, RealFashionMnistTestSet) {
  if (!fashion_mnist_installed())
    GTEST_SKIP() << "Fashion-MNIST is not installed in " << distop::data::kFashionMnistDir;
  check_fashion_mnist(distop::data::load_mnist_like(distop::data::kFashionMnistDir, false), 10000);
}

TEST(MnistLikeTest, RealFashionMnistTrainingSetCollective) {
  if (!fashion_mnist_installed())
    GTEST_SKIP() << "Fashion-MNIST is not installed in " << distop::data::kFashionMnistDir;
  check_fashion_mnist(distop::data::load_mnist_like_collective(
                          MPI_COMM_WORLD, distop::data::kFashionMnistDir, true),
                      60000);
}
