#pragma once
// Tape: records operations in program order and replays their adjoints in exact reverse order.

#include <algorithm>
#include <cstddef>
#include <functional>
#include <memory>
#include <new>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "distop/core/error.hpp"
#include "distop/core/trace.hpp"

namespace distop {

namespace detail {
struct TapeRecorder;  // autodiff/function.hpp: the one way onto a tape

#ifdef DISTOP_SMPI
// SimGrid SMPI builds only (bench_simulated's injected compute, benchmarks/op_compute.hpp): a
// callback told when an operation's local computation begins and ends, that is make_function's
// forward (backward = false) and backward's replay of each entry that is not a linear operator's
// adjoint (backward = true), so that a simulation can time them or charge them as simulated
// compute. Operators' applications (apply: halo exchanges, broadcasts) are not reported. Null (the
// default): none. Per process, i.e. per simulated rank. `name` is valid during the call with
// begin = true; the call with begin = false passes nullptr.
using OpHook = void (*)(const char* name, bool backward, bool begin);
void set_op_hook(OpHook hook) noexcept;
OpHook op_hook() noexcept;
// Calls the hook (if any) with begin = true now and begin = false when it goes.
class OpHookScope {
 public:
  OpHookScope(const char* name, bool backward) : hook_(op_hook()), backward_(backward) {
    if (hook_ != nullptr) hook_(name, backward_, true);
  }
  ~OpHookScope() {
    if (hook_ != nullptr) hook_(nullptr, backward_, false);
  }
  OpHookScope(const OpHookScope&) = delete;
  OpHookScope& operator=(const OpHookScope&) = delete;

 private:
  OpHook hook_;
  bool backward_;
};
#endif
}  // namespace detail

// The record of a forward pass. Each differentiable operation appends one entry: its name and a
// closure that propagates output gradients to input gradients (holding whatever context it saved).
// backward() runs the closures in exactly the reverse order of recording. Since every rank records
// the same communicating operations in the same order (SPMD), the adjoint communication is matched
// across ranks just as the forward was: Bcast <-> Reduce, Send <-> Recv, Allreduce <-> Allreduce.
//
// The closures live in memory the tape owns and reuses from one step to the next (a few blocks,
// filled in order and rewound when the tape empties), so recording an operation allocates nothing
// once the first step has run. Each closure is destroyed, releasing what it saved, as soon as its
// adjoint has run.
class Tape {
 public:
  // Any callable with the signature void() works as an adjoint; this is the type-erased one.
  using Backward = std::function<void()>;
  // What an entry's replay is, for the trace (core/trace.hpp): a linear operator's adjoint
  // (distop::apply's entries; category "adjoint", named "<name>.adjoint"), or any other computation
  // (category "compute", named after the layer or function whose forward recorded it, else by the
  // entry's name).
  enum class Kind : unsigned char { compute, operator_adjoint };
  Tape() = default;
  Tape(const Tape&) = delete;
  Tape& operator=(const Tape&) = delete;
  Tape(Tape&& other) noexcept;
  Tape& operator=(Tape&& other) noexcept;
  ~Tape();

  // Replays every entry in reverse order, then clears the tape (releasing the saved context).
  // A tape replays once: a second backward() without a new recording between replays nothing.
  void backward();
  void clear() noexcept;
  std::size_t size() const noexcept { return entries_.size(); }
  // Whether backward() has run and nothing was recorded (or cleared) since.
  bool replayed() const noexcept { return replayed_; }
  // The names of the recorded operations, in recording order.
  std::vector<std::string> names() const;
  // Whether backward() is replaying a tape on this thread now. A Var's ready hook runs both when a
  // replay has made its gradient final and when clear() (or a tape's destruction) lets its uses
  // go; this tells the two apart.
  static bool replaying() noexcept;
  // For a ready hook, which runs where it cannot throw: the backward() replaying now throws
  // `error` once it has run every entry (the first such error of the replay wins). Outside a
  // replay it does nothing.
  static void fail_after_replay(Error error);
  // A callback backward() runs after each entry's adjoint (and its destruction), for work that
  // must advance while the replay computes: data parallelism's reductions progress there (MPICH
  // advances a nonblocking collective only inside MPI calls). Empty: none.
  void set_progress_hook(std::function<void()> hook) { progress_ = std::move(hook); }

 private:
  // Operations reach the tape through make_function (autodiff/function.hpp), linear operators
  // through apply (autodiff/apply.hpp).
  friend struct detail::TapeRecorder;

  // Appends an entry whose adjoint is `backward`, a callable taking no arguments (a lambda, or a
  // Backward, which must not be empty).
  template <class F>
  void record(std::string name, F&& backward, Kind kind = Kind::compute);

  struct Entry {
    std::string name;
    void* closure = nullptr;
    void (*run)(void*) = nullptr;
    void (*destroy)(void*) noexcept = nullptr;
    Kind kind = Kind::compute;
    std::string label;  // when tracing: the trace::Compute span open when it was recorded
  };

  // Bump allocation from blocks kept for the tape's lifetime.
  class Arena {
   public:
    void* allocate(std::size_t bytes, std::size_t align);
    // Makes all the memory available again (the closures in it must have been destroyed).
    void rewind() noexcept {
      block_ = 0;
      used_ = 0;
    }

   private:
    std::vector<std::pair<std::unique_ptr<std::byte[]>, std::size_t>> blocks_;
    std::size_t block_ = 0;  // the block being filled
    std::size_t used_ = 0;   // bytes used in it
  };

  template <class D>
  static void run_closure(void* p) {
    (*static_cast<D*>(p))();
  }
  template <class D>
  static void destroy_closure(void* p) noexcept {
    static_cast<D*>(p)->~D();
  }
  // Destroys the closures of `entries` (last first) and empties it.
  static void destroy_all(std::vector<Entry>& entries) noexcept;

  std::vector<Entry> entries_;
  Arena arena_;
  bool replayed_ = false;
  std::function<void()> progress_;
};

template <class F>
void Tape::record(std::string name, F&& backward, Kind kind) {
  using D = std::decay_t<F>;
  static_assert(std::is_invocable_v<D&>, "Tape::record: the adjoint must be callable as f()");
  if constexpr (std::is_same_v<D, Backward> || std::is_pointer_v<D>) {
    DISTOP_CHECK(static_cast<bool>(backward), "Tape::record", "entry '", name, "' has no adjoint");
  }
  static_assert(alignof(D) <= alignof(std::max_align_t),
                "Tape::record: over-aligned closures are not supported");
  // Room for one more entry, so that push_back below cannot throw; grown geometrically.
  if (entries_.size() == entries_.capacity())
    entries_.reserve(std::max<std::size_t>(64, 2 * entries_.capacity()));
  void* const p = arena_.allocate(sizeof(D), alignof(D));
  ::new (p) D(std::forward<F>(backward));
  entries_.push_back(Entry{std::move(name), p, &run_closure<D>, &destroy_closure<D>, kind, {}});
  replayed_ = false;
  if (trace::active() && kind == Kind::compute && trace::Compute::label() != nullptr) {
    try {
      entries_.back().label = trace::Compute::label();
    } catch (...) {  // no label then: the replay is named by the entry's name
    }
  }
}

}  // namespace distop
