#include "distop/autodiff/tape.hpp"

#include <algorithm>
#include <chrono>
#include <optional>
#include <string>
#include <utility>

#include "distop/core/timers.hpp"
#include "distop/core/trace.hpp"

namespace distop {

namespace {
// The first block's size; each further block doubles the last (a LeNet-5 step records about 30
// closures of 50-150 bytes).
constexpr std::size_t kFirstBlockBytes = 4096;

// The replays running on this thread (an adjoint may replay a tape of its own), and the error a
// ready hook asked the outermost one to raise.
thread_local int t_replays = 0;
thread_local std::optional<Error> t_failure;

// Counts a replay for as long as it lives.
class Replaying {
 public:
  Replaying() noexcept { ++t_replays; }
  ~Replaying() {
    if (--t_replays == 0) t_failure.reset();
  }
  Replaying(const Replaying&) = delete;
  Replaying& operator=(const Replaying&) = delete;
};
}  // namespace

bool Tape::replaying() noexcept { return t_replays > 0; }

#ifdef DISTOP_SMPI
namespace detail {
namespace {
OpHook g_op_hook = nullptr;
}  // namespace
void set_op_hook(OpHook hook) noexcept { g_op_hook = hook; }
OpHook op_hook() noexcept { return g_op_hook; }
}  // namespace detail
#endif

void Tape::fail_after_replay(Error error) {
  if (t_replays > 0 && !t_failure) t_failure.emplace(std::move(error));
}

void* Tape::Arena::allocate(std::size_t bytes, std::size_t align) {
  while (block_ < blocks_.size()) {
    const std::size_t start = (used_ + align - 1) / align * align;
    if (start + bytes <= blocks_[block_].second) {
      used_ = start + bytes;
      return blocks_[block_].first.get() + start;
    }
    ++block_;
    used_ = 0;
  }
  const std::size_t size =
      std::max(bytes, blocks_.empty() ? kFirstBlockBytes : 2 * blocks_.back().second);
  // operator new[] aligns to alignof(std::max_align_t), the most record() accepts.
  blocks_.emplace_back(std::make_unique<std::byte[]>(size), size);
  block_ = blocks_.size() - 1;
  used_ = bytes;
  return blocks_.back().first.get();
}

Tape::Tape(Tape&& other) noexcept
    : entries_(std::move(other.entries_)),
      arena_(std::move(other.arena_)),
      replayed_(std::exchange(other.replayed_, false)),
      progress_(std::move(other.progress_)) {
  other.entries_.clear();
  other.arena_ = Arena();
}

Tape& Tape::operator=(Tape&& other) noexcept {
  if (this != &other) {
    clear();
    entries_ = std::move(other.entries_);
    arena_ = std::move(other.arena_);
    replayed_ = std::exchange(other.replayed_, false);
    progress_ = std::move(other.progress_);
    other.entries_.clear();
    other.arena_ = Arena();
  }
  return *this;
}

Tape::~Tape() { destroy_all(entries_); }

void Tape::destroy_all(std::vector<Entry>& entries) noexcept {
  for (auto it = entries.rbegin(); it != entries.rend(); ++it) it->destroy(it->closure);
  entries.clear();
}

void Tape::backward() {
  const Replaying replaying;
  auto entries = std::move(entries_);
  entries_.clear();
  replayed_ = true;
  // Each closure is destroyed right after its adjoint runs; if an adjoint throws, the rest are
  // destroyed unrun, so the saved context is released either way.
  std::size_t left = entries.size();
  try {
    const bool timed = timers::enabled();
    for (; left > 0; --left) {
      Entry& e = entries[left - 1];
#ifdef DISTOP_SMPI
      std::optional<detail::OpHookScope> hook;  // ends with the entry's closure, before progress
      if (e.kind == Kind::compute) hook.emplace(e.name.c_str(), true);
#endif
      if (!timed) {
        e.run(e.closure);
      } else {
        const auto begin = std::chrono::steady_clock::now();
        e.run(e.closure);
        const auto end = std::chrono::steady_clock::now();
        // The timers keep every entry as "<name>.adjoint"; the trace tells operators' adjoints
        // from computation (core/trace.hpp).
        std::string name = e.name + ".adjoint";
        timers::add(name, std::chrono::duration<double>(end - begin).count());
        if (trace::active()) {
          if (e.kind == Kind::operator_adjoint)
            trace::record("adjoint", name, begin, end);
          else
            trace::record("compute", e.label.empty() ? e.name : e.label, begin, end);
        }
      }
      e.destroy(e.closure);
#ifdef DISTOP_SMPI
      hook.reset();
#endif
      if (progress_) progress_();
    }
  } catch (...) {
    entries.resize(left);  // the one that threw and those before it, all still alive
    destroy_all(entries);
    if (entries_.empty()) arena_.rewind();
    throw;
  }
  // Keep the storage for the next step's records (unless an adjoint recorded onto this tape).
  entries.clear();
  if (entries_.empty()) {
    entries_ = std::move(entries);
    arena_.rewind();
  }
  if (t_failure && t_replays == 1) {
    Error failure = std::move(*t_failure);
    t_failure.reset();
    throw failure;
  }
}

void Tape::clear() noexcept {
  destroy_all(entries_);
  arena_.rewind();
  replayed_ = false;
}

std::vector<std::string> Tape::names() const {
  std::vector<std::string> n;
  n.reserve(entries_.size());
  for (const auto& e : entries_) n.push_back(e.name);
  return n;
}

}  // namespace distop
