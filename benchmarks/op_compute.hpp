#pragma once
// Per-operation injected compute for bench_simulated --program unet3d --compute injected: a model
// whose communication happens inside its forward and backward passes (halo exchanges before each
// convolution, GroupNorm's all-gather and all-reduce, the loss's all-reduces) keeps every message,
// while each operation's local computation is charged as simulated compute of a duration measured
// once on one rank.
//
// - Measuring (OpProfile::measure): one rank alone runs the model on one rank's block (a one-rank
//   model on MPI_COMM_SELF) and times, in this thread's CPU time, each operation's forward
//   (make_function) and each compute entry's replay by backward, in the order they run, through
//   the SMPI build's operation hook (autodiff/tape.hpp, detail::set_op_hook); also the optimizer
//   step and zero_grad, and the rest of the step (recording, allocation, the backward seed). Each
//   is the median over the measured steps.
// - Replaying (OpInjection): every rank of the real, spatially partitioned model runs its step as
//   usual (every operator's messages are real: halo exchanges, broadcasts, all-gathers,
//   all-reduces, the gradient reducer's exchange), and at the end of each operation the hook
//   injects that operation's measured time (smpi_execute_benched), the k-th operation of the pass
//   the profile's k-th, checked by name. The host's own time is not charged
//   (smpi/simulate-computation:no): the kernels still run on the host, on SMPI's shared malloc, so
//   they cost wall time but no simulated time.
// An operation's compute is injected where the operation ends: GroupNorm's statistics, computed
// before its all-gather, are charged after it (every rank injects the same profile, so this moves
// no rank's time relative to another's).
#include <mpi.h>

#include <algorithm>
#include <cstddef>
#include <distop/distop.hpp>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "bench_util.hpp"
#include "injected_compute.hpp"

namespace distop::bench {

// One step's local computation, operation by operation.
struct OpProfile {
  struct Op {
    std::string name;
    double seconds = 0;
  };
  std::vector<Op> forward;   // make_function's forwards, in the order they ran
  std::vector<Op> backward;  // backward's compute entries, in the order they were replayed
  double optimizer_seconds = 0;
  double rest_seconds = 0;  // the step's thread CPU time outside the operations and the optimizer

  static double total(const std::vector<Op>& ops) {
    double t = 0;
    for (const auto& op : ops) t += op.seconds;
    return t;
  }
  double step_seconds() const {
    return total(forward) + total(backward) + optimizer_seconds + rest_seconds;
  }

  // Text: "distop op profile 1", the optimizer and rest lines, then "forward N" and N lines of
  // "<seconds> <name>", likewise "backward M".
  std::string text() const {
    std::ostringstream out;
    out.precision(17);
    out << "distop op profile 1\noptimizer " << optimizer_seconds << "\nrest " << rest_seconds
        << '\n';
    for (const auto* part : {&forward, &backward}) {
      out << (part == &forward ? "forward " : "backward ") << part->size() << '\n';
      for (const auto& op : *part) out << op.seconds << ' ' << op.name << '\n';
    }
    return out.str();
  }
  static OpProfile parse(const std::string& text, const std::string& where) {
    std::istringstream in(text);
    std::string line, word;
    OpProfile p;
    auto bad = [&] { return Error("bench_simulated", where + " is not an op profile"); };
    if (!std::getline(in, line) || line != "distop op profile 1") throw bad();
    if (!(in >> word >> p.optimizer_seconds) || word != "optimizer") throw bad();
    if (!(in >> word >> p.rest_seconds) || word != "rest") throw bad();
    for (auto* part : {&p.forward, &p.backward}) {
      std::size_t n = 0;
      if (!(in >> word >> n) || word != (part == &p.forward ? "forward" : "backward")) throw bad();
      for (std::size_t i = 0; i < n; ++i) {
        Op op;
        if (!(in >> op.seconds) || !std::getline(in, op.name) || op.name.size() < 2) throw bad();
        op.name.erase(0, 1);  // the space
        part->push_back(std::move(op));
      }
    }
    return p;
  }
  void save(const std::string& path) const {
    std::ofstream out(path);
    out << text();
    if (!out.flush()) throw Error("bench_simulated", "cannot write the op profile " + path);
  }
  static OpProfile load(const std::string& path) {
    std::ifstream in(path);
    std::stringstream s;
    s << in.rdbuf();
    return parse(s.str(), path);
  }
  // Sent from `root` to every rank of `comm`.
  static OpProfile broadcast(const OpProfile& p, int root, MPI_Comm comm) {
    int rank = 0;
    MPI_Comm_rank(comm, &rank);
    std::string t = rank == root ? p.text() : std::string();
    long long n = static_cast<long long>(t.size());
    MPI_Bcast(&n, 1, MPI_LONG_LONG, root, comm);
    t.resize(static_cast<std::size_t>(n));
    MPI_Bcast(t.data(), static_cast<int>(n), MPI_CHAR, root, comm);
    return parse(t, "the broadcast op profile");
  }
};

class OpInjection;
namespace {
// The hook's state, one per simulated rank: internal linkage, so that each rank's privatised copy
// of the program has its own (a static of an inline function would be one STB_GNU_UNIQUE object,
// which the dynamic linker shares between all the copies).
OpInjection& op_injection_state();
}  // namespace

// Operations nested in another's forward count as part of the outer one.
class OpInjection {
 public:
  enum class Mode { off, measure, inject };

  static OpInjection& instance() { return op_injection_state(); }

  // Starts a step: measuring appends to a fresh profile, injecting replays `profile` from its first
  // operation.
  void begin_step(Mode mode, const OpProfile* profile = nullptr) {
    mode_ = mode;
    profile_ = profile;
    measured_ = OpProfile{};
    next_[0] = next_[1] = 0;
    depth_ = 0;
    error_.clear();
#ifdef DISTOP_SMPI
    detail::set_op_hook(mode == Mode::off ? nullptr : &OpInjection::hook);
#else
    throw Error("bench_simulated", "injected compute for unet3d needs the SMPI build");
#endif
  }
  // Ends the step (the hook off) and returns what it measured; throws if the injected step did not
  // run exactly the profile's operations.
  OpProfile end_step() {
#ifdef DISTOP_SMPI
    detail::set_op_hook(nullptr);
#endif
    const Mode mode = mode_;
    mode_ = Mode::off;
    if (!error_.empty()) throw Error("bench_simulated", error_);
    if (mode == Mode::inject)
      DISTOP_CHECK(next_[0] == profile_->forward.size() && next_[1] == profile_->backward.size(),
                   "bench_simulated", "the injected step ran ", next_[0],
                   " forward operations and ", next_[1], " backward entries; the op profile has ",
                   profile_->forward.size(), " and ", profile_->backward.size());
    return std::move(measured_);
  }

 private:
  static void hook(const char* name, bool backward, bool begin) {
    instance().on(name, backward, begin);
  }

  void on(const char* name, bool backward, bool begin) {
    const int part = backward ? 1 : 0;
    if (begin) {
      if (depth_++ > 0) return;
      if (mode_ == Mode::measure) {
        (backward ? measured_.backward : measured_.forward).push_back({name, 0});
        started_ = thread_cpu_seconds();
        return;
      }
      const auto& ops = backward ? profile_->backward : profile_->forward;
      const std::size_t k = next_[part];
      if (error_.empty() && (k >= ops.size() || ops[k].name != name))
        error_ = std::string("the injected step's ") +
                 (backward ? "backward entry " : "forward operation ") + std::to_string(k) +
                 " is '" + name + "', the op profile's is '" +
                 (k < ops.size() ? ops[k].name : std::string("(none)")) +
                 "': the profile was measured on another model";
      return;
    }
    if (--depth_ > 0) return;
    if (mode_ == Mode::measure) {
      auto& ops = backward ? measured_.backward : measured_.forward;
      ops.back().seconds = thread_cpu_seconds() - started_;
      return;
    }
    const auto& ops = backward ? profile_->backward : profile_->forward;
    const std::size_t k = next_[part]++;
    if (k < ops.size()) inject_compute(ops[k].seconds);
  }

  Mode mode_ = Mode::off;
  const OpProfile* profile_ = nullptr;
  OpProfile measured_;
  std::size_t next_[2] = {0, 0};
  int depth_ = 0;
  double started_ = 0;
  std::string error_;  // raised by end_step (the hook cannot throw through the library)
};

namespace {
OpInjection& op_injection_state() {
  static OpInjection state;
  return state;
}
}  // namespace

// Runs `step(mode)` `warmup` + `steps` times measuring (thread CPU time), `step` returning the
// optimizer's seconds; each operation's time is the median over the measured steps, and the rest is
// the median step's time less its operations and its optimizer.
inline OpProfile measure_ops(const std::function<double()>& step, int warmup, int steps) {
  std::vector<OpProfile> runs;
  std::vector<double> totals;
  for (int it = 0; it < warmup + steps; ++it) {
    OpInjection::instance().begin_step(OpInjection::Mode::measure);
    const double t0 = thread_cpu_seconds();
    double optimizer = 0;
    try {
      optimizer = step();
    } catch (...) {
      OpInjection::instance().end_step();
      throw;
    }
    const double total = thread_cpu_seconds() - t0;
    OpProfile p = OpInjection::instance().end_step();
    p.optimizer_seconds = optimizer;
    if (it < warmup) continue;
    totals.push_back(total);
    runs.push_back(std::move(p));
  }
  OpProfile m = runs.front();
  auto median_of = [&](auto get) {
    std::vector<double> v;
    for (const auto& r : runs) v.push_back(get(r));
    return median(v);
  };
  for (const auto& r : runs)
    DISTOP_CHECK(r.forward.size() == m.forward.size() && r.backward.size() == m.backward.size(),
                 "bench_simulated", "the measured steps ran different operations");
  for (std::size_t k = 0; k < m.forward.size(); ++k)
    m.forward[k].seconds = median_of([&](const OpProfile& r) { return r.forward[k].seconds; });
  for (std::size_t k = 0; k < m.backward.size(); ++k)
    m.backward[k].seconds = median_of([&](const OpProfile& r) { return r.backward[k].seconds; });
  m.optimizer_seconds = median_of([](const OpProfile& r) { return r.optimizer_seconds; });
  const double ops = OpProfile::total(m.forward) + OpProfile::total(m.backward);
  m.rest_seconds = std::max(0.0, median(totals) - ops - m.optimizer_seconds);
  return m;
}

}  // namespace distop::bench
