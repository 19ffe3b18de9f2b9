// libFuzzer target: SafetensorsFile::open on arbitrary bytes, then every read of every tensor the
// header lists. A malformed file must give distop::Error, never a crash, an out-of-bounds access
// or an allocation the file's own size does not justify (the sanitizers and libFuzzer's -rss_limit
// catch those).
#include <Kokkos_Core.hpp>
#include <cstdint>

#include "distop/core/error.hpp"
#include "distop/io/safetensors.hpp"
#include "fuzz_input.hpp"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  Kokkos::initialize();  // read_tensor_f32/f64 make Kokkos views; never finalized
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using distop::io::SafetensorsFile;
  const std::string& path = distop::fuzz::write_input(data, size);
  SafetensorsFile file;
  try {
    file = SafetensorsFile::open(path);
  } catch (const distop::Error&) {
    return 0;
  }
  for (const auto& name : file.names()) {
    // Each read on its own: one that fails must leave the others possible.
    try {
      (void)file.read_bytes(name);
    } catch (const distop::Error&) {
    }
    try {
      (void)file.read_as<double>(name);
    } catch (const distop::Error&) {
    }
    try {
      (void)file.read_as<std::int64_t>(name);
    } catch (const distop::Error&) {
    }
    try {
      (void)file.read_tensor_f32(name, file.shape(name));
    } catch (const distop::Error&) {
    }
  }
  return 0;
}
