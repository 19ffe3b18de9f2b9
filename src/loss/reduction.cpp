#include "distop/loss/reduction.hpp"

#include <array>
#include <cstddef>
#include <string>

#include "distop/core/error.hpp"

namespace distop::loss {

namespace {
constexpr std::array<std::string_view, 4> kReductionNames = {"none", "sum", "mean", "batchmean"};
}  // namespace

std::string_view reduction_name(Reduction reduction) {
  return kReductionNames.at(static_cast<std::size_t>(reduction));
}

std::span<const std::string_view> reduction_names() { return kReductionNames; }

Reduction parse_reduction(std::string_view name) {
  for (std::size_t i = 0; i < kReductionNames.size(); ++i)
    if (kReductionNames[i] == name) return static_cast<Reduction>(i);
  std::string valid;
  for (std::string_view n : kReductionNames) valid += (valid.empty() ? "" : ", ") + std::string(n);
  throw Error("parse_reduction",
              "unknown reduction '" + std::string(name) + "'; expected one of " + valid);
}

}  // namespace distop::loss
