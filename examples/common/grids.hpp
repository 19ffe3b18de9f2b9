#pragma once
// Weight grids for a chain of DistributedLinear layers, shared by the example models.

#include <algorithm>
#include <distop/distop.hpp>
#include <vector>

namespace distop::examples {

// The largest divisor a of n with a * a <= n: the rows of the squarest a x (n / a) grid.
inline int square_rows(int n) {
  int a = 1;
  for (int d = 1; d * d <= n; ++d)
    if (n % d == 0) a = d;
  return a;
}

// A weight grid [P_out, P_in] and its ranks in row-major order.
struct LayerGrid {
  Shape shape;
  std::vector<int> ranks;
};

// The weight grids for a chain of `layers` layers over `ranks` ranks. The first grid is
// [a, ranks / a] with a = square_rows(ranks); each following grid puts the previous output ranks
// (its column 0) in its row 0 and the other ranks in the rows below; the last layer has
// P_out = 1, so the logits end on rank 0.
inline std::vector<LayerGrid> linear_chain_grids(int ranks, int layers) {
  const int a = square_rows(ranks);
  std::vector<LayerGrid> grids;
  std::vector<int> in_ranks(static_cast<std::size_t>(ranks / a));
  for (int r = 0; r < ranks / a; ++r) in_ranks[static_cast<std::size_t>(r)] = r;
  for (int l = 0; l < layers; ++l) {
    const int p_in = static_cast<int>(in_ranks.size());
    const int p_out = l + 1 == layers ? 1 : ranks / p_in;
    std::vector<int> grid_ranks = in_ranks;
    for (int r = 0; r < ranks && static_cast<int>(grid_ranks.size()) < p_out * p_in; ++r)
      if (std::find(in_ranks.begin(), in_ranks.end(), r) == in_ranks.end()) grid_ranks.push_back(r);
    grids.push_back({Shape{p_out, p_in}, grid_ranks});
    in_ranks.clear();
    for (int i = 0; i < p_out; ++i)
      in_ranks.push_back(grid_ranks[static_cast<std::size_t>(i * p_in)]);
  }
  return grids;
}

}  // namespace distop::examples
