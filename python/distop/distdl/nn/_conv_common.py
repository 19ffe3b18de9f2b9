"""What DistDL's distributed convolutions share: per-axis parameters, the checks of the channel
and general layers' partitions, each weight block's channel counts, the output partition recast
as P_w's rows, and sub-grids of P_w."""

import numpy as np
import torch

from ..utilities.slicing import compute_subshape, range_index


def expand(value, dims):
    """`value` (an int, or one per spatial axis) as a list of `dims` ints; DistDL's ValueError
    for another length."""
    v = [int(a) for a in np.atleast_1d(value)]
    if len(v) == 1:
        return v * dims
    if len(v) != dims:
        raise ValueError(f"Invalid parameter: {value}")
    return v


def torch_conv(dims):
    """torch.nn.Conv{dims}d."""
    return getattr(torch.nn, f"Conv{dims}d")


def check_channel_partitions(P_x, P_y, P_w, dims, spatial_split):
    """DistDL's ValueErrors for P_x = [1, P_ci, *S], P_y = [1, P_co, *S], P_w = [P_co, P_ci, *S]
    (S all 1 unless `spatial_split`), decided from the partitions' shapes, which every worker
    holds, so every worker raises alike."""
    shapes = {name: [int(s) for s in np.atleast_1d(P.shape)]
              for name, P in (("P_x", P_x), ("P_y", P_y), ("P_w", P_w))}
    for name, shape in shapes.items():
        if len(shape) != dims + 2:
            raise ValueError(f"{name} {shape} must have {dims + 2} dimensions (a {dims}-d "
                             "convolution)")
    for name in ("P_x", "P_y"):
        if shapes[name][0] != 1:
            raise ValueError(f"The batch dimension of {name} {shapes[name]} must not be split.")
    for name in ("P_x", "P_y", "P_w"):
        if spatial_split:
            if name != "P_w" and shapes[name][2:] != shapes["P_w"][2:]:
                raise ValueError(f"Spatial components of {name} and P_w must match.")
        elif any(s != 1 for s in shapes[name][2:]):
            raise ValueError(f"Spatial components of {name} must be 1 x ... x 1.")
    if shapes["P_w"][1] != shapes["P_x"][1]:
        raise ValueError("Index 2 of P_w dimension must match input channel partition.")
    if shapes["P_w"][0] != shapes["P_y"][1]:
        raise ValueError("Index 1 of P_w dimension must match output channel partition.")


def channel_block(P_w, in_channels, out_channels):
    """(output, input) channels of this worker's block of the weight, balanced over P_w's first
    two axes (call on P_w's workers)."""
    local_co, local_ci = compute_subshape(np.asarray(P_w.shape[0:2]), np.asarray(P_w.index[0:2]),
                                          [out_channels, in_channels])
    return int(local_co), int(local_ci)


def output_rows(P_y):
    """P_y = [1, P_co, *S] as the grid [P_co, 1, *S] (the same workers in the same order), whose
    blocks line up with P_w's rows for the SumReduce over P_w's input-channel axis."""
    shape = [int(s) for s in P_y.shape]
    return P_y.create_cartesian_topology_partition([shape[1], 1] + shape[2:])


def sub_grid(P_w, keep, shape):
    """The workers of P_w whose index `keep` accepts, as a Cartesian partition of `shape`
    (collective over them; inactive elsewhere)."""
    ranks = [r for r, c in enumerate(range_index(P_w.shape)) if keep(np.asarray(c))]
    base = P_w.create_partition_inclusive(ranks)
    grid = base.create_cartesian_topology_partition(shape)
    base.deactivate()
    return grid


__all__ = ["expand", "torch_conv", "check_channel_partitions", "channel_block", "output_rows",
           "sub_grid"]
