"""DistDL-style layers from Python: DistributedLinear against torch.nn.Linear on the whole batch
(outputs, input, weight and bias gradients, state_dict names and global tensors)."""

import torch

import distop
import distop.testing
import distop.nn
from distop.nn import DistributedLinear


def grids(P):
    return {1: (1, 1), 2: (1, 2), 3: (3, 1), 4: (2, 2)}[P]


def blocks(n, parts):
    b = [n // parts + (1 if i < n % parts else 0) for i in range(parts)]
    return [sum(b[:i]) for i in range(parts + 1)]


def test_distributed_linear_equals_torch(world_size, rank):
    p_out, p_in = grids(world_size)
    W = distop.Partition.world
    P_x, P_w = W([1, p_in]), W([p_out, p_in])
    layer = DistributedLinear(P_x, P_w, 5, 3, seed=3, dtype=torch.float64)
    torch.manual_seed(3)
    ref = torch.nn.Linear(5, 3, dtype=torch.float64)
    assert list(layer.state_dict().keys()) == ["weight", "bias"]
    torch.manual_seed(8)
    X = torch.randn(2, 5, dtype=torch.float64)
    cols, rows = blocks(5, p_in), blocks(3, p_out)
    if P_x.active:
        j = P_x.coords[1]
        x = X[:, cols[j]:cols[j + 1]].clone().requires_grad_(True)
    else:
        x = distop.zero_volume_tensor(2, torch.float64)
    y = layer(x)
    Xr = X.clone().requires_grad_(True)
    Y = ref(Xr)
    if layer.P_y.active:
        i = layer.P_y.coords[1]
        torch.testing.assert_close(y, Y[:, rows[i]:rows[i + 1]])
    else:
        assert y.numel() == 0
    (y * y).sum().backward()
    (Y * Y).sum().backward()
    if P_w.active:
        i, j = P_w.coords
        torch.testing.assert_close(layer.weight.grad,
                                   ref.weight.grad[rows[i]:rows[i + 1], cols[j]:cols[j + 1]])
    if layer.P_y.active:
        i = layer.P_y.coords[1]
        torch.testing.assert_close(layer.bias.grad, ref.bias.grad[rows[i]:rows[i + 1]])
    if P_x.active:
        j = P_x.coords[1]
        torch.testing.assert_close(x.grad, Xr.grad[:, cols[j]:cols[j + 1]])
    sd = layer.global_state_dict(root=0)
    if rank == 0:
        torch.testing.assert_close(sd["weight"], ref.weight.detach())
        torch.testing.assert_close(sd["bias"], ref.bias.detach())


def test_distributed_linear_gradcheck(world_size, rank):
    p_out, p_in = grids(world_size)
    W = distop.Partition.world
    P_x, P_w = W([1, p_in]), W([p_out, p_in])
    layer = DistributedLinear(P_x, P_w, 4, 3, seed=1, dtype=torch.float64)
    cols = blocks(4, p_in)
    shape = [2, cols[P_x.coords[1] + 1] - cols[P_x.coords[1]]] if P_x.active else [0, 0]
    assert distop.testing.gradcheck(layer, torch.zeros(shape, dtype=torch.float64),
                                    fast_mode=world_size > 2)


def test_distributed_batch_norm_equals_torch(world_size, rank):
    P = world_size
    W = distop.Partition.world
    P_x = W([1, 1, P, 1])                    # the rows split over every rank, unevenly
    bn = distop.nn.DistributedBatchNorm(P_x, 3, dtype=torch.float64)
    ref = torch.nn.BatchNorm2d(3, dtype=torch.float64)
    assert list(bn.state_dict().keys()) == list(ref.state_dict().keys())
    torch.manual_seed(6)
    X = torch.randn(2, 3, P + 1, 2, dtype=torch.float64) * 2 + 1
    with torch.no_grad():
        ref.weight.uniform_(0.5, 1.5)
        ref.bias.uniform_(-1, 1)
        bn.weight.copy_(ref.weight)
        bn.bias.copy_(ref.bias)
    space = distop.TensorSpace([2, 3, P + 1, 2], P_x)
    r0, n = space.local_offset[2], space.local_shape[2]
    x = X[:, :, r0:r0 + n].clone().requires_grad_(True)
    Xr = X.clone().requires_grad_(True)
    y, Y = bn(x), ref(Xr)
    torch.testing.assert_close(y, Y[:, :, r0:r0 + n])
    (y * y).sum().backward()
    (Y * Y).sum().backward()
    torch.testing.assert_close(x.grad, Xr.grad[:, :, r0:r0 + n])
    # Tied: every rank's copy receives torch's gradient.
    for mine, theirs in ((bn.weight.grad, ref.weight.grad), (bn.bias.grad, ref.bias.grad)):
        torch.testing.assert_close(mine, theirs)
    torch.testing.assert_close(bn.running_mean, ref.running_mean)
    torch.testing.assert_close(bn.running_var, ref.running_var)
    bn.eval()
    ref.eval()
    torch.testing.assert_close(bn(x.detach()), ref(X)[:, :, r0:r0 + n])


def spatial_grid(P, dims):
    g = {1: [1], 2: [2], 3: [3], 4: [2, 2]}[P]
    g = g + [1] * (dims - len(g)) if len(g) <= dims else [P] + [1] * (dims - 1)
    return [1, 1] + g[:dims]


def box(t, space):
    shape = space.local_shape
    if any(e == 0 for e in shape):
        return torch.zeros(shape, dtype=t.dtype)
    return t[tuple(slice(o, o + n) for o, n in zip(space.local_offset, shape))].clone()


WINDOW_CASES = [
    ("conv1d", [2, 2, 9], dict(in_channels=2, out_channels=3, kernel_size=3, stride=2, padding=1)),
    ("conv2d", [2, 2, 7, 6], dict(in_channels=2, out_channels=2, kernel_size=3, padding=1)),
    ("conv2d", [1, 2, 8, 7], dict(in_channels=2, out_channels=2, kernel_size=(3, 2), stride=2,
                                  dilation=(1, 2))),
    ("conv3d", [1, 2, 5, 4, 4], dict(in_channels=2, out_channels=2, kernel_size=3, padding=1)),
    ("maxpool2d", [2, 2, 8, 6], dict(kernel_size=2)),
    ("maxpool1d", [1, 2, 10], dict(kernel_size=3, stride=2, padding=1)),
    ("avgpool2d", [1, 2, 8, 8], dict(kernel_size=3, stride=1, padding=1)),
]


def make(kind, P_x, kw):
    if kind.startswith("conv"):
        dims = int(kind[4])
        layer = getattr(distop.nn, f"DistributedConv{dims}d")(P_x, seed=5, dtype=torch.float64, **kw)
        torch.manual_seed(5)
        ref = getattr(torch.nn, f"Conv{dims}d")(dtype=torch.float64, **kw)
        return layer, ref
    dims = int(kind[7])
    name = "MaxPool" if kind.startswith("max") else "AvgPool"
    return (getattr(distop.nn, f"Distributed{name}{dims}d")(P_x, **kw),
            getattr(torch.nn, f"{name}{dims}d")(**kw))


import pytest  # noqa: E402


@pytest.mark.parametrize("case", range(len(WINDOW_CASES)))
def test_window_layers_equal_torch(case, world_size, rank):
    kind, shape, kw = WINDOW_CASES[case]
    P_x = distop.Partition.world(spatial_grid(world_size, len(shape) - 2))
    layer, ref = make(kind, P_x, kw)
    if kind.startswith("conv"):
        assert list(layer.state_dict().keys()) == list(ref.state_dict().keys())
    torch.manual_seed(9)
    X = torch.randn(shape, dtype=torch.float64)
    Xr = X.clone().requires_grad_(True)
    Y = ref(Xr)
    in_space = distop.TensorSpace(shape, P_x)
    out_space = distop.TensorSpace(list(Y.shape), P_x)
    x = box(X, in_space).requires_grad_(True)
    y = layer(x)
    torch.testing.assert_close(y, box(Y.detach(), out_space))
    (y * y).sum().backward()
    (Y * Y).sum().backward()
    torch.testing.assert_close(x.grad, box(Xr.grad, in_space))
    if kind.startswith("conv"):  # tied: every rank's copy receives torch's gradient
        for mine, theirs in ((layer.weight.grad, ref.weight.grad), (layer.bias.grad, ref.bias.grad)):
            torch.testing.assert_close(mine, theirs)


def test_conv_gradcheck(world_size, rank):
    kind, shape, kw = WINDOW_CASES[1]
    P_x = distop.Partition.world(spatial_grid(world_size, 2))
    layer, _ = make(kind, P_x, kw)
    x = torch.zeros(distop.TensorSpace(shape, P_x).local_shape, dtype=torch.float64)
    assert distop.testing.gradcheck(layer, x, fast_mode=True)
