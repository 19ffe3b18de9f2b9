"""DistDL's SumReduce: the adjoint of Broadcast, summing the tensors of P_x onto P_y."""

import distop.torch as _dt

from . import _bridge
from .module import Module


class SumReduce(Module):
    """Sums the tensors of the workers of P_x that share their index along the axes where P_y's
    shape (reversed if `transpose_dest`; P_x's if `transpose_src`; left-padded with 1s) equals
    P_x's onto the worker of P_y with that index; P_y's shape must be 1 on the others. Workers
    outside P_y get a zero-volume tensor ((batch, 0) with `preserve_batch`). Backward: Broadcast.
    Every worker of the partitions' root calls it."""

    def __init__(self, P_x, P_y, transpose_src=False, transpose_dest=False, preserve_batch=True):
        super().__init__()
        self.P_x, self.P_y = P_x, P_y
        self.transpose_src, self.transpose_dest = transpose_src, transpose_dest
        self.preserve_batch = preserve_batch
        self._ops = {}

    def forward(self, input):
        tdim = _bridge.agree_dim(self.P_x, input)
        dim = max(tdim, self.P_x.dim, self.P_y.dim)
        P_x = self.P_x._distop_partition(dim, self.transpose_src)
        P_y = self.P_y._distop_partition(dim, self.transpose_dest)
        if _bridge.same_partition(P_x, P_y):
            return input.clone()
        op = self._ops.get(dim)
        if op is None:
            op = self._ops[dim] = _dt.SumReduce(P_x, P_y)
        x, dtype = _bridge.to_native(input)
        y = op(_bridge.padded(x, dim) if self.P_x.active else x)
        if self.P_y.active:
            return _bridge.from_native(_bridge.unpadded(y, tdim), dtype)
        return _bridge.from_native(_bridge.zero_output(input, y, self.preserve_batch), dtype)
