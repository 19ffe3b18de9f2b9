"""The halo, trim and boundary padding that DistDL's feature-partitioned window layers share, as
distop.nn does them (distop.nn._WindowLayer), around a local function chosen per layer."""

from distop import nn as _dnn


class WindowHalo(_dnn._WindowLayer):
    """distop's window machinery on the distop view of a DistDL partition, applying `local` to
    each worker's exchanged, trimmed and padded block (padding value `fill`)."""

    name = "distop.distdl window layer"

    def __init__(self, P_x, dims, kernel_size, stride, padding, dilation, local, fill=0.0):
        super().__init__(P_x, dims, kernel_size, stride, padding, dilation)
        self._fn = local
        self.fill = fill

    def _local(self, x):
        return self._fn(x)
