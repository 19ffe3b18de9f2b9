"""DistDL's torch helpers: zero-volume tensors, the tensor structure layers compare, and padding in
torch's F.pad order."""

import numpy as np
import torch


def zero_volume_tensor(b=None, dtype=None, requires_grad=False, device=None):
    """A tensor without entries: shape (0,), or (b, 0) keeping a batch size `b`."""
    dtype = dtype or torch.get_default_dtype()
    shape = (0,) if b is None else (int(b), 0)
    return torch.empty(shape, dtype=dtype, requires_grad=requires_grad, device=device)


class TensorStructure:
    """A tensor's shape, dtype and requires_grad (None for all when made without a tensor)."""

    def __init__(self, tensor=None):
        self.shape = None
        self.dtype = None
        self.requires_grad = None
        if tensor is not None:
            self.fill_from_tensor(tensor)

    def fill_from_tensor(self, tensor):
        self.shape = tensor.shape
        self.dtype = tensor.dtype
        self.requires_grad = tensor.requires_grad

    def __eq__(self, other):
        return (self.shape == other.shape and self.dtype == other.dtype and
                self.requires_grad == other.requires_grad)


def distdl_padding_to_torch_padding(pad):
    """[[left_0, right_0], ..., [left_n, right_n]] as F.pad takes it, the last axis first:
    (left_n, right_n, ..., left_0, right_0)."""
    pad = np.asarray(pad, dtype=int).reshape(-1, 2)
    return tuple(int(v) for v in pad[::-1].ravel())
