#pragma once
// Tape: records operations in program order and replays their adjoints in exact reverse order.

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

namespace distop {

// The record of a forward pass. Each differentiable operation appends one entry: its name and a
// closure that propagates output gradients to input gradients (holding whatever context it saved).
// backward() runs the closures in exactly the reverse order of recording. Since every rank records
// the same communicating operations in the same order (SPMD), the adjoint communication is matched
// across ranks just as the forward was: Bcast <-> Reduce, Send <-> Recv, Allreduce <-> Allreduce.
class Tape {
 public:
  using Backward = std::function<void()>;

  void record(std::string name, Backward backward);
  // Replays every entry in reverse order, then clears the tape (releasing the saved context).
  void backward();
  void clear() noexcept;
  std::size_t size() const noexcept { return entries_.size(); }
  // The names of the recorded operations, in recording order.
  std::vector<std::string> names() const;

 private:
  struct Entry {
    std::string name;
    Backward backward;
  };
  std::vector<Entry> entries_;
};

}  // namespace distop
