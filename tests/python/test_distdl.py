"""distop.distdl: a DistDL program (MPIPartition, Repartition, Broadcast, SumReduce, HaloExchange,
a feature-partitioned convolution) equal to the same computation on one rank, DistDL's error for
mismatched partitions, and the primitives' dot-product adjoint tests."""

import numpy as np
import pytest
import torch

mpi4py = pytest.importorskip("mpi4py")
from mpi4py import MPI  # noqa: E402

import distop  # noqa: E402
from distop.distdl.backends.mpi.partition import MPIPartition  # noqa: E402
from distop.distdl.nn import (Broadcast, DistributedFeatureConv1d, HaloExchange,  # noqa: E402
                              Repartition, SumReduce)
from distop.distdl.nn.mixins.conv_mixin import ConvMixin  # noqa: E402
from distop.distdl.nn.mixins.halo_mixin import HaloMixin  # noqa: E402
from distop.distdl.utilities.slicing import compute_start_index, compute_subshape  # noqa: E402
from distop.distdl.utilities.torch import zero_volume_tensor  # noqa: E402
from distop.testing import adjoint_test  # noqa: E402


class _ConvHalo(HaloMixin, ConvMixin):
    pass


def _partitions(shape):
    """P_world over MPI_COMM_WORLD, P_0 (world rank 0 as a grid of ones) and P_x (every rank as
    a grid of `shape`, whose product is the world size)."""
    P_world = MPIPartition(MPI.COMM_WORLD)
    P_0 = P_world.create_partition_inclusive([0]).create_cartesian_topology_partition(
        [1] * len(shape))
    P_x = P_world.create_partition_inclusive(np.arange(P_world.size)) \
        .create_cartesian_topology_partition(shape)
    return P_world, P_0, P_x


def test_partition_attributes():
    P_world, P_0, P_x = _partitions([1, MPI.COMM_WORLD.size])
    assert P_world.active and P_world.rank == MPI.COMM_WORLD.rank
    assert P_x.active and list(P_x.index) == [0, MPI.COMM_WORLD.rank]
    assert P_0.active == (MPI.COMM_WORLD.rank == 0)
    assert list(P_0.shape) == [1, 1]
    assert (P_0.index is None) == (MPI.COMM_WORLD.rank != 0)
    P_0.deactivate()
    assert not P_0.active and list(P_0.shape) == [1, 1]


def test_distdl_program_equals_one_rank():
    """Scatter x [N, F] over the features (P_x = [1, P]), broadcast W [F, K]'s blocks from rank 0
    along with it, multiply locally, sum the partial products onto rank 0 (SumReduce) and square:
    the loss and both gradients equal torch's on the whole tensors."""
    P = MPI.COMM_WORLD.size
    P_world, P_0, P_x = _partitions([1, P])
    torch.manual_seed(7)
    x_g, w_g = torch.randn(5, 2 * P + 1, dtype=torch.float64), torch.randn(2 * P + 1, 3,
                                                                          dtype=torch.float64)
    scatter = Repartition(P_0, P_x)
    x_l = scatter(x_g.clone() if P_0.active else zero_volume_tensor(dtype=torch.float64))
    x_l.requires_grad_(True)
    # W's rows follow x's features: its block on rank r is rows [start, stop) of x's split. Each
    # rank takes its block of W from rank 0 by a Broadcast of W from P_0 to every rank (a [1, 1]
    # grid onto [1, P]), then keeps its rows.
    w_in = w_g.clone().requires_grad_(True) if P_0.active else \
        zero_volume_tensor(dtype=torch.float64).requires_grad_(True)
    w_all = Broadcast(P_0, P_x, preserve_batch=False)(w_in)
    start = int(compute_start_index(P, P_x.index[1], 2 * P + 1)[0])
    n = int(compute_subshape(P, P_x.index[1], 2 * P + 1)[0])
    partial = x_l @ w_all[start:start + n]
    # Partial products [5, 3] on every rank of the [1, P] grid, summed onto P_0 ([1, 1]).
    y = SumReduce(P_x, P_0)(partial)
    loss = (y ** 2).sum()
    loss.backward()
    gather = Repartition(P_x, P_0)
    dx = gather(x_l.grad)
    if P_0.active:
        x_r = x_g.clone().requires_grad_(True)
        w_r = w_g.clone().requires_grad_(True)
        loss_r = ((x_r @ w_r) ** 2).sum()
        loss_r.backward()
        assert torch.allclose(loss, loss_r, rtol=1e-12, atol=0)
        assert torch.allclose(dx, x_r.grad, rtol=1e-12, atol=1e-12)
        assert torch.allclose(w_in.grad, w_r.grad, rtol=1e-12, atol=1e-12)
    else:
        assert y.numel() == 0 and w_in.grad.numel() == 0


def test_halo_exchange_fills_ghosts_from_neighbours():
    """DistDL's halo of a kernel-3 convolution with padding 1 over P_x = [1, 1, P]: after the
    exchange each rank's padded block equals the global tensor over its block and ghosts."""
    P = MPI.COMM_WORLD.size
    _, _, P_x = _partitions([1, 1, P])
    glob = np.array([2, 3, 4 * P + 1])
    g = torch.arange(float(np.prod(glob)), dtype=torch.float64).reshape(*glob)
    halo, recv, send, _ = _ConvHalo()._compute_exchange_info(glob, [3], [1], [1], [1], True,
                                                             P_x.shape, P_x.index)
    start = compute_start_index(P_x.shape, P_x.index, glob)
    local = compute_subshape(P_x.shape, P_x.index, glob)
    left, right = int(halo[2, 0]), int(halo[2, 1])
    assert (left, right) == (0 if P_x.index[2] == 0 else 1, 0 if P_x.index[2] == P - 1 else 1)
    x = torch.zeros(2, 3, int(local[2]) + left + right, dtype=torch.float64)
    x[:, :, left:left + int(local[2])] = g[:, :, start[2]:start[2] + local[2]]
    y = HaloExchange(P_x, halo, recv, send)(x.clone())
    assert torch.equal(y, g[:, :, start[2] - left:start[2] + local[2] + right])


def test_feature_conv_equals_torch():
    """DistributedFeatureConv1d with rank 0's weight equals torch.nn.Conv1d on the whole batch,
    output and input gradient."""
    P = MPI.COMM_WORLD.size
    _, P_0, P_x = _partitions([1, 1, P])
    torch.manual_seed(3)
    glob = [2, 3, 3 * P + 2]
    x_g = torch.randn(*glob)
    conv = torch.nn.Conv1d(3, 4, 3, padding=1)
    layer = DistributedFeatureConv1d(P_x, 3, 4, 3, padding=1)
    if P_0.active:
        layer.weight.data = conv.weight.detach().clone()
        layer.bias.data = conv.bias.detach().clone()
    scatter, gather = Repartition(P_0, P_x), Repartition(P_x, P_0)
    with torch.no_grad():
        x = scatter(x_g if P_0.active else zero_volume_tensor())
    x.requires_grad_(True)
    y = layer(x)
    (y ** 2).sum().backward()
    y_g, dx_g = gather(y.detach()), gather(x.grad)
    if P_0.active:
        x_r = x_g.clone().requires_grad_(True)
        y_r = conv(x_r)
        (y_r ** 2).sum().backward()
        assert torch.allclose(y_g, y_r.detach(), atol=1e-5)
        assert torch.allclose(dx_g, x_r.grad, atol=1e-5)


def test_repartition_mismatched_partitions_raise_value_error():
    _, _, P_x = _partitions([1, MPI.COMM_WORLD.size])
    P_y = MPIPartition(MPI.COMM_WORLD).create_cartesian_topology_partition(
        [MPI.COMM_WORLD.size, 1, 1])
    with pytest.raises(ValueError, match="same dimension"):
        Repartition(P_x, P_y)


@pytest.mark.parametrize("transpose", [False, True])
def test_primitives_adjoint(transpose):
    """<F x, y> = <x, F* y> over all ranks for Broadcast and SumReduce (also transposed),
    Repartition and HaloExchange between the world and rank 0."""
    P = MPI.COMM_WORLD.size
    _, P_0, P_x = _partitions([1, P, 1])
    dt = torch.float64
    on_0 = [2, 3, 4] if P_0.active else [0]
    on_x = [2, 3, 4]
    if transpose:
        P_t = MPIPartition(MPI.COMM_WORLD).create_cartesian_topology_partition([1, P, 1])
        bcast = Broadcast(P_0, P_t, transpose_src=True, preserve_batch=False)
        reduce = SumReduce(P_t, P_0, transpose_src=True, preserve_batch=False)
    else:
        bcast = Broadcast(P_0, P_x, preserve_batch=False)
        reduce = SumReduce(P_x, P_0, preserve_batch=False)
    for op, shape in ((bcast, on_0), (reduce, on_x)):
        report = adjoint_test(op, torch.zeros(shape, dtype=dt))
        assert report.passed, str(report)
    glob = [3, 4 * P + 1, 2]
    local = [int(n) for n in compute_subshape(P_x.shape, P_x.index, glob)]
    report = adjoint_test(Repartition(P_x, P_0), torch.zeros(local, dtype=dt))
    assert report.passed, str(report)
    _, _, P_h = _partitions([1, 1, P])
    gh = np.array([2, 2, 3 * P + 1])
    halo, recv, send, _ = _ConvHalo()._compute_exchange_info(gh, [3], [1], [1], [1], True,
                                                             P_h.shape, P_h.index)
    padded = [int(n) + int(h[0]) + int(h[1]) for n, h in
              zip(compute_subshape(P_h.shape, P_h.index, gh), halo)]
    exchange = HaloExchange(P_h, halo, recv, send)
    report = adjoint_test(lambda t: exchange(t.clone()), torch.zeros(padded, dtype=dt))
    assert report.passed, str(report)
    assert distop.size() == P
