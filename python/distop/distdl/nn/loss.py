"""DistDL's distributed losses: torch's loss on each worker's block, summed onto P_x's first
worker by SumReduce and normalised there (the element count, or the batch size for KL
divergence's "batchmean"). The loss is on P_x's rank 0; other workers get a 0 that keeps them in
the backward pass (whose Broadcast gives every worker the gradient of its block)."""

import numpy as np
import torch

from .module import Module
from .sum_reduce import SumReduce


class DistributedLossBase(Module):
    """torch's `BaseLossLayer` over a tensor split over P_x (input and target alike), with
    reduction "none" (each worker's elementwise losses), "sum" or "mean"."""

    BaseLossLayer = None
    _valid_reductions = ["none", "mean", "sum"]

    def __init__(self, P_x, reduction="mean"):
        super().__init__()
        if reduction not in self._valid_reductions:
            raise ValueError(f"Invalid reduction mode for Loss type {self.__class__}.")
        self.reduction = reduction
        self.local_loss_function = self.BaseLossLayer(
            reduction="none" if reduction == "none" else "sum")
        self.P_x = P_x
        P_0_base = P_x.create_partition_inclusive([0])
        self.P_0 = P_0_base.create_cartesian_topology_partition([1] * P_x.dim)
        P_0_base.deactivate()
        self.sum_reduce = SumReduce(self.P_x, self.P_0)

    def _local_count(self, x):
        return int(np.prod(x.shape))

    def _normalization(self, x):
        if self.reduction == "sum":
            return 1
        n = self._local_count(x) if self.P_x.active else 0
        return int(sum(self.P_x._root.allgather(n)))

    def forward(self, input, target):
        if self.reduction == "none":
            return self.local_loss_function(input, target) if self.P_x.active else input.clone()
        norm = self._normalization(input)
        if self.P_x.active:
            local = self.local_loss_function(input, target).reshape(1)
        else:
            local = input.reshape(0) * 0
        total = self.sum_reduce(local)
        if self.P_0.active:
            return total[0] / norm
        # Not the loss's worker: 0, still holding the reduction's node for backward.
        return total.sum()


class DistributedL1Loss(DistributedLossBase):
    BaseLossLayer = torch.nn.L1Loss


class DistributedMSELoss(DistributedLossBase):
    BaseLossLayer = torch.nn.MSELoss


class DistributedPoissonNLLLoss(DistributedLossBase):
    BaseLossLayer = torch.nn.PoissonNLLLoss


class DistributedBCELoss(DistributedLossBase):
    BaseLossLayer = torch.nn.BCELoss


class DistributedBCEWithLogitsLoss(DistributedLossBase):
    BaseLossLayer = torch.nn.BCEWithLogitsLoss


class DistributedKLDivLoss(DistributedLossBase):
    """KL divergence; "batchmean" divides by the global batch size (the batch axis's blocks on
    the workers at index 0 along every other axis)."""

    BaseLossLayer = torch.nn.KLDivLoss
    _valid_reductions = ["none", "mean", "sum", "batchmean"]

    def __init__(self, P_x, reduction="mean"):
        super().__init__(P_x, reduction)
        if reduction == "batchmean":
            # torch's batchmean is the sum over the batch size: the local losses are summed.
            self.local_loss_function = self.BaseLossLayer(reduction="sum")

    def _local_count(self, x):
        if self.reduction == "batchmean":
            index = np.atleast_1d(self.P_x.index)
            return int(x.shape[0]) if all(int(c) == 0 for c in index[1:]) else 0
        return super()._local_count(x)
