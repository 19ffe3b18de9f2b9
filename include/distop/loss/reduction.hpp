#pragma once
// How a loss reduces its per-entry terms: torch's `reduction` argument, with DistDL's rule for a
// distributed tensor.

#include <span>
#include <string_view>

namespace distop::loss {

// torch's reductions, under DistDL's rule: each rank sums its own box's terms, and the
// normalisation divides by a count read from the global shape (no message):
//   none:      no reduction; the per-entry loss, a tensor in the input's space.
//   sum:       the sum over every global entry; a rank's component is its box's sum.
//   mean:      the sum divided by the global element count.
//   batchmean: the sum divided by the global batch (global shape[0]); KLDiv only, as in torch.
// The three reducing forms return a loss in distop's convention (docs/losses.md): a [1] Var
// replicated over the input's partition whose components sum to the loss.
enum class Reduction { none, sum, mean, batchmean };

// "none", "sum", "mean", "batchmean" (torch's spellings).
std::string_view reduction_name(Reduction reduction);
// All the names above, in enum order.
std::span<const std::string_view> reduction_names();
// The reduction of a name above; an Error listing the valid names otherwise.
Reduction parse_reduction(std::string_view name);

}  // namespace distop::loss
