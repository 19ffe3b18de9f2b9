#pragma once
// Injected compute for bench_simulated's data-parallel step (--compute injected): one rank runs
// the model's forward and backward for real and records their shape in time (a ComputeProfile);
// every rank then replays that profile on a tape of the same parameters, each stretch of compute
// an smpi_execute of its measured duration (under SimGrid SMPI; a busy wait of that much CPU time
// under plain MPI), so that the gradient reducer sees its parameters become ready in the same
// order, at the same times and between the same progress calls as in the real backward pass,
// while no rank holds activations or spends host time computing them. The communication (the
// reducer's buckets), the optimizer step and the loss seed stay real.
#include <mpi.h>
#include <time.h>

#include <algorithm>
#include <cstddef>
#include <distop/distop.hpp>
#include <fstream>
#include <functional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "bench_util.hpp"

namespace distop::bench {

// A training step's compute, as the tape replays it: forward (model and loss) as one stretch,
// then one stretch per tape entry of backward, each followed by the parameters whose gradient
// became final when that entry was done (indices into the model's parameters()).
struct ComputeProfile {
  double forward_seconds = 0;
  std::vector<double> entry_seconds;
  std::vector<std::vector<int>> ready;  // per entry

  double backward_seconds() const {
    double t = 0;
    for (double s : entry_seconds) t += s;
    return t;
  }

  // Flattened for MPI_Bcast: forward, entries, then per entry its seconds, count and indices.
  std::vector<double> pack() const {
    std::vector<double> v{forward_seconds, static_cast<double>(entry_seconds.size())};
    for (std::size_t k = 0; k < entry_seconds.size(); ++k) {
      v.push_back(entry_seconds[k]);
      v.push_back(static_cast<double>(ready[k].size()));
      for (int i : ready[k]) v.push_back(i);
    }
    return v;
  }
  static ComputeProfile unpack(const std::vector<double>& v) {
    ComputeProfile p;
    std::size_t at = 0;
    p.forward_seconds = v.at(at++);
    const auto entries = static_cast<std::size_t>(v.at(at++));
    for (std::size_t k = 0; k < entries; ++k) {
      p.entry_seconds.push_back(v.at(at++));
      const auto n = static_cast<std::size_t>(v.at(at++));
      std::vector<int> r;
      for (std::size_t j = 0; j < n; ++j) r.push_back(static_cast<int>(v.at(at++)));
      p.ready.push_back(std::move(r));
    }
    return p;
  }

  // A text file of pack()'s numbers, one per line after the line "distop compute profile 1", so
  // that the runs of a series (every rank count) replay one measurement. load() throws
  // distop::Error when the file is not such a file.
  void save(const std::string& path) const {
    std::ofstream out(path);
    out << "distop compute profile 1\n";
    out.precision(17);
    for (double x : pack()) out << x << '\n';
    if (!out.flush()) throw Error("bench_simulated", "cannot write the compute profile " + path);
  }
  static ComputeProfile load(const std::string& path) {
    std::ifstream in(path);
    std::string header;
    if (!std::getline(in, header) || header != "distop compute profile 1")
      throw Error("bench_simulated", path + " is not a compute profile");
    std::vector<double> v;
    for (double x = 0; in >> x;) v.push_back(x);
    try {
      return unpack(v);
    } catch (const std::out_of_range&) {
      throw Error("bench_simulated", "the compute profile " + path + " is truncated");
    }
  }

  // Sent from `root` to every rank of `comm`.
  static ComputeProfile broadcast(const ComputeProfile& p, int root, MPI_Comm comm) {
    int rank = 0;
    MPI_Comm_rank(comm, &rank);
    std::vector<double> v = rank == root ? p.pack() : std::vector<double>{};
    long long n = static_cast<long long>(v.size());
    MPI_Bcast(&n, 1, MPI_LONG_LONG, root, comm);
    v.resize(static_cast<std::size_t>(n));
    MPI_Bcast(v.data(), static_cast<int>(n), MPI_DOUBLE, root, comm);
    return unpack(v);
  }
};

// This thread's CPU time in seconds: what SMPI charges a rank's compute with (it times each stretch
// between MPI calls with the thread's CPU clock), so that a busy machine's waits for a core count
// in neither. The parentheses keep SMPI's clock_gettime macro (the simulated clock) out.
inline double thread_cpu_seconds() {
  timespec ts{};
  (clock_gettime)(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// `seconds` of compute on this rank: simulated under SMPI, a busy wait otherwise. Under SMPI the
// host time the rank spent since its last MPI call is charged first and the timer restarted after
// (smpi_execute_benched): with plain smpi_execute the rank's benchmark interval would span the
// simulated compute, during which the other ranks of the process run, and their host time would
// be charged to this rank (the compute-only step grew with the rank count, 50 ms injected became
// 105 ms at 32 ranks).
inline void inject_compute(double seconds) {
  if (seconds <= 0) return;
#ifdef DISTOP_SMPI
  smpi_execute_benched(seconds);
#else
  const double end = thread_cpu_seconds() + seconds;
  while (thread_cpu_seconds() < end) {
  }
#endif
}

// Measures `forward` (returning the loss) and the tape's backward replay of the real model on this
// rank, in this thread's CPU time: `warmup` untimed steps, then the profile of the step whose total
// is the median of `steps`. No gradient reducer may be attached (this sets the parameters' ready
// hooks, and clears them after).
template <class Forward>
ComputeProfile measure_compute(const std::vector<Var<float>>& params, Forward&& forward, int warmup,
                               int steps) {
  std::vector<int>* current = nullptr;
  for (std::size_t i = 0; i < params.size(); ++i)
    params[i].set_ready_hook([&current, i] {
      if (current != nullptr) current->push_back(static_cast<int>(i));
    });
  std::vector<ComputeProfile> runs;
  for (int it = 0; it < warmup + steps; ++it) {
    ComputeProfile p;
    Tape tape;
    const double t0 = thread_cpu_seconds();
    Var<float> loss = forward(tape);
    double mark = thread_cpu_seconds();
    p.forward_seconds = mark - t0;
    p.ready.emplace_back();
    current = &p.ready.back();
    tape.set_progress_hook([&] {
      p.entry_seconds.push_back(thread_cpu_seconds() - mark);
      p.ready.emplace_back();
      current = &p.ready.back();
      mark = thread_cpu_seconds();  // the hook's own bookkeeping is not the model's compute
    });
    distop::backward(tape, loss);
    tape.set_progress_hook({});
    current = nullptr;
    p.ready.pop_back();  // opened after the last entry
    for (const auto& v : params) v.zero_grad();
    if (it >= warmup) runs.push_back(std::move(p));
  }
  for (const auto& v : params) v.set_ready_hook({});
  std::sort(runs.begin(), runs.end(), [](const ComputeProfile& a, const ComputeProfile& b) {
    return a.forward_seconds + a.backward_seconds() < b.forward_seconds + b.backward_seconds();
  });
  return runs.at(runs.size() / 2);
}

// Records the profile's step on `tape`: injects the forward stretch now and returns a loss whose
// backward replays one tape entry per measured entry (its stretch injected, then the gradients of
// the parameters that became final there handed over, zeros the first time, and their uses
// released so that a gradient reducer's ready hooks run in the measured order).
class InjectedStep {
 public:
  InjectedStep(std::vector<Var<float>> params, ComputeProfile profile)
      : params_(std::move(params)), profile_(std::move(profile)), zeroed_(params_.size(), false) {}

  const ComputeProfile& profile() const noexcept { return profile_; }

  Var<float> forward(Tape& tape) {
    inject_compute(profile_.forward_seconds);
    // A chain of operations, each taking the one before's output (so that the replay reaches every
    // entry) and the parameters whose gradients became final at its measured entry, listed last
    // first: make_function releases an operation's inputs' uses last input first, so that the
    // ready hooks run in the measured order.
    Var<float> link(DistTensor<float>(TensorSpace(Shape{1}, Partition::self())), true);
    // Entries replay last-recorded first: record the measured order backwards.
    for (std::size_t k = profile_.entry_seconds.size(); k-- > 0;) {
      const std::vector<int>& ready = profile_.ready[k];
      std::vector<Var<float>> inputs{link};
      for (auto i = ready.rbegin(); i != ready.rend(); ++i)
        inputs.push_back(params_[static_cast<std::size_t>(*i)]);
      link = make_function<float>(tape, "injected", std::move(inputs), [&] {
        return Computed{link.value(), [this, k](const DistTensor<float>&, Gradients<float>& grads) {
                          inject_compute(profile_.entry_seconds[k]);
                          const std::vector<int>& final_here = profile_.ready[k];
                          for (std::size_t j = 0; j < final_here.size(); ++j) {
                            const auto i = static_cast<std::size_t>(final_here[j]);
                            const Var<float>& v = grads.input(final_here.size() - j);
                            if (v.has_grad()) continue;
                            if (!zeroed_[i])
                              v.grad();  // zeros
                            else
                              v.new_grad_for_overwrite();  // the last step's storage, as computed
                            zeroed_[i] = true;
                          }
                          grads.add_output_grad(0);  // the chain goes on
                        }};
      });
    }
    return link;
  }

 private:
  std::vector<Var<float>> params_;
  ComputeProfile profile_;
  std::vector<bool> zeroed_;
};

}  // namespace distop::bench
