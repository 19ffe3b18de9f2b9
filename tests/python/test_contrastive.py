"""The sharded contrastive losses from torch: every strategy gives the loss and the gradients of
the global batch (against torch on the whole batch, on every rank), on uneven row blocks and a
rank without rows; gradcheck in float64 through the ring strategy."""

import math

import pytest
import torch
import torch.nn.functional as F

import distop
import distop.testing
import distop.torch as dt

D = 3


def rows_per_rank(P):
    return [2 if r == 0 else (0 if r == 2 else 1) for r in range(P)]


def reference(kind, A, Bm, t, c, tau):
    a, b = F.normalize(A, dim=1), F.normalize(Bm, dim=1)
    n = a.shape[0]
    if kind == "ntxent":
        z = torch.cat([a, b])
        s = z @ z.T / tau
        s = s.masked_fill(torch.eye(2 * n, dtype=torch.bool), float("-inf"))
        pos = torch.cat([torch.arange(n, 2 * n), torch.arange(0, n)])
        return (torch.logsumexp(s, 1) - s[torch.arange(2 * n), pos]).mean()
    if kind == "clip":
        logits = torch.exp(torch.clamp(t, max=math.log(100))) * a @ b.T
        diag = torch.diagonal(logits)
        return 0.5 * ((torch.logsumexp(logits, 1) - diag).mean() +
                      (torch.logsumexp(logits, 0) - diag).mean())
    logits = torch.exp(t) * a @ b.T + c
    z = 2 * torch.eye(n, dtype=A.dtype) - 1
    return -F.logsigmoid(z * logits).sum() / n


@pytest.mark.parametrize("strategy", dt.STRATEGIES)
@pytest.mark.parametrize("kind", ["ntxent", "clip", "siglip"])
def test_every_strategy_gives_the_global_loss_and_gradients(kind, strategy, world_size, rank):
    P = world_size
    counts = rows_per_rank(P)
    first, n = sum(counts[:rank]), counts[rank]
    torch.manual_seed(4)
    A = torch.randn(sum(counts), D, dtype=torch.float64)
    Bm = torch.randn(sum(counts), D, dtype=torch.float64)
    t_val, c_val, tau = 0.3, -1.0, 0.5
    # The reference on the whole batch.
    Ar, Br = A.clone().requires_grad_(True), Bm.clone().requires_grad_(True)
    tr = torch.tensor(t_val, dtype=torch.float64, requires_grad=True)
    L = reference(kind, Ar, Br, tr, torch.tensor(c_val, dtype=torch.float64), tau)
    L.backward()
    # distop, each rank its rows.
    a = A[first:first + n].clone().requires_grad_(True)
    b = Bm[first:first + n].clone().requires_grad_(True)
    t = torch.tensor([t_val], dtype=torch.float64, requires_grad=True)
    c = torch.tensor([c_val], dtype=torch.float64, requires_grad=True)
    if kind == "ntxent":
        part = dt.ntxent(a, b, tau, strategy=strategy)
    elif kind == "clip":
        part = dt.clip_loss(a, b, t, strategy=strategy)
    else:
        part = dt.siglip_loss(a, b, t, c, strategy=strategy)
    assert part.shape == (1,)
    total = distop._core.allreduce_sum(distop.comm_handle(), float(part))
    assert abs(total - float(L)) < 1e-12 * max(1.0, abs(float(L)))
    part.sum().backward()
    torch.testing.assert_close(a.grad, Ar.grad[first:first + n], rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(b.grad, Br.grad[first:first + n], rtol=1e-10, atol=1e-12)
    if kind != "ntxent":
        # Each rank's copy of the scale gets 1/P of its gradient.
        gt = distop._core.allreduce_sum(distop.comm_handle(), float(t.grad))
        assert abs(gt - float(tr.grad)) < 1e-10


@pytest.mark.parametrize("strategy", ["ring", "gather"])
def test_gradcheck_through_the_loss(strategy, world_size, rank):
    n = rows_per_rank(world_size)[rank]

    def fn(x):
        return dt.ntxent(x[:, :D], x[:, D:], 0.5, strategy=strategy)

    assert distop.testing.gradcheck(fn, torch.zeros(n, 2 * D, dtype=torch.float64),
                                    fast_mode=world_size > 2)


def test_bad_strategy_and_bad_rows(world_size, rank):
    a = torch.zeros(1, D, dtype=torch.float64)
    with pytest.raises(distop.Error, match="strategy"):
        dt.ntxent(a, a, 0.5, strategy="broadcast")
    if world_size > 1:
        # Another feature count on one rank: the loss agrees on it and fails everywhere.
        bad = torch.ones(1, D + 1 if rank == 1 else D, dtype=torch.float64)
        with pytest.raises(distop.Error):
            dt.ntxent(bad, bad, 0.5, strategy="allgather")
