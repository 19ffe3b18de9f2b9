// libFuzzer target: read_idx on arbitrary bytes, gzip-compressed or not. A malformed file must give
// distop::Error, never a crash, an out-of-bounds access or an allocation its size does not justify.
#include <cstdint>

#include "distop/core/error.hpp"
#include "distop/data/idx.hpp"
#include "fuzz_input.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    (void)distop::data::read_idx(distop::fuzz::write_input(data, size));
  } catch (const distop::Error&) {
  }
  return 0;
}
