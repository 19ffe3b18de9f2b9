#pragma once
// A loss's value: the sum of its components over the ranks (distop's loss convention).

#include "distop/autodiff/var.hpp"

namespace distop::loss {

// The value of `loss`, a loss in distop's convention (docs/losses.md: a Var of global shape [1]
// replicated over the loss's partition, each rank of it holding its component, the loss being
// their sum): the sum of the components, accumulated in double, on every rank (what torch's
// loss.item() is). Collective over the parent communicator of the loss's partition: every rank of
// it calls; ranks outside the partition (which hold an empty tensor) add nothing. An Error (on
// this rank) for a Var that is not of global shape [1].
template <class T>
double total(const Var<T>& loss);

}  // namespace distop::loss
