"""DistDL's halo arithmetic for window layers on a balanced split: which input entries each
worker's block of the output reads, and so the ghost zones it needs."""

import numpy as np

from ...utilities.slicing import compute_start_index, compute_subshape


def _left_padded(v, n, fill):
    v = np.atleast_1d(np.asarray(v)).astype(int)
    return np.concatenate([np.full(n - len(v), fill, dtype=int), v])


class HaloMixin:
    """Needs _compute_min_input_range and _compute_max_input_range (ConvMixin, PoolingMixin)."""

    def _compute_exchange_info(self, x_global_shape, kernel_size, stride, padding, dilation,
                               partition_active, partition_shape, partition_index,
                               subtensor_shapes=None):
        """(halo_shape, recv_buffer_shape, send_buffer_shape, needed_ranges) of the worker at
        `partition_index`: its ghost widths [[left, right] per axis], the same as what it
        receives, what it sends each neighbour (the neighbour's facing ghost width), and the
        range of its padded tensor that its outputs read. Window parameters are left-padded to
        the tensor's dimensions (kernel, stride and dilation with 1, padding with 0). Nones
        outside the partition."""
        if not partition_active:
            return None, None, None, None
        x_global_shape = np.atleast_1d(np.asarray(x_global_shape)).astype(int)
        n = len(x_global_shape)
        kernel_size = _left_padded(kernel_size, n, 1)
        stride = _left_padded(stride, n, 1)
        padding = _left_padded(padding, n, 0)
        dilation = _left_padded(dilation, n, 1)
        args = (x_global_shape, kernel_size, stride, padding, dilation)
        index = np.asarray(partition_index, dtype=int)
        halo = self._compute_halo_shape(partition_shape, index, *args,
                                        subtensor_shapes=subtensor_shapes)
        send = np.zeros_like(halo, dtype=int)
        for a in range(len(partition_shape)):
            if index[a] > 0:
                left = index.copy()
                left[a] -= 1
                send[a, 0] = self._compute_halo_shape(partition_shape, left, *args,
                                                      subtensor_shapes=subtensor_shapes)[a, 1]
            if index[a] < partition_shape[a] - 1:
                right = index.copy()
                right[a] += 1
                send[a, 1] = self._compute_halo_shape(partition_shape, right, *args,
                                                      subtensor_shapes=subtensor_shapes)[a, 0]
        if subtensor_shapes is not None:
            local = np.asarray(subtensor_shapes[tuple(index)], dtype=int)
        else:
            local = compute_subshape(partition_shape, index, x_global_shape)
        signed = self._compute_halo_shape(partition_shape, index, *args,
                                          require_nonnegative=False,
                                          subtensor_shapes=subtensor_shapes)
        needed = self._compute_needed_ranges(local, signed)
        return halo.astype(int), halo.copy().astype(int), send, needed.astype(int)

    def _compute_local_start_index(self, index, subtensor_shapes, x_local_shape):
        """The global start of the block at `index` when the blocks are `subtensor_shapes`."""
        start = np.zeros(len(x_local_shape), dtype=int)
        for a in range(len(x_local_shape)):
            for i in range(index[a]):
                at = tuple(i if b == a else 0 for b in range(len(x_local_shape)))
                start[a] += subtensor_shapes[at][a]
        return start

    def _compute_needed_ranges(self, tensor_shape, halo_shape):
        """[[begin, end] per axis] of the padded tensor that the outputs read: a negative
        (surplus) left width skips entries."""
        halo_shape = np.asarray(halo_shape, dtype=int)
        tensor_shape = np.asarray(tensor_shape, dtype=int)
        out = np.zeros_like(halo_shape)
        out[:, 0] = np.maximum(0, -halo_shape[:, 0])
        out[:, 1] = (tensor_shape + np.maximum(0, halo_shape[:, 0]) +
                     np.maximum(0, halo_shape[:, 1]))
        return out

    def _compute_out_shape(self, in_shape, kernel_size, stride, padding, dilation):
        return (in_shape + 2 * padding - dilation * (kernel_size - 1) - 1) // stride + 1

    def _compute_halo_shape(self, shape, index, x_global_shape, kernel_size, stride, padding,
                            dilation, require_nonnegative=True, subtensor_shapes=None):
        """[[left, right] per axis]: how far the inputs that the block of the (balanced) output
        at `index` reads reach beyond the worker's input block, clipped to the tensor; negative
        where the block holds inputs its outputs do not read (0 unless not
        `require_nonnegative`)."""
        x_global_shape = np.asarray(x_global_shape, dtype=int)
        index = np.asarray(index, dtype=int)
        if subtensor_shapes is not None:
            x_local = np.asarray(subtensor_shapes[tuple(index)], dtype=int)
            x_start = self._compute_local_start_index(index, subtensor_shapes, x_local)
        else:
            x_local = compute_subshape(shape, index, x_global_shape)
            x_start = compute_start_index(shape, index, x_global_shape)
        y_global = self._compute_out_shape(x_global_shape, kernel_size, stride, padding, dilation)
        y_local = compute_subshape(shape, index, y_global)
        y_start = compute_start_index(shape, index, y_global)
        first = np.maximum(0, self._compute_min_input_range(y_start, kernel_size, stride,
                                                            padding, dilation))
        last = np.minimum(x_global_shape - 1,
                          self._compute_max_input_range(y_start + y_local - 1, kernel_size,
                                                        stride, padding, dilation))
        left = x_start - first
        right = last - (x_start + x_local - 1)
        if require_nonnegative:
            left, right = np.maximum(left, 0), np.maximum(right, 0)
        return np.stack([left, right], axis=1)
