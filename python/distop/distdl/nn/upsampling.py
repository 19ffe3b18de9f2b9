"""DistDL's DistributedUpsample over distop.nn.DistributedUpsample (distop's distributed
interpolation): x [N, C, *spatial] on P_x, split over any of its axes; the output on P_x, x's
batch and channel blocks, the spatial axes balanced; torch.nn.Upsample's index rules exactly."""

import torch

from ... import nn as _nn
from ..utilities.torch import zero_volume_tensor
from .module import Module

_TORCH_MODES = {1: "linear", 2: "bilinear", 3: "trilinear"}


class DistributedUpsample(Module):
    """DistDL's arguments: ``size`` the output's global shape (all axes, N and C included, as
    DistDL takes it) or ``scale_factor`` (the spatial axes), ``mode`` "nearest" or "linear" (the
    linear mode of the input's number of spatial axes), ``align_corners`` (for "linear" only; a
    nearest mode ignores it, as DistDL does). ``buffer_manager`` is accepted and ignored."""

    def __init__(self, P_x, buffer_manager=None, size=None, scale_factor=None, mode="linear",
                 align_corners=False):
        super().__init__()
        if mode == "cubic":
            raise NotImplementedError("Cubic interpolation is not implemented.")
        if size is None and scale_factor is None:
            raise ValueError("One of `size` or `scale_factor` must be set.")
        if size is not None and scale_factor is not None:
            raise ValueError("Only one of `size` or `scale_factor` may be set.")
        self.P_x = P_x
        self.mode, self.align_corners = mode, align_corners
        self.size, self.scale_factor = size, scale_factor
        P = P_x._distop_partition()
        dims = P.dim - 2
        if size is not None:
            size = list(size)
            if len(size) != P.dim:
                raise ValueError("Provided size does not match input tensor dimension.")
            size = size[2:]
        torch_mode = _TORCH_MODES.get(dims, mode) if mode == "linear" else mode
        self._layer = _nn.DistributedUpsample(
            P, size=size, scale_factor=scale_factor, mode=torch_mode,
            align_corners=bool(align_corners) if "linear" in torch_mode else None)

    def forward(self, input):
        y = self._layer(input)
        if self.P_x.active:
            return y
        return zero_volume_tensor(device=input.device, dtype=input.dtype) + y.sum() * 0
