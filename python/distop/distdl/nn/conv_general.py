"""DistDL's generally partitioned convolutions: x [N, C_in, *spatial] split over its input
channels and spatial axes, P_x = [1, P_ci, *S]; the weight in blocks over P_w = [P_co, P_ci, *S];
y split over its output channels and the same spatial grid, P_y = [1, P_co, *S].

Forward, on every worker of the root (each step a distop operator, backward their adjoints in
reverse):

1. P_x's workers pad their block with the global padding where it touches the domain's boundary
   and exchange the halo the convolution needs (HaloExchange, widths by DistDL's halo arithmetic,
   HaloMixin, on the padded tensor's blocks), keeping only the entries their outputs read;
2. the weight blocks, stored on P_w's workers at spatial index 0, are broadcast over the spatial
   axes of P_w; the bias, stored on the workers at index 0 off the output-channel axis, to P_w's
   first column (input-channel index 0), where it is added once;
3. x is broadcast from P_x down P_w's first axis, each worker of P_w convolves its input channels
   into its output channels (torch's convolution, no padding), and the partial outputs are summed
   along P_w's second axis onto P_y (as a [P_co, 1, *S] grid): each worker of P_y holds its
   balanced spatial block of its output channels.
"""

import numpy as np
import torch
import torch.nn.functional as F

import distop

from ..utilities.torch import distdl_padding_to_torch_padding, zero_volume_tensor
from ._conv_common import channel_block, check_channel_partitions, expand, output_rows, sub_grid
from .broadcast import Broadcast
from .halo_exchange import HaloExchange
from .mixins.conv_mixin import ConvMixin
from .mixins.halo_mixin import HaloMixin
from .module import Module
from .sum_reduce import SumReduce


class DistributedGeneralConvBase(Module, HaloMixin, ConvMixin):
    """DistDL's DistributedGeneralConv{1,2,3}d(P_x, P_y, P_w, in_channels, out_channels,
    kernel_size, stride, padding, padding_mode, dilation, groups, bias, buffer_manager).
    `weight` is a Parameter on P_w's workers at spatial index 0 (their block
    [out / P_co, in / P_ci, *kernel], balanced), `bias` one on those also at input-channel index
    0 (their [out / P_co] block); other workers hold zero-volume buffers that receive their
    (zero-volume) part of the gradient. Inputs need not be split balanced; the output is. Only
    'zeros' padding; groups other than 1 only without channel partitioning (a grouped weight does
    not split into channel blocks). Every worker of the partitions' root calls it."""

    TorchConvType = None
    num_dimensions = None

    def __init__(self, P_x, P_y, P_w, in_channels, out_channels, kernel_size, stride=1,
                 padding=0, padding_mode="zeros", dilation=1, groups=1, bias=True,
                 buffer_manager=None):
        super().__init__()
        dims = self.num_dimensions
        check_channel_partitions(P_x, P_y, P_w, dims, spatial_split=True)
        if padding_mode != "zeros":
            raise ValueError(f"padding_mode {padding_mode!r}: only 'zeros' is supported")
        P_co, P_ci = int(P_w.shape[0]), int(P_w.shape[1])
        if groups != 1 and (P_co > 1 or P_ci > 1):
            raise ValueError(f"groups={groups} needs P_w's channel axes to be 1, not "
                             f"{[P_co, P_ci]}")
        self.P_x, self.P_y, self.P_w = P_x, P_y, P_w
        self.in_channels, self.out_channels = in_channels, out_channels
        self.kernel_size = expand(kernel_size, dims)
        self.stride = expand(stride, dims)
        self.padding = expand(padding, dims)
        self.padding_mode = padding_mode
        self.dilation = expand(dilation, dims)
        self.groups = groups
        self.use_bias = bool(bias)
        P_s = [int(s) for s in P_w.shape[2:]]

        # Where the parameters live and where they are used (DistDL's P_wr, P_b, P_br).
        self.P_wr = sub_grid(P_w, lambda c: np.all(c[2:] == 0), [P_co, P_ci] + [1] * dims)
        self.stores_weight = self.P_wr.active
        self.receives_weight = P_w.active
        self.stores_bias = self.receives_bias = False
        if self.use_bias:
            self.P_b = sub_grid(P_w, lambda c: c[1] == 0, [P_co, 1] + P_s)
            self.P_br = sub_grid(P_w, lambda c: c[1] == 0 and np.all(c[2:] == 0),
                                 [P_co, 1] + [1] * dims)
            self.receives_bias, self.stores_bias = self.P_b.active, self.P_br.active
        conv = None
        if P_w.active:
            local_co, local_ci = channel_block(P_w, in_channels, out_channels)
            conv = self.TorchConvType(local_ci, local_co, self.kernel_size, stride=self.stride,
                                      dilation=self.dilation, groups=groups,
                                      bias=self.receives_bias)
        if self.stores_weight:
            self.weight = torch.nn.Parameter(conv.weight.detach())
        else:
            self.register_buffer("weight", zero_volume_tensor(requires_grad=True))
        if self.stores_bias:
            self.bias = torch.nn.Parameter(conv.bias.detach())
        else:
            self.register_buffer("bias", zero_volume_tensor(requires_grad=True)
                                 if self.use_bias else None)

        self.w_broadcast = Broadcast(self.P_wr, P_w, preserve_batch=False)
        self.b_broadcast = Broadcast(self.P_br, self.P_b, preserve_batch=False) \
            if self.use_bias else None
        self.P_y_rows = output_rows(P_y)
        self.x_broadcast = Broadcast(P_x, P_w, preserve_batch=True)
        self.y_sum_reduce = SumReduce(P_w, self.P_y_rows, preserve_batch=True)
        self._conv = getattr(F, f"conv{dims}d")
        self._halos = {}

    # ---- the halo of x on P_x

    def _halo_plan(self, input):
        """(HaloExchange, F.pad argument, slices of the exchanged tensor to keep) for the blocks
        every worker of P_x holds now (their shapes agreed over the root; plans kept per
        layout)."""
        P = self.P_x
        mine = None
        if P.active:
            mine = (tuple(int(i) for i in P.index), tuple(int(n) for n in input.shape))
        held = tuple(h for h in P._root.allgather(mine) if h is not None)
        plan = self._halos.get(held)
        if plan is not None:
            return plan
        n = self.num_dimensions + 2
        grid = [int(s) for s in P.shape]
        bad = sorted(set(len(s) for _, s in held if len(s) != n))
        if bad:
            raise distop.Error(f"[{type(self).__name__}] the workers of P_x pass "
                               f"tensors of {bad} dimensions; expected {n}")
        # Every block's shape after the boundary padding, and the padded global shape.
        pad = np.array([0, 0] + self.padding, dtype=int)
        blocks = np.zeros(grid + [n], dtype=int)
        extents = [dict() for _ in range(n)]
        for index, shape in held:
            index = np.asarray(index)
            padded = np.asarray(shape) + pad * (index == 0) + pad * (index == np.asarray(grid) - 1)
            blocks[tuple(index)] = padded
            for a in range(n):
                extents[a][int(index[a])] = int(padded[a])
        glob = np.array([sum(e.values()) for e in extents], dtype=int)
        if glob[1] != self.in_channels:
            raise distop.Error(f"[{type(self).__name__}] the input has {glob[1]} "
                               f"channels; the layer takes {self.in_channels}")
        window = tuple(np.array(v, dtype=int) for v in ([1, 1] + self.kernel_size,
                                                        [1, 1] + self.stride, [0] * n,
                                                        [1, 1] + self.dilation))
        halo = recv = send = None
        torch_pad = keep = None
        if P.active:
            index = np.asarray(P.index, dtype=int)
            halo, recv, send, _ = self._compute_exchange_info(
                glob, *window, True, grid, index, subtensor_shapes=blocks)
            # DistDL keeps what the outputs read from the left; the right end is trimmed too, so
            # that a surplus there never makes an extra output.
            signed = self._compute_halo_shape(grid, index, glob, *window,
                                              require_nonnegative=False,
                                              subtensor_shapes=blocks)
            boundary = np.stack([pad * (index == 0), pad * (index == np.asarray(grid) - 1)], 1)
            torch_pad = distdl_padding_to_torch_padding(boundary + halo)
            size = blocks[tuple(index)] + halo.sum(axis=1)
            keep = tuple(slice(int(max(0, -lo)), int(s - max(0, -hi)))
                         for (lo, hi), s in zip(signed, size))
        plan = self._halos[held] = (HaloExchange(P, halo, recv, send), torch_pad, keep)
        return plan

    def _exchanged(self, input):
        """P_x's workers: the padded, halo-exchanged block, cut to what the outputs read; the
        others: their zero-volume input (the exchange is collective over the root)."""
        exchange, torch_pad, keep = self._halo_plan(input)
        if not self.P_x.active:
            return exchange(input.clone())
        return exchange(F.pad(input, torch_pad))[keep]

    def forward(self, input):
        x = self._exchanged(input)
        w = self.w_broadcast(self.weight)
        b = None
        if self.b_broadcast is not None:
            # As [out / P_co, 1, ...]: the blocks along P_br's first axis then form a tensor.
            b = self.b_broadcast(self.bias.reshape([-1] + [1] * (self.num_dimensions + 1))
                                 if self.stores_bias else self.bias)
            if self.receives_bias:
                b = b.reshape(-1)
        x = self.x_broadcast(x)
        if self.P_w.active:
            x = self._conv(x, w, b if self.receives_bias else None, stride=self.stride,
                           padding=0, dilation=self.dilation, groups=self.groups)
        else:
            # Nothing to compute, but the parameters' broadcasts stay in the graph.
            x = x + w.sum() * 0
        if b is not None and not self.receives_bias:
            x = x + b.sum() * 0
        return self.y_sum_reduce(x)


class DistributedGeneralConv1d(DistributedGeneralConvBase):
    """DistDL's general 1-d convolution (torch.nn.Conv1d's local unit)."""
    TorchConvType = torch.nn.Conv1d
    num_dimensions = 1


class DistributedGeneralConv2d(DistributedGeneralConvBase):
    """DistDL's general 2-d convolution (torch.nn.Conv2d's local unit)."""
    TorchConvType = torch.nn.Conv2d
    num_dimensions = 2


class DistributedGeneralConv3d(DistributedGeneralConvBase):
    """DistDL's general 3-d convolution (torch.nn.Conv3d's local unit)."""
    TorchConvType = torch.nn.Conv3d
    num_dimensions = 3


__all__ = ["DistributedGeneralConvBase", "DistributedGeneralConv1d", "DistributedGeneralConv2d",
           "DistributedGeneralConv3d"]
