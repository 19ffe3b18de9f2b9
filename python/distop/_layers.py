"""distop's C++ layers inside torch's autograd (distop.nn re-exports them).

A layer here is one of distop's C++ layers (nn::DistributedInterpolate, DistributedConvTranspose,
GroupNorm, LayerNorm, the tensor- and sequence-parallel attention and encoder layer, the
sequence-parallel attention plan). Its forward records on a tape of its own, which the call keeps
until torch runs its backward; the backward replays that tape, its collectives in the reverse
order of the forward's, on every rank alike. The parameters are the C++ layer's own storage, seen
as torch Parameters without a copy: an optimizer's in-place step is what the next forward reads
(so a layer's dtype is chosen at construction; ``.to()`` or ``.double()`` would detach the torch
tensors from the layer). Every copy of a parameter receives the gradient of the whole loss: where
a parameter is replicated over ranks and each copy would hold only its rank's part, the backward
sums the copies (one all-reduce), so any torch optimizer keeps the copies equal.

Every rank of the layer's partitions' parent calls forward, and runs backward through the output
(a rank whose output is empty includes it in its loss all the same, as ``y.sum()`` does), as with
distop.torch's operators.
"""

import torch as _torch

from . import _core, Error
from .torch import _DTYPES, _dtype_name, _joined, _local, _wants_grad

__all__ = ["DistributedUpsample", "DistributedGeneralConv1d", "DistributedGeneralConv2d",
           "DistributedGeneralConv3d", "DistributedConvTranspose1d", "DistributedConvTranspose2d",
           "DistributedConvTranspose3d", "DistributedGroupNorm", "DistributedLayerNorm",
           "DistributedEmbedding", "DistributedMultiheadAttention",
           "DistributedTransformerEncoderLayer",
           "sequence_parallel_attention", "sequence_blocks", "sequence_positions",
           "l1_loss", "mse_loss", "poisson_nll_loss", "binary_cross_entropy",
           "binary_cross_entropy_with_logits", "kl_div", "dice_loss"]

_TORCH_DTYPES = {"float32": _torch.float32, "float64": _torch.float64}


def _dtype_of(dtype):
    name = _DTYPES.get(dtype)
    if name is None:
        raise Error(f"[distop.nn] dtype must be torch.float32 or torch.float64, not {dtype}")
    return name


class _LayerFunction(_torch.autograd.Function):
    """y = layer(inputs; parameters) forward, the layer's tape replayed backward."""

    @staticmethod
    def forward(ctx, layer, spaces, is_causal, n_in, *tensors):
        inputs = [_local(x, s.local_shape) for x, s in zip(tensors[:n_in], spaces)]
        wants = [bool(ctx.needs_input_grad[4 + i]) for i in range(n_in)]
        call, y = layer.forward(spaces, inputs, wants, is_causal)
        ctx.call, ctx.shapes, ctx.n_params = call, [x.shape for x in tensors], len(tensors) - n_in
        ctx.save_for_backward(*tensors[:n_in])  # torch then refuses inputs changed in place
        return y

    @staticmethod
    def backward(ctx, dy):
        ctx.saved_tensors  # noqa: B018 -- the check that no input changed since forward
        inputs, params = ctx.call.backward(dy.detach().contiguous())
        grads = []
        for g, shape in zip(list(inputs) + list(params), ctx.shapes):
            grads.append(None if g is None else (g if g.shape == shape else g.reshape(shape)))
        return (None, None, None, None, *grads)


class _Layer(_torch.nn.Module):
    """A torch module around one C++ layer: its parameters registered under torch's names (child
    modules for dotted names, so that state_dict() has torch's keys, each rank its local block)."""

    def __init__(self, layer=None):
        super().__init__()
        self._layer = layer
        self._parameters_in_order = []
        for name, array in layer.parameters() if layer is not None else []:
            *path, leaf = name.split(".")
            owner = self
            for part in path:
                if part not in owner._modules:
                    owner.add_module(part, _torch.nn.Module())
                owner = owner._modules[part]
            p = _torch.nn.Parameter(array)
            owner.register_parameter(leaf, p)
            self._parameters_in_order.append(p)

    def train(self, mode=True):
        super().train(mode)
        if self._layer is not None:
            self._layer.train(mode)
        return self

    def _run(self, layer, tensors, spaces, any_grads, is_causal=False):
        tensors = [_joined(x, g) for x, g in zip(tensors, any_grads)]
        return _LayerFunction.apply(layer, spaces, is_causal, len(tensors), *tensors,
                                    *self._parameters_in_order)

    def global_state_dict(self):
        """torch's state_dict of the layer as global tensors, on every rank. Collective over the
        parameters' partitions' parent."""
        return dict(self._layer.state_dict()) if self._layer is not None else {}


def _infer(partition, x, axis_map, name):
    space, dtype, any_grad = _core.infer_space_mapped(partition, list(x.shape), _dtype_name(x),
                                                      _wants_grad(x), list(axis_map), name)
    return space, dtype, any_grad


def _check_dtype(dtype, layer_dtype, name):
    if dtype != layer_dtype:
        raise Error(f"[{name}] the input is {dtype}, the layer's parameters {layer_dtype}")


def _spatial(value, dims, name, what):
    if value is None:
        return []
    if isinstance(value, (int, float)):
        return [value]
    value = list(value)
    if len(value) not in (1, dims):
        raise Error(f"[{name}] {what} has {len(value)} entries; give 1 or {dims}")
    return value


class DistributedUpsample(_Layer):
    """torch.nn.Upsample (and F.interpolate) over x [N, C, *spatial] split over P_x (one grid axis
    per tensor axis; balanced or uneven blocks): modes ``nearest``, ``nearest-exact``, ``linear``,
    ``bilinear``, ``trilinear``, ``align_corners``, ``size`` (the output's spatial extents) or
    ``scale_factor`` (integer or fractional, per axis or one for all) and
    ``recompute_scale_factor``, with torch's index rules and defaults. The output lies on P_x,
    x's batch and channel blocks, the spatial axes balanced. Each rank receives the input region
    its outputs read by a halo exchange planned once per input shape; backward is its adjoint
    (the scatter-add of the interpolation weights, the halo's adjoint). No parameters."""

    def __init__(self, P_x, size=None, scale_factor=None, mode="nearest", align_corners=None,
                 recompute_scale_factor=None):
        super().__init__()
        self.P_x = P_x
        dims = P_x.dim - 2
        if dims < 1 or dims > 3:
            raise Error(f"[DistributedUpsample] P_x must have 3 to 5 dimensions ([N, C, spatial]), "
                        f"not {P_x.dim}")
        self.size = _spatial(size, dims, "DistributedUpsample", "size")
        self.scale_factor = [float(s) for s in _spatial(scale_factor, dims, "DistributedUpsample",
                                                        "scale_factor")]
        self.mode, self.align_corners = mode, align_corners
        self.recompute_scale_factor = bool(recompute_scale_factor)
        self._layers = {}
        self._make("float32")  # the options' errors now, on every rank

    def _make(self, dtype):
        layer = self._layers.get(dtype)
        if layer is None:
            layer = self._layers[dtype] = _core.interpolate_layer(
                dtype, self.mode, [int(s) for s in self.size], self.scale_factor,
                self.align_corners, self.recompute_scale_factor)
        return layer

    def forward(self, x):
        space, dtype, any_grad = _infer(self.P_x, x, range(self.P_x.dim), "DistributedUpsample")
        return self._run(self._make(dtype), [x], [space], [any_grad])


class _WeightPartitionedConv(_Layer):
    """A convolution or transposed convolution over a weight partition P_w [P_co, P_ci, *S]: x on
    P_x (P_w's ranks with output-channel coordinate 0: channels split P_ci ways, the spatial axes
    as P_w's), y on P_y (the ranks with input-channel coordinate 0), both balanced."""

    dims = 0
    kind = ""

    def _build(self, P_w, in_channels, out_channels, kernel_size, bias, seed, dtype, **windows):
        name = f"{self.kind}{self.dims}d"
        values = {what: [int(e) for e in _spatial(v, self.dims, name, what)]
                  for what, v in dict(kernel_size=kernel_size, **windows).items()}
        factory = _core.conv_layer if self.kind == "DistributedGeneralConv" \
            else _core.conv_transpose_layer
        layer, P_x, P_y = factory(_dtype_of(dtype), self.dims, in_channels, out_channels,
                                  values.pop("kernel_size"), P_w, *values.values(), bias, seed)
        _Layer.__init__(self, layer)
        self.P_w, self.P_x, self.P_y = P_w, P_x, P_y
        self.in_channels, self.out_channels = in_channels, out_channels

    def forward(self, x):
        """x [N, C, *spatial] on P_x; returns y [N, O, *spatial'] on P_y. Every rank of P_w's
        parent calls it; ranks off P_x pass a zero-volume tensor."""
        name = f"{self.kind}{self.dims}d"
        space, dtype, any_grad = _infer(self.P_x, x, range(self.P_x.dim), name)
        _check_dtype(dtype, self._layer.dtype, name)
        return self._run(self._layer, [x], [space], [any_grad])


class _DistributedGeneralConv(_WeightPartitionedConv):
    kind = "DistributedGeneralConv"

    def __init__(self, P_w, in_channels, out_channels, kernel_size, stride=1, padding=0,
                 dilation=1, bias=True, seed=0, dtype=_torch.float32):
        self._build(P_w, in_channels, out_channels, kernel_size, bias, seed, dtype,
                    stride=stride, padding=padding, dilation=dilation)


class DistributedGeneralConv1d(_DistributedGeneralConv):
    """torch.nn.Conv1d (groups = 1) over a weight partition P_w [P_co, P_ci, S]: the channel
    ([P_co, P_ci, 1]) and general partitions (distop.nn.DistributedConv1d returns one for such a
    P_w). x on P_x = the co = 0 ranks as [1, P_ci, S], y on P_y = the ci = 0 ranks as
    [1, P_co, S]; the weight [out, in, k] on the spatial-0 ranks, split [P_co, P_ci], the bias on
    the ci = 0, spatial-0 ranks, broadcast along the spatial axes each pass. Initialised as
    distop's Conv1d with the same seed, whatever the partition."""

    dims = 1


class DistributedGeneralConv2d(_DistributedGeneralConv):
    """torch.nn.Conv2d over P_w [P_co, P_ci, S_1, S_2]; as DistributedGeneralConv1d."""

    dims = 2


class DistributedGeneralConv3d(_DistributedGeneralConv):
    """torch.nn.Conv3d over P_w [P_co, P_ci, S_1, S_2, S_3]; as DistributedGeneralConv1d."""

    dims = 3


class _DistributedConvTranspose(_WeightPartitionedConv):
    kind = "DistributedConvTranspose"

    def __init__(self, P_w, in_channels, out_channels, kernel_size, stride=1, padding=0,
                 output_padding=0, dilation=1, bias=True, seed=0, dtype=_torch.float32):
        self._build(P_w, in_channels, out_channels, kernel_size, bias, seed, dtype,
                    stride=stride, padding=padding, output_padding=output_padding,
                    dilation=dilation)


class DistributedConvTranspose1d(_DistributedConvTranspose):
    """torch.nn.ConvTranspose1d (groups = 1) over a weight partition P_w [P_co, P_ci, S]: x on
    P_x = P_w's co = 0 ranks as grid [1, P_ci, S], y on P_y = the ci = 0 ranks as [1, P_co, S];
    the weight [in, out, k] on the spatial-0 ranks, split [P_ci, P_co], the bias [out] on the
    ci = 0, spatial-0 ranks. P_w = [1, 1, S] is the feature partition. Parameters are initialised
    as distop's ConvTranspose1d with the same seed, whatever the partition."""

    dims = 1


class DistributedConvTranspose2d(_DistributedConvTranspose):
    """torch.nn.ConvTranspose2d over P_w [P_co, P_ci, S_1, S_2]; as DistributedConvTranspose1d."""

    dims = 2


class DistributedConvTranspose3d(_DistributedConvTranspose):
    """torch.nn.ConvTranspose3d over P_w [P_co, P_ci, S_1, S_2, S_3]; as
    DistributedConvTranspose1d."""

    dims = 3


class DistributedGroupNorm(_Layer):
    """torch.nn.GroupNorm(num_groups, num_channels, eps, affine) over x [N, C, *spatial] split over
    P_x (one grid axis per tensor axis; the channel axis whole, the batch and spatial axes split
    any way): each (sample, group)'s mean and variance over its channels and the whole spatial
    domain, by one all-gather of the parts' statistics. The weight and bias [C] are on every rank
    of P_x (each copy receives the whole gradient)."""

    def __init__(self, P_x, num_groups, num_channels, eps=1e-5, affine=True,
                 dtype=_torch.float32):
        super().__init__(_core.group_norm_layer(_dtype_of(dtype), num_groups, num_channels, P_x,
                                                eps, affine))
        self.P_x, self.num_groups, self.num_channels = P_x, num_groups, num_channels

    def forward(self, x):
        space, dtype, any_grad = _infer(self.P_x, x, range(self.P_x.dim), "DistributedGroupNorm")
        _check_dtype(dtype, self._layer.dtype, "DistributedGroupNorm")
        return self._run(self._layer, [x], [space], [any_grad])


class DistributedLayerNorm(_Layer):
    """torch.nn.LayerNorm(normalized_shape, eps, elementwise_affine, bias) over the last axis of
    x split over P_x (one grid axis per tensor axis). Where P_x splits the last axis, each row's
    statistics come from one all-gather over the row's ranks and the weight and bias are split as
    the axis is; otherwise every rank normalises its own rows and holds a copy of the weight and
    bias (each copy receiving the whole gradient)."""

    def __init__(self, P_x, normalized_shape, eps=1e-5, elementwise_affine=True, bias=True,
                 dtype=_torch.float32):
        if not isinstance(normalized_shape, int):
            shape = list(normalized_shape)
            if len(shape) != 1:
                raise Error("[DistributedLayerNorm] normalises over the last axis only: "
                            f"normalized_shape must be one extent, not {shape}")
            normalized_shape = shape[0]
        split = P_x.dim - 1 if P_x.shape[-1] > 1 else -1
        super().__init__(_core.layer_norm_layer(_dtype_of(dtype), normalized_shape, P_x, eps,
                                                elementwise_affine, bias, split))
        self.P_x, self.normalized_shape = P_x, (normalized_shape,)

    def forward(self, x):
        space, dtype, any_grad = _infer(self.P_x, x, range(self.P_x.dim), "DistributedLayerNorm")
        _check_dtype(dtype, self._layer.dtype, "DistributedLayerNorm")
        return self._run(self._layer, [x], [space], [any_grad])


class DistributedEmbedding(_Layer):
    """torch.nn.Embedding(num_embeddings, embedding_dim, padding_idx) with its rows (the
    vocabulary) split over grid axis ``vocab_axis`` of P (Megatron's VocabParallelEmbedding: each
    rank looks up the indices in its block of rows, one all-reduce adds the blocks' results;
    ``vocab_axis=None``: the whole table on every rank). The indices (an integer tensor) are the
    same on every rank of P, and so is the output [..., embedding_dim]. Initialised N(0, 1) by
    distop's seed rule, the same values at any partition; ``global_state_dict()`` loads into
    torch.nn.Embedding."""

    def __init__(self, P, num_embeddings, embedding_dim, padding_idx=None, vocab_axis=0, seed=0,
                 dtype=_torch.float32):
        super().__init__(_core.embedding_layer(
            _dtype_of(dtype), num_embeddings, embedding_dim, P,
            -1 if vocab_axis is None else vocab_axis, padding_idx, seed))
        self.P, self.num_embeddings, self.embedding_dim = P, num_embeddings, embedding_dim
        self._dtype = _TORCH_DTYPES[self._layer.dtype]
        # The C++ layer's output is a sum-convention component per rank (its backward adds the
        # copies' gradients over the vocabulary axis); here the output is tied, the same loss on
        # every rank, so the gradient entering it is the group's mean: 1/P_g of that sum.
        self._groups = 1 if vocab_axis is None else P.shape[vocab_axis]

    def forward(self, indices):
        if indices.is_floating_point() or indices.is_complex():
            raise Error("[DistributedEmbedding] the indices must be an integer tensor")
        x = indices.to(self._dtype)  # exact below 2^24 (float32) or 2^53 (float64)
        space, _, _ = _infer(self.P, x, [-1] * x.dim(), "DistributedEmbedding")
        y = self._run(self._layer, [x], [space], [False])
        return _ScaleGradient.apply(y, 1.0 / self._groups) if self._groups > 1 else y


class _ScaleGradient(_torch.autograd.Function):
    """Identity forward; the gradient times `scale` backward."""

    @staticmethod
    def forward(ctx, y, scale):
        ctx.scale = scale
        return y.view_as(y)

    @staticmethod
    def backward(ctx, dy):
        return dy * ctx.scale, None


def _sequence_map(P, sequence_axis, name):
    if sequence_axis is None:
        return -1
    if not 0 <= sequence_axis < P.dim:
        raise Error(f"[{name}] sequence_axis {sequence_axis} is not an axis of a partition of "
                    f"{P.dim} dimensions")
    return sequence_axis


class DistributedMultiheadAttention(_Layer):
    """torch.nn.MultiheadAttention(embed_dim, num_heads, dropout, batch_first=True) as
    self-attention on x [N, S, E], over a partition P: the heads split over grid axis
    ``tensor_axis`` (Megatron: column-parallel q, k, v, row-parallel out_proj; one all-reduce
    forward and one backward) and, with ``sequence_axis``, the sequence split over that grid axis
    with attention across the blocks by ``strategy`` ("ring": key/value blocks around the ring of
    ranks with an online softmax; "alltoall": a repartition from sequence-split to head-split and
    back) and the tokens laid out as ``layout`` says ("contiguous" or "zigzag", the balanced
    assignment under a causal mask: sequence_positions). x is the same on every rank of the tensor
    axis (its batch whole); each rank passes its block of the sequence. forward(x, is_causal).
    Parameters with torch's names and layouts (``in_proj_weight`` as this rank's heads' rows of
    [3E, E], ...); ``global_state_dict()`` loads into torch.nn.MultiheadAttention."""

    def __init__(self, P, embed_dim, num_heads, dropout=0.0, tensor_axis=0, sequence_axis=None,
                 strategy="ring", layout="contiguous", seed=0, dtype=_torch.float32):
        name = "DistributedMultiheadAttention"
        sequence = _sequence_map(P, sequence_axis, name)
        super().__init__(_core.multihead_attention_layer(
            _dtype_of(dtype), embed_dim, num_heads, P, tensor_axis, dropout, seed, sequence,
            strategy, layout))
        self.P, self.embed_dim, self.num_heads = P, embed_dim, num_heads
        self._axis_map = [-1, sequence, -1]

    def forward(self, x, is_causal=False):
        space, dtype, any_grad = _infer(self.P, x, self._axis_map, "DistributedMultiheadAttention")
        _check_dtype(dtype, self._layer.dtype, "DistributedMultiheadAttention")
        return self._run(self._layer, [x], [space], [any_grad], bool(is_causal))


class DistributedTransformerEncoderLayer(_Layer):
    """torch.nn.TransformerEncoderLayer(d_model, nhead, dim_feedforward, dropout,
    activation="gelu", layer_norm_eps, batch_first=True, norm_first=True) over a partition P, with
    DistributedMultiheadAttention's tensor and sequence parallelism (the MLP split column then
    row over ``tensor_axis``); ``approximate`` is GELU's ("none" or "tanh"). forward(x,
    is_causal) on x [N, S, d_model] as DistributedMultiheadAttention's. Children and parameters
    under torch's names (self_attn, linear1, linear2, norm1, norm2)."""

    def __init__(self, P, d_model, nhead, dim_feedforward=2048, dropout=0.1, layer_norm_eps=1e-5,
                 approximate="none", tensor_axis=0, sequence_axis=None, strategy="ring",
                 layout="contiguous", seed=0, dtype=_torch.float32):
        name = "DistributedTransformerEncoderLayer"
        sequence = _sequence_map(P, sequence_axis, name)
        super().__init__(_core.transformer_encoder_layer(
            _dtype_of(dtype), d_model, nhead, dim_feedforward, P, tensor_axis, dropout,
            layer_norm_eps, approximate, seed, sequence, strategy, layout))
        self.P, self.d_model, self.nhead = P, d_model, nhead
        self._axis_map = [-1, sequence, -1]

    def forward(self, x, is_causal=False):
        name = "DistributedTransformerEncoderLayer"
        space, dtype, any_grad = _infer(self.P, x, self._axis_map, name)
        _check_dtype(dtype, self._layer.dtype, name)
        return self._run(self._layer, [x], [space], [any_grad], bool(is_causal))


class _Plans(_Layer):
    """The sequence-parallel attention plans, one per space and options, kept for reuse."""

    def __init__(self):
        super().__init__()
        self._plans = {}

    def get(self, key, build):
        plan = self._plans.get(key)
        if plan is None:
            plan = self._plans[key] = build()
        return plan


_PLANS = _Plans()


def sequence_parallel_attention(q, k, v, P, sequence_axis, strategy="ring", layout="contiguous",
                                is_causal=False, dropout_p=0.0, dropout_seed=0, scale=None,
                                heads_axis=None, batch_axis=None):
    """softmax(q k^T scale [+ causal mask]) v on q, k, v [N, H, S, D] whose sequence axis is split
    over grid axis ``sequence_axis`` of P (blocks as ``layout`` says: sequence_blocks), the heads
    over ``heads_axis`` and the batch over ``batch_axis`` where given, D whole; ``strategy`` "ring"
    or "alltoall" (DistributedMultiheadAttention). Exact against unsharded attention to float
    rounding; dropout masks keyed by each weight's global index and ``dropout_seed``. The plan is
    built once per space and options (collective over P's parent) and kept."""
    name = "sequence_parallel_attention"
    axis_map = [-1 if batch_axis is None else batch_axis, -1 if heads_axis is None else heads_axis,
                _sequence_map(P, sequence_axis, name), -1]
    inferred = [_infer(P, t, axis_map, name) for t in (q, k, v)]
    space, dtype = inferred[0][0], inferred[0][1]
    for s, d, _ in inferred[1:]:
        if not s == space or d != dtype:
            raise Error(f"[{name}] q, k and v must have the same shape, split and dtype")
    key = (space.fingerprint(), dtype, sequence_axis, strategy, layout, float(dropout_p),
           int(dropout_seed), scale)
    plan = _PLANS.get(key, lambda: _core.sequence_attention_layer(
        dtype, space, sequence_axis, strategy, layout, float(dropout_p), int(dropout_seed),
        None if scale is None else float(scale)))
    return _PLANS._run(plan, [q, k, v], [space] * 3, [g for _, _, g in inferred], bool(is_causal))


def sequence_blocks(length, parts, layout="contiguous"):
    """The extents of the ``parts`` blocks of a sequence of ``length`` tokens under ``layout``."""
    return list(_core.sequence_blocks(length, parts, layout))


def sequence_positions(length, parts, layout="contiguous"):
    """The position of the token at each global index along the sequence under ``layout`` (the
    order in which a program lays out its tokens and position embeddings for "zigzag")."""
    return list(_core.sequence_positions(length, parts, layout))


# ---- The distributed losses

class _Losses(_Layer):
    """The loss layers, one per kind, dtype and options (they hold no state)."""

    def __init__(self):
        super().__init__()
        self._losses = {}

    def get(self, key):
        layer = self._losses.get(key)
        if layer is None:
            layer = self._losses[key] = _core.loss_layer(*key)
        return layer


_LOSSES = _Losses()


def _loss(kind, input, target, P, reduction="mean", log_input=True, full=False, eps=1e-8,
          log_target=False, pos_weight=None, smooth=1.0):
    name = kind
    axis_map = list(range(P.dim))
    space, dtype, any_grad = _infer(P, input, axis_map, name)
    t_space, t_dtype, _ = _infer(P, target, axis_map, name)
    if not t_space == space or t_dtype != dtype:
        raise Error(f"[{name}] the target must have the input's shape, split and dtype")
    tensors, spaces, grads = [input, target], [space, space], [any_grad, False]
    if pos_weight is not None:
        pw = pos_weight.detach().to(_TORCH_DTYPES[dtype]).contiguous()
        if not P.active:
            pw = pw.new_zeros([0] * pw.dim())
        w_space, _, _ = _infer(P, pw, [-1] * pw.dim(), name)
        tensors.append(pw)
        spaces.append(w_space)
        grads.append(False)
    layer = _LOSSES.get((dtype, kind, reduction, bool(log_input), bool(full), float(eps),
                         bool(log_target), pos_weight is not None, float(smooth)))
    return _LOSSES._run(layer, [tensors[0], tensors[1].detach()] + tensors[2:], spaces, grads)


_LOSS_DOC = """The loss of `input` against `target` (no gradient), both split alike over P (one grid
axis per tensor axis, any blocks), as torch's {torch} with DistDL's rule: each rank sums its
block's terms, and "mean" ("batchmean") divides by the global count (batch). Returns distop's loss
convention: a [1] tensor on every rank of P whose components add up to the loss (call backward()
on every rank; distop.torch.AllSumReduce, or the sum of the ranks' values, gives the loss), or the
per-entry terms for reduction "none"."""


def l1_loss(input, target, P, reduction="mean"):
    return _loss("l1", input, target, P, reduction)


def mse_loss(input, target, P, reduction="mean"):
    return _loss("mse", input, target, P, reduction)


def poisson_nll_loss(input, target, P, log_input=True, full=False, eps=1e-8, reduction="mean"):
    return _loss("poisson_nll", input, target, P, reduction, log_input=log_input, full=full,
                 eps=eps)


def binary_cross_entropy(input, target, P, reduction="mean"):
    return _loss("bce", input, target, P, reduction)


def binary_cross_entropy_with_logits(input, target, P, reduction="mean", pos_weight=None):
    return _loss("bce_with_logits", input, target, P, reduction, pos_weight=pos_weight)


def kl_div(input, target, P, reduction="mean", log_target=False):
    return _loss("kl_div", input, target, P, reduction, log_target=log_target)


for _f, _torch_name in ((l1_loss, "l1_loss"), (mse_loss, "mse_loss"),
                        (poisson_nll_loss, "poisson_nll_loss (log_input, full, eps)"),
                        (binary_cross_entropy, "binary_cross_entropy (each log clamped at -100)"),
                        (binary_cross_entropy_with_logits,
                         "binary_cross_entropy_with_logits (pos_weight whole on every rank)"),
                        (kl_div, "kl_div (log_target; reduction \"batchmean\" too)")):
    _f.__doc__ = _LOSS_DOC.format(torch="torch.nn.functional." + _torch_name)


def dice_loss(input, target, P, smooth=1.0):
    """The soft Dice loss 1 - (2 sum(input target) + smooth) / (sum(input) + sum(target) +
    smooth) over the whole tensor split over P (input probabilities, target a mask in [0, 1], no
    gradient to it): one all-reduce of two sums. The loss in distop's convention: [1] on every rank
    of P, the first rank holding the loss and the others 0."""
    return _loss("dice", input, target, P, smooth=smooth)
