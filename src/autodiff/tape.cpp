#include "distop/autodiff/tape.hpp"

#include "distop/core/error.hpp"
#include "distop/core/timers.hpp"

namespace distop {

void Tape::record(std::string name, Backward backward) {
  DISTOP_CHECK(static_cast<bool>(backward), "Tape::record", "entry '", name, "' has no adjoint");
  entries_.push_back({std::move(name), std::move(backward)});
}

void Tape::backward() {
  // Clear even if an adjoint throws, so the saved context is released.
  auto entries = std::move(entries_);
  entries_.clear();
  if (!timers::enabled()) {
    for (auto it = entries.rbegin(); it != entries.rend(); ++it) it->backward();
  } else {
    for (auto it = entries.rbegin(); it != entries.rend(); ++it) {
      const timers::Scope timer(it->name + ".adjoint");
      it->backward();
    }
  }
  // Keep the storage for the next step's records (unless an adjoint recorded onto this tape).
  entries.clear();
  if (entries_.empty()) entries_ = std::move(entries);
}

void Tape::clear() noexcept { entries_.clear(); }

std::vector<std::string> Tape::names() const {
  std::vector<std::string> n;
  n.reserve(entries_.size());
  for (const auto& e : entries_) n.push_back(e.name);
  return n;
}

}  // namespace distop
