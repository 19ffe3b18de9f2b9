#pragma once
// Per-process wall-clock timers of distop's operations, for step breakdowns and performance
// models. Off by default; when on, every linear operator applied on the tape (forward, by its
// name()) and every tape entry replayed by backward (by its recorded name, with ".adjoint"
// appended) adds its elapsed time here.

#include <chrono>
#include <map>
#include <string>
#include <utility>

namespace distop::timers {

// Turns timing on or off for this process (not thread-safe: call between steps).
void enable(bool on) noexcept;
bool enabled() noexcept;
// Adds `seconds` and one call under `name`.
void add(const std::string& name, double seconds);
// Adds the span [begin, end) under `name`, and records it as an event of the trace when one is
// being recorded (core/trace.hpp; category "adjoint" for a name ending in ".adjoint", else "op").
void add_span(const std::string& name, std::chrono::steady_clock::time_point begin,
              std::chrono::steady_clock::time_point end);

struct Entry {
  double seconds = 0;
  long long calls = 0;
};
// The totals since the last reset, by name.
std::map<std::string, Entry> snapshot();
void reset();

// Times its own lifetime under `name` when timing is on.
class Scope {
 public:
  explicit Scope(std::string name) : on_(enabled()) {
    if (!on_) return;
    name_ = std::move(name);
    start_ = std::chrono::steady_clock::now();
  }
  ~Scope() {
    if (on_) add_span(name_, start_, std::chrono::steady_clock::now());
  }
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;

 private:
  bool on_;
  std::string name_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace distop::timers
