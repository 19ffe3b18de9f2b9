"""The layouts of the example models, as examples/common/grids.hpp computes them (no distop import:
the DistDL benchmark uses them too)."""


def square_rows(n):
    """The largest divisor a of n with a * a <= n (examples/common/grids.hpp)."""
    a = 1
    d = 1
    while d * d <= n:
        if n % d == 0:
            a = d
        d += 1
    return a


def linear_chain_grids(ranks, layers):
    """[(grid shape, ranks in row-major order)] for a chain of DistributedLinear layers, as
    examples/common/grids.hpp: the first grid is [a, ranks / a]; each following grid puts the
    previous output ranks (its column 0) in its row 0 and the others below; the last has
    P_out = 1, so the logits end on rank 0."""
    a = square_rows(ranks)
    grids = []
    in_ranks = list(range(ranks // a))
    for layer in range(layers):
        p_in = len(in_ranks)
        p_out = 1 if layer + 1 == layers else ranks // p_in
        grid_ranks = list(in_ranks)
        for r in range(ranks):
            if len(grid_ranks) >= p_out * p_in:
                break
            if r not in in_ranks:
                grid_ranks.append(r)
        grids.append(([p_out, p_in], grid_ranks))
        in_ranks = [grid_ranks[i * p_in] for i in range(p_out)]
    return grids
