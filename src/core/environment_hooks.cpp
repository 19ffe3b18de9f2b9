#include "environment_hooks.hpp"

#include <vector>

namespace distop::detail {

namespace {
// Constructed on first use: hooks are added from other files' static initialisers.
std::vector<EnvironmentHook>& hooks() {
  static std::vector<EnvironmentHook> installed;
  return installed;
}
}  // namespace

void add_environment_hook(EnvironmentHook hook) { hooks().push_back(hook); }

void open_environment_hooks(MPI_Comm world) noexcept {
  for (const auto& h : hooks()) h.open(world);
}

void close_environment_hooks() noexcept {
  const auto& all = hooks();
  for (auto h = all.rbegin(); h != all.rend(); ++h) h->close();
}

}  // namespace distop::detail
