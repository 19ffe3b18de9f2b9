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
    h = distop.comm_handle()
    for mine, theirs in ((bn.weight.grad, ref.weight.grad), (bn.bias.grad, ref.bias.grad)):
        total = mine.detach().clone()
        distop._core.allreduce_sum_array(h, total)
        torch.testing.assert_close(total, theirs)
    torch.testing.assert_close(bn.running_mean, ref.running_mean)
    torch.testing.assert_close(bn.running_var, ref.running_var)
    bn.eval()
    ref.eval()
    torch.testing.assert_close(bn(x.detach()), ref(X)[:, :, r0:r0 + n])
