"""DistDL's channel-partitioned convolutions: x [N, C_in, *spatial] with its input channels over
P_x = [1, P_ci, 1, ...], the weight in blocks over P_w = [P_co, P_ci, 1, ...], y with its output
channels over P_y = [1, P_co, 1, ...]. x is broadcast from P_x down P_w's first axis, each worker
of P_w convolves its input channels into its output channels (torch's layer, `conv_layer`; the
bias on P_w's first column), and the partial outputs are summed along P_w's second axis onto P_y
(as a [P_co, 1, ...] grid); backward runs the adjoints in reverse. The spatial axes are not
split."""

import torch

from ._conv_common import channel_block, check_channel_partitions, output_rows
from .broadcast import Broadcast
from .module import Module
from .sum_reduce import SumReduce


class DistributedChannelConvBase(Module):
    TorchConvType = None
    num_dimensions = None

    def __init__(self, P_x, P_y, P_w, in_channels, out_channels, kernel_size, stride=1,
                 padding=0, padding_mode="zeros", dilation=1, groups=1, bias=True, *args,
                 **kwargs):
        super().__init__()
        check_channel_partitions(P_x, P_y, P_w, self.num_dimensions, spatial_split=False)
        self.P_x, self.P_y, self.P_w = P_x, P_y, P_w
        self.in_channels, self.out_channels = in_channels, out_channels
        self.use_bias = bias
        self.serial = P_w.size == 1 and P_w.active and P_x.size == 1 and P_y.size == 1
        self._P_y_rows = output_rows(P_y)
        self.x_broadcast = Broadcast(P_x, P_w, preserve_batch=True)
        self.y_sum_reduce = SumReduce(P_w, self._P_y_rows, preserve_batch=True)
        self.stores_bias = False
        if P_w.active:
            self.stores_bias = bool(bias) and int(P_w.index[1]) == 0
            local_co, local_ci = channel_block(P_w, in_channels, out_channels)
            self.conv_layer = self.TorchConvType(local_ci, local_co, kernel_size, stride=stride,
                                                 padding=padding, padding_mode=padding_mode,
                                                 dilation=dilation, groups=groups,
                                                 bias=self.stores_bias)
            self.weight = self.conv_layer.weight
            if self.stores_bias:
                self.bias = self.conv_layer.bias

    def forward(self, input):
        x = self.x_broadcast(input)
        if self.P_w.active:
            x = self.conv_layer(x)
        return self.y_sum_reduce(x)


class DistributedChannelConv1d(DistributedChannelConvBase):
    TorchConvType = torch.nn.Conv1d
    num_dimensions = 1


class DistributedChannelConv2d(DistributedChannelConvBase):
    TorchConvType = torch.nn.Conv2d
    num_dimensions = 2


class DistributedChannelConv3d(DistributedChannelConvBase):
    TorchConvType = torch.nn.Conv3d
    num_dimensions = 3
