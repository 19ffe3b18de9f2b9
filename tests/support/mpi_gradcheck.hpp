#pragma once
// Gradient checks of tape-recorded operations on distributed tensors against central finite
// differences, under the sum convention (testing::gradcheck through gradcheck.hpp): every rank's
// local entry of every input (each replicated copy its own component) is perturbed in turn, on
// that rank alone. Collective over the parent communicator of the first input's space: every rank
// of it calls with the same loss.

#include <functional>
#include <utility>
#include <vector>

#include "gradcheck.hpp"

namespace distop::test {

// expect_gradients_match, named for the distributed tests: the loss is summed over the ranks, and
// an input with no gradient on a rank counts as a zero gradient there.
inline void expect_gradients_match_everywhere(const std::function<Var<double>(Tape&)>& loss,
                                              std::vector<Var<double>> wrt, double h = 1e-6,
                                              double rel_tol = 1e-7) {
  expect_gradients_match(loss, std::move(wrt), h, rel_tol);
}

}  // namespace distop::test
