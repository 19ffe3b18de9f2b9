"""The dot-product adjoint test from Python, for distop's operators and for a user's own.

``adjoint_test(op, x)`` checks <F x, y> = <x, F* y> over all ranks, where

- `op` is a distop Operator (``distop._core`` factories, a module's ``operator_for``): F and F*
  are its C++ forward and adjoint, and the C++ test runs (distop::testing::adjoint_test); or
- `op` is any torch callable linear in x (a distop.torch module, a composition of them): F x is
  op(x) and F* y is its vector-Jacobian product, so the test checks what torch's backward
  computes. `x` gives the shape and dtype of this rank's input.

y is drawn as z + s F x with z random and s = +-|z| / |F x| (the sign of <F x, z>), so that
|<F x, y>| >= |F x| |y| / 2 and the relative error |<F x, y> - <x, F* y>| / |<F x, y>| is never
divided by a small number (the same normalisation as the C++ test; docs/adjoints.md). Inner
products are summed over every rank of `comm` in double. Collective over `comm` (default
MPI_COMM_WORLD), with the same seed everywhere; every rank gets the same report.
"""

from dataclasses import dataclass

from . import _core, comm_handle


@dataclass
class AdjointReport:
    passed: bool
    forward_inner: float
    adjoint_inner: float
    relative_error: float
    tolerance: float

    def __str__(self):
        return (f"{'PASS' if self.passed else 'FAIL'}: <F x, y> = {self.forward_inner!r}, "
                f"<x, F* y> = {self.adjoint_inner!r}, relative error {self.relative_error:.3e} "
                f"(tolerance {self.tolerance:.1e})")


def default_tolerance(dtype):
    import torch
    return 1e-13 if dtype == torch.float64 else 1e-5


def adjoint_test(op, x=None, seed=20261121, tolerance=None, comm=None):
    if isinstance(op, _core.Operator):
        passed, fwd, adj, err, _ = op.adjoint_test(seed, tolerance or 0.0)
        tol = tolerance or (1e-13 if op.dtype == "float64" else 1e-5)
        return AdjointReport(passed, fwd, adj, err, tol)
    import torch
    if x is None:
        raise TypeError("distop.testing.adjoint_test: a torch callable needs a sample input x")
    h = comm_handle(comm)
    rank = _core.comm_rank(h)
    g = torch.Generator().manual_seed(int(seed) * 1000003 + rank)

    def inner(a, b):
        return _core.allreduce_sum(h, float((a.double() * b.double()).sum()))

    tol = tolerance or default_tolerance(x.dtype)
    xs = (torch.rand(x.shape, generator=g, dtype=torch.float64) * 2 - 1).to(x.device, x.dtype)
    xs.requires_grad_(True)
    fx = op(xs)
    z = (torch.rand(fx.shape, generator=g, dtype=torch.float64) * 2 - 1).to(fx.device, fx.dtype)
    fx_norm = inner(fx, fx) ** 0.5
    z_norm = inner(z, z) ** 0.5
    s = 0.0 if fx_norm == 0 else (z_norm / fx_norm) * (1.0 if inner(fx, z) >= 0 else -1.0)
    y = (z + s * fx.detach()).to(fx.dtype)
    (fty,) = torch.autograd.grad(fx, xs, grad_outputs=y, allow_unused=True)
    if fty is None:
        fty = torch.zeros_like(xs)
    fwd = inner(fx.detach(), y)
    adj = inner(xs.detach(), fty)
    if fwd != 0:
        div = abs(fwd)
    else:
        div = inner(xs, xs) ** 0.5 * inner(fty, fty) ** 0.5 or 1.0
    err = abs(fwd - adj) / div
    return AdjointReport(err <= tol, fwd, adj, err, tol)


def _world_sum(h):
    import torch

    class _SumToAll(torch.autograd.Function):
        # Sum over the ranks forward, identity backward: the output is the same on every rank and
        # so is the seed gradcheck hands to each rank's copy of it (Megatron's g).
        @staticmethod
        def forward(ctx, y):
            out = y.detach().double().cpu().clone()  # the sum runs on host memory
            _core.allreduce_sum_array(h, out)
            return out.to(y.device, y.dtype)

        @staticmethod
        def backward(ctx, dy):
            return dy

    class _CopyToAll(torch.autograd.Function):
        # Identity forward, sum over the ranks backward: every rank reads its part of one input
        # that all of them hold (Megatron's f, Broadcast's adjoint kept on every rank).
        @staticmethod
        def forward(ctx, x):
            return x.clone()

        @staticmethod
        def backward(ctx, dx):
            out = dx.detach().double().cpu().contiguous().clone()
            _core.allreduce_sum_array(h, out)
            return out.to(dx.device, dx.dtype)

    return _SumToAll, _CopyToAll


def gradcheck(fn, x, comm=None, seed=0, fast_mode=False, **kwargs):
    """torch.autograd.gradcheck of a distributed function `fn` of this rank's input `x` (a
    float64 tensor of this rank's shape; only its shape is used, values are seeded), collective
    over `comm`.

    gradcheck perturbs one input entry at a time and asks for one vector-Jacobian product per
    output entry, so every rank must see inputs and outputs of the same sizes, and a perturbation
    must move one rank's input only. The check therefore runs on the whole problem on every rank:
    the input is the concatenation of every rank's input (the same on every rank), each rank reads
    its own part of it (identity forward; the gradients summed over the ranks backward) and
    applies fn, and the output is the concatenation of every rank's output (each rank's part
    placed in zeros, summed over the ranks forward; identity backward). Its Jacobian is the
    operator's whole Jacobian, on every rank; the analytical one goes through fn's backward.
    `fast_mode` is gradcheck's: the Jacobians compared along random directions (seeded alike on
    every rank) instead of entry by entry, for a few evaluations in place of two per input entry.
    Returns what torch.autograd.gradcheck returns (True, or raises)."""
    import torch
    h = comm_handle(comm)
    sum_to_all, copy_to_all = _world_sum(h)
    with torch.no_grad():
        y0 = fn(x.detach().clone())
    n_in = _core.allgather_int(h, x.numel())
    n_out = _core.allgather_int(h, y0.numel())
    rank = _core.comm_rank(h)
    in_off, out_off = sum(n_in[:rank]), sum(n_out[:rank])
    g = torch.Generator().manual_seed(int(seed))
    x_all = (torch.rand(sum(n_in), generator=g, dtype=torch.float64) * 2 - 1).to(x.device)
    x_all.requires_grad_(True)
    x_shape, y_shape = list(x.shape), list(y0.shape)

    def whole(x_all):
        xs = copy_to_all.apply(x_all)
        mine = xs[in_off:in_off + n_in[rank]].reshape(x_shape)
        y = fn(mine).reshape(-1)
        assert list(y.shape) == [n_out[rank]], (y.shape, y_shape)
        total = sum(n_out)
        parts = [y.new_zeros(out_off), y, y.new_zeros(total - out_off - n_out[rank])]
        return sum_to_all.apply(torch.cat(parts))

    kwargs.setdefault("atol", 1e-8)
    kwargs.setdefault("rtol", 1e-6)
    # Fast mode draws its directions from torch's generator: the same draws on every rank.
    state = torch.get_rng_state()
    torch.manual_seed(int(seed) + 1)
    try:
        return torch.autograd.gradcheck(whole, (x_all,), fast_mode=fast_mode, **kwargs)
    finally:
        torch.set_rng_state(state)
