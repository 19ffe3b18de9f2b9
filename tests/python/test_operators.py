"""Every data-movement operator from torch: forward against the global computation, gradcheck in
float64 (distop.testing.gradcheck), and the dot-product adjoint test both of the C++ operator and
of torch's backward through the module (distop.testing.adjoint_test)."""

import pytest
import torch

import distop
import distop.testing
import distop.torch as dt


def block(g, space):
    """The box of global tensor g that `space` gives this rank."""
    shape = space.local_shape
    if any(e == 0 for e in shape):
        return torch.zeros(shape, dtype=g.dtype)
    return g[tuple(slice(o, o + n) for o, n in zip(space.local_offset, shape))].clone()


def empty(dim=2):
    return distop.zero_volume_tensor(dim, dtype=torch.float64)


def case(name, P, rank):
    """(module, this rank's input, this rank's expected output) for operator `name` at P ranks."""
    torch.manual_seed(7)  # the same global tensors on every rank
    W = distop.Partition.world
    if name == "broadcast":
        g = torch.randn(3, 2, dtype=torch.float64)
        return dt.Broadcast(W([1, 1]), W([1, P])), g if rank == 0 else empty(), g
    if name == "sum_reduce":
        g = torch.randn(3, 2, dtype=torch.float64)
        x = g + rank  # copies may differ: each is its own component
        y = P * g + P * (P - 1) / 2 if rank == 0 else torch.zeros(0, 0, dtype=torch.float64)
        return dt.SumReduce(W([1, P]), W([1, 1])), x, y
    if name == "all_sum_reduce":
        g = torch.randn(2, 3, dtype=torch.float64)
        return dt.AllSumReduce(W([P, 1]), [0]), g * (rank + 1), g * (P * (P + 1) / 2)
    if name == "gather":
        g = torch.randn(P + 1, 2, dtype=torch.float64)
        space = distop.TensorSpace([P + 1, 2], W([P, 1]))
        y = g if rank == 0 else torch.zeros(0, 0, dtype=torch.float64)
        return dt.Gather(W([P, 1]), root=0), block(g, space), y
    if name == "scatter":
        g = torch.randn(P + 1, 2, dtype=torch.float64)
        space = distop.TensorSpace([P + 1, 2], W([P, 1]))
        return dt.Scatter(W([P, 1]), root=0), g if rank == 0 else empty(), block(g, space)
    if name == "all_gather":
        g = torch.randn(P + 1, 2, dtype=torch.float64)
        space = distop.TensorSpace([P + 1, 2], W([P, 1]))
        return dt.AllGather(W([P, 1]), [0]), block(g, space), g
    if name == "reduce_scatter":
        g = torch.randn(P + 1, 2, dtype=torch.float64)
        space = distop.TensorSpace([P + 1, 2], W([P, 1]))
        return dt.ReduceScatter(W([P, 1]), [0]), g * (rank + 1), block(g * (P * (P + 1) / 2), space)
    if name == "repartition":
        g = torch.randn(P + 1, P + 1, dtype=torch.float64)
        src = distop.TensorSpace([P + 1, P + 1], W([P, 1]))
        dst = distop.TensorSpace([P + 1, P + 1], W([1, P]))
        return dt.Repartition(W([P, 1]), W([1, P])), block(g, src), block(g, dst)
    if name == "halo_exchange":
        g = torch.randn(2 * P + 2, 3, dtype=torch.float64)
        interior = distop.TensorSpace([2 * P + 2, 3], W([P, 1]))
        widths = [[(1, 1)] * P, [(0, 0)]]
        padded = torch.cat([torch.zeros(1, 3, dtype=torch.float64), g,
                            torch.zeros(1, 3, dtype=torch.float64)])
        start, n = interior.local_offset[0], interior.local_shape[0]
        x = torch.full((n + 2, 3), -1.0, dtype=torch.float64)  # ghosts are not read
        x[1:n + 1] = g[start:start + n]
        return dt.HaloExchange(interior, widths=widths), x, padded[start:start + n + 2].clone()
    if name == "send_recv":
        g = torch.randn(3, 2, dtype=torch.float64)
        y = g if rank == P - 1 else torch.zeros(0, 0, dtype=torch.float64)
        return dt.SendRecv(0, P - 1), g if rank == 0 else empty(), y
    if name in ("all_max", "all_min"):
        G = torch.randn(P, 2, 3, dtype=torch.float64)
        module = dt.AllMax(W([P, 1]), [0]) if name == "all_max" else dt.AllMin(W([P, 1]), [0])
        y = G.max(0).values if name == "all_max" else G.min(0).values
        return module, G[rank].clone(), y
    raise KeyError(name)


LINEAR = ["broadcast", "sum_reduce", "all_sum_reduce", "gather", "scatter", "all_gather",
          "reduce_scatter", "repartition", "halo_exchange", "send_recv"]


@pytest.mark.parametrize("name", LINEAR + ["all_max", "all_min"])
def test_forward_matches_the_global_computation(name, world_size, rank):
    module, x, expected = case(name, world_size, rank)
    y = module(x)
    assert y.dtype == torch.float64
    assert list(y.shape) == list(expected.shape)
    torch.testing.assert_close(y, expected, rtol=1e-12, atol=1e-12)
    # float32 runs the float instantiation of the same operator.
    y32 = module(x.float())
    assert y32.dtype == torch.float32
    torch.testing.assert_close(y32, expected.float(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", LINEAR + ["all_max", "all_min"])
def test_gradcheck_float64(name, world_size, rank):
    module, x, _ = case(name, world_size, rank)
    # Entry by entry at 1 and 2 ranks; along random directions at 3 and 4, where every
    # evaluation's collectives cost more on this 2-core machine.
    assert distop.testing.gradcheck(module, x, fast_mode=world_size > 2)


@pytest.mark.parametrize("name", LINEAR)
def test_adjoint_of_the_operator_and_of_torch_backward(name, world_size, rank):
    module, x, _ = case(name, world_size, rank)
    for dtype in (torch.float64, torch.float32):
        xd = x.to(dtype)
        report = distop.testing.adjoint_test(module.operator_for(xd))
        assert report.passed, str(report)
        report = distop.testing.adjoint_test(module, xd)
        assert report.passed, str(report)


def test_adjoint_test_catches_a_wrong_adjoint(world_size, rank):
    # A function whose backward is twice its adjoint fails the test.
    class Doubled(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 3

        @staticmethod
        def backward(ctx, dy):
            return dy * 6

    x = torch.ones(2, 2, dtype=torch.float64)
    report = distop.testing.adjoint_test(Doubled.apply, x)
    assert not report.passed and abs(report.relative_error - 1.0) < 1e-12


def test_plans_are_built_once_per_shape_and_dtype(world_size, rank):
    module, x, _ = case("all_gather", world_size, rank)
    a = module.operator_for(x)
    assert module.operator_for(x.clone()) is a
    assert module.operator_for(x.float()) is not a
    assert len(module._operators) == 2
    P = world_size
    g = torch.randn(P + 3, 2, dtype=torch.float64)
    bigger = distop.TensorSpace([P + 3, 2], distop.Partition.world([P, 1]))
    y = module(block(g, bigger))
    assert list(y.shape) == [P + 3, 2]
    assert len(module._operators) == 3


def test_nonblocking_send_recv_and_all_sum_reduce(world_size, rank):
    P = world_size
    sr = dt.SendRecv(0, P - 1)
    g = torch.randn(2, 3, dtype=torch.float64)
    torch.manual_seed(3)
    g = torch.randn(2, 3, dtype=torch.float64)
    x = (g if rank == 0 else empty()).requires_grad_(True)
    pending = sr.start(x)
    other = torch.ones(4, dtype=torch.float64, requires_grad=True) * 2  # overlapping compute
    y = pending.wait()
    with pytest.raises(distop.Error, match="already waited"):
        pending.wait()
    if rank == P - 1:
        torch.testing.assert_close(y, g)
    (y.sum() * 3 + other.sum()).backward()
    if rank == 0:
        torch.testing.assert_close(x.grad, torch.full_like(g, 3.0))
    # gradcheck through start ... wait, and the adjoint of the pair.
    assert distop.testing.gradcheck(lambda t: sr.start(t).wait(), x.detach(), fast_mode=True)
    assert distop.testing.adjoint_test(lambda t: sr.start(t).wait(), x.detach()).passed

    asr = dt.AllSumReduce(distop.Partition.world([P, 1]), [0])
    xa = torch.randn(2, 2, dtype=torch.float64) + rank
    ya = asr.start(xa).wait()
    torch.testing.assert_close(ya, asr(xa))
    assert distop.testing.gradcheck(lambda t: asr.start(t).wait(), xa, fast_mode=True)
    assert distop.testing.adjoint_test(lambda t: asr.start(t).wait(), xa).passed


def test_apply_a_prebuilt_operator(world_size, rank):
    P = distop.Partition.world([world_size, 1])
    space = distop.TensorSpace([world_size + 1, 2], P)
    op = distop._core.all_gather("float64", space, [0])
    torch.manual_seed(5)
    g = torch.randn(world_size + 1, 2, dtype=torch.float64)
    x = block(g, space).requires_grad_(True)
    y = dt.apply(op, x)
    torch.testing.assert_close(y, g)
    y.sum().backward()
    # AllGather's adjoint sums every rank's copy of the gradient onto the owner.
    torch.testing.assert_close(x.grad, torch.full_like(x, float(world_size)))
