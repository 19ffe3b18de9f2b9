"""The adjoint-MPI rule inside torch's graph: backward runs the operators' adjoints in the reverse
of their creation order on every rank, also where ranks hold different shapes (uneven blocks,
ranks outside a partition with zero-volume tensors) and where independent branches each
communicate. A wrong order would deadlock (and the conftest's timeout would fail the test)."""

import torch

import distop
import distop.testing
import distop.torch as dt


def test_chain_with_uneven_shapes_and_idle_ranks(world_size, rank):
    P = world_size
    W = distop.Partition.world
    scatter = dt.Scatter(W([P, 1]), root=0)               # rank 0 -> uneven row blocks
    repart = dt.Repartition(W([P, 1]), W([1, P]))          # rows -> columns
    gather_last = dt.Gather(W([1, P]), root=P - 1)         # whole on the last rank only
    bcast = dt.Broadcast(W([1, 1], [P - 1]), W([1, P]))     # last rank -> everyone
    allsum = dt.AllSumReduce(W([1, P]), [1])

    def chain(x):
        a = scatter(x)
        b = repart(a * 2.0)
        c = gather_last(torch.sin(b))
        d = bcast(c)  # c: the whole tensor on the last rank, zero-volume elsewhere
        return allsum(d * (rank + 1))

    torch.manual_seed(11)
    g = torch.randn(P + 2, P + 1, dtype=torch.float64)
    # Only rank 0 holds an input that requires a gradient: the others join its graph all the same.
    x = g.clone().requires_grad_(True) if rank == 0 else distop.zero_volume_tensor(2, torch.float64)
    y = chain(x)
    # Reference: every rank's copy of sin(2 g) times its rank + 1, summed.
    torch.testing.assert_close(y, torch.sin(2 * g) * (P * (P + 1) / 2))
    y.sum().backward()
    if rank == 0:
        # d/dg of sum over ranks r of sum(P(P+1)/2 * sin(2 g)) = P * P(P+1)/2 * 2 cos(2 g)
        torch.testing.assert_close(x.grad, P * (P * (P + 1) / 2) * 2 * torch.cos(2 * g))
    assert distop.testing.gradcheck(chain, x.detach(), fast_mode=True)


def test_independent_branches_each_communicate(world_size, rank):
    # Two branches whose communication is independent in the graph: torch still runs their
    # adjoints in reverse creation order on every rank (the later branch first).
    P = world_size
    W = distop.Partition.world
    first = dt.AllGather(W([P, 1]), [0])
    second = dt.SendRecv(P - 1, 0)
    third = dt.AllSumReduce(W([P, 1]), [0])
    torch.manual_seed(2)
    g = torch.randn(P + 1, 2, dtype=torch.float64)
    space = distop.TensorSpace([P + 1, 2], W([P, 1]))
    off, n = space.local_offset[0], space.local_shape[0]

    def two_branches(x):
        a = first(x)                       # branch 1
        # Zero-volume on the ranks other than the sender, but computed from x there too: then the
        # node leads to x on every rank, which torch.autograd.grad(..., inputs=x) (gradcheck's
        # way) needs; backward() alone would also take a fresh zero-volume tensor.
        v = x.sum(0, keepdim=True) if rank == P - 1 else x[:0]
        b = second(v)                      # branch 2
        c = third(a * a)                   # branch 1 again, after branch 2 was created
        return torch.cat([c.reshape(-1), b.reshape(-1) * 5])

    x = g[off:off + n].clone().requires_grad_(True)
    out = two_branches(x)
    out.sum().backward()
    # Each rank's copy of a = g, c = P g^2 summed over its entries: d/dx of sum_r P g^2 is
    # 2 P^2 g on the owner (AllGather's adjoint sums the copies), plus 5 on the last rank's rows.
    expected = 2 * P * P * g[off:off + n]
    if rank == P - 1:
        expected = expected + 5
    torch.testing.assert_close(x.grad, expected)
    assert distop.testing.gradcheck(two_branches, x.detach(), fast_mode=True)


def test_many_steps_reuse_the_plans(world_size, rank):
    P = world_size
    ag = dt.AllGather(distop.Partition.world([P, 1]), [0])
    w = torch.ones(1, dtype=torch.float64, requires_grad=True)
    opt = torch.optim.SGD([w], lr=0.1)
    x = torch.ones(1, 3, dtype=torch.float64)
    for _ in range(3):
        opt.zero_grad()
        loss = (ag(x * w) ** 2).sum()
        loss.backward()
        opt.step()
    assert len(ag._operators) == 1
    # d/dw sum over ranks' copies of (P * 3) (w)^2 entries: each rank sees grad 2 w P 3 * P.
    assert torch.isfinite(w).all()
