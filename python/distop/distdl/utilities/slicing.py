"""DistDL's index arithmetic for balanced blocks: a tensor axis of n entries over p workers gives
worker i n // p entries, plus one for the first n % p workers."""

import numpy as np


def _arrays(*values):
    return [np.atleast_1d(np.asarray(v)).astype(int) for v in values]


def compute_subshape(P_shape, index, shape):
    """The shape of the block of a tensor of `shape` that the worker at `index` of a grid of
    `P_shape` holds."""
    P_shape, index, shape = _arrays(P_shape, index, shape)
    sub = shape // P_shape
    sub[index < shape % P_shape] += 1
    return sub


def compute_start_index(P_shape, index, shape):
    """The global index of the first entry of that block."""
    P_shape, index, shape = _arrays(P_shape, index, shape)
    return (shape // P_shape) * index + np.minimum(index, shape % P_shape)


def compute_stop_index(P_shape, index, shape):
    """One past the global index of the block's last entry."""
    return compute_start_index(P_shape, index, shape) + compute_subshape(P_shape, index, shape)


def compute_intersection(r0_start_index, r0_stop_index, r1_start_index, r1_stop_index):
    """The start, stop and shape of the intersection of two boxes (shape 0 where empty)."""
    a0, b0, a1, b1 = _arrays(r0_start_index, r0_stop_index, r1_start_index, r1_stop_index)
    start = np.maximum(a0, a1)
    stop = np.maximum(np.minimum(b0, b1), start)
    return start, stop, stop - start


def assemble_slices(start_index, stop_index):
    """The box from `start_index` to `stop_index` as a tuple of slices."""
    return tuple(slice(int(a), int(b), None) for a, b in zip(start_index, stop_index))


def compute_nd_slice_volume(slices):
    """The number of entries of a box given as slices."""
    return int(np.prod(compute_nd_slice_shape(slices)))


def compute_nd_slice_shape(slices):
    """The shape of a box given as slices (unit steps)."""
    return np.array([max(s.stop - s.start, 0) for s in slices], dtype=int)


def range_index(shape):
    """Every index of a grid of `shape`, in row-major order."""
    for index in np.ndindex(*[int(s) for s in np.atleast_1d(shape)]):
        yield index


def worker_layout(shape):
    """The row-major rank of each worker of a grid of `shape`, as an array of that shape."""
    shape = [int(s) for s in np.atleast_1d(shape)]
    return np.arange(int(np.prod(shape))).reshape(shape)
