"""distop.distdl's generally partitioned convolutions and the DistributedConv{1,2,3}d dispatcher:
DistributedGeneralConv{1,2,3}d over channel and spatial grids equal to torch.nn.Conv{1,2,3}d on
the assembled tensors (output, input, weight and bias gradients, float64), their dot-product
test, the dispatcher's choice and DistDL's ValueErrors, and bad partitions or inputs raising on
every rank."""

import numpy as np
import pytest
import torch

mpi4py = pytest.importorskip("mpi4py")
from mpi4py import MPI  # noqa: E402

import distop  # noqa: E402
from distop.distdl.backends.mpi.partition import MPIPartition  # noqa: E402
from distop.distdl.nn import (DistributedChannelConv1d, DistributedChannelConv2d,  # noqa: E402
                              DistributedConv1d, DistributedConv2d, DistributedConv3d,
                              DistributedFeatureConv1d, DistributedFeatureConv2d,
                              DistributedGeneralConv1d, DistributedGeneralConv2d,
                              DistributedGeneralConv3d)
from distop.distdl.utilities.slicing import compute_start_index, compute_subshape  # noqa: E402
from distop.distdl.utilities.torch import zero_volume_tensor  # noqa: E402
from distop.testing import adjoint_test  # noqa: E402

WORLD = MPI.COMM_WORLD
DT = torch.float64


def _grid(P_world, ranks, shape):
    return P_world.create_partition_inclusive(ranks).create_cartesian_topology_partition(shape)


def _block(shape, index, glob, starts=None):
    """The slices of the block at `index` of a tensor of shape `glob` split over a grid of `shape`
    (balanced, or along each axis at `starts`: every block's first index, then the end)."""
    if starts is None:
        start = compute_start_index(shape, index, glob)
        stop = start + compute_subshape(shape, index, glob)
    else:
        start = [s[i] for s, i in zip(starts, index)]
        stop = [s[i + 1] for s, i in zip(starts, index)]
    return tuple(slice(int(a), int(b)) for a, b in zip(start, stop))


def _assemble(glob, pieces):
    """The global tensor from every rank's (slices, block) pieces (None where it holds none)."""
    out = torch.full(glob, float("nan"), dtype=DT)
    for piece in WORLD.allgather(pieces):
        if piece is not None:
            where, block = piece
            out[where] = torch.as_tensor(block)
    return out


# (dims, P_x shape and ranks, P_y shape and ranks, P_w shape (ranks 0, 1, ...), window options,
# x's global shape, uneven: x's spatial blocks start where given instead of balanced).
CASES = {
    # 1 rank: the whole layer on one worker (P_w = [1, 1, 1]).
    "1d-serial": (1, [1, 1, 1], [0], [1, 1, 1], [0], [1, 1, 1],
                  dict(kernel_size=3, padding=1), [2, 3, 7], None),
    # Spatial only, P workers, stride 2, padding 2, dilation 2, input blocks uneven.
    "1d-spatial-uneven": (1, [1, 1, "P"], "all", [1, 1, "P"], "all", [1, 1, "P"],
                          dict(kernel_size=3, stride=2, padding=2, dilation=2),
                          [2, 3, "8P+1"], "uneven"),
    # 3 workers: input channels over P_ci = 3, one output worker (the spatial grid 1).
    "1d-ci3": (1, [1, 3, 1], [0, 1, 2], [1, 1, 1], [2], [1, 3, 1],
               dict(kernel_size=3, padding=1), [2, 7, 9], None),
    # 4 workers: x on 2 of them split in space, broadcast to both output-channel rows.
    "1d-co2-s2": (1, [1, 1, 2], [2, 3], [1, 2, 2], [0, 1, 2, 3], [2, 1, 2],
                  dict(kernel_size=3, padding=1, stride=2), [2, 3, 11], None),
    # 4 workers: input channels and space split, summed onto 2 workers.
    "1d-ci2-s2": (1, [1, 2, 2], [0, 1, 2, 3], [1, 1, 2], [1, 3], [1, 2, 2],
                  dict(kernel_size=4, padding=2), [3, 5, 10], None),
    # 4 workers: channel-free 2-d over a 2 x 2 spatial grid.
    "2d-s2x2": (2, [1, 1, 2, 2], [0, 1, 2, 3], [1, 1, 2, 2], [3, 2, 1, 0], [1, 1, 2, 2],
                dict(kernel_size=(3, 2), stride=(1, 2), padding=(1, 0)), [2, 2, 7, 9], None),
    # 4 workers: 2-d, output channels over 2 rows, width over 2.
    "2d-co2-w2": (2, [1, 1, 1, 2], [1, 2], [1, 2, 1, 2], [0, 1, 2, 3], [2, 1, 1, 2],
                  dict(kernel_size=3, padding=1), [2, 3, 5, 6], None),
    # 2 workers: 3-d, the height split, the input and output workers in opposite order.
    "3d-h2": (3, [1, 1, 1, 2, 1], [1, 0], [1, 1, 1, 2, 1], [0, 1], [1, 1, 1, 2, 1],
              dict(kernel_size=3, padding=(0, 1, 1)), [1, 2, 3, 5, 3], None),
}


def _resolve(case, P):
    """The case at P ranks, and the number of ranks it runs at."""
    dims, xs, xr, ys, yr, ws, opts, glob, uneven = case
    xs, ys, ws = ([P if v == "P" else v for v in s] for s in (xs, ys, ws))
    glob = [8 * P + 1 if v == "8P+1" else v for v in glob]
    xr = list(range(int(np.prod(xs)))) if xr == "all" else xr
    yr = list(range(int(np.prod(ys)))) if yr == "all" else yr
    need = max([int(np.prod(ws)), max(xr) + 1, max(yr) + 1])
    return dims, xs, xr, ys, yr, ws, opts, glob, uneven, need


def _layer_and_reference(name, P, bias=True):
    dims, xs, xr, ys, yr, ws, opts, glob, uneven, need = _resolve(CASES[name], P)
    if need != P:
        pytest.skip(f"case {name} runs at {need} ranks")
    P_world = MPIPartition(WORLD)
    P_x, P_y = _grid(P_world, xr, xs), _grid(P_world, yr, ys)
    P_w = _grid(P_world, list(range(int(np.prod(ws)))), ws)
    cls = {1: DistributedGeneralConv1d, 2: DistributedGeneralConv2d,
           3: DistributedGeneralConv3d}[dims]
    c_in, c_out = glob[1], 5
    # Built in float64 throughout: the zero-volume stand-ins too (every rank passes one dtype).
    default = torch.get_default_dtype()
    torch.set_default_dtype(DT)
    try:
        layer = cls(P_x, P_y, P_w, c_in, c_out, bias=bias, **opts)
    finally:
        torch.set_default_dtype(default)
    torch.manual_seed(11)
    ref = getattr(torch.nn, f"Conv{dims}d")(c_in, c_out, bias=bias, dtype=DT, **opts)
    w_glob = list(ref.weight.shape)
    # Each storing worker takes its block of torch's weight (and bias).
    if layer.stores_weight:
        layer.weight.data = ref.weight.detach()[_block(ws[:2], P_w.index[:2], w_glob[:2])].clone()
    if layer.stores_bias:
        layer.bias.data = ref.bias.detach()[_block(ws[:1], P_w.index[:1], [c_out])].clone()
    starts = None
    if uneven:
        # The balanced spatial blocks with 2 entries moved from the last to the first.
        p = xs[2]
        cuts = [int(compute_start_index(p, i, glob[2])[0]) for i in range(p)] + [glob[2]]
        cuts[1:p] = [c + 2 for c in cuts[1:p]]
        starts = [[0, glob[0]], [0, glob[1]], cuts]
    return layer, ref, (P_x, P_y, P_w), glob, starts


@pytest.mark.parametrize("name", sorted(CASES))
def test_general_conv_equals_torch(name):
    """Forward and backward of the distributed layer on x's blocks equal torch's layer on the
    whole tensor: y, x.grad, weight.grad and bias.grad assembled from every worker's block."""
    P = WORLD.size
    layer, ref, (P_x, P_y, P_w), glob, starts = _layer_and_reference(name, P)
    torch.manual_seed(5)
    x_g = torch.randn(glob, dtype=DT)
    y_r = ref(x_g.clone().requires_grad_(True))
    g_g = torch.randn(y_r.shape, dtype=DT)
    x_ref = x_g.clone().requires_grad_(True)
    (ref(x_ref) * g_g).sum().backward()

    where_x = _block(P_x.shape, P_x.index, glob, starts) if P_x.active else None
    x = x_g[where_x].clone() if P_x.active else zero_volume_tensor(glob[0], dtype=DT)
    x.requires_grad_(True)
    y = layer(x)
    # Every rank's local facts first, asserted after the collectives (a rank that failed early
    # would leave the others waiting in them).
    where_y = _block(P_y.shape, P_y.index, list(y_r.shape)) if P_y.active else None
    y_shape_ok = list(y.shape) == ([s.stop - s.start for s in where_y] if P_y.active
                                   else [glob[0], 0])
    (y * g_g[where_y] if P_y.active else y).sum().backward()
    # Workers of P_w that do not store a parameter hold zero-volume stand-ins with a gradient.
    stand_ins_ok = (not P_w.active or
                    (layer.stores_weight or layer.weight.grad.numel() == 0) and
                    (layer.stores_bias or layer.bias.grad.numel() == 0))
    y_d = _assemble(list(y_r.shape), (where_y, y.detach().numpy()) if P_y.active else None)
    dx = _assemble(glob, (where_x, x.grad.numpy()) if P_x.active else None)
    w_piece = b_piece = None
    if layer.stores_weight:
        w_piece = (_block(P_w.shape[:2], P_w.index[:2], list(ref.weight.shape[:2])),
                   layer.weight.grad.numpy())
    if layer.stores_bias:
        b_piece = (_block(P_w.shape[:1], P_w.index[:1], [ref.bias.shape[0]]),
                   layer.bias.grad.numpy())
    dw = _assemble(list(ref.weight.shape), w_piece)
    db = _assemble(list(ref.bias.shape), b_piece)
    assert y_shape_ok and stand_ins_ok
    assert torch.allclose(y_d, y_r.detach(), rtol=1e-12, atol=1e-12)
    assert torch.allclose(dx, x_ref.grad, rtol=1e-12, atol=1e-12)
    assert torch.allclose(dw, ref.weight.grad, rtol=1e-12, atol=1e-12)
    assert torch.allclose(db, ref.bias.grad, rtol=1e-12, atol=1e-12)


def test_general_conv_adjoint():
    """Without bias the layer is linear in x: <F x, y> = <x, F* y> over all ranks."""
    P = WORLD.size
    name = {1: "1d-serial", 3: "1d-ci3", 4: "1d-ci2-s2"}.get(P, "1d-spatial-uneven")
    layer, _, (P_x, _, _), glob, starts = _layer_and_reference(name, P, bias=False)
    x = torch.zeros([len(range(*s.indices(n)))
                     for s, n in zip(_block(P_x.shape, P_x.index, glob, starts), glob)]
                    if P_x.active else [glob[0], 0], dtype=DT)
    report = adjoint_test(layer, x)
    assert report.passed, str(report)


def test_dispatcher_picks_the_class():
    """DistDL's choice: P_x alone gives the feature convolution, P_y and P_w without a spatial
    split the channel one, with a spatial split the general one."""
    P = WORLD.size
    P_world = MPIPartition(WORLD)
    ranks = list(range(P))
    P_xf = _grid(P_world, ranks, [1, 1, P])
    layer = DistributedConv1d(P_xf, in_channels=2, out_channels=3, kernel_size=3)
    assert type(layer) is DistributedFeatureConv1d
    P_xc, P_yc = _grid(P_world, ranks, [1, P, 1]), _grid(P_world, [0], [1, 1, 1])
    P_wc = _grid(P_world, ranks, [1, P, 1])
    layer = DistributedConv1d(P_xc, P_y=P_yc, P_w=P_wc, in_channels=P, out_channels=3,
                              kernel_size=3)
    assert type(layer) is DistributedChannelConv1d
    layer = DistributedConv2d(_grid(P_world, ranks, [1, P, 1, 1]), _grid(P_world, [0], [1] * 4),
                              _grid(P_world, ranks, [1, P, 1, 1]), None, P, 3, 3)
    assert type(layer) is DistributedChannelConv2d
    if P > 1:
        P_xg = _grid(P_world, ranks, [1, 1, 1, P])
        layer = DistributedConv2d(P_xg, P_y=P_xg, P_w=_grid(P_world, ranks, [1, 1, 1, P]),
                                  in_channels=2, out_channels=3, kernel_size=[3, 3])
        assert type(layer) is DistributedGeneralConv2d
    layer = DistributedConv2d(_grid(P_world, ranks, [1, 1, P, 1]), in_channels=1,
                              out_channels=1, kernel_size=[3, 3])
    assert type(layer) is DistributedFeatureConv2d
    for kwargs in (dict(P_y=P_yc), dict(P_w=P_wc)):
        with pytest.raises(ValueError, match="Cannot determine valid matching class"):
            DistributedConv1d(P_xc, in_channels=P, out_channels=3, kernel_size=3, **kwargs)
    with pytest.raises(ValueError, match="Cannot determine"):
        DistributedConv3d(_grid(P_world, ranks, [1, 1, P, 1, 1]), P_w=P_wc, in_channels=1,
                          out_channels=1, kernel_size=3)


def test_general_conv_bad_partitions_raise_everywhere():
    """Partitions that do not fit together, and bad options, are ValueErrors on every rank
    (decided from the partitions' shapes, before any communication a rank could wait in)."""
    P = WORLD.size
    P_world = MPIPartition(WORLD)
    ranks = list(range(P))
    P_s = _grid(P_world, ranks, [1, 1, P])
    P_0 = _grid(P_world, [0], [1, 1, 1])
    bad = [((_grid(P_world, [0], [1, 1, 1, 1]), P_0, P_0), {}, "must have 3 dimensions"),
           ((P_s, P_s, P_s), dict(padding_mode="circular"), "padding_mode"),
           ((P_s, P_s, P_s), dict(kernel_size=[3, 3]), "Invalid parameter")]
    if P > 1:
        P_c = _grid(P_world, ranks, [1, P, 1])
        bad += [((P_0, P_s, P_s), {}, "Spatial components of P_x and P_w must match"),
                ((P_s, P_0, P_s), {}, "Spatial components of P_y and P_w must match"),
                ((P_0, P_c, P_c), {}, "Index 2 of P_w dimension"),
                ((P_c, P_c, P_c), {}, "Index 1 of P_w dimension"),
                ((_grid(P_world, ranks, [P, 1, 1]), P_0, P_0), {}, "batch dimension"),
                ((P_c, P_0, P_c), dict(groups=P), "groups")]
    for (P_x, P_y, P_w), options, match in bad:
        args = dict(in_channels=P, out_channels=2, kernel_size=3)
        args.update(options)
        with pytest.raises(ValueError, match=match):
            DistributedGeneralConv1d(P_x, P_y, P_w, **args)


def test_general_conv_bad_input_raises_everywhere():
    """An input whose channels or dimensions do not fit the layer: distop.Error on every rank,
    the workers outside P_x included (they pass a zero-volume tensor)."""
    P = WORLD.size
    P_world = MPIPartition(WORLD)
    P_x = _grid(P_world, [P - 1], [1, 1, 1])
    P_w = _grid(P_world, list(range(P)), [P, 1, 1])
    P_y = _grid(P_world, list(range(P)), [1, P, 1])
    layer = DistributedGeneralConv1d(P_x, P_y, P_w, 3, P, 3, padding=1)
    x = torch.randn(2, 4, 6) if P_x.active else zero_volume_tensor(2)
    with pytest.raises(distop.Error, match="the input has 4 channels; the layer takes 3"):
        layer(x)
    x = torch.randn(2, 3, 6, 1) if P_x.active else zero_volume_tensor(2)
    with pytest.raises(distop.Error, match=r"tensors of \[4\] dimensions; expected 3"):
        layer(x)
    y = layer(torch.randn(2, 3, 6) if P_x.active else zero_volume_tensor(2))
    assert list(y.shape) == [2, 1, 6]
