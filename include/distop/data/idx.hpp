#pragma once
// IDX files (the MNIST / Fashion-MNIST format) and the loader of an MNIST-like data set.
//
// An IDX file is: two zero bytes, a type code byte (0x08: unsigned byte, the only one supported
// here), a dimension count byte, one big-endian uint32 extent per dimension, then the elements in
// row-major order. MNIST images are magic 0x00000803 ([count, rows, cols]) and labels 0x00000801
// ([count]). Files may be gzip-compressed; they are read through zlib, which reads uncompressed
// files transparently, so the name's suffix does not matter to read_idx.

#include <mpi.h>

#include <cstdint>
#include <string>
#include <vector>

namespace distop::data {

// Where the Debian package dataset-fashion-mnist installs {train,t10k}-{images-idx3,labels-idx1}-
// ubyte.gz.
inline constexpr const char* kFashionMnistDir = "/usr/share/datasets/fashion-mnist";

// The contents of an IDX file of unsigned bytes.
struct IdxArray {
  std::vector<std::int64_t> shape;
  std::vector<std::uint8_t> data;  // row-major, the product of `shape` elements

  // The product of the extents (1 for no dimension); the largest int64 where that overflows, -1
  // for a negative extent.
  std::int64_t numel() const noexcept;
};

// Reads an IDX file of unsigned bytes, gzip-compressed or not. Throws distop::Error (op
// "read_idx") naming the file and what was expected against what was found when the file is
// missing or unreadable, the header is truncated, the magic is wrong (nonzero leading bytes, a type
// code other than 0x08), or the data is shorter or longer than the extents say.
IdxArray read_idx(const std::string& path);

// Writes `array` as an IDX file of unsigned bytes, gzip-compressed when `compress` (through zlib;
// the file name is used as given). array.data.size() must equal array.numel() and each extent must
// fit in a uint32. Throws distop::Error (op "write_idx") on failure.
void write_idx(const std::string& path, const IdxArray& array, bool compress);

// An image data set in memory: MNIST-like (one channel) or CIFAR-10 (three, data/cifar.hpp).
struct Dataset {
  std::int64_t size = 0;      // number of examples
  std::int64_t channels = 1;  // colour channels per image (1 for MNIST-like data sets)
  std::int64_t rows = 0;
  std::int64_t cols = 0;
  // byte / 255, row-major [size, channels, rows, cols]: each image channel-major, as a
  // [channels, rows, cols] tensor (NCHW).
  std::vector<float> images;
  std::vector<std::int32_t> labels;  // [size], each in [0, num_classes)

  // The values of one image: channels * rows * cols (rows * cols pixels for one channel).
  std::int64_t pixels() const noexcept { return channels * rows * cols; }
  // Example i's pixels() values.
  const float* image(std::int64_t i) const noexcept {
    return images.data() + static_cast<std::size_t>(i * pixels());
  }
};

// The path load_mnist_like reads for one of the four files: dir/<stem>.gz if it exists, else
// dir/<stem>, where stem is {train,t10k}-{images-idx3,labels-idx1}-ubyte. Throws distop::Error (op
// "load_mnist_like") naming both candidates when neither exists.
std::string mnist_like_path(const std::string& dir, bool train, bool images);

// Loads the training (train) or test (!train) split of an MNIST-like data set from `dir` (see
// mnist_like_path). Checks, beyond read_idx's checks, that the images file has 3 dimensions
// (magic 0x00000803) and the labels file 1 (0x00000801), that both hold the same number of
// examples, and that every label lies in [0, num_classes). Throws distop::Error (op
// "load_mnist_like") naming the file and the problem.
Dataset load_mnist_like(const std::string& dir, bool train, int num_classes = 10);

// load_mnist_like on every rank of `comm` (collective). A failure on any rank, or ranks whose
// loaded data sets differ (in shape or in content, as by a checksum), makes every rank throw the
// same distop::Error (op "load_mnist_like"), with the message of the lowest failing rank; no rank
// is left waiting. With MPI_COMM_NULL it is load_mnist_like.
Dataset load_mnist_like_collective(MPI_Comm comm, const std::string& dir, bool train,
                                   int num_classes = 10);

}  // namespace distop::data
