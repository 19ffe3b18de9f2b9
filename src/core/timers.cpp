#include "distop/core/timers.hpp"

namespace distop::timers {

namespace {
bool g_enabled = false;
std::map<std::string, Entry>& table() {
  static std::map<std::string, Entry> t;
  return t;
}
}  // namespace

void enable(bool on) noexcept { g_enabled = on; }
bool enabled() noexcept { return g_enabled; }

void add(const std::string& name, double seconds) {
  auto& e = table()[name];
  e.seconds += seconds;
  ++e.calls;
}

std::map<std::string, Entry> snapshot() { return table(); }
void reset() { table().clear(); }

}  // namespace distop::timers
