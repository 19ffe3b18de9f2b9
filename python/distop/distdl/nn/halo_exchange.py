"""DistDL's HaloExchange: fills the ghost zones of each worker's padded tensor in place."""

import numpy as np
import torch

from distop import _core

from .module import Module

_DTYPES = {torch.float32: "float32", torch.float64: "float64"}


class _InPlaceHalo(torch.autograd.Function):
    # DistDL's exchange is in place, forward and adjoint: x's ghosts are overwritten with the
    # neighbours' entries, and backward writes F* dy into dy itself (DistDL's tests read it there).
    @staticmethod
    def forward(ctx, x, op):
        ctx.op = op
        y = op.forward(x.detach().contiguous().reshape(op.domain.local_shape), agreed=False)
        if x.numel() > 0:
            x.copy_(y.reshape(x.shape))
        ctx.mark_dirty(x)
        return x

    @staticmethod
    def backward(ctx, dy):
        op = ctx.op
        dx = op.adjoint(dy.detach().contiguous().reshape(op.range.local_shape), agreed=False)
        if dy.numel() > 0:
            dy.copy_(dx.reshape(dy.shape))
            return dy, None
        return dy, None


class HaloExchange(Module):
    """The halo exchange of a tensor split over the Cartesian partition P_x (one grid axis per
    tensor axis), each worker's tensor padded with its ghost zones `halo_shape` ([[left, right]
    per axis], from HaloMixin._compute_exchange_info). recv_buffer_shape and send_buffer_shape
    are accepted as DistDL takes them; distop plans the transfers from every worker's halo_shape.
    Forward overwrites the ghosts with the neighbours' owned entries, in place; backward adds the
    ghosts' gradients into their owners and zeroes them (distop's HaloExchange and its adjoint).
    Every worker of the root calls it."""

    def __init__(self, P_x, halo_shape, recv_buffer_shape, send_buffer_shape,
                 buffer_manager=None):
        super().__init__()
        self.P_x = P_x
        self.halo_shape = halo_shape
        self.recv_buffer_shape = recv_buffer_shape
        self.send_buffer_shape = send_buffer_shape
        self._ops = {}

    def _operator(self, x):
        P = self.P_x
        mine = None
        if P.active:
            halo = np.asarray(self.halo_shape, dtype=int).reshape(-1, 2)
            interior = [int(n - h[0] - h[1]) for n, h in zip(x.shape, halo)]
            mine = ([int(i) for i in P.index], halo.tolist(), interior,
                    _DTYPES.get(x.dtype, str(x.dtype)))
        held = [h for h in P._root.allgather(mine) if h is not None]
        dtypes = set(h[3] for h in held)
        if len(dtypes) != 1:
            raise _core.Error(f"[HaloExchange] the workers pass tensors of dtypes {sorted(dtypes)}")
        dtype = dtypes.pop()
        dim = len(P.shape)
        widths = [[None] * int(P.shape[a]) for a in range(dim)]
        extents = [[None] * int(P.shape[a]) for a in range(dim)]
        for index, halo, interior, _ in held:
            if len(halo) != dim or len(interior) != dim:
                raise _core.Error(f"[HaloExchange] a worker's tensor or halo has {len(interior)} "
                                  f"dimensions, the partition {dim}")
            for a in range(dim):
                widths[a][index[a]] = (halo[a][0], halo[a][1])
                extents[a][index[a]] = interior[a]
        key = (repr(widths), repr(extents), dtype)
        op = self._ops.get(key)
        if op is None:
            part = P._distop_partition()
            glob = [sum(e) for e in extents]
            space = _core.TensorSpace(part, _core.Decomposition.blocks(glob, list(part.shape),
                                                                       extents))
            op = self._ops[key] = _core.halo_exchange(dtype, space, widths)
        return op

    def forward(self, input):
        op = self._operator(input)
        return _InPlaceHalo.apply(input, op)
