// The safetensors reader and writer: round trips, the exact byte layout, every corruption the
// reader must reject, and the atomic replacement of an existing file.
#include "distop/io/safetensors.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "distop/core/error.hpp"
#include "distop/core/tensor.hpp"
#include "temp_dir.hpp"

namespace fs = std::filesystem;
using distop::Error;
using distop::Shape;
using distop::io::Metadata;
using distop::io::SafetensorsFile;
using distop::io::TensorEntry;
using nlohmann::json;

namespace {

struct TempDir : distop::test::TempDir {
  TempDir() : distop::test::TempDir("distop_safetensors_test") {}
};

std::string read_all(const std::string& path) {
  std::string bytes(static_cast<std::size_t>(fs::file_size(path)), '\0');
  std::ifstream in(path, std::ios::binary);
  in.read(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  EXPECT_EQ(in.gcount(), static_cast<std::streamsize>(bytes.size())) << path;
  return bytes;
}

void write_all(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::string le64(std::uint64_t v) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[static_cast<std::size_t>(i)] = static_cast<char>(v >> (8 * i));
  return out;
}

std::uint64_t read_le64(const std::string& bytes) {
  std::uint64_t v = 0;
  for (int i = 0; i < 8; ++i)
    v |= std::uint64_t{static_cast<unsigned char>(bytes[static_cast<std::size_t>(i)])} << (8 * i);
  return v;
}

// A safetensors file with the given header text and data buffer, as it is, for corruption tests.
void write_raw(const std::string& path, const std::string& header, const std::string& buffer) {
  write_all(path, le64(header.size()) + header + buffer);
}

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

// The message of opening a file with this header and an `n`-byte buffer.
std::string open_error(const TempDir& dir, const std::string& header, std::size_t n = 24) {
  const std::string path = dir.file("bad.safetensors");
  write_raw(path, header, std::string(n, '\0'));
  const std::string msg = error_of([&] { SafetensorsFile::open(path); });
  EXPECT_NE(msg.find(path), std::string::npos) << "the message should name the file: " << msg;
  return msg;
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

std::vector<std::string> leftovers(const TempDir& dir) {
  std::vector<std::string> out;
  for (const auto& entry : fs::directory_iterator(dir.path()))
    if (contains(entry.path().filename().string(), ".tmp.")) out.push_back(entry.path().string());
  return out;
}

}  // namespace

TEST(SafetensorsTest, RoundTripsSeveralTensorsAndMetadata) {
  TempDir dir;
  const std::string path = dir.file("model.safetensors");
  const std::vector<float> w{1.5f, -2.0f, 3.25f, 0.0f, 1e-30f, -7.0f};
  const std::vector<double> b{0.1, -0.2, 1e300, 4.0};
  const std::vector<std::int32_t> i32{-1, 2, 2147483647};
  const std::vector<std::int64_t> i64{-9000000000000LL, 5};
  const std::vector<std::uint8_t> u8{0, 128, 255, 7, 9};
  const float scalar = 42.0f;
  const Metadata metadata{{"format", "pt"}, {"epoch", "3"}};
  distop::io::write_safetensors(
      path,
      {TensorEntry("fc1.weight", Shape{2, 3}, w.data()),
       TensorEntry("fc1.bias", Shape{4}, b.data()), TensorEntry("counts", Shape{3}, i32.data()),
       TensorEntry("steps", Shape{2}, i64.data()), TensorEntry("mask", Shape{5}, u8.data()),
       TensorEntry("scale", Shape{}, &scalar),
       TensorEntry("empty", Shape{0, 3}, static_cast<float*>(nullptr))},
      metadata);

  const SafetensorsFile file = SafetensorsFile::open(path);
  EXPECT_EQ(file.path(), path);
  EXPECT_EQ(file.names(), (std::vector<std::string>{"counts", "empty", "fc1.bias", "fc1.weight",
                                                    "mask", "scale", "steps"}));
  EXPECT_EQ(file.metadata(), metadata);
  EXPECT_TRUE(file.contains("fc1.weight"));
  EXPECT_FALSE(file.contains("fc2.weight"));
  EXPECT_EQ(file.shape("fc1.weight"), (Shape{2, 3}));
  EXPECT_EQ(file.dtype("fc1.weight"), "F32");
  EXPECT_EQ(file.dtype("fc1.bias"), "F64");
  EXPECT_EQ(file.dtype("counts"), "I32");
  EXPECT_EQ(file.dtype("steps"), "I64");
  EXPECT_EQ(file.dtype("mask"), "U8");
  EXPECT_EQ(file.shape("scale"), Shape{});
  EXPECT_EQ(file.read_f32("fc1.weight"), w);
  EXPECT_EQ(file.read_f32("fc1.weight", Shape{2, 3}), w);
  EXPECT_EQ(file.read_f64("fc1.bias"), b);
  EXPECT_EQ(file.read_i32("counts"), i32);
  EXPECT_EQ(file.read_i64("steps"), i64);
  EXPECT_EQ(file.read_u8("mask"), u8);
  EXPECT_EQ(file.read_f32("scale"), std::vector<float>{42.0f});
  EXPECT_TRUE(file.read_f32("empty", Shape{0, 3}).empty());
  EXPECT_EQ(file.read_bytes("mask").size(), 5u);
}

TEST(SafetensorsTest, HeaderBytesFollowTheFormat) {
  TempDir dir;
  const std::string path = dir.file("layout.safetensors");
  const std::vector<float> a{1.0f, 2.0f, 3.0f};  // 12 bytes
  const std::vector<float> b{-1.0f, 0.5f};       // 8 bytes
  distop::io::write_safetensors(
      path, {TensorEntry("b", Shape{2}, b.data()), TensorEntry("a", Shape{1, 3}, a.data())},
      {{"note", "x"}});
  const std::string bytes = read_all(path);
  ASSERT_GE(bytes.size(), 8u);
  const std::uint64_t n = read_le64(bytes);
  EXPECT_EQ(n % 8, 0u) << "the header is padded so that the data starts 8-aligned";
  ASSERT_EQ(bytes.size(), 8 + n + 20);
  const std::string header = bytes.substr(8, n);
  EXPECT_EQ(header.front(), '{');
  const std::size_t last = header.find_last_not_of(' ');
  EXPECT_EQ(header[last], '}') << "padding is spaces after the object";
  const json j = json::parse(header);
  EXPECT_EQ(j.size(), 3u);
  EXPECT_EQ(j["__metadata__"], (json{{"note", "x"}}));
  // Same dtype: name order, no gaps, starting at 0 and ending at the end of the file.
  EXPECT_EQ(j["a"]["dtype"], "F32");
  EXPECT_EQ(j["a"]["shape"], json::array({1, 3}));
  EXPECT_EQ(j["a"]["data_offsets"], json::array({0, 12}));
  EXPECT_EQ(j["b"]["dtype"], "F32");
  EXPECT_EQ(j["b"]["shape"], json::array({2}));
  EXPECT_EQ(j["b"]["data_offsets"], json::array({12, 20}));
  const std::string data = bytes.substr(8 + n);
  // 1.0f = 0x3f800000 little-endian; -1.0f = 0xbf800000.
  EXPECT_EQ(data.substr(0, 4), std::string("\x00\x00\x80\x3f", 4));
  EXPECT_EQ(data.substr(12, 4), std::string("\x00\x00\x80\xbf", 4));
  std::vector<float> back(5);
  std::memcpy(back.data(), data.data(), 20);
  EXPECT_EQ(back, (std::vector<float>{1.0f, 2.0f, 3.0f, -1.0f, 0.5f}));
}

TEST(SafetensorsTest, NoMetadataKeyWhenMetadataIsEmpty) {
  TempDir dir;
  const std::string path = dir.file("m.safetensors");
  const float x = 1.0f;
  distop::io::write_safetensors(path, {TensorEntry("x", Shape{1}, &x)});
  const std::string bytes = read_all(path);
  const json j = json::parse(bytes.substr(8, read_le64(bytes)));
  EXPECT_FALSE(j.contains("__metadata__"));
  EXPECT_TRUE(SafetensorsFile::open(path).metadata().empty());
}

TEST(SafetensorsTest, WiderElementsComeFirstSoEveryTensorIsAligned) {
  TempDir dir;
  const std::string path = dir.file("mixed.safetensors");
  const std::vector<std::uint8_t> a{1, 2, 3};
  const std::vector<float> b{1.0f};
  const std::vector<double> c{2.0, 3.0};
  distop::io::write_safetensors(
      path, {TensorEntry("a", Shape{3}, a.data()), TensorEntry("b", Shape{1}, b.data()),
             TensorEntry("c", Shape{2}, c.data())});
  const std::string bytes = read_all(path);
  const json j = json::parse(bytes.substr(8, read_le64(bytes)));
  EXPECT_EQ(j["c"]["data_offsets"], json::array({0, 16}));
  EXPECT_EQ(j["b"]["data_offsets"], json::array({16, 20}));
  EXPECT_EQ(j["a"]["data_offsets"], json::array({20, 23}));
  const SafetensorsFile file = SafetensorsFile::open(path);
  EXPECT_EQ(file.read_u8("a"), a);
  EXPECT_EQ(file.read_f32("b"), b);
  EXPECT_EQ(file.read_f64("c"), c);
}

TEST(SafetensorsTest, TensorMapsRoundTrip) {
  TempDir dir;
  const std::string path = dir.file("tensors.safetensors");
  std::map<std::string, distop::Tensor<float>> tensors;
  tensors["fc1.weight"] = distop::Tensor<float>::from_vector(Shape{2, 2}, {1, 2, 3, 4});
  tensors["fc1.bias"] = distop::Tensor<float>::from_vector(Shape{2}, {5, 6});
  distop::io::write_safetensors(path, tensors, {{"k", "v"}});
  const SafetensorsFile file = SafetensorsFile::open(path);
  const distop::Tensor<float> w = file.read_tensor_f32("fc1.weight", Shape{2, 2});
  EXPECT_EQ(w.shape(), (Shape{2, 2}));
  EXPECT_EQ(w.to_vector(), (std::vector<float>{1, 2, 3, 4}));
  EXPECT_EQ(file.read_tensor_f32("fc1.bias", Shape{2}).to_vector(), (std::vector<float>{5, 6}));
  EXPECT_THROW(file.read_tensor_f32("fc1.bias", Shape{3}), Error);

  std::map<std::string, distop::Tensor<double>> doubles;
  doubles["x"] = distop::Tensor<double>::from_vector(Shape{3}, {0.5, 0.25, 0.125});
  distop::io::write_safetensors(path, doubles);
  EXPECT_EQ(SafetensorsFile::open(path).read_tensor_f64("x", Shape{3}).to_vector(),
            (std::vector<double>{0.5, 0.25, 0.125}));
}

TEST(SafetensorsTest, CheckedReadsNameTheTensorTheFileAndTheShapes) {
  TempDir dir;
  const std::string path = dir.file("ckpt.safetensors");
  const std::vector<float> w(256 * 784, 0.5f);
  distop::io::write_safetensors(path, {TensorEntry("fc1.weight", Shape{256, 784}, w.data())});
  const SafetensorsFile file = SafetensorsFile::open(path);
  EXPECT_EQ(file.read_f32("fc1.weight", Shape{256, 784}), w);
  const std::string shape_msg = error_of([&] { file.read_f32("fc1.weight", Shape{128, 784}); });
  EXPECT_TRUE(contains(shape_msg, "tensor 'fc1.weight' has shape [256, 784] in file " + path +
                                      ", expected [128, 784]"))
      << shape_msg;
  const std::string missing = error_of([&] { file.read_f32("fc1.bias"); });
  EXPECT_TRUE(contains(missing, "file " + path + " has no tensor 'fc1.bias'")) << missing;
  EXPECT_TRUE(contains(error_of([&] { file.shape("fc1.bias"); }), "has no tensor 'fc1.bias'"));
  EXPECT_TRUE(contains(error_of([&] { file.dtype("fc1.bias"); }), "has no tensor 'fc1.bias'"));
}

TEST(SafetensorsTest, DtypesAreNotConvertedUnlessAsked) {
  TempDir dir;
  const std::string path = dir.file("f64.safetensors");
  const std::vector<double> v{0.1, 2.5, -3.0};
  const std::vector<float> f{1.5f, -2.0f};
  distop::io::write_safetensors(
      path, {TensorEntry("w", Shape{3}, v.data()), TensorEntry("f", Shape{2}, f.data())});
  const SafetensorsFile file = SafetensorsFile::open(path);
  const std::string msg = error_of([&] { file.read_f32("w"); });
  EXPECT_TRUE(contains(msg, "tensor 'w' has dtype F64 in file " + path + ", expected F32")) << msg;
  EXPECT_THROW(file.read_f64("f"), Error);
  EXPECT_THROW(file.read_i32("f"), Error);
  EXPECT_EQ(file.read_as<float>("w"), (std::vector<float>{0.1f, 2.5f, -3.0f}));
  EXPECT_EQ(file.read_as<double>("f"), (std::vector<double>{1.5, -2.0}));
  EXPECT_EQ(file.read_as<std::int64_t>("f"), (std::vector<std::int64_t>{1, -2}));
}

TEST(SafetensorsTest, ReadAsRejectsElementsTheTargetCannotHold) {
  TempDir dir;
  const std::string path = dir.file("convert.safetensors");
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  const double two63 = 9223372036854775808.0;  // 2^63
  const std::vector<double> in_range{-0.5, 2.9, 255.9, -2147483648.9};
  const std::vector<double> large{1e38};
  const std::vector<double> big{3e9};
  const std::vector<double> huge{1e300};
  const std::vector<double> special{1.0, nan, inf};
  const std::vector<double> edges{-two63, two63};
  const std::vector<std::int64_t> ints{7, 300, -1};
  distop::io::write_safetensors(
      path,
      {TensorEntry("in_range", Shape{4}, in_range.data()),
       TensorEntry("large", Shape{1}, large.data()), TensorEntry("big", Shape{1}, big.data()),
       TensorEntry("huge", Shape{1}, huge.data()), TensorEntry("special", Shape{3}, special.data()),
       TensorEntry("edges", Shape{2}, edges.data()), TensorEntry("ints", Shape{3}, ints.data())});
  const SafetensorsFile file = SafetensorsFile::open(path);
  // Truncation toward zero, to the ends of each range.
  EXPECT_EQ(file.read_as<std::int32_t>("in_range"),
            (std::vector<std::int32_t>{0, 2, 255, -2147483647 - 1}));
  EXPECT_EQ(file.read_as<std::int64_t>("big"), (std::vector<std::int64_t>{3000000000}));
  EXPECT_EQ(file.read_as<float>("large"), (std::vector<float>{1e38f}));
  // -2^63 fits an I64, 2^63 does not.
  const std::string edge = error_of([&] { file.read_as<std::int64_t>("edges"); });
  EXPECT_TRUE(contains(edge, "at index 1, which I64 cannot hold")) << edge;
  // Out of range, NaN and infinities to integers; a finite F64 beyond F32; integers narrowed.
  const std::string i32 = error_of([&] { file.read_as<std::int32_t>("big"); });
  EXPECT_TRUE(contains(i32, "tensor 'big' in file " + path +
                                " holds 3e+09 at index 0, which I32 "
                                "cannot hold"))
      << i32;
  EXPECT_TRUE(contains(error_of([&] { file.read_as<std::uint8_t>("in_range"); }),
                       "at index 3, which U8 cannot hold"));  // -0.5 truncates to 0: fits
  EXPECT_TRUE(contains(error_of([&] { file.read_as<std::int64_t>("large"); }),
                       "at index 0, which I64 cannot hold"));
  EXPECT_TRUE(
      contains(error_of([&] { file.read_as<std::int64_t>("special"); }), "holds nan at index 1"));
  EXPECT_TRUE(contains(error_of([&] { file.read_as<float>("huge"); }), "which F32 cannot hold"));
  const std::string u8 = error_of([&] { file.read_as<std::uint8_t>("ints"); });
  EXPECT_TRUE(contains(u8, "holds 300 at index 1, which U8 cannot hold")) << u8;
  // NaN and infinities stay themselves between floating types.
  const std::vector<float> f = file.read_as<float>("special");
  EXPECT_TRUE(std::isnan(f[1]));
  EXPECT_EQ(f[2], std::numeric_limits<float>::infinity());
  EXPECT_EQ(file.read_as<double>("ints"), (std::vector<double>{7.0, 300.0, -1.0}));
}

TEST(SafetensorsTest, RawEntriesOfOtherDtypes) {
  TempDir dir;
  const std::string path = dir.file("bf16.safetensors");
  const std::vector<std::uint16_t> bf16{0x3f80, 0xc000};  // 1.0, -2.0
  distop::io::write_safetensors(path, {TensorEntry("h", "BF16", Shape{2}, bf16.data())});
  const SafetensorsFile file = SafetensorsFile::open(path);
  EXPECT_EQ(file.dtype("h"), "BF16");
  EXPECT_EQ(file.read_bytes("h").size(), 4u);
  const std::string msg = error_of([&] { file.read_as<float>("h"); });
  EXPECT_TRUE(contains(msg, "has dtype BF16")) << msg;
  EXPECT_EQ(distop::io::dtype_size("BF16"), 2u);
  EXPECT_EQ(distop::io::dtype_size("F64"), 8u);
  EXPECT_THROW(distop::io::dtype_size("F17"), Error);
}

TEST(SafetensorsTest, WriterRejectsBadEntries) {
  TempDir dir;
  const std::string path = dir.file("w.safetensors");
  const float x[2] = {1.0f, 2.0f};
  EXPECT_TRUE(contains(error_of([&] {
                         distop::io::write_safetensors(
                             path, {TensorEntry("a", Shape{1}, x), TensorEntry("a", Shape{1}, x)});
                       }),
                       "two tensors are named 'a'"));
  EXPECT_TRUE(contains(error_of([&] {
                         distop::io::write_safetensors(path,
                                                       {TensorEntry("__metadata__", Shape{1}, x)});
                       }),
                       "reserved"));
  EXPECT_TRUE(contains(error_of([&] {
                         distop::io::write_safetensors(path,
                                                       {TensorEntry("a", "F17", Shape{1}, x)});
                       }),
                       "unknown dtype 'F17'"));
  EXPECT_TRUE(contains(error_of([&] {
                         distop::io::write_safetensors(
                             path, {TensorEntry("a", Shape{2}, static_cast<float*>(nullptr))});
                       }),
                       "null pointer"));
  EXPECT_TRUE(contains(
      error_of([&] { distop::io::write_safetensors(path, {TensorEntry("a", Shape{-1}, x)}); }),
      "non-negative extents"));
  // JSON strings must be UTF-8: a name or a metadata value that is not cannot be encoded.
  EXPECT_TRUE(contains(
      error_of([&] { distop::io::write_safetensors(path, {TensorEntry("a\xff", Shape{1}, x)}); }),
      "must be UTF-8"));
  EXPECT_TRUE(contains(
      error_of([&] {
        distop::io::write_safetensors(path, {TensorEntry("a", Shape{1}, x)}, {{"note", "caf\xe9"}});
      }),
      "must be UTF-8"));
  EXPECT_FALSE(fs::exists(path));
  EXPECT_TRUE(leftovers(dir).empty());
}

TEST(SafetensorsTest, MissingFile) {
  TempDir dir;
  const std::string path = dir.file("none.safetensors");
  const std::string msg = error_of([&] { SafetensorsFile::open(path); });
  EXPECT_TRUE(contains(msg, "cannot open safetensors file " + path)) << msg;
}

TEST(SafetensorsTest, FileShorterThanTheHeaderLength) {
  TempDir dir;
  const std::string path = dir.file("short.safetensors");
  write_all(path, std::string(5, '\0'));
  const std::string msg = error_of([&] { SafetensorsFile::open(path); });
  EXPECT_TRUE(contains(msg, "file " + path + " is 5 bytes long, shorter than the 8-byte header"))
      << msg;
}

TEST(SafetensorsTest, HeaderLengthLargerThanTheFile) {
  TempDir dir;
  const std::string path = dir.file("long.safetensors");
  write_all(path, le64(1000) + "{}");
  const std::string msg = error_of([&] { SafetensorsFile::open(path); });
  EXPECT_TRUE(contains(msg, "declares a header of 1000 bytes, but only 2 bytes follow")) << msg;
}

TEST(SafetensorsTest, InvalidJson) {
  TempDir dir;
  EXPECT_TRUE(contains(open_error(dir, "{\"a\": {\"dtype\": "), "is not valid JSON"));
  EXPECT_TRUE(contains(open_error(dir, "[1, 2]   "), "is a JSON array, expected an object"));
}

TEST(SafetensorsTest, MissingEntryFields) {
  TempDir dir;
  const std::string no_dtype = open_error(dir, R"({"w": {"shape": [2], "data_offsets": [0, 8]}})");
  EXPECT_TRUE(contains(no_dtype, "tensor 'w'")) << no_dtype;
  EXPECT_TRUE(contains(no_dtype, "has no \"dtype\"")) << no_dtype;
  EXPECT_TRUE(contains(open_error(dir, R"({"w": {"dtype": "F32", "data_offsets": [0, 8]}})"),
                       "has no \"shape\""));
  EXPECT_TRUE(contains(open_error(dir, R"({"w": {"dtype": "F32", "shape": [2]}})"),
                       "has no \"data_offsets\""));
  EXPECT_TRUE(contains(open_error(dir, R"({"w": 3})"), "expected an object with dtype"));
}

TEST(SafetensorsTest, BadFieldValues) {
  TempDir dir;
  const std::string unknown =
      open_error(dir, R"({"w": {"dtype": "F17", "shape": [2], "data_offsets": [0, 8]}})");
  EXPECT_TRUE(contains(unknown, "tensor 'w' in file")) << unknown;
  EXPECT_TRUE(contains(unknown, "has unknown dtype 'F17'")) << unknown;
  EXPECT_TRUE(
      contains(open_error(dir, R"({"w": {"dtype": 4, "shape": [2], "data_offsets": [0, 8]}})"),
               "expected a string"));
  EXPECT_TRUE(
      contains(open_error(dir, R"({"w": {"dtype": "F32", "shape": [-2], "data_offsets": [0, 8]}})"),
               "has shape [-2], expected an array of non-negative integers"));
  EXPECT_TRUE(contains(
      open_error(dir, R"({"w": {"dtype": "F32", "shape": [2.5], "data_offsets": [0, 8]}})"),
      "expected an array of non-negative integers"));
  EXPECT_TRUE(
      contains(open_error(dir, R"({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0]}})"),
               "expected [begin, end]"));
  EXPECT_TRUE(contains(open_error(dir, R"({"__metadata__": {"a": 1}})"), "metadata 'a' in file"));
  EXPECT_TRUE(
      contains(open_error(dir, R"({"__metadata__": [1]})"), "expected an object of strings"));
}

// A hostile header nests a value a million levels deep (2 MB of brackets): the error names its type
// instead of printing it, which would recurse once per level and exhaust the stack.
TEST(SafetensorsTest, DeeplyNestedHeaderValuesAreErrorsNotCrashes) {
  TempDir dir;
  const std::size_t depth = 1000000;
  const std::string nested = std::string(depth, '[') + std::string(depth, ']');
  for (const std::string field : {"shape", "dtype", "data_offsets"}) {
    std::string header = R"({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}})";
    const std::string old = field == "shape"   ? R"("shape": [2])"
                            : field == "dtype" ? R"("dtype": "F32")"
                                               : R"("data_offsets": [0, 8])";
    header.replace(header.find(old), old.size(), "\"" + field + "\": " + nested);
    const std::string msg = open_error(dir, header, 8);
    EXPECT_TRUE(contains(msg, "a JSON array nested deeper than 4")) << msg.substr(0, 300);
  }
  // A missing field next to a deep one: the entry is described, not printed.
  const std::string msg = open_error(
      dir, R"({"w": {"dtype": "F32", "data_offsets": [0, 8], "extra": )" + nested + "}}", 8);
  EXPECT_TRUE(contains(msg, "has no \"shape\" in its header entry a JSON object")) << msg;
}

TEST(SafetensorsTest, OffsetsOutOfRange) {
  TempDir dir;
  const std::string msg =
      open_error(dir, R"({"w": {"dtype": "F32", "shape": [8], "data_offsets": [0, 32]}})", 24);
  EXPECT_TRUE(contains(msg, "tensor 'w' in file")) << msg;
  EXPECT_TRUE(contains(msg, "has data_offsets [0, 32], outside the data buffer of 24 bytes"))
      << msg;
  EXPECT_TRUE(
      contains(open_error(dir, R"({"w": {"dtype": "F32", "shape": [0], "data_offsets": [8, 4]}})"),
               "outside the data buffer"));
}

TEST(SafetensorsTest, OffsetsNotMatchingShapeAndDtype) {
  TempDir dir;
  const std::string msg =
      open_error(dir, R"({"w": {"dtype": "F64", "shape": [2, 2], "data_offsets": [0, 24]}})", 40);
  EXPECT_TRUE(contains(msg,
                       "has data_offsets [0, 24] (24 bytes), but shape [2, 2] of dtype F64 needs "
                       "32 bytes"))
      << msg;
}

TEST(SafetensorsTest, OverlappingTensors) {
  TempDir dir;
  const std::string msg =
      open_error(dir,
                 R"({"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]},
          "b": {"dtype": "F32", "shape": [4], "data_offsets": [8, 24]}})",
                 24);
  EXPECT_TRUE(contains(msg, "tensors 'a' [0, 16] and 'b' [8, 24] overlap")) << msg;
}

TEST(SafetensorsTest, HandWrittenFileWithUnpaddedHeaderReads) {
  // A header without padding and tensors in an order other than the writer's: still valid.
  TempDir dir;
  const std::string path = dir.file("hand.safetensors");
  std::string buffer(12, '\0');
  const float v[3] = {7.0f, 8.0f, 9.0f};
  std::memcpy(buffer.data(), v, 12);
  write_raw(path,
            R"({"z":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
            R"("a":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
            buffer);
  const SafetensorsFile file = SafetensorsFile::open(path);
  EXPECT_EQ(file.read_f32("z"), std::vector<float>{7.0f});
  EXPECT_EQ(file.read_f32("a"), (std::vector<float>{8.0f, 9.0f}));
}

TEST(SafetensorsTest, OverwriteIsAtomicAndLeavesNoTemporaryFile) {
  TempDir dir;
  const std::string path = dir.file("ckpt.safetensors");
  const std::vector<float> first(1000, 1.0f);
  const std::vector<float> second(5000, 2.0f);
  distop::io::write_safetensors(path, {TensorEntry("w", Shape{1000}, first.data())});
  distop::io::write_safetensors(
      path,
      {TensorEntry("w", Shape{5000}, second.data()), TensorEntry("v", Shape{10}, second.data())},
      {{"step", "2"}});
  const SafetensorsFile file = SafetensorsFile::open(path);
  EXPECT_EQ(file.read_f32("w", Shape{5000}), second);
  EXPECT_EQ(file.names(), (std::vector<std::string>{"v", "w"}));
  EXPECT_EQ(file.metadata().at("step"), "2");
  EXPECT_TRUE(leftovers(dir).empty());
}

TEST(SafetensorsTest, FailedWriteKeepsThePreviousFileAndRemovesTheTemporary) {
  TempDir dir;
  const std::string path = dir.file("ckpt.safetensors");
  const std::vector<float> old(10, 3.0f);
  distop::io::write_safetensors(path, {TensorEntry("w", Shape{10}, old.data())});
  const std::string before = read_all(path);

  // Rejected before anything is written.
  EXPECT_THROW(distop::io::write_safetensors(path, {TensorEntry("w", Shape{10}, old.data()),
                                                    TensorEntry("w", Shape{10}, old.data())}),
               Error);
  EXPECT_EQ(read_all(path), before);

  // Fails at the rename, after the temporary file has been written: a directory is in the way.
  const std::string blocked = dir.file("blocked");
  fs::create_directories(fs::path(blocked) / "inside");
  const std::string msg = error_of(
      [&] { distop::io::write_safetensors(blocked, {TensorEntry("w", Shape{10}, old.data())}); });
  EXPECT_TRUE(contains(msg, "cannot rename")) << msg;
  EXPECT_TRUE(fs::is_directory(blocked));
  EXPECT_TRUE(leftovers(dir).empty());

  // Fails at creation: the directory does not exist.
  const std::string nowhere = dir.file("no/such/dir/x.safetensors");
  EXPECT_TRUE(contains(error_of([&] {
                         distop::io::write_safetensors(nowhere,
                                                       {TensorEntry("w", Shape{10}, old.data())});
                       }),
                       "cannot create"));
  EXPECT_EQ(read_all(path), before);
  EXPECT_TRUE(leftovers(dir).empty());
}

// A checksummed tensor whose bytes changed on disk is an error naming it; its neighbours still
// read, and a file without checksums reads as it is.
TEST(SafetensorsTest, ChecksumsCatchCorruptTensors) {
  TempDir dir;
  const std::string path = dir.file("sums.safetensors");
  const std::vector<float> w{1, 2, 3, 4};
  const std::vector<std::int64_t> n{7};
  const std::vector<TensorEntry> entries{TensorEntry("w", Shape{4}, w.data()),
                                         TensorEntry("n", Shape{1}, n.data())};
  Metadata metadata{{"format", "pt"}};
  distop::io::add_checksums(entries, metadata);
  // zlib's CRC-32 of the 16 bytes of four little-endian floats 1, 2, 3, 4.
  EXPECT_EQ(metadata.at(distop::io::checksum_key("w")), [&] {
    char buf[9];
    std::snprintf(buf, sizeof buf, "%08x", distop::io::crc32_of(w.data(), 16));
    return std::string(buf);
  }());
  EXPECT_EQ(distop::io::crc32_of("123456789", 9), 0xcbf43926u);  // the CRC-32 check value
  distop::io::write_safetensors(path, entries, metadata);
  EXPECT_EQ(SafetensorsFile::open(path).read<float>("w"), w);
  {
    // "n" (8-byte elements) comes first in the buffer, "w" last: flip w's last byte.
    std::fstream f(path, std::ios::binary | std::ios::in | std::ios::out);
    f.seekg(-1, std::ios::end);
    char c = 0;
    f.read(&c, 1);
    c = static_cast<char>(c ^ 0x40);
    f.seekp(-1, std::ios::end);
    f.write(&c, 1);
  }
  const auto file = SafetensorsFile::open(path);
  EXPECT_EQ(file.read<std::int64_t>("n"), n);
  try {
    (void)file.read<float>("w");
    ADD_FAILURE() << "a corrupt tensor was read";
  } catch (const distop::Error& e) {
    EXPECT_NE(std::string(e.what()).find("tensor 'w' in file " + path + " is corrupt"),
              std::string::npos)
        << e.what();
  }
  // Without the checksums the (changed) bytes read as they are.
  distop::io::write_safetensors(path, entries, {{"format", "pt"}});
  EXPECT_EQ(SafetensorsFile::open(path).read<float>("w"), w);
}

TEST(SafetensorsTest, TheMetadatasChecksumCatchesAChangedEntry) {
  TempDir dir;
  const std::string path = dir.file("meta.safetensors");
  const std::vector<float> w{1, 2, 3, 4};
  const std::vector<TensorEntry> entries{TensorEntry("w", Shape{4}, w.data())};
  Metadata metadata{{"scheduler.base_lr.0", "0.01"}, {"epoch", "3"}};
  distop::io::add_checksums(entries, metadata);
  ASSERT_EQ(metadata.count(distop::io::checksum_key("__metadata__")), 1u);
  distop::io::write_safetensors(path, entries, metadata);
  EXPECT_EQ(SafetensorsFile::open(path).metadata().at("scheduler.base_lr.0"), "0.01");
  // One digit changed, the file otherwise valid: opening it is the error, before any read.
  Metadata changed = metadata;
  changed["scheduler.base_lr.0"] = "0.09";
  distop::io::write_safetensors(path, entries, changed);
  try {
    (void)SafetensorsFile::open(path);
    ADD_FAILURE() << "a changed metadata entry went unnoticed";
  } catch (const distop::Error& e) {
    EXPECT_NE(std::string(e.what()).find("the metadata of file " + path + " is corrupt"),
              std::string::npos)
        << e.what();
  }
  // An entry added, or one removed, likewise.
  for (const bool add : {true, false}) {
    Metadata edited = metadata;
    if (add)
      edited["user.note"] = "x";
    else
      edited.erase("epoch");
    distop::io::write_safetensors(path, entries, edited);
    EXPECT_THROW((void)SafetensorsFile::open(path), distop::Error) << (add ? "added" : "removed");
  }
  // Checksums made anew for the changed metadata: a valid file again.
  distop::io::add_checksums(entries, changed);
  distop::io::write_safetensors(path, entries, changed);
  EXPECT_EQ(SafetensorsFile::open(path).metadata().at("scheduler.base_lr.0"), "0.09");
}
