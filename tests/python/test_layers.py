"""distop's C++ layers from Python (distop.nn's DistributedUpsample, DistributedConvTranspose,
DistributedGroupNorm, DistributedLayerNorm, DistributedMultiheadAttention,
DistributedTransformerEncoderLayer, sequence_parallel_attention) against torch's layers on the
whole tensors: outputs, input gradients, parameter gradients and state_dicts, in float64; and the
distributed losses (l1, mse, poisson_nll, binary cross-entropy, kl_div, dice) against torch's."""

import pytest
import torch
import torch.nn.functional as F

import distop
import distop.nn as dnn
import distop.testing

W = distop.Partition.world
f64 = torch.float64


def balanced(P, shape):
    return distop.TensorSpace(P, distop.Decomposition.balanced(list(shape), list(P.shape),
                                                               list(range(len(shape)))))


def spatial_grid(world_size, dims):
    """A grid over the spatial axes of [N, C, *spatial]: every rank on the first one, or 2 x 2."""
    if dims >= 2 and world_size == 4:
        return [1, 1, 2, 2] + [1] * (dims - 2)
    return [1, 1, world_size] + [1] * (dims - 1)


def run_layer(layer, P_x, X, Y_shape, dY, P_y=None):
    """The layer on this rank's balanced block of X, its output assembled on rank 0 and the
    gradient of <y, dY> with respect to x assembled there too."""
    x_space = balanced(P_x, X.shape)
    x = distop.distribute(X, x_space).requires_grad_(True)
    y = layer(x)
    y_space = balanced(P_y or P_x, Y_shape)
    (y * distop.distribute(dY, y_space)).sum().backward()
    return distop.assemble(y.detach(), y_space), distop.assemble(x.grad, x_space)


@pytest.mark.parametrize("mode,align,size,scale", [
    ("nearest", None, None, 1.5), ("nearest", None, [11, 5], None),
    ("nearest-exact", None, None, 2), ("bilinear", False, None, 1.5),
    ("bilinear", True, [9, 13], None), ("bilinear", False, None, 0.75)])
def test_upsample_equals_torch(world_size, rank, mode, align, size, scale):
    P_x = W(spatial_grid(world_size, 2))
    torch.manual_seed(1)
    X = torch.randn(2, 3, 7, 9, dtype=f64)
    ref = F.interpolate(X, size=size, scale_factor=scale, mode=mode, align_corners=align)
    dY = torch.randn(ref.shape, dtype=f64)
    layer = dnn.DistributedUpsample(P_x, size=size, scale_factor=scale, mode=mode,
                                    align_corners=align)
    assert list(layer.state_dict()) == []
    y, dx = run_layer(layer, P_x, X, ref.shape, dY)
    Xr = X.clone().requires_grad_(True)
    (F.interpolate(Xr, size=size, scale_factor=scale, mode=mode, align_corners=align)
     * dY).sum().backward()
    if rank == 0:
        torch.testing.assert_close(y, ref, rtol=0, atol=1e-14)
        torch.testing.assert_close(dx, Xr.grad, rtol=0, atol=1e-13)


def test_upsample_1d_linear_gradcheck_and_float32(world_size, rank):
    P_x = W([1, 1, world_size])
    layer = dnn.DistributedUpsample(P_x, scale_factor=2.5, mode="linear", align_corners=False)
    n = [7 // world_size + (1 if r < 7 % world_size else 0) for r in range(world_size)][rank]
    assert distop.testing.gradcheck(layer, torch.zeros(1, 2, n, dtype=f64),
                                    fast_mode=world_size > 2)
    y = layer(torch.ones(2, 2, n, dtype=torch.float32))
    assert y.dtype == torch.float32
    torch.testing.assert_close(y, torch.ones_like(y))


def test_upsample_errors(world_size):
    with pytest.raises(distop.Error, match="align_corners"):
        dnn.DistributedUpsample(W([1, 1, world_size]), scale_factor=2, mode="nearest",
                                align_corners=True)
    with pytest.raises(distop.Error, match="bicubic"):
        dnn.DistributedUpsample(W([1, 1, world_size]), scale_factor=2, mode="bicubic")
    with pytest.raises(distop.Error, match="size"):
        dnn.DistributedUpsample(W([1, 1, world_size, 1]), size=[4, 5, 6])


def compare_conv(layer, ref, shape, rank):
    """A convolution layer on x over layer.P_x against torch's `ref` holding the same parameters:
    the output and the input gradient assembled on rank 0; `ref` keeps its parameters'
    gradients."""
    torch.manual_seed(2)
    X = torch.randn(shape, dtype=f64)
    Xr = X.clone().requires_grad_(True)
    Y = ref(Xr)
    dY = torch.randn(Y.shape, dtype=f64)
    (Y * dY).sum().backward()
    y, dx = run_layer(layer, layer.P_x, X, Y.shape, dY, layer.P_y)
    if rank == 0:
        torch.testing.assert_close(y, Y.detach(), rtol=0, atol=1e-13)
        torch.testing.assert_close(dx, Xr.grad, rtol=0, atol=1e-13)


@pytest.mark.parametrize("grid", ["feature", "channel"])
def test_conv_transpose_equals_torch(world_size, rank, grid):
    if grid == "feature":
        P_w = W([1, 1] + spatial_grid(world_size, 2)[2:])
    else:
        if world_size == 3:
            pytest.skip("the channel grid here is 2 x 2 or 1 x 2")
        P_w = W([2, 2, 1, 1] if world_size == 4 else [1, world_size, 1, 1])
    layer = dnn.DistributedConvTranspose2d(P_w, 4, 3, kernel_size=3, stride=2, padding=1,
                                           output_padding=1, seed=5, dtype=f64)
    sd = layer.global_state_dict()
    assert sorted(sd) == ["bias", "weight"] and list(sd["weight"].shape) == [4, 3, 3, 3]
    ref = torch.nn.ConvTranspose2d(4, 3, 3, stride=2, padding=1, output_padding=1, dtype=f64)
    ref.load_state_dict(sd)
    compare_conv(layer, ref, [2, 4, 5, 6], rank)
    if grid == "feature" and layer.weight.numel() > 0:  # whole on the spatial-0 rank
        torch.testing.assert_close(layer.weight.grad, ref.weight.grad, rtol=0, atol=1e-12)
        torch.testing.assert_close(layer.bias.grad, ref.bias.grad, rtol=0, atol=1e-12)


def test_group_norm_equals_torch(world_size, rank):
    P_x = W([1, 1, world_size])  # 7 positions over the ranks: uneven at 2, 3 and 4
    layer = dnn.DistributedGroupNorm(P_x, 2, 4, dtype=f64)
    assert list(layer.state_dict()) == ["weight", "bias"]
    torch.manual_seed(3)
    w, b = torch.randn(4, dtype=f64), torch.randn(4, dtype=f64)
    with torch.no_grad():  # the copies on every rank, as an optimizer keeps them
        layer.weight.copy_(w)
        layer.bias.copy_(b)
    ref = torch.nn.GroupNorm(2, 4, dtype=f64)
    with torch.no_grad():
        ref.weight.copy_(w)
        ref.bias.copy_(b)
    X = torch.randn(3, 4, 7, dtype=f64)
    Xr = X.clone().requires_grad_(True)
    Y = ref(Xr)
    dY = torch.randn(Y.shape, dtype=f64)
    (Y * dY).sum().backward()
    x_space = distop.TensorSpace(P_x, distop.Decomposition.blocks(
        [3, 4, 7], [1, 1, world_size], [[3], [4], uneven(7, world_size)], [0, 1, 2]))
    x = distop.distribute(X, x_space).requires_grad_(True)
    y = layer(x)
    (y * distop.distribute(dY, x_space)).sum().backward()
    ya, dx = distop.assemble(y.detach(), x_space), distop.assemble(x.grad, x_space)
    if rank == 0:
        torch.testing.assert_close(ya, Y.detach(), rtol=0, atol=1e-13)
        torch.testing.assert_close(dx, Xr.grad, rtol=0, atol=1e-13)
    # Every rank's copy holds the gradient of the whole loss.
    torch.testing.assert_close(layer.weight.grad, ref.weight.grad, rtol=0, atol=1e-12)
    torch.testing.assert_close(layer.bias.grad, ref.bias.grad, rtol=0, atol=1e-12)


def uneven(n, parts):
    """Blocks of n over `parts`, the last ones largest (not the balanced split)."""
    b = [n // parts] * parts
    for i in range(n % parts):
        b[parts - 1 - i] += 1
    return b


@pytest.mark.parametrize("split", [True, False])
def test_layer_norm_equals_torch(world_size, rank, split):
    P_x = W([1, world_size] if split else [world_size, 1])
    layer = dnn.DistributedLayerNorm(P_x, 10, dtype=f64)
    torch.manual_seed(4)
    X = torch.randn(5, 10, dtype=f64)
    ref = torch.nn.LayerNorm(10, dtype=f64)
    with torch.no_grad():
        ref.weight.copy_(torch.randn(10, dtype=f64))
        ref.bias.copy_(torch.randn(10, dtype=f64))
    cols = balanced(W([world_size]), [10]) if split else None
    with torch.no_grad():
        layer.weight.copy_(distop.distribute(ref.weight.detach(), cols) if split
                           else ref.weight.detach())
        layer.bias.copy_(distop.distribute(ref.bias.detach(), cols) if split
                         else ref.bias.detach())
    Xr = X.clone().requires_grad_(True)
    Y = ref(Xr)
    dY = torch.randn(Y.shape, dtype=f64)
    (Y * dY).sum().backward()
    y, dx = run_layer(layer, P_x, X, Y.shape, dY)
    if rank == 0:
        torch.testing.assert_close(y, Y.detach(), rtol=0, atol=1e-13)
        torch.testing.assert_close(dx, Xr.grad, rtol=0, atol=1e-13)
    gw = distop.distribute(ref.weight.grad, cols) if split else ref.weight.grad
    torch.testing.assert_close(layer.weight.grad, gw, rtol=0, atol=1e-12)
    assert distop.testing.gradcheck(layer, torch.zeros(list(balanced(P_x, [4, 10]).local_shape),
                                                       dtype=f64), fast_mode=world_size > 2)


def attention_reference(layer, X, dY, causal):
    ref = torch.nn.MultiheadAttention(layer.embed_dim, layer.num_heads, batch_first=True,
                                      dtype=f64)
    ref.load_state_dict(layer.global_state_dict())
    Xr = X.clone().requires_grad_(True)
    S = X.shape[1]
    mask = torch.triu(torch.ones(S, S, dtype=torch.bool), 1) if causal else None
    Y = ref(Xr, Xr, Xr, attn_mask=mask, need_weights=False)[0]
    (Y * dY).sum().backward()
    return ref, Y.detach(), Xr.grad


def test_multihead_attention_tensor_parallel_equals_torch(world_size, rank):
    layer = dnn.DistributedMultiheadAttention(W([world_size]), 24, 12, seed=2, dtype=f64)
    sd = layer.global_state_dict()
    assert list(sd["in_proj_weight"].shape) == [72, 24]
    torch.manual_seed(5)
    X = torch.randn(2, 6, 24, dtype=f64)
    dY = torch.randn(2, 6, 24, dtype=f64)
    ref, Y, dX = attention_reference(layer, X, dY, False)
    x = X.clone().requires_grad_(True)  # tied: the same on every rank
    y = layer(x)
    (y * dY).sum().backward()
    torch.testing.assert_close(y.detach(), Y, rtol=0, atol=1e-13)
    torch.testing.assert_close(x.grad, dX, rtol=0, atol=1e-13)
    torch.testing.assert_close(layer.out_proj.bias.grad, ref.out_proj.bias.grad, rtol=0,
                               atol=1e-12)


@pytest.mark.parametrize("strategy,layout,causal", [
    ("ring", "contiguous", False), ("ring", "zigzag", True), ("alltoall", "contiguous", True)])
def test_multihead_attention_sequence_parallel_equals_torch(world_size, rank, strategy, layout,
                                                            causal):
    S = 9
    layer = dnn.DistributedMultiheadAttention(W([1, world_size]), 24, 12, tensor_axis=0,
                                              sequence_axis=1, strategy=strategy, layout=layout,
                                              seed=3, dtype=f64)
    torch.manual_seed(6)
    pos = dnn.sequence_positions(S, world_size, layout)
    X = torch.randn(2, S, 24, dtype=f64)
    dY = torch.randn(2, S, 24, dtype=f64)
    ref, Y, dX = attention_reference(layer, X, dY, causal)
    # The tensor's order along S is the layout's: global index i holds position pos[i].
    blocks = dnn.sequence_blocks(S, world_size, layout)
    lo = sum(blocks[:rank])
    mine = pos[lo:lo + blocks[rank]]
    x = X[:, mine].clone().requires_grad_(True)
    y = layer(x, is_causal=causal)
    (y * dY[:, mine]).sum().backward()
    torch.testing.assert_close(y.detach(), Y[:, mine], rtol=0, atol=1e-13)
    torch.testing.assert_close(x.grad, dX[:, mine], rtol=0, atol=1e-13)
    gw = layer.in_proj_weight.grad.reshape(72, 24)
    torch.testing.assert_close(gw, ref.in_proj_weight.grad, rtol=0, atol=1e-12)


def test_sequence_parallel_attention_function(world_size, rank):
    torch.manual_seed(7)
    q, k, v = (torch.randn(2, 3, 10, 4, dtype=f64) for _ in range(3))
    blocks = dnn.sequence_blocks(10, world_size)
    lo = sum(blocks[:rank])
    part = [t[:, :, lo:lo + blocks[rank]].clone().requires_grad_(True) for t in (q, k, v)]
    y = dnn.sequence_parallel_attention(*part, W([world_size]), sequence_axis=0, is_causal=True)
    ref = F.scaled_dot_product_attention(q, k, v, is_causal=True) if hasattr(
        F, "scaled_dot_product_attention") else None
    if ref is None:
        s = q @ k.transpose(-1, -2) / 2.0
        s = s.masked_fill(torch.triu(torch.ones(10, 10, dtype=torch.bool), 1), float("-inf"))
        ref = s.softmax(-1) @ v
    torch.testing.assert_close(y.detach(), ref[:, :, lo:lo + blocks[rank]], rtol=0, atol=1e-13)
    y.sum().backward()
    assert all(t.grad is not None and t.grad.shape == t.shape for t in part)


def test_transformer_encoder_layer_state_dict_loads_in_torch(world_size, rank):
    layer = dnn.DistributedTransformerEncoderLayer(W([world_size]), 24, 12, dim_feedforward=24,
                                                   dropout=0.0, seed=4, dtype=f64)
    ref = torch.nn.TransformerEncoderLayer(24, 12, dim_feedforward=24, dropout=0.0,
                                           activation="gelu", batch_first=True, norm_first=True,
                                           dtype=f64)
    ref.load_state_dict(layer.global_state_dict())
    torch.manual_seed(8)
    X = torch.randn(2, 5, 24, dtype=f64)
    x = X.clone().requires_grad_(True)
    y = layer(x)
    Xr = X.clone().requires_grad_(True)
    Y = ref(Xr)
    torch.testing.assert_close(y.detach(), Y.detach(), rtol=0, atol=1e-12)
    y.sum().backward()
    Y.sum().backward()
    torch.testing.assert_close(x.grad, Xr.grad, rtol=0, atol=1e-12)
    torch.testing.assert_close(layer.norm1.weight.grad, ref.norm1.weight.grad, rtol=0, atol=1e-11)


def test_layer_errors(world_size):
    layer = dnn.DistributedGroupNorm(W([1, 1, world_size]), 2, 4, dtype=f64)
    with pytest.raises(distop.Error, match="float32"):
        layer(torch.zeros(1, 4, 1, dtype=torch.float32))
    with pytest.raises(distop.Error, match="dimensions"):
        layer(torch.zeros(1, 4, dtype=f64))
    with pytest.raises(distop.Error):
        dnn.DistributedGroupNorm(W([1, 1, world_size]), 3, 4)  # 4 channels in 3 groups
    with pytest.raises(distop.Error, match="sequence_axis"):
        dnn.DistributedMultiheadAttention(W([world_size]), 24, 12, sequence_axis=2)


LOSSES = [  # (distop.nn function, torch function, extra arguments, reductions)
    (dnn.l1_loss, F.l1_loss, {}, ["mean", "sum", "none"]),
    (dnn.mse_loss, F.mse_loss, {}, ["mean", "sum"]),
    (dnn.poisson_nll_loss, F.poisson_nll_loss, {"log_input": False, "full": True},
     ["mean", "sum"]),
    (dnn.binary_cross_entropy, F.binary_cross_entropy, {}, ["mean", "none"]),
    (dnn.binary_cross_entropy_with_logits, F.binary_cross_entropy_with_logits,
     {"pos_weight": torch.linspace(0.5, 2, 7, dtype=f64)}, ["mean", "sum"]),
    (dnn.kl_div, F.kl_div, {"log_target": True}, ["batchmean", "sum"]),
]


@pytest.mark.parametrize("fn,ref_fn,kw,reductions", LOSSES)
def test_losses_equal_torch(world_size, rank, fn, ref_fn, kw, reductions):
    P = W([world_size, 1])  # 5 rows over the ranks
    torch.manual_seed(9)
    X = torch.rand(5, 7, dtype=f64) * 0.9 + 0.05
    T = torch.rand(5, 7, dtype=f64)
    if fn is dnn.poisson_nll_loss:
        T = torch.randint(0, 5, (5, 7)).to(f64)
    if fn is dnn.kl_div:
        X, T = X.log_softmax(1), T.log_softmax(1)
    space = balanced(P, [5, 7])
    for reduction in reductions:
        x = distop.distribute(X, space).requires_grad_(True)
        loss = fn(x, distop.distribute(T, space), P, reduction=reduction, **kw)
        Xr = X.clone().requires_grad_(True)
        ref = ref_fn(Xr, T, reduction=reduction, **kw)
        if reduction == "none":
            torch.testing.assert_close(loss, distop.distribute(ref.detach(), space), rtol=0,
                                       atol=1e-14)
            dY = torch.randn(5, 7, dtype=f64)
            (loss * distop.distribute(dY, space)).sum().backward()
            (ref * dY).sum().backward()
        else:
            total = distop._core.allreduce_sum(distop.comm_handle(), loss.item())
            assert total == pytest.approx(ref.item(), rel=1e-13, abs=1e-14)
            loss.backward()
            ref.backward()
        torch.testing.assert_close(x.grad, distop.distribute(Xr.grad, space), rtol=1e-13,
                                   atol=1e-15)


def test_dice_loss_and_loss_errors(world_size, rank):
    P = W([1, 1, world_size])
    torch.manual_seed(10)
    X, T = torch.rand(2, 1, 9, dtype=f64), (torch.rand(2, 1, 9, dtype=f64) > 0.5).to(f64)
    space = balanced(P, [2, 1, 9])
    x = distop.distribute(X, space).requires_grad_(True)
    loss = dnn.dice_loss(x, distop.distribute(T, space), P, smooth=1.0)
    Xr = X.clone().requires_grad_(True)
    ref = 1 - (2 * (Xr * T).sum() + 1) / (Xr.sum() + T.sum() + 1)
    torch.testing.assert_close(loss.detach(), ref.detach().reshape(1) * (rank == 0), rtol=1e-14,
                               atol=1e-15)
    loss.backward()
    ref.backward()
    torch.testing.assert_close(x.grad, distop.distribute(Xr.grad, space), rtol=1e-13, atol=1e-15)
    with pytest.raises(distop.Error, match="batchmean"):
        dnn.mse_loss(x, x.detach(), P, reduction="batchmean")
    with pytest.raises(distop.Error, match="target"):
        dnn.l1_loss(x, distop.distribute(torch.zeros(2, 1, 8, dtype=f64), balanced(P, [2, 1, 8])),
                    P)


def test_conv_over_channel_and_general_partitions_equals_torch(world_size, rank):
    if world_size == 1:
        pytest.skip("one rank is the feature partition")
    grid = {2: [1, 2, 1, 1], 3: [3, 1, 1, 1], 4: [2, 1, 2, 1]}[world_size]
    layer = dnn.DistributedConv2d(W(grid), 4, 3, 3, padding=1, seed=6, dtype=f64)
    assert isinstance(layer, dnn.DistributedGeneralConv2d)
    ref = torch.nn.Conv2d(4, 3, 3, padding=1, dtype=f64)
    ref.load_state_dict(layer.global_state_dict())
    compare_conv(layer, ref, [2, 4, 6, 5], rank)


@pytest.mark.parametrize("vocab_axis", [0, None])
def test_embedding_equals_torch(world_size, rank, vocab_axis):
    layer = dnn.DistributedEmbedding(W([world_size]), 11, 4, padding_idx=2, vocab_axis=vocab_axis,
                                     seed=7, dtype=f64)
    ref = torch.nn.Embedding(11, 4, padding_idx=2, dtype=f64)
    ref.load_state_dict(layer.global_state_dict())
    torch.testing.assert_close(ref.weight[2], torch.zeros(4, dtype=f64))
    idx = torch.tensor([[0, 2, 10], [5, 5, 1]])
    y = layer(idx)
    Y = ref(idx)
    torch.testing.assert_close(y.detach(), Y.detach(), rtol=0, atol=0)
    dY = torch.randn(Y.shape, dtype=f64, generator=torch.Generator().manual_seed(3))
    (y * dY).sum().backward()
    (Y * dY).sum().backward()
    rows = distop.TensorSpace(W([world_size]),
                              distop.Decomposition.balanced([11, 4], [world_size], [0, -1]))
    mine = distop.distribute(ref.weight.grad, rows) if vocab_axis == 0 else ref.weight.grad
    torch.testing.assert_close(layer.weight.grad, mine, rtol=0, atol=1e-14)
    with pytest.raises(distop.Error, match="integer"):
        layer(idx.to(f64))
