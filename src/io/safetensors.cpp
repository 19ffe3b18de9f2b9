#include "distop/io/safetensors.hpp"

#include <fcntl.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <tuple>
#include <type_traits>
#include <utility>

#include "distop/core/error.hpp"

namespace distop::io {

// The format is little-endian; on such a host, memory is already in the file's byte order.
static_assert(std::endian::native == std::endian::little,
              "distop's safetensors I/O assumes a little-endian host");

namespace {

using nlohmann::json;

constexpr const char* kOp = "safetensors";
constexpr const char* kWriteOp = "write_safetensors";
constexpr const char* kMetadataKey = "__metadata__";

struct DtypeInfo {
  const char* name;
  std::size_t size;
};
constexpr std::array<DtypeInfo, 16> kDtypes{{{"BOOL", 1},
                                             {"U8", 1},
                                             {"I8", 1},
                                             {"F8_E5M2", 1},
                                             {"F8_E4M3", 1},
                                             {"F8_E8M0", 1},
                                             {"I16", 2},
                                             {"U16", 2},
                                             {"F16", 2},
                                             {"BF16", 2},
                                             {"I32", 4},
                                             {"U32", 4},
                                             {"F32", 4},
                                             {"F64", 8},
                                             {"I64", 8},
                                             {"U64", 8}}};

// 0 for a name that is not a dtype of the format.
std::size_t find_dtype_size(const std::string& dtype) noexcept {
  for (const DtypeInfo& d : kDtypes)
    if (dtype == d.name) return d.size;
  return 0;
}

// a * b, or nullopt-like false when it would exceed 2^62 (far beyond any file).
bool checked_mul(std::uint64_t a, std::uint64_t b, std::uint64_t& out) noexcept {
  constexpr std::uint64_t kLimit = std::uint64_t{1} << 62;
  if (a != 0 && b > kLimit / a) return false;
  out = a * b;
  return true;
}

// The byte count of a tensor of `shape` and element size `element`, or false on overflow.
bool byte_count(const Shape& shape, std::size_t element, std::uint64_t& out) noexcept {
  std::uint64_t n = element;
  for (std::int64_t e : shape)
    if (e < 0 || !checked_mul(n, static_cast<std::uint64_t>(e), n)) return false;
  out = n;
  return true;
}

std::string in_quotes(const std::string& name) { return "'" + name + "'"; }

// Owns a POSIX file descriptor.
class Fd {
 public:
  explicit Fd(int fd) noexcept : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const noexcept { return fd_; }
  // Closes now, returning close()'s result: for a written file, a late write error shows here.
  int close() noexcept {
    const int rc = ::close(fd_);
    fd_ = -1;
    return rc;
  }

 private:
  int fd_;
};

void write_all(int fd, const void* data, std::uint64_t n, const std::string& path) {
  const auto* p = static_cast<const char*>(data);
  while (n > 0) {
    const std::size_t chunk = static_cast<std::size_t>(std::min<std::uint64_t>(n, 1u << 30));
    const ssize_t put = ::write(fd, p, chunk);
    if (put < 0 && errno == EINTR) continue;
    DISTOP_CHECK(put > 0, kWriteOp, "cannot write ", path, ": ", std::strerror(errno));
    p += put;
    n -= static_cast<std::uint64_t>(put);
  }
}

// Flushes a directory entry change (the rename) to disk; best effort, as some file systems refuse
// fsync on directories.
void sync_directory(const std::string& path) {
  std::filesystem::path dir = std::filesystem::path(path).parent_path();
  if (dir.empty()) dir = ".";
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

// Whether `j` nests no deeper than `levels` (recursing no further than that).
bool nests_within(const json& j, int levels) {
  if (!j.is_structured()) return true;
  if (levels == 0) return false;
  for (const json& e : j)
    if (!nests_within(e, levels - 1)) return false;
  return true;
}

// A header value as an error message shows it: its JSON text, cut at 200 characters, or for a
// value nested deeper than a few levels (whose text a hostile file could make deep enough to
// exhaust the stack) its type alone.
std::string brief(const json& j) {
  if (!nests_within(j, 4)) return std::string("a JSON ") + j.type_name() + " nested deeper than 4";
  std::string text = j.dump();
  if (text.size() > 200) text = text.substr(0, 200) + "...";
  return text;
}

const json& require(const json& entry, const char* key, const std::string& name,
                    const std::string& path) {
  const auto it = entry.find(key);
  DISTOP_CHECK(it != entry.end(), kOp, "tensor ", in_quotes(name), " in file ", path, " has no \"",
               key, "\" in its header entry ", brief(entry));
  return *it;
}

}  // namespace

std::size_t dtype_size(const std::string& dtype) {
  const std::size_t size = find_dtype_size(dtype);
  DISTOP_CHECK(size != 0, kOp, "unknown safetensors dtype ", in_quotes(dtype),
               "; expected one of BOOL, U8, I8, F8_E5M2, F8_E4M3, F8_E8M0, I16, U16, F16, BF16, "
               "I32, U32, F32, F64, I64, U64");
  return size;
}

void write_safetensors(const std::string& path, const std::vector<TensorEntry>& entries,
                       const Metadata& metadata) {
  std::set<std::string> names;
  std::vector<std::pair<const TensorEntry*, std::uint64_t>> order;  // entry, byte count
  for (const TensorEntry& e : entries) {
    DISTOP_CHECK(e.name != kMetadataKey, kWriteOp, "cannot write ", path, ": the tensor name ",
                 in_quotes(e.name), " is reserved for the file's metadata");
    DISTOP_CHECK(names.insert(e.name).second, kWriteOp, "cannot write ", path,
                 ": two tensors are named ", in_quotes(e.name));
    const std::size_t element = find_dtype_size(e.dtype);
    DISTOP_CHECK(element != 0, kWriteOp, "cannot write ", path, ": tensor ", in_quotes(e.name),
                 " has unknown dtype ", in_quotes(e.dtype));
    std::uint64_t bytes = 0;
    DISTOP_CHECK(byte_count(e.shape, element, bytes), kWriteOp, "cannot write ", path, ": tensor ",
                 in_quotes(e.name), " has shape ", e.shape.str(),
                 ", expected non-negative extents of a size that fits in memory");
    DISTOP_CHECK(bytes == 0 || e.data != nullptr, kWriteOp, "cannot write ", path, ": tensor ",
                 in_quotes(e.name), " of shape ", e.shape.str(), " has no data (null pointer)");
    order.emplace_back(&e, bytes);
  }
  std::sort(order.begin(), order.end(), [](const auto& a, const auto& b) {
    return std::forward_as_tuple(find_dtype_size(b.first->dtype), a.first->name) <
           std::forward_as_tuple(find_dtype_size(a.first->dtype), b.first->name);
  });

  json header = json::object();
  std::uint64_t offset = 0;
  for (const auto& [e, bytes] : order) {
    header[e->name] = {{"dtype", e->dtype},
                       {"shape", e->shape.extents()},
                       {"data_offsets", json::array({offset, offset + bytes})}};
    offset += bytes;
  }
  if (!metadata.empty()) header[kMetadataKey] = metadata;
  std::string text;
  try {
    text = header.dump();
  } catch (const json::exception& ex) {
    throw Error(kWriteOp, detail::concat("cannot write ", path,
                                         ": cannot encode the header (names and metadata must "
                                         "be UTF-8): ",
                                         ex.what()));
  }
  text.append((8 - text.size() % 8) % 8, ' ');
  std::array<unsigned char, 8> length{};
  for (std::size_t i = 0; i < length.size(); ++i)
    length[i] = static_cast<unsigned char>((std::uint64_t{text.size()} >> (8 * i)) & 0xff);

  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  Fd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666));
  DISTOP_CHECK(fd.get() >= 0, kWriteOp, "cannot create ", tmp, " (to be renamed to ", path,
               "): ", std::strerror(errno));
  try {
    write_all(fd.get(), length.data(), length.size(), tmp);
    write_all(fd.get(), text.data(), text.size(), tmp);
    for (const auto& [e, bytes] : order) write_all(fd.get(), e->data, bytes, tmp);
    DISTOP_CHECK(::fsync(fd.get()) == 0, kWriteOp, "cannot flush ", tmp,
                 " to disk: ", std::strerror(errno));
    DISTOP_CHECK(fd.close() == 0, kWriteOp, "cannot close ", tmp, ": ", std::strerror(errno));
    DISTOP_CHECK(::rename(tmp.c_str(), path.c_str()) == 0, kWriteOp, "cannot rename ", tmp, " to ",
                 path, ": ", std::strerror(errno));
  } catch (...) {
    ::unlink(tmp.c_str());
    throw;
  }
  sync_directory(path);
}

std::string checksum_key(const std::string& name) { return "distop.crc32." + name; }

std::uint32_t crc32_of(const void* data, std::size_t n) {
  uLong crc = ::crc32(0L, Z_NULL, 0);
  const auto* p = static_cast<const Bytef*>(data);
  while (n > 0) {  // zlib's length is a uInt
    const auto chunk = static_cast<uInt>(std::min<std::size_t>(n, 1u << 30));
    crc = ::crc32(crc, p, chunk);
    p += chunk;
    n -= chunk;
  }
  return static_cast<std::uint32_t>(crc);
}

namespace {
std::string hex32(std::uint32_t v) {
  char buf[9];
  std::snprintf(buf, sizeof buf, "%08x", static_cast<unsigned>(v));
  return buf;
}
}  // namespace

namespace {
// The CRC-32 of every metadata entry but the metadata's own checksum, in key order, each as its
// key and value each followed by a NUL byte.
std::string metadata_checksum(const Metadata& metadata) {
  const std::string own = checksum_key(kMetadataKey);
  std::string text;
  for (const auto& [key, value] : metadata) {
    if (key == own) continue;
    text += key;
    text += '\0';
    text += value;
    text += '\0';
  }
  return hex32(crc32_of(text.data(), text.size()));
}
}  // namespace

void add_checksums(const std::vector<TensorEntry>& entries, Metadata& metadata) {
  for (const TensorEntry& e : entries) {
    const std::size_t element = find_dtype_size(e.dtype);
    DISTOP_CHECK(element != 0, kWriteOp, "tensor ", in_quotes(e.name), " has unknown dtype ",
                 in_quotes(e.dtype));
    std::uint64_t bytes = 0;
    DISTOP_CHECK(byte_count(e.shape, element, bytes), kWriteOp, "tensor ", in_quotes(e.name),
                 " has shape ", e.shape.str(), ", which is negative or too large");
    metadata[checksum_key(e.name)] = hex32(
        bytes == 0 ? crc32_of(nullptr, 0) : crc32_of(e.data, static_cast<std::size_t>(bytes)));
  }
  // Last: the metadata's own checksum, over the others too.
  metadata[checksum_key(kMetadataKey)] = metadata_checksum(metadata);
}

template <class T, class Space>
requires std::same_as<T, float> || std::same_as<T, double>
void write_safetensors(const std::string& path,
                       const std::map<std::string, Tensor<T, Space>>& tensors,
                       const Metadata& metadata) {
  std::vector<HostTensor<T>> host;  // host copies of tensors in another memory space
  host.reserve(tensors.size());
  std::vector<TensorEntry> entries;
  entries.reserve(tensors.size());
  for (const auto& [name, tensor] : tensors) {
    if constexpr (std::is_same_v<Space, HostMemSpace>) {
      entries.emplace_back(name, tensor.shape(), tensor.data());
    } else {
      host.push_back(to_host(tensor));
      entries.emplace_back(name, tensor.shape(), host.back().data());
    }
  }
  write_safetensors(path, entries, metadata);
}

template void write_safetensors<float, MemSpace>(const std::string&,
                                                 const std::map<std::string, Tensor<float>>&,
                                                 const Metadata&);
template void write_safetensors<double, MemSpace>(const std::string&,
                                                  const std::map<std::string, Tensor<double>>&,
                                                  const Metadata&);
#if DISTOP_DEVICE_MEMORY_SPACE
template void write_safetensors<float, HostMemSpace>(
    const std::string&, const std::map<std::string, HostTensor<float>>&, const Metadata&);
template void write_safetensors<double, HostMemSpace>(
    const std::string&, const std::map<std::string, HostTensor<double>>&, const Metadata&);
#endif

SafetensorsFile SafetensorsFile::open(const std::string& path) {
  std::error_code ec;
  const std::uint64_t size = std::filesystem::file_size(path, ec);
  DISTOP_CHECK(!ec, kOp, "cannot open safetensors file ", path, ": ", ec.message());
  std::ifstream in(path, std::ios::binary);
  DISTOP_CHECK(in.good(), kOp, "cannot open safetensors file ", path, ": ", std::strerror(errno));
  DISTOP_CHECK(size >= 8, kOp, "file ", path, " is ", size,
               " bytes long, shorter than the 8-byte header length that starts a safetensors "
               "file");

  std::array<unsigned char, 8> length{};
  in.read(reinterpret_cast<char*>(length.data()), length.size());
  DISTOP_CHECK(in.gcount() == 8, kOp, "cannot read the header length of file ", path);
  std::uint64_t header_size = 0;
  for (std::size_t i = 0; i < length.size(); ++i)
    header_size |= std::uint64_t{length[i]} << (8 * i);
  DISTOP_CHECK(header_size <= size - 8, kOp, "file ", path, " declares a header of ", header_size,
               " bytes, but only ", size - 8, " bytes follow the header length");

  std::string text(static_cast<std::size_t>(header_size), '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  DISTOP_CHECK(in.gcount() == static_cast<std::streamsize>(text.size()), kOp, "cannot read the ",
               header_size, "-byte header of file ", path);
  json header;
  try {
    header = json::parse(text);
  } catch (const json::exception& ex) {
    throw Error(kOp,
                detail::concat("the header of file ", path, " is not valid JSON: ", ex.what()));
  }
  DISTOP_CHECK(header.is_object(), kOp, "the header of file ", path, " is a JSON ",
               header.type_name(), ", expected an object");

  SafetensorsFile file;
  file.path_ = path;
  file.data_start_ = 8 + header_size;
  const std::uint64_t buffer = size - file.data_start_;
  for (const auto& [key, value] : header.items()) {
    if (key == kMetadataKey) {
      DISTOP_CHECK(value.is_object(), kOp, "\"", kMetadataKey, "\" in file ", path, " is a JSON ",
                   value.type_name(), ", expected an object of strings");
      for (const auto& [mkey, mvalue] : value.items()) {
        DISTOP_CHECK(mvalue.is_string(), kOp, "metadata ", in_quotes(mkey), " in file ", path,
                     " is a JSON ", mvalue.type_name(), ", expected a string");
        file.metadata_[mkey] = mvalue.get<std::string>();
      }
      // A file distop wrote carries its metadata's checksum: a changed setting, count or number
      // (a checkpoint's learning rate, say) is found before anything reads it.
      const auto sum = file.metadata_.find(checksum_key(kMetadataKey));
      if (sum != file.metadata_.end()) {
        const std::string found = metadata_checksum(file.metadata_);
        DISTOP_CHECK(found == sum->second, kOp, "the metadata of file ", path,
                     " is corrupt: the CRC-32 of its entries is ", found, ", its metadata ",
                     in_quotes(sum->first), " says ", sum->second);
      }
      continue;
    }
    DISTOP_CHECK(value.is_object(), kOp, "tensor ", in_quotes(key), " in file ", path,
                 " has a header entry that is a JSON ", value.type_name(),
                 ", expected an object with dtype, shape and data_offsets");
    Entry entry;
    const json& dtype = require(value, "dtype", key, path);
    DISTOP_CHECK(dtype.is_string(), kOp, "tensor ", in_quotes(key), " in file ", path,
                 " has dtype ", brief(dtype), ", expected a string");
    entry.dtype = dtype.get<std::string>();
    const std::size_t element = find_dtype_size(entry.dtype);
    DISTOP_CHECK(element != 0, kOp, "tensor ", in_quotes(key), " in file ", path,
                 " has unknown dtype ", in_quotes(entry.dtype));

    const json& shape = require(value, "shape", key, path);
    bool shape_ok = shape.is_array();
    std::vector<std::int64_t> extents;
    if (shape_ok) {
      for (const json& e : shape) {
        if (!e.is_number_unsigned() ||
            e.get<std::uint64_t>() >
                static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
          shape_ok = false;
        else
          extents.push_back(static_cast<std::int64_t>(e.get<std::uint64_t>()));
      }
    }
    DISTOP_CHECK(shape_ok, kOp, "tensor ", in_quotes(key), " in file ", path, " has shape ",
                 brief(shape), ", expected an array of non-negative integers");
    entry.shape = Shape(std::move(extents));

    const json& offsets = require(value, "data_offsets", key, path);
    DISTOP_CHECK(offsets.is_array() && offsets.size() == 2 && offsets[0].is_number_unsigned() &&
                     offsets[1].is_number_unsigned(),
                 kOp, "tensor ", in_quotes(key), " in file ", path, " has data_offsets ",
                 brief(offsets), ", expected [begin, end] of non-negative integers");
    entry.begin = offsets[0].get<std::uint64_t>();
    entry.end = offsets[1].get<std::uint64_t>();
    DISTOP_CHECK(entry.begin <= entry.end && entry.end <= buffer, kOp, "tensor ", in_quotes(key),
                 " in file ", path, " has data_offsets [", entry.begin, ", ", entry.end,
                 "], outside the data buffer of ", buffer, " bytes");
    std::uint64_t bytes = 0;
    DISTOP_CHECK(byte_count(entry.shape, element, bytes) && bytes == entry.end - entry.begin, kOp,
                 "tensor ", in_quotes(key), " in file ", path, " has data_offsets [", entry.begin,
                 ", ", entry.end, "] (", entry.end - entry.begin, " bytes), but shape ",
                 entry.shape.str(), " of dtype ", entry.dtype, " needs ", bytes, " bytes");
    file.tensors_.emplace(key, std::move(entry));
  }

  std::vector<std::pair<const Entry*, const std::string*>> by_offset;
  for (const auto& [name, entry] : file.tensors_) by_offset.emplace_back(&entry, &name);
  std::sort(by_offset.begin(), by_offset.end(), [](const auto& a, const auto& b) {
    return std::tie(a.first->begin, a.first->end) < std::tie(b.first->begin, b.first->end);
  });
  for (std::size_t i = 1; i < by_offset.size(); ++i) {
    const Entry& prev = *by_offset[i - 1].first;
    const Entry& next = *by_offset[i].first;
    DISTOP_CHECK(next.begin >= prev.end, kOp, "tensors ", in_quotes(*by_offset[i - 1].second), " [",
                 prev.begin, ", ", prev.end, "] and ", in_quotes(*by_offset[i].second), " [",
                 next.begin, ", ", next.end, "] overlap in the data buffer of file ", path);
  }
  return file;
}

std::vector<std::string> SafetensorsFile::names() const {
  std::vector<std::string> out;
  out.reserve(tensors_.size());
  for (const auto& [name, entry] : tensors_) out.push_back(name);
  return out;
}

const SafetensorsFile::Entry& SafetensorsFile::entry(const std::string& name) const {
  const auto it = tensors_.find(name);
  DISTOP_CHECK(it != tensors_.end(), kOp, "file ", path_, " has no tensor ", in_quotes(name));
  return it->second;
}

const Shape& SafetensorsFile::shape(const std::string& name) const { return entry(name).shape; }

const std::string& SafetensorsFile::dtype(const std::string& name) const {
  return entry(name).dtype;
}

void SafetensorsFile::check_shape(const std::string& name, const Shape& expected) const {
  const Shape& found = entry(name).shape;
  DISTOP_CHECK(found == expected, kOp, "tensor ", in_quotes(name), " has shape ", found.str(),
               " in file ", path_, ", expected ", expected.str());
}

std::vector<std::byte> SafetensorsFile::read_bytes(const std::string& name) const {
  const Entry& e = entry(name);
  std::vector<std::byte> bytes(static_cast<std::size_t>(e.end - e.begin));
  if (bytes.empty()) return bytes;
  std::ifstream in(path_, std::ios::binary);
  DISTOP_CHECK(in.good(), kOp, "cannot open file ", path_, " to read tensor ", in_quotes(name),
               ": ", std::strerror(errno));
  in.seekg(static_cast<std::streamoff>(data_start_ + e.begin));
  in.read(reinterpret_cast<char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  DISTOP_CHECK(in.gcount() == static_cast<std::streamsize>(bytes.size()), kOp, "file ", path_,
               " ended early while reading tensor ", in_quotes(name),
               " (has it changed since it was opened?)");
  const auto sum = metadata_.find(checksum_key(name));
  if (sum != metadata_.end()) {
    const std::string found = hex32(crc32_of(bytes.data(), bytes.size()));
    DISTOP_CHECK(found == sum->second, kOp, "tensor ", in_quotes(name), " in file ", path_,
                 " is corrupt: the CRC-32 of its ", bytes.size(), " bytes is ", found,
                 ", its metadata ", in_quotes(sum->first), " says ", sum->second);
  }
  return bytes;
}

template <SafetensorsElement T>
std::vector<T> SafetensorsFile::read(const std::string& name) const {
  const Entry& e = entry(name);
  DISTOP_CHECK(e.dtype == dtype_of<T>(), kOp, "tensor ", in_quotes(name), " has dtype ", e.dtype,
               " in file ", path_, ", expected ", dtype_of<T>(),
               " (read_as converts between dtypes when that is intended)");
  const std::vector<std::byte> bytes = read_bytes(name);
  std::vector<T> values(bytes.size() / sizeof(T));
  if (!bytes.empty()) std::memcpy(values.data(), bytes.data(), bytes.size());
  return values;
}

namespace {
// Whether To can hold v: an integer within To's range; to an integer type, a floating value whose
// truncation toward zero is within it (never NaN or an infinity); F64 to F32, anything but a
// finite value beyond F32's range.
template <class To, class From>
bool holds(From v) {
  if constexpr (std::is_integral_v<To> && std::is_integral_v<From>) {
    return std::in_range<To>(v);
  } else if constexpr (std::is_integral_v<To>) {
    // 2^digits: exact, also where max itself is not (I64).
    constexpr double hi = static_cast<double>(std::numeric_limits<To>::max()) + 1.0;
    constexpr double lo = std::is_signed_v<To> ? -hi : 0.0;
    const double t = std::trunc(static_cast<double>(v));
    return t >= lo && t < hi;  // false for NaN
  } else if constexpr (sizeof(To) < sizeof(From)) {
    return !std::isfinite(v) || std::isfinite(static_cast<To>(v));  // IEEE: overflow is infinite
  } else {
    return true;
  }
}

template <class To, class From>
std::vector<To> convert(const std::vector<From>& from, const std::string& name,
                        const std::string& path) {
  std::vector<To> to(from.size());
  for (std::size_t i = 0; i < from.size(); ++i) {
    DISTOP_CHECK(holds<To>(from[i]), kOp, "tensor ", in_quotes(name), " in file ", path, " holds ",
                 +from[i], " at index ", i, ", which ", dtype_of<To>(),
                 " cannot hold (read_as truncates floating values toward zero; NaN, infinities "
                 "and values out of range are errors)");
    to[i] = static_cast<To>(from[i]);
  }
  return to;
}
}  // namespace

template <SafetensorsElement T>
std::vector<T> SafetensorsFile::read_as(const std::string& name) const {
  const std::string& d = entry(name).dtype;
  if (d == "F32") return convert<T>(read<float>(name), name, path_);
  if (d == "F64") return convert<T>(read<double>(name), name, path_);
  if (d == "I32") return convert<T>(read<std::int32_t>(name), name, path_);
  if (d == "I64") return convert<T>(read<std::int64_t>(name), name, path_);
  if (d == "U8") return convert<T>(read<std::uint8_t>(name), name, path_);
  throw Error(kOp, detail::concat("tensor ", in_quotes(name), " has dtype ", d, " in file ", path_,
                                  ", which cannot be converted to ", dtype_of<T>(),
                                  " (conversions are from F32, F64, I32, I64 and U8)"));
}

template <class T>
HostTensor<T> SafetensorsFile::read_host_tensor(const std::string& name,
                                                const Shape& expected) const {
  check_shape(name, expected);
  const Entry& e = entry(name);
  DISTOP_CHECK(e.dtype == dtype_of<T>(), kOp, "tensor ", in_quotes(name), " has dtype ", e.dtype,
               " in file ", path_, ", expected ", dtype_of<T>(),
               " (read_as converts between dtypes when that is intended)");
  const std::vector<std::byte> bytes = read_bytes(name);
  auto out = HostTensor<T>::uninitialized(expected);
  if (!bytes.empty()) std::memcpy(static_cast<void*>(out.data()), bytes.data(), bytes.size());
  return out;
}

HostTensor<float> SafetensorsFile::read_host_tensor_f32(const std::string& name,
                                                        const Shape& expected) const {
  return read_host_tensor<float>(name, expected);
}

HostTensor<double> SafetensorsFile::read_host_tensor_f64(const std::string& name,
                                                         const Shape& expected) const {
  return read_host_tensor<double>(name, expected);
}

Tensor<float> SafetensorsFile::read_tensor_f32(const std::string& name,
                                               const Shape& expected) const {
  return to_device(read_host_tensor<float>(name, expected));
}

Tensor<double> SafetensorsFile::read_tensor_f64(const std::string& name,
                                                const Shape& expected) const {
  return to_device(read_host_tensor<double>(name, expected));
}

template std::vector<float> SafetensorsFile::read<float>(const std::string&) const;
template std::vector<double> SafetensorsFile::read<double>(const std::string&) const;
template std::vector<std::int32_t> SafetensorsFile::read<std::int32_t>(const std::string&) const;
template std::vector<std::int64_t> SafetensorsFile::read<std::int64_t>(const std::string&) const;
template std::vector<std::uint8_t> SafetensorsFile::read<std::uint8_t>(const std::string&) const;
template std::vector<float> SafetensorsFile::read_as<float>(const std::string&) const;
template std::vector<double> SafetensorsFile::read_as<double>(const std::string&) const;
template std::vector<std::int32_t> SafetensorsFile::read_as<std::int32_t>(const std::string&) const;
template std::vector<std::int64_t> SafetensorsFile::read_as<std::int64_t>(const std::string&) const;
template std::vector<std::uint8_t> SafetensorsFile::read_as<std::uint8_t>(const std::string&) const;

}  // namespace distop::io
