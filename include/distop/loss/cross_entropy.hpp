#pragma once
// Softmax cross-entropy of logits against class labels, averaged over the global batch.

#include <cstdint>
#include <vector>

#include "distop/autodiff/tape.hpp"
#include "distop/autodiff/var.hpp"

namespace distop::loss {

// PyTorch's cross_entropy(logits, labels) with reduction 'mean', for logits of global shape
// [batch, classes] with the class axis unsplit (the batch axis may be split over the partition).
// `labels` holds the class of each row of this rank's box (empty outside the partition).
//
// Returns the loss in distop's loss convention (docs/losses.md): a Var of shape [1] replicated
// over the logits' partition, each rank's component the sum of its rows'
// -log softmax(logits)[label] divided by the global batch, so that the loss (the sum of the
// components, loss::total) is the mean over the global batch. A replicated batch axis counts each
// copy; ranks outside the partition hold an empty tensor. Backward adds dL/d(component) (softmax -
// onehot) / batch to the logits' gradient, from the probabilities saved by the forward pass.
//
// Collective over the logits' parent communicator (one small allreduce): a wrong label count or a
// label outside [0, classes) on any rank raises the same Error on every rank.
template <class T>
Var<T> cross_entropy(Tape& tape, const Var<T>& logits, const std::vector<std::int32_t>& labels);

// The number of this rank's rows whose argmax (the first, on ties) is the label; sum over the
// ranks holding distinct rows for the global count. Local: labels are checked as above but not
// agreed.
template <class T>
std::int64_t count_correct(const DistTensor<T>& logits, const std::vector<std::int32_t>& labels);

}  // namespace distop::loss
