"""DistDL's DistributedBatchNorm: torch's batch normalisation over x [N, C, *spatial] split over
P_x along any axes, the channel axis (1) included. The statistics are one AllSumReduce over every
grid axis but the channel axis; the affine weight and bias live on the workers at index 0 off the
channel axis (shape [1, C_local, 1, ...]) and are broadcast to the others each forward pass.
Running statistics are kept on every worker for its channels."""

import numpy as np
import torch

from .all_sum_reduce import AllSumReduce
from .broadcast import Broadcast
from .module import Module
from ..utilities.slicing import compute_subshape


class DistributedBatchNorm(Module):

    def __init__(self, P_x, num_features, eps=1e-05, momentum=0.1, affine=True,
                 track_running_stats=True):
        super().__init__()
        if P_x.dim < 2:
            raise ValueError("DistributedBatchNorm: the partition needs a channel axis (axis 1)")
        self.P_x = P_x
        self.num_features, self.eps, self.momentum = num_features, eps, momentum
        self.affine, self.track_running_stats = affine, track_running_stats
        shape = [int(s) for s in P_x.shape]
        self._stat_shape = None
        if P_x.active:
            c_local = int(compute_subshape(shape[1], P_x.index[1], num_features)[0])
            self._stat_shape = [1, c_local] + [1] * (P_x.dim - 2)
        self.reduce = AllSumReduce(P_x, [a for a in range(P_x.dim) if a != 1])
        if affine:
            inner = int(np.prod(shape[2:]))
            base = P_x.create_partition_inclusive([c * inner for c in range(shape[1])])
            self.P_affine = base.create_cartesian_topology_partition(
                [1, shape[1]] + [1] * (P_x.dim - 2))
            base.deactivate()
            if self.P_affine.active:
                self.weight = torch.nn.Parameter(torch.ones(self._stat_shape))
                self.bias = torch.nn.Parameter(torch.zeros(self._stat_shape))
            else:
                self.register_parameter("weight", None)
                self.register_parameter("bias", None)
            self.w_broadcast = Broadcast(self.P_affine, P_x, preserve_batch=False)
            self.b_broadcast = Broadcast(self.P_affine, P_x, preserve_batch=False)
        if track_running_stats and P_x.active:
            self.register_buffer("running_mean", torch.zeros(self._stat_shape))
            self.register_buffer("running_var", torch.ones(self._stat_shape))
            self.register_buffer("num_batches_tracked", torch.tensor(0, dtype=torch.long))
        else:
            self.register_buffer("running_mean", None)
            self.register_buffer("running_var", None)
            self.register_buffer("num_batches_tracked", None)

    def _affine_parameters(self, like):
        w = self.weight if self.weight is not None else like.new_zeros(0)
        b = self.bias if self.bias is not None else like.new_zeros(0)
        return self.w_broadcast(w), self.b_broadcast(b)

    def forward(self, input):
        active = self.P_x.active
        batch_stats = self.training or not self.track_running_stats
        if batch_stats:
            axes = [a for a in range(input.dim()) if a != 1]
            if active:
                s1 = input.sum(axes, keepdim=True)
                s2 = (input * input).sum(axes, keepdim=True)
                count = input.new_full(self._stat_shape, float(input.numel() // input.shape[1]))
                stats = torch.cat([s1, s2, count], dim=0)
            else:
                stats = input.reshape(0) * 0
            stats = self.reduce(stats)
        if self.affine:
            w, b = self._affine_parameters(input)
        if not active:
            out = input.clone()
            if batch_stats:
                out = out + stats.sum() * 0
            if self.affine:
                out = out + (w.sum() + b.sum()) * 0
            return out
        if batch_stats:
            n = float(stats[2].reshape(-1)[0])
            mean = stats[0:1] / n
            var = stats[1:2] / n - mean * mean
            if self.training and self.track_running_stats:
                with torch.no_grad():
                    self.num_batches_tracked += 1
                    unbiased = var * (n / max(n - 1.0, 1.0))
                    self.running_mean.mul_(1 - self.momentum).add_(self.momentum * mean)
                    self.running_var.mul_(1 - self.momentum).add_(self.momentum * unbiased)
        else:
            mean, var = self.running_mean, self.running_var
        y = (input - mean) / torch.sqrt(var + self.eps)
        if self.affine:
            y = y * w + b
        return y
