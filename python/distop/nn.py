"""Distributed layers composed in Python from distop's operators and torch's local layers, the way
DistDL builds its own.

DistributedLinear is DistDL's: the input's features split over P_x = [1, P_in], the weight's
blocks over P_w = [P_out, P_in], the output's features over P_y = [1, P_out] (the ranks of P_w's
first column). Its state_dict holds torch.nn.Linear's names (``weight``, ``bias``), each rank its
block (zero-volume outside P_w / P_y); ``global_state_dict`` assembles torch's tensors.

DistributedBatchNorm is torch.nn.BatchNorm{1,2,3}d over an input split over any axes but the
channels: the statistics by one AllSumReduce of the per-channel sums.

DistributedConv{1,2,3}d and DistributedMaxPool/AvgPool{1,2,3}d are DistDL's feature-partitioned
layers: x [N, C, *spatial] split over the spatial axes by P_x = [1, 1, p_1, ...], balanced; each
rank exchanges the halo its outputs need (HaloExchange, widths by DistDL's rule, ops/halo.hpp),
drops the owned inputs they do not read, pads at the domain boundary and applies torch's local
layer with no padding, giving its balanced block of the output. Given a partition that splits the
channels (a weight partition [P_co, P_ci, *S]: DistDL's channel and general partitions),
DistributedConv{1,2,3}d returns distop's C++ DistributedGeneralConv{1,2,3}d over it.

DistributedUpsample, DistributedConvTranspose{1,2,3}d, DistributedGroupNorm, DistributedLayerNorm,
DistributedMultiheadAttention, DistributedTransformerEncoderLayer and sequence_parallel_attention
run distop's C++ layers inside torch's autograd (distop/_layers.py says how), and so do the
distributed losses l1_loss, mse_loss, poisson_nll_loss, binary_cross_entropy(_with_logits), kl_div
and dice_loss.
"""

import torch as _torch
import torch.nn.functional as _F

from . import _core, Error, TensorSpace, Decomposition, assemble
from .torch import apply as _apply
from .torch import _dtype_name
from ._layers import (DistributedUpsample, DistributedConvTranspose1d,  # noqa: F401
                      DistributedGeneralConv1d, DistributedGeneralConv2d, DistributedGeneralConv3d,
                      DistributedConvTranspose2d, DistributedConvTranspose3d,
                      DistributedGroupNorm, DistributedLayerNorm, DistributedEmbedding,
                      DistributedMultiheadAttention,
                      DistributedTransformerEncoderLayer, sequence_parallel_attention,
                      sequence_blocks, sequence_positions, l1_loss, mse_loss, poisson_nll_loss,
                      binary_cross_entropy, binary_cross_entropy_with_logits, kl_div, dice_loss)
from . import _layers

__all__ = ["DistributedLinear", "DistributedBatchNorm", "DistributedConv1d", "DistributedConv2d",
           "DistributedConv3d", "DistributedMaxPool1d", "DistributedMaxPool2d",
           "DistributedMaxPool3d", "DistributedAvgPool1d", "DistributedAvgPool2d",
           "DistributedAvgPool3d"] + _layers.__all__


def _blocks(n, parts):
    b = [n // parts + (1 if i < n % parts else 0) for i in range(parts)]
    return [sum(b[:i]) for i in range(parts + 1)]


class _TieFunction(_torch.autograd.Function):
    """Megatron's f for parameters copied on every rank of a partition: identity forward, the
    copies' gradients summed over the ranks backward (one all-reduce for all of them), so that
    every copy receives the gradient of the whole loss and an optimizer keeps the copies equal."""

    @staticmethod
    def forward(ctx, op, *params):
        ctx.op, ctx.shapes, ctx.dtype = op, [p.shape for p in params], params[0].dtype
        ctx.device = params[0].device
        return tuple(p.view_as(p) for p in params)

    @staticmethod
    def backward(ctx, *grads):
        flat = _torch.cat([
            (g if g is not None else _torch.zeros(shape, dtype=ctx.dtype, device=ctx.device))
            .reshape(-1) for g, shape in zip(grads, ctx.shapes)])
        total = ctx.op.forward(flat.reshape(ctx.op.domain.local_shape).contiguous(), agreed=True)
        out, offset = [], 0
        for shape in ctx.shapes:
            n = 1
            for e in shape:
                n *= e
            out.append(total.reshape(-1)[offset:offset + n].reshape(shape))
            offset += n
        return (None, *out)


class _Tie:
    """The all-reduce of the gradients of `params` (copies on every rank of P), planned once at
    construction (collective over P's parent)."""

    def __init__(self, P, params):
        self.params = [p for p in params if p is not None]
        n = sum(p.numel() for p in self.params)
        shape = [1] * (P.dim - 1) + [n]
        space = TensorSpace(P, Decomposition.balanced(shape, list(P.shape), [-1] * P.dim))
        dtype = str(self.params[0].dtype).split(".")[-1]
        self.op = _core.all_sum_reduce(dtype, space, list(range(P.dim)))
        self.active = P.active

    def __call__(self):
        """The parameters as the forward uses them (on P's ranks; elsewhere as they are)."""
        if not self.active or not _torch.is_grad_enabled():
            return self.params
        return list(_TieFunction.apply(self.op, *self.params))


class DistributedLinear(_torch.nn.Module):
    """y = x W^T + b, with x [N, in] on P_x = [1, P_in] (features split), W [out, in] in blocks over
    P_w = [P_out, P_in] (the rank at (i, j) holds rows block i and columns block j), b on the
    ranks of P_y = P_w's first column, and y [N, out] on P_y as a [1, P_out] grid (features
    split). x is broadcast from P_x down P_w's columns, each P_w rank multiplies its blocks, and
    the partial sums are sum-reduced along P_w's rows onto P_y; backward runs the adjoints
    (SumReduce's is Broadcast, Broadcast's is SumReduce) in the reverse order. The weight and
    bias are initialised as torch.nn.Linear(in_features, out_features) draws them after
    torch.manual_seed(seed), every rank keeping its block."""

    def __init__(self, P_x, P_w, in_features, out_features, bias=True, seed=0,
                 dtype=_torch.float32):
        super().__init__()
        if P_x.dim != 2 or P_w.dim != 2 or P_x.shape[0] != 1 or P_x.shape[1] != P_w.shape[1]:
            raise Error(f"[DistributedLinear] P_x must be [1, P_in] and P_w [P_out, P_in]; got "
                        f"{P_x.shape} and {P_w.shape}")
        self.P_x, self.P_w = P_x, P_w
        p_out, p_in = P_w.shape
        self.P_y = P_w.slice(1, 0).reshape([1, p_out])
        self._P_y_column = P_w.slice(1, 0)  # [P_out, 1]: where the sum-reduce lands
        self.in_features, self.out_features = in_features, out_features
        self._rows, self._cols = _blocks(out_features, p_out), _blocks(in_features, p_in)
        gen = _torch.random.fork_rng(devices=[])
        with gen:
            _torch.manual_seed(seed)
            ref = _torch.nn.Linear(in_features, out_features, bias=bias, dtype=dtype)
        if P_w.active:
            i, j = P_w.coords
            w = ref.weight.detach()[self._rows[i]:self._rows[i + 1],
                                    self._cols[j]:self._cols[j + 1]].clone()
        else:
            w = _torch.zeros(0, 0, dtype=dtype)
        self.weight = _torch.nn.Parameter(w)
        if bias:
            if self.P_y.active:
                i = self.P_y.coords[1]
                bvec = ref.bias.detach()[self._rows[i]:self._rows[i + 1]].clone()
            else:
                bvec = _torch.zeros(0, dtype=dtype)
            self.bias = _torch.nn.Parameter(bvec)
        else:
            self.register_parameter("bias", None)
        self._ops = {}

    def _operators(self, x):
        space, dtype, _ = _core.infer_space(self.P_x, list(x.shape), _dtype_name(x),
                                            False, [], "DistributedLinear")[:3]
        n = space.global_shape[0]
        if space.global_shape[1] != self.in_features:
            raise Error(f"[DistributedLinear] the input has {space.global_shape[1]} features, the "
                        f"layer {self.in_features}")
        key = (space.fingerprint(), dtype)
        ops = self._ops.get(key)
        if ops is None:
            p_out, p_in = self.P_w.shape
            bcast = _core.broadcast(dtype, space, self.P_w)
            partial = TensorSpace(self.P_w, Decomposition.balanced([n, self.out_features],
                                                                   [p_out, p_in], [-1, 0]))
            dst = TensorSpace(self._P_y_column, Decomposition.balanced(
                [n, self.out_features], [p_out, 1], [-1, 0]))
            reduce = _core.sum_reduce(dtype, self.P_w, dst)
            if not reduce.domain == partial:
                raise Error("[DistributedLinear] internal: the partial products' space differs")
            ops = self._ops[key] = (bcast, reduce)
        return ops

    def forward(self, x):
        bcast, reduce = self._operators(x)
        xb = _apply(bcast, x)
        if self.P_w.active:
            partial = _F.linear(xb, self.weight)
        else:
            # Nothing to multiply, but x's broadcast stays in this rank's graph (its adjoint is
            # collective), and so does the empty weight.
            partial = xb.new_zeros(reduce.domain.local_shape) + (xb.sum() + self.weight.sum()) * 0
        y = _apply(reduce, partial)
        if self.bias is not None and self.P_y.active:
            y = y + self.bias
        return y

    def global_state_dict(self, root=0):
        """torch.nn.Linear's state_dict (global tensors) on parent rank `root`, empty tensors
        elsewhere. Collective over the partitions' parent."""
        p_out, p_in = self.P_w.shape
        w_space = TensorSpace(self.P_w, Decomposition.blocks(
            [self.out_features, self.in_features], [p_out, p_in],
            [[self._rows[i + 1] - self._rows[i] for i in range(p_out)],
             [self._cols[j + 1] - self._cols[j] for j in range(p_in)]]))
        out = {"weight": assemble(self.weight.detach(), w_space, root)}
        if self.bias is not None:
            b_space = TensorSpace(self._P_y_column, Decomposition.blocks(
                [self.out_features], [p_out, 1],
                [[self._rows[i + 1] - self._rows[i] for i in range(p_out)]], [0]))
            out["bias"] = assemble(self.bias.detach(), b_space, root)
        return out


class DistributedBatchNorm(_torch.nn.Module):
    """torch.nn.BatchNorm{1,2,3}d(num_features) on x [N, C, *spatial] split over partition P_x
    along any axes but the channel axis (axis 1, which P_x must not split). Training: the mean
    and the biased variance over N and the whole (split) spatial domain, from one AllSumReduce
    over every grid axis of the per-channel sums of x and x^2 and the count; running statistics
    updated as torch does (unbiased variance, `momentum`). Evaluation: the running statistics.
    weight, bias, running_mean, running_var and num_batches_tracked are torch's state_dict
    entries, the same on every rank of P_x (the affine parameters are tied: each rank's copy
    receives torch's gradient, the sum of the ranks' parts, by one all-reduce in backward)."""

    def __init__(self, P_x, num_features, eps=1e-5, momentum=0.1, affine=True, dtype=_torch.float32):
        super().__init__()
        if P_x.dim < 2 or P_x.shape[1] != 1:
            raise Error(f"[DistributedBatchNorm] the partition must not split the channel axis "
                        f"(axis 1): {P_x.shape}")
        from .torch import AllSumReduce
        self.P_x, self.num_features, self.eps, self.momentum = P_x, num_features, eps, momentum
        self._sum = AllSumReduce(P_x, list(range(P_x.dim)))
        if affine:
            self.weight = _torch.nn.Parameter(_torch.ones(num_features, dtype=dtype))
            self.bias = _torch.nn.Parameter(_torch.zeros(num_features, dtype=dtype))
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)
        self._tie = _Tie(P_x, [self.weight, self.bias]) if affine else None
        self.register_buffer("running_mean", _torch.zeros(num_features, dtype=dtype))
        self.register_buffer("running_var", _torch.ones(num_features, dtype=dtype))
        self.register_buffer("num_batches_tracked", _torch.tensor(0, dtype=_torch.long))

    def forward(self, x):
        dim = self.P_x.dim
        shape = [1, self.num_features] + [1] * (dim - 2)
        if self.training:
            axes = [a for a in range(dim) if a != 1]
            if x.numel() > 0:
                s1 = x.sum(axes, keepdim=True)
                s2 = (x * x).sum(axes, keepdim=True)
                count = x.new_full(shape, float(x.numel() // max(x.shape[1], 1)))
            else:  # outside the partition: nothing of its own, but the sums are collective
                s1 = x.new_zeros(shape) + x.sum() * 0
                s2 = x.new_zeros(shape)
                count = x.new_zeros(shape)
            stats = self._sum(_torch.cat([s1, s2, count], dim=0))
            n = float(stats[2].reshape(-1)[0])
            mean = stats[0:1] / n
            var = stats[1:2] / n - mean * mean
            with _torch.no_grad():
                self.num_batches_tracked += 1
                unbiased = var.detach().reshape(-1) * (n / max(n - 1, 1))
                self.running_mean.mul_(1 - self.momentum).add_(self.momentum * mean.detach().reshape(-1))
                self.running_var.mul_(1 - self.momentum).add_(self.momentum * unbiased)
        else:
            mean = self.running_mean.reshape(shape)
            var = self.running_var.reshape(shape)
        if x.numel() == 0:
            return x
        y = (x - mean) / _torch.sqrt(var + self.eps)
        if self.weight is not None:
            weight, bias = self._tie()
            y = y * weight.reshape(shape) + bias.reshape(shape)
        return y


def _per_axis(v, n):
    return list(v) if isinstance(v, (list, tuple)) else [v] * n


class _WindowLayer(_torch.nn.Module):
    """The halo, trim and boundary padding of a window layer on a feature-partitioned input."""

    name = "DistributedWindowLayer"
    fill = 0.0

    def __init__(self, P_x, dims, kernel_size, stride, padding, dilation):
        super().__init__()
        if P_x.dim != dims + 2 or P_x.shape[0] != 1 or P_x.shape[1] != 1:
            raise Error(f"[{self.name}] the partition must be [1, 1] followed by {dims} spatial "
                        f"extents; got {P_x.shape}")
        self.P_x, self.dims = P_x, dims
        self.kernel_size = _per_axis(kernel_size, dims)
        self.stride = _per_axis(stride, dims)
        self.padding = _per_axis(padding, dims)
        self.dilation = _per_axis(dilation, dims)
        self._plans = {}

    def _plan(self, x):
        from .torch import HaloExchange
        space, dtype, _ = _core.infer_space(self.P_x, list(x.shape), _dtype_name(x),
                                            False, [], self.name)
        key = (space.fingerprint(), dtype)
        plan = self._plans.get(key)
        if plan is not None:
            return plan
        if not space.decomposition.is_balanced():
            raise Error(f"[{self.name}] the input must be split balanced ({space})")
        glob = space.global_shape
        widths = [[(0, 0)], [(0, 0)]]
        ghosts, trims, pads = [], [], []
        for a in range(self.dims):
            k, st, p, d = self.kernel_size[a], self.stride[a], self.padding[a], self.dilation[a]
            parts = _core.halo_widths(glob[2 + a], self.P_x.shape[2 + a], k, st, p, d)
            widths.append([(max(h[6], 0), max(h[7], 0)) for h in parts])
            if self.P_x.active:
                own_b, own_e, out_b, out_e, need_b, need_e, left, right = parts[self.P_x.coords[2 + a]]
                ghosts.append((max(left, 0), max(right, 0)))
                trims.append((max(-left, 0), max(-right, 0)))
                first, last = out_b * st - p, (out_e - 1) * st - p + d * (k - 1)
                pads.append((need_b - first, last + 1 - need_e))
        plan = self._plans[key] = (HaloExchange(space, widths=widths), ghosts, trims, pads)
        return plan

    @staticmethod
    def _pad_arg(pairs):
        out = []
        for left, right in reversed(pairs):  # F.pad takes the last axis first
            out += [left, right]
        return out

    def forward(self, x):
        halo, ghosts, trims, pads = self._plan(x)
        if not self.P_x.active:
            # Nothing of its own, but the exchange is collective and stays in the graph.
            xh = halo(x)
            return x.new_zeros([0] * (self.dims + 2)) + xh.sum() * 0
        xh = halo(_F.pad(x, self._pad_arg(ghosts)))
        index = [slice(None), slice(None)]
        for a, (tl, tr) in enumerate(trims):
            index.append(slice(tl, xh.shape[2 + a] - tr))
        xt = xh[tuple(index)]
        xb = _F.pad(xt, self._pad_arg(pads), value=self.fill)
        return self._local(xb)


class _DistributedConv(_WindowLayer):
    def __new__(cls, P_x, *args, **kwargs):
        # A partition that splits the channels is a weight partition [P_co, P_ci, *S]: the
        # channel and general convolutions, distop's C++ DistributedConv.
        if P_x.dim == cls.dims_ + 2 and (P_x.shape[0] != 1 or P_x.shape[1] != 1):
            general = getattr(_layers, f"DistributedGeneralConv{cls.dims_}d")
            return general(P_x, *args, **kwargs)
        return super().__new__(cls)

    def __init__(self, P_x, in_channels, out_channels, kernel_size, stride=1, padding=0,
                 dilation=1, bias=True, seed=0, dtype=_torch.float32):
        super().__init__(P_x, self.dims_, kernel_size, stride, padding, dilation)
        conv = getattr(_torch.nn, f"Conv{self.dims_}d")
        with _torch.random.fork_rng(devices=[]):
            _torch.manual_seed(seed)
            ref = conv(in_channels, out_channels, kernel_size, stride=stride, padding=padding,
                       dilation=dilation, bias=bias, dtype=dtype)
        # Tied: every rank of P_x holds the whole weight and bias, and each copy receives the
        # gradient of the whole loss (torch's).
        self.weight = _torch.nn.Parameter(ref.weight.detach().clone())
        self.bias = _torch.nn.Parameter(ref.bias.detach().clone()) if bias else None
        self._conv = getattr(_F, f"conv{self.dims_}d")
        self._tie = _Tie(P_x, [self.weight, self.bias])

    def _local(self, x):
        w, *b = self._tie()
        return self._conv(x, w, b[0] if b else None, stride=self.stride, padding=0,
                          dilation=self.dilation)


class DistributedConv1d(_DistributedConv):
    """torch.nn.Conv1d on x [N, C, L] split over P_x = [1, 1, p]; torch's names and initial values
    (after torch.manual_seed(seed)), the parameters on every rank of P_x, each copy receiving the
    gradient of the whole loss. Given a partition that splits the channels, P_w = [P_co, P_ci, p]
    (the channel and general partitions), it returns a DistributedGeneralConv1d over it."""
    name, dims_ = "DistributedConv1d", 1


class DistributedConv2d(_DistributedConv):
    """torch.nn.Conv2d on x [N, C, H, W] split over P_x = [1, 1, p_h, p_w]; as DistributedConv1d."""
    name, dims_ = "DistributedConv2d", 2


class DistributedConv3d(_DistributedConv):
    """torch.nn.Conv3d on x [N, C, D, H, W] split over P_x = [1, 1, p_d, p_h, p_w]."""
    name, dims_ = "DistributedConv3d", 3


class _DistributedPool(_WindowLayer):
    def __init__(self, P_x, kernel_size, stride=None, padding=0, dilation=1):
        super().__init__(P_x, self.dims_, kernel_size,
                         kernel_size if stride is None else stride, padding, dilation)


class _MaxPool(_DistributedPool):
    fill = float("-inf")  # torch's max pooling pads with -inf

    def _local(self, x):
        return getattr(_F, f"max_pool{self.dims_}d")(x, self.kernel_size, self.stride, 0,
                                                     self.dilation)


class _AvgPool(_DistributedPool):
    def __init__(self, P_x, kernel_size, stride=None, padding=0):
        super().__init__(P_x, kernel_size, stride, padding, 1)

    def _local(self, x):
        # Zeros at the boundary, every window divided by its size: count_include_pad=True.
        return getattr(_F, f"avg_pool{self.dims_}d")(x, self.kernel_size, self.stride, 0)


class DistributedMaxPool1d(_MaxPool):
    name, dims_ = "DistributedMaxPool1d", 1


class DistributedMaxPool2d(_MaxPool):
    name, dims_ = "DistributedMaxPool2d", 2


class DistributedMaxPool3d(_MaxPool):
    name, dims_ = "DistributedMaxPool3d", 3


class DistributedAvgPool1d(_AvgPool):
    name, dims_ = "DistributedAvgPool1d", 1


class DistributedAvgPool2d(_AvgPool):
    name, dims_ = "DistributedAvgPool2d", 2


class DistributedAvgPool3d(_AvgPool):
    name, dims_ = "DistributedAvgPool3d", 3
