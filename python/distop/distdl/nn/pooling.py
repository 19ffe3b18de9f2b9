"""DistDL's feature-partitioned pooling: x [N, C, *spatial] split over the spatial axes of
P_x = [1, 1, p_1, ...], each worker pooling its balanced block of the output after a halo
exchange (distop's HaloExchange). Max pooling pads with -inf, as torch; average pooling counts
the padding (count_include_pad)."""

import torch.nn.functional as F

from ..utilities.torch import zero_volume_tensor
from ._window import WindowHalo
from .module import Module


def _expand(v, dims):
    return list(v) if isinstance(v, (list, tuple)) else [v] * dims


class DistributedPoolBase(Module):
    dims = None
    is_max = True

    def __init__(self, P_x, kernel_size, stride=None, padding=0, dilation=1,
                 buffer_manager=None):
        super().__init__()
        self.P_x = P_x
        self.kernel_size = _expand(kernel_size, self.dims)
        self.stride = self.kernel_size if stride is None else _expand(stride, self.dims)
        self.padding = _expand(padding, self.dims)
        self.dilation = _expand(dilation, self.dims)
        fn = getattr(F, f"{'max' if self.is_max else 'avg'}_pool{self.dims}d")
        if self.is_max:
            def local(x):
                return fn(x, self.kernel_size, self.stride, 0, self.dilation)
        else:
            if any(d != 1 for d in self.dilation):
                raise ValueError("average pooling has no dilation")

            def local(x):
                return fn(x, self.kernel_size, self.stride, 0)
        self._halo = WindowHalo(P_x._distop_partition(), self.dims, self.kernel_size,
                                self.stride, self.padding, self.dilation, local,
                                float("-inf") if self.is_max else 0.0)

    def forward(self, input):
        y = self._halo(input)
        if self.P_x.active:
            return y
        return zero_volume_tensor(device=input.device, dtype=input.dtype) + y.sum() * 0


class DistributedMaxPool1d(DistributedPoolBase):
    dims, is_max = 1, True


class DistributedMaxPool2d(DistributedPoolBase):
    dims, is_max = 2, True


class DistributedMaxPool3d(DistributedPoolBase):
    dims, is_max = 3, True


class DistributedAvgPool1d(DistributedPoolBase):
    dims, is_max = 1, False


class DistributedAvgPool2d(DistributedPoolBase):
    dims, is_max = 2, False


class DistributedAvgPool3d(DistributedPoolBase):
    dims, is_max = 3, False
