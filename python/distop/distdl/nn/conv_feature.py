"""DistDL's feature-partitioned convolutions: x [N, C, *spatial] split over the spatial axes of
P_x = [1, 1, p_1, ...]. The weight and bias live on P_x's first worker (zero-volume buffers on
the others, as in DistDL) and are broadcast to every worker of P_x in each forward pass (their
gradients summed back onto it); each worker convolves its halo-exchanged block (distop's
HaloExchange) into its balanced block of the output."""

import torch
import torch.nn.functional as F

from ..utilities.torch import zero_volume_tensor
from ._conv_common import expand, torch_conv
from ._window import WindowHalo
from .broadcast import Broadcast
from .module import Module


class DistributedFeatureConvBase(Module):
    dims = None

    def __init__(self, P_x, in_channels, out_channels, kernel_size, stride=1, padding=0,
                 padding_mode="zeros", dilation=1, groups=1, bias=True, buffer_manager=None):
        super().__init__()
        if padding_mode != "zeros":
            raise ValueError(f"padding_mode {padding_mode!r}: only 'zeros' is supported")
        self.P_x = P_x
        self.in_channels, self.out_channels = in_channels, out_channels
        self.kernel_size = expand(kernel_size, self.dims)
        self.stride = expand(stride, self.dims)
        self.padding = expand(padding, self.dims)
        self.dilation = expand(dilation, self.dims)
        self.groups = groups
        self.use_bias = bias
        P_wb = P_x.create_partition_inclusive([0])
        self.P_wb_cart = P_wb.create_cartesian_topology_partition([1])
        P_wb.deactivate()
        if self.P_wb_cart.active:
            conv = torch_conv(self.dims)(in_channels, out_channels, self.kernel_size,
                                         groups=groups, bias=bias)
            self.weight = torch.nn.Parameter(conv.weight.detach())
            if bias:
                self.bias = torch.nn.Parameter(conv.bias.detach())
            else:
                self.register_buffer("bias", None)
        else:
            # Zero-volume stand-ins that still require a gradient (DistDL's): each receives its
            # zero-volume part of the broadcast's adjoint.
            self.register_buffer("weight", zero_volume_tensor(requires_grad=True))
            self.register_buffer("bias", zero_volume_tensor(requires_grad=True) if bias else None)
        self.w_broadcast = Broadcast(self.P_wb_cart, P_x, preserve_batch=False)
        self.b_broadcast = Broadcast(self.P_wb_cart, P_x, preserve_batch=False) if bias else None
        fn = getattr(F, f"conv{self.dims}d")
        self._w = self._b = None

        def local(x):
            return fn(x, self._w, self._b, stride=self.stride, padding=0,
                      dilation=self.dilation, groups=self.groups)

        self._halo = WindowHalo(P_x._distop_partition(), self.dims, self.kernel_size,
                                self.stride, self.padding, self.dilation, local)

    def forward(self, input):
        self._w = self.w_broadcast(self.weight)
        self._b = self.b_broadcast(self.bias) if self.b_broadcast is not None else None
        try:
            y = self._halo(input)
        finally:
            w, b = self._w, self._b
            self._w = self._b = None
        if self.P_x.active:
            return y
        # Outside P_x: nothing to compute, but the broadcasts' nodes stay in the graph.
        extra = w.sum() * 0 + (b.sum() * 0 if b is not None else 0)
        return zero_volume_tensor(input.shape[0] if input.dim() else None,
                                  dtype=input.dtype) + y.sum() * 0 + extra


class DistributedFeatureConv1d(DistributedFeatureConvBase):
    dims = 1


class DistributedFeatureConv2d(DistributedFeatureConvBase):
    dims = 2


class DistributedFeatureConv3d(DistributedFeatureConvBase):
    dims = 3
