"""distop's data-movement operators inside torch's autograd.

Every operator is a ``torch.autograd.Function`` whose forward runs the C++ operator's forward and
whose backward runs its adjoint (Broadcast's backward is SumReduce, AllGather's is ReduceScatter,
and so on, exactly), and an ``nn.Module`` that builds the C++ operator (its plan) once per global
shape, decomposition and dtype and keeps it.

Each module call first agrees on the input with one small allgather over the partition's parent
communicator: every rank's local shape and dtype. From these every rank derives the same global
shape and decomposition (the blocks the ranks hold, balanced or not), so every rank looks up the
same cached plan, builds a missing one at the same time, and raises the same ``distop.Error`` for a
bad input (a block that does not fit the others, another dtype on one rank) -- never a hang.

Ranks outside an operator's partitions pass a zero-volume tensor (``distop.zero_volume_tensor()``)
and receive one; they still call the module, because every call is collective over the parent.

Backward order. torch runs a backward pass on CPU tensors on the calling thread, taking the ready
node with the highest sequence number first; a node's sequence number is its creation order, and
every node that consumes a node's outputs was created after it. So when the highest-numbered node
not yet run is in the graph, all its consumers have run and it is ready: the engine runs the graph
in exactly the reverse order of creation, the order a tape replays. Every rank creates the
operators' nodes in the same program order (SPMD; ranks outside a partition too, with zero-volume
tensors), so every rank runs the adjoints in the same, reversed order: the adjoint-MPI rule, and
the backward pass cannot deadlock, whatever shapes the ranks hold. What every rank must keep is
that each operator's output is part of the loss's graph on every rank or on none (a rank whose
loss ignores a zero-volume output still adds ``y.sum()``, which is 0).
"""

import torch as _torch

from . import _core, Error, comm_handle

__all__ = [
    "apply", "Broadcast", "SumReduce", "AllSumReduce", "Gather", "Scatter", "AllGather",
    "ReduceScatter", "Repartition", "HaloExchange", "SendRecv", "AllMax", "AllMin", "Pending",
    "ntxent", "clip_loss", "siglip_loss", "STRATEGIES",
]

_DTYPES = {_torch.float32: "float32", _torch.float64: "float64"}


_DEVICE = []  # [torch.device where this build's tensors live], filled at the first call


def _dtype_name(x):
    """What a call's agreement says of x: its dtype's name, or "device <where>" when x is not where
    this build's tensors live (distop.device()). Anything but float32 and float64 there is refused
    by the agreement, on every rank alike."""
    if not _DEVICE:
        from . import device
        _DEVICE.append(device())
    if isinstance(x, _torch.Tensor) and x.device != _DEVICE[0]:
        return f"device {x.device}"
    return _DTYPES.get(x.dtype, str(x.dtype))


def _as_input(dx, shape):
    """The gradient in the shape of the input it belongs to (a zero-volume input of any shape)."""
    return dx if dx.shape == shape else dx.reshape(shape)


def _local(x, shape):
    """x contiguous, as a tensor of this rank's local `shape`; a rank that holds nothing may pass
    any zero-volume tensor. Detached: DLPack hands over data, not autograd's bookkeeping."""
    x = x.detach().contiguous()
    if x.numel() == 0 and list(x.shape) != list(shape):
        n = 1
        for e in shape:
            n *= e
        if n == 0:
            x = x.reshape(shape)
    return x


class _OperatorFunction(_torch.autograd.Function):
    """y = F x forward; dL/dx = F* dL/dy backward, with F a distop operator."""

    @staticmethod
    def forward(ctx, x, op, agreed):
        ctx.op, ctx.x_shape = op, x.shape
        return op.forward(_local(x, op.domain.local_shape), agreed=agreed)

    @staticmethod
    def backward(ctx, dy):
        # torch hands a gradient of y's shape: the local shape of the range on this rank.
        op = ctx.op
        dx = op.adjoint(_local(dy, op.range.local_shape), agreed=True)
        return _as_input(dx, ctx.x_shape), None, None


def _wants_grad(x):
    return bool(_torch.is_grad_enabled() and x.requires_grad)


def _joined(x, any_grad):
    """x, made to require a gradient where another rank's input does: then every rank's graph
    holds the operator's node, and every rank runs its adjoint (a zero-volume or constant input
    on one rank must not leave the others alone in the adjoint's collectives)."""
    if any_grad and _torch.is_grad_enabled() and not x.requires_grad:
        x = x.detach().requires_grad_(True)
    return x


def _agree_dtype(handle, x, op):
    """(the dtype every rank of `handle` passes, whether any rank's input requires a gradient);
    a distop.Error on every rank if the dtypes differ."""
    _, dtype, any_grad = _core.shape_on_rank(handle, 0, [], _dtype_name(x), _wants_grad(x), op)
    return dtype, any_grad


def apply(op, x):
    """F x for a distop Operator `op` (made with distop._core's factories or a module's
    ``operator_for``) inside torch's autograd: backward runs F*. Collective as the operator; the
    input's shape is checked on every rank."""
    dtype, any_grad = _agree_dtype(op.domain.partition.parent_handle, x, op.name)
    if dtype != op.dtype:
        raise Error(f"[{op.name}] the input is {dtype}, the operator {op.dtype}")
    return _OperatorFunction.apply(_joined(x, any_grad), op, False)


class _Operator(_torch.nn.Module):
    """A module around one kind of distop operator: the C++ operators, cached by space and
    dtype."""

    name = "Operator"

    def __init__(self):
        super().__init__()
        self._operators = {}

    def _agree(self, x):
        """(key, builder, any_grad): a cache key the same on every rank, a function building the
        operator, and whether any rank's input requires a gradient. Collective over the parent
        communicator."""
        raise NotImplementedError

    def _prepare(self, x):
        key, build, any_grad = self._agree(x)
        op = self._operators.get(key)
        if op is None:
            op = build()
            self._operators[key] = op
        return op, any_grad

    def operator_for(self, x):
        """The distop Operator this module applies to x (built on first use). Collective."""
        return self._prepare(x)[0]

    def forward(self, x):
        op, any_grad = self._prepare(x)
        return _OperatorFunction.apply(_joined(x, any_grad), op, True)


def _infer(partition, x, whole, name):
    space, dtype, any_grad = _core.infer_space(partition, list(x.shape), _dtype_name(x),
                                               _wants_grad(x), list(whole), name)
    return space, dtype, (space.fingerprint(), dtype), any_grad


class Broadcast(_Operator):
    """Broadcast from partition P_x to P_y (DistDL's rule: P_x's grid, left-padded with 1s, equals
    P_y's or is 1 along each axis, where the box is copied). Backward: SumReduce."""

    name = "Broadcast"

    def __init__(self, P_x, P_y):
        super().__init__()
        self.P_x, self.P_y = P_x, P_y

    def _agree(self, x):
        space, dtype, key, any_grad = _infer(self.P_x, x, [], self.name)
        return key, lambda: _core.broadcast(dtype, space, self.P_y), any_grad


class SumReduce(_Operator):
    """Sum-reduce from partition P_x onto P_y, the adjoint of Broadcast from P_y to P_x: the boxes
    along the axes where P_y has extent 1 (and P_x more) are summed. The input's boxes agree along
    those axes. Backward: Broadcast."""

    name = "SumReduce"

    def __init__(self, P_x, P_y):
        super().__init__()
        if P_x.dim != P_y.dim:
            raise Error(f"[SumReduce] the partitions have {P_x.dim} and {P_y.dim} dimensions; "
                        "give both the tensor's number of dimensions")
        self.P_x, self.P_y = P_x, P_y
        self._reduced = [d for d in range(P_x.dim) if P_y.shape[d] == 1 and P_x.shape[d] > 1]

    def _agree(self, x):
        space, dtype, key, any_grad = _infer(self.P_x, x, self._reduced, self.name)

        def build():
            d = space.decomposition
            glob = space.global_shape
            extents = []
            for a in range(len(glob)):
                if self.P_y.shape[a] > 1:
                    b = d.bounds(a)
                    extents.append([b[i + 1] - b[i] for i in range(len(b) - 1)])
                else:
                    extents.append([glob[a]])
            dst = _core.TensorSpace(self.P_y, _core.Decomposition.blocks(glob, self.P_y.shape, extents))
            return _core.sum_reduce(dtype, self.P_x, dst)

        return key, build, any_grad


class AllSumReduce(_Operator):
    """All-sum-reduce over grid axes `axes` of partition P (MPI_Allreduce over each sub-grid); the
    input is not split along those axes. Self-adjoint: backward is AllSumReduce too."""

    name = "AllSumReduce"

    def __init__(self, P, axes):
        super().__init__()
        self.P, self.axes = P, list(axes)

    def _agree(self, x):
        space, dtype, key, any_grad = _infer(self.P, x, self.axes, self.name)
        return key, lambda: _core.all_sum_reduce(dtype, space, self.axes), any_grad

    def start(self, x):
        """Posts y = A x (MPI_Iallreduce) and returns the Pending whose wait() gives y."""
        op, any_grad = self._prepare(x)
        return _start(op, _joined(x, any_grad))


class Gather(_Operator):
    """The tensor on partition P assembled whole on parent rank `root` (a zero-volume tensor
    elsewhere). Backward: Scatter."""

    name = "Gather"

    def __init__(self, P, root=0):
        super().__init__()
        self.P, self.root = P, root

    def _agree(self, x):
        space, dtype, key, any_grad = _infer(self.P, x, [], self.name)
        return key, lambda: _core.gather(dtype, space, self.root), any_grad


class Scatter(_Operator):
    """The whole tensor on parent rank `root` split over partition P (balanced; every replica of a
    box receives it). Backward: Gather, summing the copies."""

    name = "Scatter"

    def __init__(self, P, root=0):
        super().__init__()
        self.P, self.root = P, root

    def _agree(self, x):
        shape, dtype, any_grad = _core.shape_on_rank(self.P.parent_handle, self.root,
                                                     list(x.shape), _dtype_name(x),
                                                     _wants_grad(x), self.name)
        return (tuple(shape), dtype), lambda: _core.scatter(
            dtype, _core.TensorSpace(shape, self.P), self.root), any_grad


class AllGather(_Operator):
    """All-gather along grid axes `axes` of P: every rank of a group receives the whole extent of
    the tensor axes those grid axes split. Backward: ReduceScatter."""

    name = "AllGather"

    def __init__(self, P, axes):
        super().__init__()
        self.P, self.axes = P, list(axes)

    def _agree(self, x):
        space, dtype, key, any_grad = _infer(self.P, x, [], self.name)
        return key, lambda: _core.all_gather(dtype, space, self.axes), any_grad


class ReduceScatter(_Operator):
    """Reduce-scatter along grid axes `axes` of P: each rank receives the sum over its group of
    its (balanced) block of the tensor axes those grid axes split. Backward: AllGather."""

    name = "ReduceScatter"

    def __init__(self, P, axes):
        super().__init__()
        self.P, self.axes = P, list(axes)

    def _agree(self, x):
        space, dtype, key, any_grad = _infer(self.P, x, self.axes, self.name)

        def build():
            split = _core.TensorSpace(space.global_shape, self.P)
            op = _core.reduce_scatter(dtype, split, self.axes)
            if not op.domain == space:
                raise Error(f"[ReduceScatter] the input's blocks ({space}) are not the gathered "
                            f"form of the balanced split ({op.domain})")
            return op

        return key, build, any_grad


class Repartition(_Operator):
    """The tensor on partition P_x moved to partition P_y (balanced there, or `dst_decomposition`
    when given as a function of the global shape). Backward: the reverse transfer."""

    name = "Repartition"

    def __init__(self, P_x, P_y, dst_decomposition=None):
        super().__init__()
        self.P_x, self.P_y = P_x, P_y
        self.dst_decomposition = dst_decomposition

    def _agree(self, x):
        space, dtype, key, any_grad = _infer(self.P_x, x, [], self.name)

        def build():
            glob = space.global_shape
            if self.dst_decomposition is None:
                dst = _core.TensorSpace(glob, self.P_y)
            else:
                dst = _core.TensorSpace(self.P_y, self.dst_decomposition(glob))
            return _core.repartition(dtype, space, dst)

        return key, build, any_grad


class HaloExchange(_Operator):
    """Fills the ghost zones of the padded local arrays of `interior` (a TensorSpace split over a
    partition with one grid axis per tensor axis). Ghost widths either explicit, `widths[a][c] =
    (left, right)` for part c along axis a, or those a convolution or pooling with the given
    kernel sizes (and stride, padding, dilation) needs. Input and output: this rank's padded array
    (``halo_space(...).local_shape``). Backward: the ghost values added into their owners."""

    name = "HaloExchange"

    def __init__(self, interior, widths=None, kernel_size=None, stride=1, padding=0, dilation=1):
        super().__init__()
        if (widths is None) == (kernel_size is None):
            raise Error("[HaloExchange] give either widths or kernel_size")
        self.interior = interior
        self.widths = widths
        n = len(interior.global_shape)

        def per_axis(v):
            return list(v) if isinstance(v, (list, tuple)) else [v] * n

        self.window = None if kernel_size is None else (
            per_axis(kernel_size), per_axis(stride), per_axis(padding), per_axis(dilation))

    def _agree(self, x):
        dtype, any_grad = _agree_dtype(self.interior.partition.parent_handle, x, self.name)

        def build():
            if self.widths is not None:
                return _core.halo_exchange(dtype, self.interior, self.widths)
            return _core.halo_exchange_for_windows(dtype, self.interior, *self.window)

        return dtype, build, any_grad


class SendRecv(_Operator):
    """The whole tensor of rank `src` of `comm` (mpi4py communicator; None: MPI_COMM_WORLD) moved
    to rank `dst`. Backward: the reverse transfer."""

    name = "SendRecv"

    def __init__(self, src, dst, comm=None):
        super().__init__()
        self.src, self.dst, self.handle = src, dst, comm_handle(comm)

    def _agree(self, x):
        shape, dtype, any_grad = _core.shape_on_rank(self.handle, self.src, list(x.shape),
                                                     _dtype_name(x), _wants_grad(x), self.name)
        return (tuple(shape), dtype), lambda: _core.send_recv(dtype, self.handle, shape, self.src,
                                                              self.dst), any_grad

    def start(self, x):
        """Posts the transfer (MPI_Isend on src, MPI_Irecv on dst) and returns the Pending whose
        wait() gives the received tensor."""
        op, any_grad = self._prepare(x)
        return _start(op, _joined(x, any_grad))


# ---- The nonblocking pair: start ... wait

class Pending:
    """A transfer in flight from ``SendRecv.start`` or ``AllSumReduce.start``. ``wait()`` completes
    it and returns y. In backward the adjoint-MPI rule holds: wait's backward posts the reverse
    transfer of dL/dy (Isend + Wait <-> Wait + Irecv, Iallreduce <-> Iallreduce), compute between
    them overlaps it, and start's backward waits for it and gives dL/dx. x must not be modified
    between start and wait."""

    def __init__(self, op, token):
        self.op = op
        self._token = token
        self.forward_transfer = None
        self.backward_transfer = None
        self._waited = False

    def wait(self):
        if self._waited:
            raise Error(f"[{self.op.name}.wait] this transfer was already waited for")
        self._waited = True
        return _Wait.apply(self._token, self)


class _Start(_torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, pending):
        op = pending.op
        pending.forward_transfer = op.start_forward(_local(x, op.domain.local_shape))
        ctx.pending, ctx.x_shape = pending, x.shape
        # A token: wait consumes it, so that start's backward runs after wait's.
        return x.new_zeros(0)

    @staticmethod
    def backward(ctx, dtoken):
        p = ctx.pending
        if p.backward_transfer is None:
            raise Error(f"[{p.op.name}.start] backward reached a transfer whose wait's backward "
                        "did not run")
        t, p.backward_transfer = p.backward_transfer, None
        t.wait()
        return _as_input(t.result, ctx.x_shape), None


class _Wait(_torch.autograd.Function):
    @staticmethod
    def forward(ctx, token, pending):
        pending.forward_transfer.wait()
        ctx.pending = pending
        y = pending.forward_transfer.result
        pending.forward_transfer = None
        return y

    @staticmethod
    def backward(ctx, dy):
        p = ctx.pending
        p.backward_transfer = p.op.start_adjoint(_local(dy, p.op.range.local_shape))
        return dy.new_zeros(0), None


def _start(op, x):
    pending = Pending(op, None)
    pending._token = _Start.apply(x, pending)
    return pending


# ---- Max and min all-reduce (not linear: gradient-checked, the gradient routed to the holder)

class _ExtremumFunction(_torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, space, axes, is_max):
        state, y = _core.extremum_forward(space, axes, _local(x, space.local_shape), is_max)
        ctx.state, ctx.space, ctx.x_shape = state, space, x.shape
        return y

    @staticmethod
    def backward(ctx, dy):
        dx = _core.extremum_backward(ctx.state, _local(dy, ctx.space.local_shape))
        return _as_input(dx, ctx.x_shape), None, None, None


class AllMax(_torch.nn.Module):
    """The elementwise maximum over each group of ranks sharing their coordinates off grid axes
    `axes` of P (MPI_MAXLOC), on every member; the gradient goes to the member that held the
    maximum (the lowest group rank on ties)."""

    name = "AllMax"
    _is_max = True

    def __init__(self, P, axes):
        super().__init__()
        self.P, self.axes = P, list(axes)

    def forward(self, x):
        space, _, _, any_grad = _infer(self.P, x, self.axes, self.name)
        return _ExtremumFunction.apply(_joined(x, any_grad), space, self.axes, self._is_max)


class AllMin(AllMax):
    """The elementwise minimum, as AllMax."""

    name = "AllMin"
    _is_max = False


# ---- The sharded contrastive losses (docs/contrastive.md)

#: The communication strategies of the contrastive losses.
STRATEGIES = ("allgather-nograd", "gather", "allgather", "ring")

_NTXENT, _CLIP, _SIGLIP = 0, 1, 2


class _ContrastiveFunction(_torch.autograd.Function):
    @staticmethod
    def forward(ctx, a, b, t, c, kind, temperature, handle, strategy, root, normalize):
        state, loss = _core.contrastive_forward(
            kind, a.detach().contiguous(), b.detach().contiguous(), t.detach().contiguous(),
            c.detach().contiguous(), float(temperature), handle, strategy, root, normalize)
        ctx.state = state
        ctx.shapes = (a.shape, b.shape, t.shape, c.shape)
        return loss

    @staticmethod
    def backward(ctx, dl):
        ga, gb, gt, gc = _core.contrastive_backward(ctx.state, dl.detach().contiguous())
        sa, sb, st, sc = ctx.shapes
        return (ga.reshape(sa), gb.reshape(sb), gt.reshape(st), gc.reshape(sc), None, None, None,
                None, None, None)


def _contrastive(kind, a, b, t, c, temperature, strategy, comm, root, normalize):
    if strategy not in STRATEGIES:
        raise Error(f"[contrastive loss] unknown strategy '{strategy}'; one of {', '.join(STRATEGIES)}")
    t = (t if t is not None else a.new_zeros(1)).reshape(1)
    c = (c if c is not None else a.new_zeros(1)).reshape(1)
    if _torch.is_grad_enabled():
        # Every rank takes part in the loss's backward, also a rank whose rows need no gradient.
        a, b = _joined(a, True), _joined(b, True)
    return _ContrastiveFunction.apply(a, b, t, c, kind, temperature, comm_handle(comm), strategy,
                                      root, normalize)


def ntxent(a, b, temperature, strategy="allgather", comm=None, root=0, normalize=True):
    """SimCLR's NT-Xent loss of the batch whose rows the ranks of `comm` hold (a, b: this rank's
    rows of the two views, [b_r, D], any b_r >= 0). Returns this rank's component, shape [1]: the
    loss is the sum of the components over the ranks (distop's loss convention; under the gather
    strategy the root's component is the loss). backward() with the same seed on every rank (as
    component.backward() gives) puts into each rank's rows the gradient of the loss. `strategy`:
    "allgather-nograd", "gather" (onto `root`), "allgather" or "ring" (memory O(b D + b^2) per
    rank: no rank holds the whole batch). Collective over `comm` (default MPI_COMM_WORLD)."""
    return _contrastive(_NTXENT, a, b, None, None, temperature, strategy, comm, root, normalize)


def clip_loss(a, b, logit_scale, strategy="allgather", comm=None, root=0, normalize=True):
    """CLIP's symmetric InfoNCE with the learnable log-scale `logit_scale` (open_clip's parameter,
    clamped at log 100), as ntxent. Each rank's copy of logit_scale receives 1/P of its gradient,
    so the copies' gradients summed over the ranks are the gradient of the loss."""
    return _contrastive(_CLIP, a, b, logit_scale, None, 1.0, strategy, comm, root, normalize)


def siglip_loss(a, b, logit_scale, logit_bias, strategy="allgather", comm=None, root=0,
                normalize=True):
    """SigLIP's pairwise sigmoid loss with the learnable log-scale and bias, as clip_loss."""
    return _contrastive(_SIGLIP, a, b, logit_scale, logit_bias, 1.0, strategy, comm, root,
                        normalize)
