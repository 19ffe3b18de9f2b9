#pragma once
// Reading and writing the safetensors format, as PyTorch's safetensors.torch.load_file and
// save_file read and write it:
//
//   8 bytes   N, the header length, a little-endian uint64
//   N bytes   a JSON object {"<name>": {"dtype": "F32", "shape": [..], "data_offsets": [b, e]},
//   ...,
//             optionally "__metadata__": {"<key>": "<string>", ...}}, padded with spaces
//   the rest  the data buffer; tensor <name> occupies bytes [b, e) of it, little-endian, row-major

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "distop/core/shape.hpp"
#include "distop/core/tensor.hpp"

namespace distop::io {

// The file's "__metadata__": free-form string pairs.
using Metadata = std::map<std::string, std::string>;

// The element types with typed reads and writes, and their safetensors dtypes.
template <class T>
concept SafetensorsElement = std::same_as<T, float> || std::same_as<T, double> ||
    std::same_as<T, std::int32_t> || std::same_as<T, std::int64_t> || std::same_as<T, std::uint8_t>;

template <SafetensorsElement T>
constexpr const char* dtype_of() noexcept {
  if constexpr (std::is_same_v<T, float>)
    return "F32";
  else if constexpr (std::is_same_v<T, double>)
    return "F64";
  else if constexpr (std::is_same_v<T, std::int32_t>)
    return "I32";
  else if constexpr (std::is_same_v<T, std::int64_t>)
    return "I64";
  else
    return "U8";
}

// The size in bytes of one element of a safetensors dtype (every dtype of the format's
// specification: BOOL, U8, I8, F8_E5M2, F8_E4M3, F8_E8M0, I16, U16, F16, BF16, I32, U32, F32, F64,
// I64, U64). Throws distop::Error (op "safetensors") for any other name.
std::size_t dtype_size(const std::string& dtype);

// One tensor to write: a name and a view of host memory that must stay valid during the write.
struct TensorEntry {
  std::string name;
  std::string dtype;
  Shape shape;
  const void* data;  // shape.numel() elements of dtype, little-endian, row-major

  template <SafetensorsElement T>
  TensorEntry(std::string tensor_name, Shape tensor_shape, const T* values)
      : name(std::move(tensor_name)),
        dtype(dtype_of<T>()),
        shape(std::move(tensor_shape)),
        data(values) {}
  // Raw bytes of any dtype of the format (F16, BF16, ...), already in the file's byte order.
  TensorEntry(std::string tensor_name, std::string tensor_dtype, Shape tensor_shape,
              const void* bytes)
      : name(std::move(tensor_name)),
        dtype(std::move(tensor_dtype)),
        shape(std::move(tensor_shape)),
        data(bytes) {}
};

// Writes a safetensors file atomically: the bytes go to "<path>.tmp.<pid>" in the same directory,
// which is fsync'ed and renamed over `path` (and the directory fsync'ed), so a crash part way
// leaves any previous file at `path` whole, and readers never see a partial file. Concurrent
// writers of one path must be distinct processes.
//
// The header is padded with spaces so that the data buffer starts at a multiple of 8 bytes. The
// buffer holds the tensors without gaps, ordered by element size (largest first) and then by
// name, so each tensor is aligned to its element size, as the reference implementation lays them
// out; with a single dtype this is name order. Throws distop::Error (op "write_safetensors") for
// duplicate or reserved names ("__metadata__"), an unknown dtype, a negative extent, null data for
// a non-empty tensor, or an I/O failure (the temporary file is then removed).
void write_safetensors(const std::string& path, const std::vector<TensorEntry>& entries,
                       const Metadata& metadata = {});
// The same for local tensors, as F32 or F64: host tensors (HostTensor) are written from their own
// memory; tensors in another memory space (a device's) are first copied to the host (to_host),
// one copy each. A template only so that a braced list of TensorEntry picks the overload above
// unambiguously; Space is MemSpace or HostMemSpace.
template <class T, class Space>
requires std::same_as<T, float> || std::same_as<T, double>
void write_safetensors(const std::string& path,
                       const std::map<std::string, Tensor<T, Space>>& tensors,
                       const Metadata& metadata = {});
extern template void write_safetensors<float, MemSpace>(const std::string&,
                                                        const std::map<std::string, Tensor<float>>&,
                                                        const Metadata&);
extern template void write_safetensors<double, MemSpace>(
    const std::string&, const std::map<std::string, Tensor<double>>&, const Metadata&);
#if DISTOP_DEVICE_MEMORY_SPACE
extern template void write_safetensors<float, HostMemSpace>(
    const std::string&, const std::map<std::string, HostTensor<float>>&, const Metadata&);
extern template void write_safetensors<double, HostMemSpace>(
    const std::string&, const std::map<std::string, HostTensor<double>>&, const Metadata&);
#endif

// Checksums. distop's checkpoints and weights files carry the CRC-32 (zlib's crc32, the checksum
// of gzip and PNG) of each tensor's bytes in the metadata, as 8 lowercase hex digits under
// checksum_key(name) = "distop.crc32.<name>", and the CRC-32 of the metadata itself (every other
// entry, in key order, each key and value followed by a NUL byte) under
// checksum_key("__metadata__"). SafetensorsFile checks the metadata's checksum when it opens the
// file and a tensor's each time it reads the tensor, when the file has them; files without
// checksums (those PyTorch writes) are read as they are.
std::string checksum_key(const std::string& name);
// The CRC-32 of `n` bytes at `data`.
std::uint32_t crc32_of(const void* data, std::size_t n);
// Sets checksum_key(e.name) in `metadata` to the CRC-32 of each entry's bytes (replacing any
// such key already there), then the metadata's own checksum. An entry of an unknown dtype or a
// negative extent is an error (op "write_safetensors"), as write_safetensors would raise.
void add_checksums(const std::vector<TensorEntry>& entries, Metadata& metadata);

// A safetensors file whose header has been read and validated. Tensor data is read on demand
// (so a file of many tensors is never read whole); the file must not change in between.
//
// Every error is a distop::Error (op "safetensors") naming the file; a name that the file lacks
// gives "file <path> has no tensor '<name>'".
class SafetensorsFile {
 public:
  // Reads and validates the header: the file is at least 8 bytes, the header length fits in it,
  // the header is a JSON object, every entry has a known "dtype", a "shape" of non-negative
  // integers and "data_offsets" [begin, end] within the data buffer whose length matches the shape
  // and dtype, no two tensors overlap, and "__metadata__" maps strings to strings.
  static SafetensorsFile open(const std::string& path);

  const std::string& path() const noexcept { return path_; }
  // The tensor names, in sorted order.
  std::vector<std::string> names() const;
  bool contains(const std::string& name) const { return tensors_.count(name) != 0; }
  const Shape& shape(const std::string& name) const;
  const std::string& dtype(const std::string& name) const;
  const Metadata& metadata() const noexcept { return metadata_; }

  // Throws "tensor '<name>' has shape [..] in file <path>, expected [..]" unless they agree.
  void check_shape(const std::string& name, const Shape& expected) const;

  // The tensor's raw bytes, as stored. When the metadata holds the tensor's checksum
  // (checksum_key), the bytes must match it: "tensor '<name>' in file <path> is corrupt: ..."
  // otherwise. Every typed read below goes through this one.
  std::vector<std::byte> read_bytes(const std::string& name) const;
  // The tensor's elements; its dtype must be dtype_of<T>() exactly (an F64 tensor is not read as
  // F32 unless asked for with read_as). With `expected`, its shape must be that too.
  template <SafetensorsElement T>
  std::vector<T> read(const std::string& name) const;
  template <SafetensorsElement T>
  std::vector<T> read(const std::string& name, const Shape& expected) const {
    check_shape(name, expected);
    return read<T>(name);
  }
  // The tensor's elements converted to T from any of F32, F64, I32, I64 and U8: F64 to F32
  // rounds to nearest, floating to integer truncates toward zero. An element T cannot hold (an
  // integer out of T's range; NaN, an infinity or a value out of range to an integer type; a
  // finite F64 beyond F32's range) is an error naming it and its index.
  template <SafetensorsElement T>
  std::vector<T> read_as(const std::string& name) const;

  std::vector<float> read_f32(const std::string& name) const { return read<float>(name); }
  std::vector<float> read_f32(const std::string& name, const Shape& expected) const {
    return read<float>(name, expected);
  }
  std::vector<double> read_f64(const std::string& name) const { return read<double>(name); }
  std::vector<double> read_f64(const std::string& name, const Shape& expected) const {
    return read<double>(name, expected);
  }
  std::vector<std::int32_t> read_i32(const std::string& name) const {
    return read<std::int32_t>(name);
  }
  std::vector<std::int64_t> read_i64(const std::string& name) const {
    return read<std::int64_t>(name);
  }
  std::vector<std::uint8_t> read_u8(const std::string& name) const {
    return read<std::uint8_t>(name);
  }

  // The tensor as a host tensor of the file's shape, which must be `expected`; dtype exactly F32
  // (read_host_tensor_f32) or F64 (read_host_tensor_f64). The file's bytes are read into the
  // tensor's memory.
  HostTensor<float> read_host_tensor_f32(const std::string& name, const Shape& expected) const;
  HostTensor<double> read_host_tensor_f64(const std::string& name, const Shape& expected) const;
  // The same in the default memory space (where layers take it): the host tensor above, copied
  // once with to_device.
  Tensor<float> read_tensor_f32(const std::string& name, const Shape& expected) const;
  Tensor<double> read_tensor_f64(const std::string& name, const Shape& expected) const;

 private:
  template <class T>
  HostTensor<T> read_host_tensor(const std::string& name, const Shape& expected) const;
  struct Entry {
    std::string dtype;
    Shape shape;
    std::uint64_t begin = 0;  // in the data buffer
    std::uint64_t end = 0;
  };
  const Entry& entry(const std::string& name) const;

  std::string path_;
  std::uint64_t data_start_ = 0;  // 8 + header length
  std::map<std::string, Entry> tensors_;
  Metadata metadata_;
};

extern template std::vector<float> SafetensorsFile::read<float>(const std::string&) const;
extern template std::vector<double> SafetensorsFile::read<double>(const std::string&) const;
extern template std::vector<std::int32_t> SafetensorsFile::read<std::int32_t>(
    const std::string&) const;
extern template std::vector<std::int64_t> SafetensorsFile::read<std::int64_t>(
    const std::string&) const;
extern template std::vector<std::uint8_t> SafetensorsFile::read<std::uint8_t>(
    const std::string&) const;
extern template std::vector<float> SafetensorsFile::read_as<float>(const std::string&) const;
extern template std::vector<double> SafetensorsFile::read_as<double>(const std::string&) const;
extern template std::vector<std::int32_t> SafetensorsFile::read_as<std::int32_t>(
    const std::string&) const;
extern template std::vector<std::int64_t> SafetensorsFile::read_as<std::int64_t>(
    const std::string&) const;
extern template std::vector<std::uint8_t> SafetensorsFile::read_as<std::uint8_t>(
    const std::string&) const;

}  // namespace distop::io
