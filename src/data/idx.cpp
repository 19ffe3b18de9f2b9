#include "distop/data/idx.hpp"

#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <sstream>

#include "collective_load.hpp"
#include "distop/core/error.hpp"
#include "files.hpp"

namespace distop::data {

namespace {

constexpr const char* kReadOp = "read_idx";
constexpr const char* kWriteOp = "write_idx";
constexpr const char* kLoadOp = "load_mnist_like";
constexpr int kUnsignedByte = 0x08;
// gzread and gzwrite count in unsigned int; larger transfers go in pieces of this size.
constexpr std::size_t kChunk = std::size_t{1} << 20;

std::string hex32(std::uint32_t v) {
  char text[16];
  std::snprintf(text, sizeof text, "0x%08x", v);
  return text;
}

std::string hex8(int v) {
  char text[8];
  std::snprintf(text, sizeof text, "0x%02x", v);
  return text;
}

const char* type_code_name(int code) {
  switch (code) {
    case 0x08:
      return "unsigned byte";
    case 0x09:
      return "signed byte";
    case 0x0B:
      return "short";
    case 0x0C:
      return "int";
    case 0x0D:
      return "float";
    case 0x0E:
      return "double";
    default:
      return "not an IDX type code";
  }
}

std::string shape_str(const std::vector<std::int64_t>& shape) {
  std::ostringstream os;
  os << '[';
  for (std::size_t i = 0; i < shape.size(); ++i) os << (i ? ", " : "") << shape[i];
  os << ']';
  return os.str();
}

// Owns a zlib file handle.
class GzFile {
 public:
  GzFile(const std::string& path, const char* mode) : file_(gzopen(path.c_str(), mode)) {}
  // Takes over `fd` (closed here if zlib cannot take it).
  GzFile(int fd, const char* mode) : file_(gzdopen(fd, mode)) {
    if (file_ == nullptr) ::close(fd);
  }
  ~GzFile() {
    if (file_ != nullptr) gzclose(file_);
  }
  GzFile(const GzFile&) = delete;
  GzFile& operator=(const GzFile&) = delete;

  gzFile get() const noexcept { return file_; }
  // Closes the file, returning zlib's status (Z_OK on success); for a file being written this is
  // where the last compressed block is flushed.
  int close() noexcept {
    const int rc = gzclose(file_);
    file_ = nullptr;
    return rc;
  }

 private:
  gzFile file_;
};

// zlib's description of the file's last error, without the "<path>: " that zlib puts before it
// (the callers' messages name the file already).
std::string gz_error_message(gzFile file, const std::string& path) {
  int errnum = Z_OK;
  const char* message = gzerror(file, &errnum);
  if (errnum == Z_ERRNO) return std::strerror(errno);
  std::string text = message != nullptr ? message : "unknown zlib error";
  if (text.rfind(path + ": ", 0) == 0) text.erase(0, path.size() + 2);
  if (errnum == Z_DATA_ERROR || errnum == Z_BUF_ERROR) text += " (corrupt or truncated gzip data)";
  return text;
}

// Reads up to `n` bytes into `out`; fewer only at the end of the (decompressed) data. Throws on a
// read or decompression error, such as a gzip stream cut short.
std::size_t read_some(gzFile file, std::uint8_t* out, std::size_t n, const std::string& path,
                      const char* what) {
  std::size_t done = 0;
  while (done < n) {
    const auto want = static_cast<unsigned>(std::min(n - done, kChunk));
    const int got = gzread(file, out + done, want);
    DISTOP_CHECK(got >= 0, kReadOp, "cannot read ", what, " of file ", path, ": ",
                 gz_error_message(file, path));
    if (got == 0) break;
    done += static_cast<std::size_t>(got);
  }
  // zlib reports a gzip stream that ends without its trailer only once the data has run out.
  if (done < n) {
    int errnum = Z_OK;
    gzerror(file, &errnum);
    DISTOP_CHECK(errnum == Z_OK, kReadOp, "cannot read ", what, " of file ", path, ": ",
                 gz_error_message(file, path));
  }
  return done;
}

std::uint32_t big_endian32(const std::uint8_t* p) {
  return (std::uint32_t{p[0]} << 24) | (std::uint32_t{p[1]} << 16) | (std::uint32_t{p[2]} << 8) |
         std::uint32_t{p[3]};
}

std::string stem(bool train, bool images) {
  return std::string(train ? "train" : "t10k") +
         (images ? "-images-idx3-ubyte" : "-labels-idx1-ubyte");
}

std::uint32_t magic_for(std::size_t ndim) {
  return (std::uint32_t{kUnsignedByte} << 8) | static_cast<std::uint32_t>(ndim);
}

}  // namespace

std::int64_t IdxArray::numel() const noexcept {
  if (std::find(shape.begin(), shape.end(), 0) != shape.end()) return 0;
  constexpr std::int64_t kMax = std::numeric_limits<std::int64_t>::max();
  std::int64_t n = 1;
  for (std::int64_t e : shape) {
    if (e < 0) return -1;
    if (n > kMax / e) return kMax;
    n *= e;
  }
  return n;
}

IdxArray read_idx(const std::string& path) {
  GzFile file(detail::open_for_reading(kReadOp, path, "an IDX file"), "rb");
  DISTOP_CHECK(file.get() != nullptr, kReadOp, "cannot read file ", path, ": ",
               std::strerror(errno));
  gzbuffer(file.get(), 1u << 17);

  std::array<std::uint8_t, 4> magic{};
  std::size_t got = read_some(file.get(), magic.data(), magic.size(), path, "the header");
  DISTOP_CHECK(got == magic.size(), kReadOp, "truncated header in file ", path,
               ": expected a 4-byte magic number, found ", got, " bytes");
  const std::uint32_t magic_value = big_endian32(magic.data());
  DISTOP_CHECK(magic[0] == 0 && magic[1] == 0, kReadOp, "wrong magic number ", hex32(magic_value),
               " in file ", path,
               ": expected two zero bytes, a type code and a dimension count (such as 0x00000803 "
               "for images or 0x00000801 for labels); not an IDX file");
  DISTOP_CHECK(magic[2] == kUnsignedByte, kReadOp, "file ", path, " has element type code ",
               hex8(magic[2]), " (", type_code_name(magic[2]), ", magic ", hex32(magic_value),
               "), expected 0x08 (unsigned byte); only unsigned-byte IDX files are supported");
  const int ndim = magic[3];
  DISTOP_CHECK(ndim >= 1, kReadOp, "file ", path, " has dimension count 0 (magic ",
               hex32(magic_value), "), expected at least 1");

  std::vector<std::uint8_t> extents(static_cast<std::size_t>(4 * ndim));
  got = read_some(file.get(), extents.data(), extents.size(), path, "the header");
  DISTOP_CHECK(got == extents.size(), kReadOp, "truncated header in file ", path, ": magic ",
               hex32(magic_value), " promises ", ndim, " big-endian uint32 extents (",
               extents.size(), " bytes), found ", got, " bytes");

  IdxArray array;
  array.shape.resize(static_cast<std::size_t>(ndim));
  // Bytes, not elements, bound what a vector can hold; 2^62 keeps the product from overflowing.
  constexpr std::int64_t kMaxElements = std::int64_t{1} << 62;
  std::int64_t expected = 1;
  bool overflow = false;
  for (int d = 0; d < ndim; ++d) {
    const std::int64_t e = big_endian32(extents.data() + 4 * d);
    array.shape[static_cast<std::size_t>(d)] = e;
    if (e != 0 && expected > kMaxElements / e) overflow = true;
    if (!overflow) expected *= e;
  }
  // A zero extent makes the product 0 however large the others are.
  if (std::find(array.shape.begin(), array.shape.end(), 0) != array.shape.end()) {
    expected = 0;
    overflow = false;
  }
  DISTOP_CHECK(!overflow, kReadOp, "file ", path, " has shape ", shape_str(array.shape),
               ", more than 2^62 elements; the header is corrupt");

  // Grown as data arrives rather than sized from the header up front, so a corrupted header that
  // promises terabytes fails with "data shorter than" instead of an allocation failure.
  const auto want = static_cast<std::size_t>(expected);
  array.data.reserve(std::min(want, std::size_t{64} << 20));
  while (array.data.size() < want) {
    const std::size_t old = array.data.size();
    const std::size_t n = std::min(want - old, kChunk);
    array.data.resize(old + n);
    const std::size_t read = read_some(file.get(), array.data.data() + old, n, path, "the data");
    if (read < n) {
      array.data.resize(old + read);
      break;
    }
  }
  DISTOP_CHECK(array.data.size() == want, kReadOp, "data in file ", path,
               " is shorter than its header says: shape ", shape_str(array.shape), " needs ",
               expected, " bytes of data, found ", array.data.size());

  std::size_t extra = 0;
  std::vector<std::uint8_t> rest(kChunk);
  for (;;) {
    const std::size_t read = read_some(file.get(), rest.data(), rest.size(), path, "the data");
    extra += read;
    if (read < rest.size()) break;
  }
  DISTOP_CHECK(extra == 0, kReadOp, "data in file ", path,
               " is longer than its header says: shape ", shape_str(array.shape), " needs ",
               expected, " bytes of data, found ", expected + static_cast<std::int64_t>(extra));
  return array;
}

void write_idx(const std::string& path, const IdxArray& array, bool compress) {
  const std::size_t ndim = array.shape.size();
  DISTOP_CHECK(ndim >= 1 && ndim <= 255, kWriteOp, "cannot write ", path, ": an IDX file has 1 to ",
               "255 dimensions, got ", ndim);
  for (std::int64_t e : array.shape)
    DISTOP_CHECK(e >= 0 && e <= std::numeric_limits<std::uint32_t>::max(), kWriteOp,
                 "cannot write ", path, ": extent ", e, " of shape ", shape_str(array.shape),
                 " does not fit in a uint32");
  DISTOP_CHECK(static_cast<std::int64_t>(array.data.size()) == array.numel(), kWriteOp,
               "cannot write ", path, ": shape ", shape_str(array.shape), " has ", array.numel(),
               " elements, data has ", array.data.size());

  std::vector<std::uint8_t> header{0, 0, kUnsignedByte, static_cast<std::uint8_t>(ndim)};
  for (std::int64_t e : array.shape)
    for (int shift = 24; shift >= 0; shift -= 8)
      header.push_back(static_cast<std::uint8_t>((static_cast<std::uint64_t>(e) >> shift) & 0xff));

  // "T" asks zlib for a plain (transparent) write, so both cases share one code path.
  GzFile file(path, compress ? "wb" : "wbT");
  DISTOP_CHECK(file.get() != nullptr, kWriteOp, "cannot create file ", path, ": ",
               std::strerror(errno));
  auto write = [&](const std::uint8_t* p, std::size_t n) {
    for (std::size_t done = 0; done < n;) {
      const auto len = static_cast<unsigned>(std::min(n - done, kChunk));
      const int put = gzwrite(file.get(), p + done, len);
      DISTOP_CHECK(put > 0, kWriteOp, "cannot write file ", path, ": ",
                   gz_error_message(file.get(), path));
      done += static_cast<std::size_t>(put);
    }
  };
  write(header.data(), header.size());
  write(array.data.data(), array.data.size());
  const int rc = file.close();
  DISTOP_CHECK(rc == Z_OK, kWriteOp, "cannot finish writing file ", path, " (zlib status ", rc,
               ")");
}

std::string mnist_like_path(const std::string& dir, bool train, bool images) {
  const std::filesystem::path plain = std::filesystem::path(dir) / stem(train, images);
  const std::filesystem::path gz = std::filesystem::path(dir) / (stem(train, images) + ".gz");
  // A file that is there but cannot be looked up is an error saying why (detail::exists).
  if (detail::exists(kLoadOp, gz.string())) return gz.string();
  if (detail::exists(kLoadOp, plain.string())) return plain.string();
  throw Error(kLoadOp, distop::detail::concat("data set directory ", dir, " has neither ",
                                              gz.string(), " nor ", plain.string(),
                                              ": the file does not exist in either form"));
}

Dataset load_mnist_like(const std::string& dir, bool train, int num_classes) {
  DISTOP_CHECK(num_classes >= 1, kLoadOp, "num_classes must be at least 1, got ", num_classes);
  const std::string images_path = mnist_like_path(dir, train, true);
  const std::string labels_path = mnist_like_path(dir, train, false);

  // read_idx's errors already name the file; they are re-raised under this loader's name.
  IdxArray images, labels;
  try {
    images = read_idx(images_path);
    labels = read_idx(labels_path);
  } catch (const Error& e) {
    throw Error(kLoadOp, e.detail());
  }
  DISTOP_CHECK(images.shape.size() == 3, kLoadOp, "images file ", images_path, " has ",
               images.shape.size(), " dimensions (magic ", hex32(magic_for(images.shape.size())),
               ", shape ", shape_str(images.shape), "), expected 3 (magic ", hex32(magic_for(3)),
               ", [count, rows, cols])");
  DISTOP_CHECK(labels.shape.size() == 1, kLoadOp, "labels file ", labels_path, " has ",
               labels.shape.size(), " dimensions (magic ", hex32(magic_for(labels.shape.size())),
               ", shape ", shape_str(labels.shape), "), expected 1 (magic ", hex32(magic_for(1)),
               ", [count])");
  DISTOP_CHECK(images.shape[0] == labels.shape[0], kLoadOp, "images file ", images_path, " holds ",
               images.shape[0], " examples but labels file ", labels_path, " holds ",
               labels.shape[0], "; expected the same count");

  Dataset ds;
  ds.size = images.shape[0];
  ds.rows = images.shape[1];
  ds.cols = images.shape[2];
  ds.labels.resize(labels.data.size());
  for (std::size_t i = 0; i < labels.data.size(); ++i) {
    const int label = labels.data[i];
    DISTOP_CHECK(label < num_classes, kLoadOp, "label ", label, " of example ", i,
                 " in labels file ", labels_path, " is out of range [0, ", num_classes - 1, "]");
    ds.labels[i] = label;
  }
  ds.images.resize(images.data.size());
  std::transform(images.data.begin(), images.data.end(), ds.images.begin(),
                 [](std::uint8_t v) { return static_cast<float>(v) / 255.0f; });
  return ds;
}

Dataset load_mnist_like_collective(MPI_Comm comm, const std::string& dir, bool train,
                                   int num_classes) {
  return detail::load_collective(comm, kLoadOp, dir,
                                 [&] { return load_mnist_like(dir, train, num_classes); });
}

}  // namespace distop::data
