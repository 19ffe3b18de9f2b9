"""DistDL's DistributedLinear: x [N, in] with its features over P_x = [1, P_in], the weight in
blocks over P_w = [P_out, P_in], y [N, out] with its features over P_y = [1, P_out]. x is
broadcast from P_x down P_w's columns, each worker of P_w applies its block (torch.nn.Linear; the
bias on P_w's first column), and the partial products are summed over P_w's rows onto P_y
(SumReduce with transpose_src); backward runs the adjoints in reverse."""

import torch

from ..utilities.slicing import compute_subshape
from .broadcast import Broadcast
from .module import Module
from .sum_reduce import SumReduce


class DistributedLinear(Module):

    def __init__(self, P_x, P_y, P_w, in_features, out_features, bias=True):
        super().__init__()
        self.P_x, self.P_y, self.P_w = P_x, P_y, P_w
        self.bias = bias
        self.x_broadcast = Broadcast(P_x, P_w, preserve_batch=True)
        if P_w.active:
            local_in = int(compute_subshape(P_w.shape[1], P_w.index[1], in_features)[0])
            local_out = int(compute_subshape(P_w.shape[0], P_w.index[0], out_features)[0])
            self.sublinear = torch.nn.Linear(local_in, local_out,
                                             bias=bool(bias) and int(P_w.index[-1]) == 0)
        self.y_sum_reduce = SumReduce(P_w, P_y, transpose_src=True, preserve_batch=True)

    def forward(self, input):
        x = self.x_broadcast(input)
        if self.P_w.active:
            x = self.sublinear(x)
        return self.y_sum_reduce(x)
