"""What the DistDL primitives share: agreeing on the tensor's number of dimensions, padding
partitions and tensors to it, and DistDL's zero-volume outputs."""

import numpy as np
import torch

import distop

from ..utilities.torch import zero_volume_tensor


def agree_dim(P, x):
    """The number of dimensions of the tensors the active workers of P pass (collective over P's
    root). A distop.Error on every worker if they differ or no worker of P holds one."""
    dims = set(d for d in P._root.allgather(x.dim() if P.active else -1) if d >= 0)
    if len(dims) != 1:
        raise distop.Error(f"[distop.distdl] the workers of the input partition pass tensors of "
                           f"{sorted(dims)} dimensions; they must agree")
    return dims.pop()


def structure(P, x):
    """(number of dimensions, global shape) of the tensor the active workers of P hold, from every
    worker's index and local shape (collective over P's root); the global shape sums the blocks
    along each axis. A distop.Error on every worker if the workers' dimensions differ."""
    mine = None
    if P.active:
        mine = ([int(i) for i in np.atleast_1d(P.index)], list(x.shape))
    held = [h for h in P._root.allgather(mine) if h is not None]
    dims = set(len(h[1]) for h in held)
    if len(dims) != 1:
        raise distop.Error(f"[distop.distdl] the workers of the input partition pass tensors of "
                           f"{sorted(dims)} dimensions; they must agree")
    dim = dims.pop()
    glob = []
    for a in range(dim):
        if a < len(held[0][0]):
            ext = {}
            for index, shape in held:
                ext[index[a]] = shape[a]
            glob.append(sum(ext.values()))
        else:
            glob.append(held[0][1][a])
    return dim, glob


#: dtypes distop moves as they are; others (integers) travel as float64, exactly (|v| < 2^53).
_NATIVE = (torch.float32, torch.float64)


def to_native(x):
    """(x as a dtype distop moves, x's dtype to return to)."""
    if x.dtype in _NATIVE:
        return x, None
    return x.to(torch.float64), x.dtype


def from_native(y, dtype):
    return y if dtype is None else y.to(dtype)


def padded(x, dim):
    """x with leading axes of extent 1 up to `dim` axes."""
    return x.reshape([1] * (dim - x.dim()) + list(x.shape)) if x.dim() < dim else x


def unpadded(y, dim):
    """y without the leading axes `padded` added: the last `dim` axes."""
    return y.reshape(list(y.shape)[y.dim() - dim:]) if y.dim() > dim else y


def same_partition(a, b):
    return list(a.shape) == list(b.shape) and list(a.ranks) == list(b.ranks)


def zero_output(x, y, preserve_batch):
    """DistDL's output on a worker outside the output partition: zero-volume, (batch, 0) where
    preserve_batch keeps the input's batch size, else (0,); still y's node in the graph."""
    shape = zero_volume_tensor(x.shape[0] if preserve_batch and x.dim() > 0 else None).shape
    return y.reshape(shape) if y.numel() == 0 else y.new_zeros(shape) + y.sum() * 0


__all__ = ["agree_dim", "structure", "to_native", "from_native", "padded", "unpadded",
           "same_partition", "zero_output"]
