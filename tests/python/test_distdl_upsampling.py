"""distop.distdl's DistributedUpsample with DistDL's arguments (size as the output's whole global
shape, mode "linear" for the input's number of spatial axes, align_corners=False accepted with
"nearest") equal to torch.nn.Upsample on the whole tensor, forward and backward, scattered from and
gathered onto rank 0 with Repartition as DistDL's own tests do; and DistDL's sequential
Interpolate (purely local) equal to torch on whole blocks and to their slices on sub-blocks, with
its adjoint."""

import numpy as np
import pytest
import torch

mpi4py = pytest.importorskip("mpi4py")
from mpi4py import MPI  # noqa: E402

from distop.distdl.backends.mpi.partition import MPIPartition  # noqa: E402
from distop.distdl.nn import DistributedUpsample, Interpolate, Repartition  # noqa: E402
from distop.testing import adjoint_test  # noqa: E402
from distop.distdl.utilities.torch import zero_volume_tensor  # noqa: E402

TORCH_MODES = {3: "linear", 4: "bilinear", 5: "trilinear"}


@pytest.mark.parametrize("mode,align,use_size,scale", [
    ("nearest", False, False, 1.5), ("linear", True, True, 1.5), ("linear", False, False, 2),
    ("linear", False, True, 0.6)])
@pytest.mark.parametrize("dims", [1, 2])
def test_distdl_upsample_equals_torch(mode, align, use_size, scale, dims):
    P = MPI.COMM_WORLD.size
    grid = [1, 1, P] if dims == 1 else ([1, 1, 2, 2] if P == 4 else [1, 1, P, 1])
    x_shape = [2, 3, 9] if dims == 1 else [2, 3, 7, 5]
    P_world = MPIPartition(MPI.COMM_WORLD)
    P_0 = P_world.create_partition_inclusive([0]).create_cartesian_topology_partition(
        [1] * len(grid))
    P_x = P_world.create_partition_inclusive(np.arange(P)).create_cartesian_topology_partition(
        grid)
    y_shape = x_shape[:2] + [int(np.floor(n * scale)) for n in x_shape[2:]]
    if use_size:
        layer = DistributedUpsample(P_x, size=y_shape, mode=mode, align_corners=align)
    else:
        layer = DistributedUpsample(P_x, scale_factor=scale, mode=mode, align_corners=align)
    torch.manual_seed(11)
    X = torch.randn(x_shape, dtype=torch.float64)
    dY = torch.randn(y_shape, dtype=torch.float64)
    x = Repartition(P_0, P_x)(X.clone() if P_0.active else zero_volume_tensor(
        dtype=torch.float64))
    x.requires_grad_(True)
    y = layer(x.clone())
    dy = Repartition(P_0, P_x)(dY.clone() if P_0.active else zero_volume_tensor(
        dtype=torch.float64))
    y.backward(dy)
    y_g = Repartition(P_x, P_0)(y.detach())
    dx_g = Repartition(P_x, P_0)(x.grad)
    if P_0.active:
        torch_mode = TORCH_MODES[len(x_shape)] if mode == "linear" else mode
        kw = dict(size=y_shape[2:]) if use_size else dict(scale_factor=scale)
        ref = torch.nn.Upsample(mode=torch_mode,
                                align_corners=align if mode == "linear" else None, **kw)
        Xr = X.clone().requires_grad_(True)
        Y = ref(Xr)
        Y.backward(dY)
        torch.testing.assert_close(y_g, Y.detach(), rtol=0, atol=1e-14)
        torch.testing.assert_close(dx_g, Xr.grad, rtol=0, atol=1e-13)


def test_distdl_upsample_errors():
    P_world = MPIPartition(MPI.COMM_WORLD)
    P_x = P_world.create_partition_inclusive(np.arange(P_world.size)) \
        .create_cartesian_topology_partition([1, 1, P_world.size])
    with pytest.raises(ValueError, match="One of"):
        DistributedUpsample(P_x)
    with pytest.raises(ValueError, match="Only one"):
        DistributedUpsample(P_x, size=[1, 1, 4], scale_factor=2)
    with pytest.raises(ValueError, match="does not match"):
        DistributedUpsample(P_x, size=[4])
    with pytest.raises(NotImplementedError):
        DistributedUpsample(P_x, scale_factor=2, mode="cubic")


INTERPOLATE_CASES = [("nearest", False), ("linear", False), ("linear", True)]


@pytest.mark.parametrize("mode,align", INTERPOLATE_CASES)
@pytest.mark.parametrize("dims", [1, 2, 3])
def test_distdl_interpolate_whole_and_blocks(mode, align, dims):
    gx = [2, 3, 7, 6, 5][:2 + dims]
    gy = [2, 3, 11, 13, 8][:2 + dims]
    zeros = [0] * len(gx)
    torch.manual_seed(5)
    X = torch.randn(gx, dtype=torch.float64)
    whole = Interpolate(zeros, gx, gx, zeros, gy, gy, mode=mode, align_corners=align)
    Y = whole(X)
    torch_mode = TORCH_MODES[2 + dims] if mode == "linear" else "nearest"
    ref = torch.nn.functional.interpolate(X, size=gy[2:], mode=torch_mode,
                                          align_corners=align if mode == "linear" else None)
    torch.testing.assert_close(Y, ref, rtol=0, atol=1e-14)
    # An output block computed from an input block that holds every input it reads (one more on
    # each side than the outputs' extreme sources) is the slice of the whole output.
    y0 = [0, 0] + [m // 3 for m in gy[2:]]
    y1 = [2, 3] + [m - m // 4 for m in gy[2:]]
    x0, x1 = [0, 0], [2, 3]
    for a in range(2, len(gx)):
        src = [(o + 0.5) * gx[a] / gy[a] - 0.5 for o in (y0[a], y1[a] - 1)]
        if align:
            src = [o * (gx[a] - 1) / (gy[a] - 1) for o in (y0[a], y1[a] - 1)]
        x0.append(max(0, int(np.floor(src[0])) - 1))
        x1.append(min(gx[a], int(np.floor(src[1])) + 2))
    block = Interpolate(x0, x1, gx, y0, y1, gy, mode=mode, align_corners=align)
    xb = X[tuple(slice(b, e) for b, e in zip(x0, x1))]
    torch.testing.assert_close(block(xb), Y[tuple(slice(b, e) for b, e in zip(y0, y1))],
                               rtol=0, atol=1e-13)
    report = adjoint_test(block, xb, comm=MPI.COMM_SELF)
    assert report.passed, str(report)


def test_distdl_interpolate_errors():
    g = [1, 2, 6]
    with pytest.raises(ValueError, match="mode 'cubic'"):
        Interpolate([0, 0, 0], g, g, [0, 0, 0], g, g, mode="cubic")
    with pytest.raises(ValueError, match="not inside the global shape"):
        Interpolate([0, 0, 0], [1, 2, 7], g, [0, 0, 0], g, g)
    with pytest.raises(ValueError, match="batch and channel"):
        Interpolate([0, 0, 0], g, g, [0, 0, 0], [1, 1, 6], g)
    with pytest.raises(ValueError, match="entries"):
        Interpolate([0, 0], g, g, [0, 0, 0], g, g)
    layer = Interpolate([0, 0, 0], g, g, [0, 0, 0], [1, 2, 12], [1, 2, 12], mode="linear")
    with pytest.raises(ValueError, match="input of shape"):
        layer(torch.zeros(1, 2, 5))
