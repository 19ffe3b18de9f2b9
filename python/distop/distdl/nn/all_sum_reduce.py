"""DistDL's AllSumReduce: the sum over sub-grids of a partition, on every member."""

import distop.torch as _dt

from . import _bridge
from .module import Module


class AllSumReduce(Module):
    """Each worker of P_x receives the sum of the tensors of the workers that share its index
    off the grid axes `axes_reduce` (all axes by default). Self-adjoint. Every worker of P_x's
    root calls it (outside P_x with a zero-volume tensor, which it gets back)."""

    def __init__(self, P_x, axes_reduce=None):
        super().__init__()
        self.P_x = P_x
        self.axes_reduce = None if axes_reduce is None else [int(a) for a in axes_reduce]
        self._ops = {}

    def forward(self, input):
        tdim = _bridge.agree_dim(self.P_x, input)
        dim = max(tdim, self.P_x.dim)
        axes = range(self.P_x.dim) if self.axes_reduce is None else self.axes_reduce
        axes = [a + dim - self.P_x.dim for a in axes]
        op = self._ops.get(dim)
        if op is None:
            op = self._ops[dim] = _dt.AllSumReduce(self.P_x._distop_partition(dim), axes)
        x, dtype = _bridge.to_native(input)
        y = op(_bridge.padded(x, dim) if self.P_x.active else x)
        y = _bridge.unpadded(y, tdim) if self.P_x.active else _bridge.zero_output(input, y, False)
        return _bridge.from_native(y, dtype)
