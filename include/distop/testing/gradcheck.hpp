#pragma once
// The gradient check: any differentiable computation's tape gradient against central finite
// differences in double, over distributed inputs.

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "distop/autodiff/tape.hpp"
#include "distop/autodiff/var.hpp"

namespace distop::testing {

struct GradcheckOptions {
  // The finite-difference step h: (J(x + h e) - J(x - h e)) / 2h.
  double step = 1e-6;
  // An entry passes when |tape - finite difference| <= tolerance * max(1, |finite difference|).
  double tolerance = 1e-6;
  // Check at most this many entries of each input on each rank, a seeded random subset (for large
  // inputs: every checked entry costs two runs of f on every rank); 0: every entry.
  std::int64_t max_entries = 0;
  // Seeds the output weights r and the subsets.
  std::uint64_t seed = 20261121;
};

// The outcome of one gradient check (the same on every rank).
struct GradcheckReport {
  bool passed = false;
  double max_abs_error = 0;       // max |tape - finite difference| over the checked entries
  double max_relative_error = 0;  // max |tape - finite difference| / max(1, |finite difference|)
  double tolerance = 0;
  std::int64_t checked = 0;  // entries checked, over every input and rank
  // The entry of the largest relative error: input (its position in `inputs`), the parent rank
  // holding it and its index in that rank's box (row-major), with both derivatives there.
  std::size_t worst_input = 0;
  int worst_rank = 0;
  std::int64_t worst_index = 0;
  double worst_tape = 0;
  double worst_numeric = 0;
  // "PASS: ..." or "FAIL: ...", with the errors, the tolerance and the worst entry.
  std::string str() const;
};

// Checks the gradients the tape computes for f against central differences, for every entry of
// every input on every rank (or a subset of at most options.max_entries per input and rank).
//
// f records a computation of `inputs` on the tape it is given and returns its output y, of any
// space; it must be deterministic and is run 2 (checked entries) + 1 times on fresh tapes. Each
// rank draws seeded weights r in y's space (its own, as random_tensor does: replicated copies
// differ; magnitudes in [0.5, 1) with random signs, so that no output is weighted near zero) and
// J = <r, y>, summed over every rank (the sum convention's inner product). The tape gradient is
// dJ/dx from backward(tape, y, r); the finite difference perturbs one entry of one rank's box at a
// time (each rank's entries in turn; a replicated input's copies are distinct variables under the
// sum convention, each with its own gradient) while every rank runs f. A parameter whose copies
// are one variable (GradientReduction::tied, DistributedBatchNorm's weight: every copy already
// holds the gradient summed over its partition) is checked at one rank.
//
// The inputs must be defined Vars of double that require gradients, on any TensorSpace (split,
// replicated, idle ranks). Their gradients are forgotten (zero_grad) before and after the check
// and their values left as they were. Collective over the parent communicator of inputs[0]'s
// space: every rank of it calls, with the same options; f's output and every input must live on
// partitions of the same parent ranks (congruent parents; an Error otherwise). Every rank
// receives the same report.
GradcheckReport gradcheck(const std::function<Var<double>(Tape&)>& f,
                          const std::vector<Var<double>>& inputs,
                          const GradcheckOptions& options = {});

}  // namespace distop::testing
