"""DistDL's sequential ``Interpolate``: the interpolation of one rank's sub-block of a global input
onto a sub-block of a global output, with DistDL's index rule (its ``interpolate.h``), composed of
torch's ``index_select`` so that torch's autograd gives its exact adjoint.

DistDL's rule along each spatial axis, for local output ``o`` of a block starting at global index
``y_start`` and a local input block starting at ``x_start`` (``n``, ``m`` the global input and
output extents; arithmetic in the tensor's dtype, the floor in single precision, as DistDL's
``floorf``):

- ``"nearest"`` (DistDL's nearest-left neighbour; ``scale_factor`` is not used):
  ``i = floor(n / m * (y_start + o) - x_start)``;
- ``"linear"``: ``t = r * (y_start + o) - x_start`` with ``align_corners`` and ``r = (n - 1) /
  (m - 1)``, else ``t = r * (y_start + o + 0.5) - (x_start + 0.5)`` with ``r = 1 / scale_factor``
  when one is given and ``n / m`` otherwise; ``t`` below 0 is 0; ``i0 = floor(t)``, ``i1 = i0 + 1``,
  weights ``1 - l`` and ``l`` for ``l = t - i0`` (snapped to 0 or 1 within 1e-4); ``"linear"``
  applies along every spatial axis (bi- and trilinear for two and three);

every index clamped to the local input block, so an output whose source lies outside the block
reads the block's edge (a sub-block is meant to cover the inputs its outputs read). On whole blocks
this is torch's ``linear`` rule and torch's ``nearest`` rule without a scale factor. The batch and
channel axes are not interpolated: the output block has the input's."""

import math

import torch

_MODES = ("nearest", "linear")


def _extents(value):
    return tuple(int(v) for v in torch.as_tensor(value).reshape(-1).tolist())


def _axis_taps(dtype, mode, align_corners, scale_factor, x_start, x_len, n, y_start, y_len, m):
    """DistDL's taps along one axis: (i0, w0, i1, w1) for the y_len local outputs (i1, w1 None for
    the nearest mode)."""
    o = torch.arange(y_start, y_start + y_len, dtype=torch.float64)
    if mode == "nearest":
        fac = torch.tensor(n, dtype=dtype) / torch.tensor(m, dtype=dtype)
        t = fac * o.to(dtype) - torch.tensor(x_start, dtype=dtype)
        i0 = torch.floor(t.to(torch.float32)).to(torch.int64).clamp(0, x_len - 1)
        return i0, None, None, None
    if align_corners:
        fac = (torch.tensor(n - 1, dtype=dtype) / torch.tensor(m - 1, dtype=dtype)
               if m > 1 else torch.tensor(math.nan, dtype=dtype))
        t = fac * o.to(dtype) - torch.tensor(x_start, dtype=dtype)
    else:
        if scale_factor is not None and scale_factor > 0:
            fac = torch.tensor(1.0 / scale_factor, dtype=dtype)
        else:
            fac = torch.tensor(n, dtype=dtype) / torch.tensor(m, dtype=dtype)
        # DistDL's (y_start + o + 0.5) and (x_start + 0.5) are doubles; the result is stored in
        # the dtype.
        t = (fac.to(torch.float64) * (o + 0.5) - (x_start + 0.5)).to(dtype)
    t = torch.where(t < 0, torch.zeros_like(t), t)
    i0 = torch.floor(t.to(torch.float32)).to(torch.int64).clamp(0, x_len - 1)
    i1 = (i0 + 1).clamp(0, x_len - 1)
    lam = t - i0.to(dtype)
    lam = torch.where(lam.abs() < 1e-4, torch.zeros_like(lam), lam)
    lam = torch.where((lam - 1.0).abs() < 1e-4, torch.ones_like(lam), lam)
    return i0, 1.0 - lam, i1, lam


class Interpolate(torch.nn.Module):
    """DistDL's ``distdl.nn.interpolate.Interpolate``: ``x_local_start``, ``x_local_stop``,
    ``x_global_shape`` place the input block in its global tensor, ``y_local_*`` the output block
    in its global tensor (every axis, batch and channel included); ``mode`` ``"nearest"`` or
    ``"linear"``; ``scale_factor`` (linear without align_corners only) and ``align_corners`` as
    DistDL takes them. Purely local: no communication. Input [N, C, *spatial] with one to three
    spatial axes, of the shape ``x_local_stop - x_local_start``."""

    def __init__(self, x_local_start, x_local_stop, x_global_shape,
                 y_local_start, y_local_stop, y_global_shape,
                 scale_factor=None, mode="nearest", align_corners=False):
        super().__init__()
        if mode not in _MODES:
            raise ValueError(f"Interpolate: mode {mode!r} is not one of {', '.join(_MODES)}")
        self.mode = mode
        self.align_corners = bool(align_corners)
        self.scale_factor = scale_factor
        self.x_local_start = torch.Size(_extents(x_local_start))
        self.x_local_stop = torch.Size(_extents(x_local_stop))
        self.x_global_shape = torch.Size(_extents(x_global_shape))
        self.y_local_start = torch.Size(_extents(y_local_start))
        self.y_local_stop = torch.Size(_extents(y_local_stop))
        self.y_global_shape = torch.Size(_extents(y_global_shape))
        dims = len(self.x_global_shape)
        for name in ("x_local_start", "x_local_stop", "y_local_start", "y_local_stop",
                     "y_global_shape"):
            if len(getattr(self, name)) != dims:
                raise ValueError(f"Interpolate: {name} has {len(getattr(self, name))} entries, "
                                 f"x_global_shape {dims}")
        if not 3 <= dims <= 5:
            raise ValueError(f"Interpolate: tensors of 3 to 5 axes ([N, C] and 1-3 spatial), "
                             f"not {dims}")
        for side in ("x", "y"):
            start, stop = getattr(self, f"{side}_local_start"), getattr(self, f"{side}_local_stop")
            shape = getattr(self, f"{side}_global_shape")
            if any(not 0 <= b <= e <= s for b, e, s in zip(start, stop, shape)):
                raise ValueError(f"Interpolate: the {side} block [{list(start)}, {list(stop)}) "
                                 f"is not inside the global shape {list(shape)}")
        x_local = [e - b for b, e in zip(self.x_local_start, self.x_local_stop)]
        y_local = [e - b for b, e in zip(self.y_local_start, self.y_local_stop)]
        if x_local[:2] != y_local[:2]:
            raise ValueError(f"Interpolate: the output block's batch and channel extents "
                             f"{y_local[:2]} differ from the input block's {x_local[:2]}")
        if any(e == 0 for e in x_local[2:]) and any(e > 0 for e in y_local[2:]):
            raise ValueError("Interpolate: an empty input block cannot fill a non-empty output")
        self._x_local, self._y_local = torch.Size(x_local), torch.Size(y_local)
        self._taps = {}  # (dtype, device) -> per spatial axis, last first: (axis, i0, w0, i1, w1)

    def _axes(self, dtype, device):
        key = (dtype, device)
        if key not in self._taps:
            axes = []
            for axis in range(len(self._x_local) - 1, 1, -1):  # the last first, as DistDL's loops
                taps = _axis_taps(
                    dtype, self.mode, self.align_corners, self.scale_factor,
                    self.x_local_start[axis], self._x_local[axis], self.x_global_shape[axis],
                    self.y_local_start[axis], self._y_local[axis], self.y_global_shape[axis])
                view = [1] * len(self._x_local)
                view[axis] = -1
                i0, w0, i1, w1 = (None if t is None else t.to(device) for t in taps)
                if w0 is not None:
                    w0, w1 = w0.reshape(view), w1.reshape(view)
                axes.append((axis, i0, w0, i1, w1))
            self._taps[key] = axes
        return self._taps[key]

    def forward(self, input):
        if input.shape != self._x_local:
            raise ValueError(f"Interpolate: input of shape {list(input.shape)}, the block "
                             f"[{list(self.x_local_start)}, {list(self.x_local_stop)}) is "
                             f"{list(self._x_local)}")
        if not input.dtype.is_floating_point:
            raise TypeError(f"Interpolate: a floating-point input, not {input.dtype}")
        if self._y_local.numel() == 0:
            return input.new_zeros(self._y_local) + input.sum() * 0
        y = input
        for axis, i0, w0, i1, w1 in self._axes(input.dtype, input.device):
            if w0 is None:
                y = y.index_select(axis, i0)
            else:
                y = w0 * y.index_select(axis, i0) + w1 * y.index_select(axis, i1)
        return y
