"""Partitions, spaces, decompositions, distribute/assemble, and tensors crossing without a copy."""

import numpy as np
import pytest
import torch

import distop
from distop import _core


def test_world_partition_and_sub_partitions(world_size, rank):
    P = distop.Partition.world([world_size])
    assert P.shape == [world_size] and P.size == world_size and P.active
    assert P.index == rank and P.coords == [rank]
    assert P.ranks == list(range(world_size))
    first = distop.Partition.world([1])
    assert first.active == (rank == 0)
    assert first.coords == ([0] if rank == 0 else []) and first.index == (0 if rank == 0 else -1)
    grid = distop.Partition.world([1, world_size])
    row = grid.slice(1, world_size - 1)
    assert row.shape == [1, 1] and row.ranks == [world_size - 1]
    assert grid.reshape([world_size, 1]).shape == [world_size, 1]
    both = first.unite(row)
    assert both.ranks == sorted({0, world_size - 1})
    assert "Partition" in str(P)
    # Explicit ranks, in reverse order.
    rev = distop.Partition.world([world_size], list(reversed(range(world_size))))
    assert rev.index == world_size - 1 - rank


def test_spaces_balanced_and_explicit(world_size, rank):
    P = distop.Partition.world([world_size, 1])
    s = distop.TensorSpace([2 * world_size + 1, 3], P)
    assert s.global_shape == [2 * world_size + 1, 3]
    assert s.local_shape == [3 if rank == 0 else 2, 3]
    assert s.decomposition.is_balanced()
    extents = [[1] * (world_size - 1) + [world_size + 2], [3]]
    d = distop.Decomposition.blocks([2 * world_size + 1, 3], [world_size, 1], extents)
    e = distop.TensorSpace(P, d)
    assert e.local_shape == [extents[0][rank], 3]
    assert e.local_offset == [rank, 0]
    assert (e == s) == (world_size == 1)
    # Outside the partition: every extent 0.
    first = distop.TensorSpace([4, 2], distop.Partition.world([1, 1]))
    assert first.local_shape == ([4, 2] if rank == 0 else [0, 0])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_distribute_assemble_round_trip(world_size, rank, dtype):
    P = distop.Partition.world([world_size, 1])
    space = distop.TensorSpace([world_size + 3, 2], P)
    g = torch.arange((world_size + 3) * 2, dtype=dtype).reshape(world_size + 3, 2)
    local = distop.distribute(g, space)
    assert isinstance(local, torch.Tensor) and local.dtype == dtype
    off = space.local_offset[0]
    assert torch.equal(local, g[off:off + space.local_shape[0]])
    back = distop.assemble(local, space, root=0)
    if rank == 0:
        assert torch.equal(back, g)
    else:
        assert back.numel() == 0
    # numpy in, numpy out.
    local_np = distop.distribute(g.numpy(), space)
    assert isinstance(local_np, np.ndarray)
    assert np.array_equal(local_np, local.numpy())


def test_tensors_cross_without_a_copy():
    x = torch.arange(12, dtype=torch.float64).reshape(3, 4)
    y = _core.roundtrip(x)  # through a distop Tensor and back
    assert isinstance(y, torch.Tensor) and y.shape == x.shape
    assert y.data_ptr() == x.data_ptr()
    y[1, 2] = -5.0
    assert x[1, 2] == -5.0  # writes visible both ways
    x[0, 0] = 7.0
    assert y[0, 0] == 7.0
    del x
    assert y[1, 2] == -5.0  # the distop side keeps the torch tensor alive
    a = np.ones((2, 2), dtype=np.float32)
    b = _core.roundtrip(a, numpy=True)
    assert b.__array_interface__["data"][0] == a.__array_interface__["data"][0]
    b[0, 1] = 3
    assert a[0, 1] == 3


def test_operator_results_live_in_distop_memory(world_size):
    # Identical spaces make a pass-through Repartition: the result is the input's own memory,
    # handed to distop and back without a copy.
    P = distop.Partition.world([world_size, 1])
    space = distop.TensorSpace([world_size, 3], P)
    op = _core.repartition("float64", space, space)
    x = torch.ones(space.local_shape, dtype=torch.float64)
    y = op.forward(x)
    assert y.data_ptr() == x.data_ptr()
    # A real move gives a new tensor over distop's memory, which stays valid.
    op2 = _core.all_gather("float64", space, [0])
    y2 = op2.forward(x)
    assert y2.shape == (world_size, 3) and torch.equal(y2, torch.ones(world_size, 3, dtype=torch.float64))


def test_zero_volume_tensor():
    z = distop.zero_volume_tensor(3, dtype=torch.float64)
    assert z.shape == (0, 0, 0) and z.dtype == torch.float64
