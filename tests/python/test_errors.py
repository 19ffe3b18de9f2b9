"""distop's errors arrive as distop.Error, with distop's message, on every rank: never a hang."""

import pytest
import torch

import distop
import distop.torch as dt


def test_error_is_a_python_exception_type():
    assert issubclass(distop.Error, RuntimeError)


def test_a_block_that_does_not_fit_is_an_error_everywhere(world_size, rank):
    P = world_size
    gather = dt.Gather(distop.Partition.world([P, 1]), root=0)
    x = torch.zeros(2, 3 if rank != P - 1 else 4, dtype=torch.float64)
    if P == 1:
        x = torch.zeros(2, 4, dtype=torch.float64)
        gather(x)  # alone, any shape is the whole tensor
        return
    with pytest.raises(distop.Error, match=r"Gather.*rank"):
        gather(x)
    # The module still works afterwards on every rank.
    y = gather(torch.zeros(1, 3, dtype=torch.float64))
    assert list(y.shape) == ([P, 3] if rank == 0 else [0, 0])


def test_unsupported_or_mismatched_dtypes(world_size, rank):
    P = world_size
    ag = dt.AllGather(distop.Partition.world([P, 1]), [0])
    with pytest.raises(distop.Error, match="neither float32 nor float64"):
        ag(torch.zeros(1, 2, dtype=torch.int64))
    if P > 1:
        x = torch.zeros(1, 2, dtype=torch.float32 if rank == 0 else torch.float64)
        with pytest.raises(distop.Error, match="different dtypes"):
            ag(x)


def test_wrong_dimensions(world_size):
    ag = dt.AllGather(distop.Partition.world([world_size, 1]), [0])
    with pytest.raises(distop.Error, match="as many dimensions as the partition"):
        ag(torch.zeros(1, 2, 3, dtype=torch.float64))


def test_bad_partitions(world_size, rank):
    with pytest.raises(distop.Error, match="Partition"):
        distop.Partition.world([world_size + 1])
    if world_size > 1:
        # The ranks pass different partitions.
        with pytest.raises(distop.Error):
            distop.Partition.world([1], [0 if rank == 0 else 1])
        # Broadcast between grids that do not broadcast ([1, P] onto [P, 1]).
        W = distop.Partition.world
        space = distop.TensorSpace([3, world_size], W([1, world_size]))
        with pytest.raises(distop.Error, match="Broadcast"):
            distop._core.broadcast("float64", space, W([world_size, 1]))
    with pytest.raises(distop.Error, match="SumReduce"):
        dt.SumReduce(distop.Partition.world([1]), distop.Partition.world([1, 1]))


def test_prebuilt_operator_with_a_wrong_input(world_size, rank):
    P = world_size
    space = distop.TensorSpace([P, 2], distop.Partition.world([P, 1]))
    op = distop._core.all_gather("float64", space, [0])
    bad = torch.zeros(1, 2 if rank != 0 else 3, dtype=torch.float64)
    with pytest.raises(distop.Error, match="DistTensor|shape") as info:
        dt.apply(op, bad)
    assert "rank" in str(info.value)
    with pytest.raises(distop.Error, match="float32"):
        dt.apply(op, torch.zeros(1, 2, dtype=torch.float32))


def test_halo_widths_beyond_the_neighbour(world_size):
    if world_size < 2:
        pytest.skip("needs a neighbour")
    interior = distop.TensorSpace([world_size, 2], distop.Partition.world([world_size, 1]))
    with pytest.raises(distop.Error, match="HaloExchange"):
        dt.HaloExchange(interior, widths=[[(2, 2)] * world_size, [(0, 0)]])(
            torch.zeros(5, 2, dtype=torch.float64))
