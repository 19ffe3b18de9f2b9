// libFuzzer target: read_cifar10_batch on arbitrary bytes. A malformed file (a size that is not a
// whole number of records, a label above 9) must give distop::Error, never a crash or an
// out-of-bounds access; a well-formed one must give a data set whose shape matches its size.
#include <cstdint>
#include <cstdlib>

#include "distop/core/error.hpp"
#include "distop/data/cifar.hpp"
#include "fuzz_input.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    const auto ds = distop::data::read_cifar10_batch(distop::fuzz::write_input(data, size));
    const auto records = static_cast<std::int64_t>(size) / distop::data::kCifar10RecordBytes;
    if (ds.size != records || static_cast<std::int64_t>(ds.labels.size()) != records ||
        static_cast<std::int64_t>(ds.images.size()) != records * ds.pixels())
      std::abort();
  } catch (const distop::Error&) {
  }
  return 0;
}
