#include "distop/core/timers.hpp"

#include "distop/core/trace.hpp"

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

void add_span(const std::string& name, std::chrono::steady_clock::time_point begin,
              std::chrono::steady_clock::time_point end) {
  add(name, std::chrono::duration<double>(end - begin).count());
  if (!trace::active()) return;
  const bool adjoint = name.size() > 8 && name.compare(name.size() - 8, 8, ".adjoint") == 0;
  trace::record(adjoint ? "adjoint" : "op", name, begin, end);
}

std::map<std::string, Entry> snapshot() { return table(); }
void reset() { table().clear(); }

}  // namespace distop::timers
