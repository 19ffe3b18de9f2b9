"""DistDL's Repartition (also DistributedTranspose): a tensor moved from one partition to
another, balanced there."""

import distop.torch as _dt

from . import _bridge
from .module import Module


class Repartition(Module):
    """Moves the tensor split over P_x (any blocks the workers hold) to P_y, split balanced as
    DistDL splits (compute_subshape). P_x and P_y have the tensor's number of dimensions (a
    ValueError otherwise). Workers outside P_y get a zero-volume tensor ((batch, 0) with
    `preserve_batch`). Backward: the reverse transfer. Every worker of the root calls it."""

    def __init__(self, P_x, P_y, preserve_batch=True, buffer_manager=None):
        super().__init__()
        if P_x.dim != P_y.dim:
            raise ValueError(f"Input and output partition must be same dimension: {P_x.dim} and "
                             f"{P_y.dim}.")
        self.P_x, self.P_y = P_x, P_y
        self.preserve_batch = preserve_batch
        self._op = None

    def forward(self, input):
        tdim, glob = _bridge.structure(self.P_x, input)
        if tdim != self.P_x.dim:
            raise ValueError(f"Input partition must have the dimension ({self.P_x.dim}) of the "
                             f"input tensor ({tdim}).")
        for n, p in zip(glob, self.P_y.shape):
            if n == 1 and p != 1:
                raise ValueError(f"Input tensor must not be size 1 ({glob}) in a dimension where "
                                 f"the output partition is other than 1 ({list(self.P_y.shape)}).")
        if self._op is None:
            self._op = _dt.Repartition(self.P_x._distop_partition(), self.P_y._distop_partition())
        x, dtype = _bridge.to_native(input)
        y = self._op(x)
        if self.P_y.active:
            return _bridge.from_native(y, dtype)
        return _bridge.from_native(_bridge.zero_output(input, y, self.preserve_batch), dtype)
