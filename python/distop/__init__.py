"""distop for Python: partitions, tensor spaces and distop's data-movement operators.

``import distop`` initialises MPI (unless it is initialised already, by mpi4py for one) and Kokkos
once, and finalises both at exit in the reverse order (MPI only where distop initialised it).
Tensors cross into distop without a copy (DLPack): a contiguous float32/float64 torch tensor (or
numpy array) where this build's tensors live (``distop.device()``: host memory, or in a CUDA build
the rank's GPU) becomes a distop tensor over the same memory, and results come back as tensors
over distop's memory. ``distop.torch`` has the operators as autograd functions and modules.
"""

import atexit as _atexit

from . import _core
from ._core import Decomposition, Operator, Partition, TensorSpace

__all__ = [
    "Error", "Partition", "TensorSpace", "Decomposition", "Operator", "rank", "size", "barrier",
    "comm_handle", "device", "distribute", "assemble", "zero_volume_tensor",
]

#: The exception every distop error arrives as, on every rank, with distop's message
#: ("[Operation, rank r] what was expected, what was found").
Error = _core.Error

_core.initialize()
_WORLD = _core.world_handle()


def _finalize():
    # Operator caches hold communicators: let them go before MPI does.
    import gc
    gc.collect()
    _core.finalize()


_atexit.register(_finalize)


def comm_handle(comm=None):
    """The handle distop's C++ side takes for `comm`: a communicator's Fortran handle (an int
    whatever MPI's C type is): MPI_COMM_WORLD's for None, ``comm.py2f()`` for an mpi4py
    communicator, an int as it is."""
    if comm is None:
        return _WORLD
    if isinstance(comm, int):
        return comm
    if hasattr(comm, "py2f"):
        return int(comm.py2f())
    raise TypeError(f"distop: not a communicator: {comm!r} (an mpi4py communicator or None)")


def rank(comm=None):
    """This process's rank in `comm` (MPI_COMM_WORLD by default)."""
    return _core.comm_rank(comm_handle(comm))


def size(comm=None):
    """The number of ranks of `comm` (MPI_COMM_WORLD by default)."""
    return _core.comm_size(comm_handle(comm))


def barrier(comm=None):
    _core.barrier(comm_handle(comm))


def _partition_world(shape, ranks=()):
    """A Cartesian grid of `shape` over the first prod(shape) ranks of MPI_COMM_WORLD, or over
    `ranks` (parent ranks in row-major grid order). Collective over MPI_COMM_WORLD."""
    return _core.Partition(_WORLD, list(shape), list(ranks))


def _partition_from_comm(comm, shape, ranks=()):
    """A Cartesian grid of `shape` over ranks of `comm` (an mpi4py communicator; None for
    MPI_COMM_WORLD). Collective over `comm`."""
    return _core.Partition(comm_handle(comm), list(shape), list(ranks))


Partition.world = staticmethod(_partition_world)
Partition.from_comm = staticmethod(_partition_from_comm)


def _framework(x):
    return type(x).__module__.split(".")[0]


def _contiguous(x):
    if _framework(x) == "torch":
        return x.detach().contiguous()
    import numpy
    return numpy.ascontiguousarray(x)


def distribute(global_tensor, space):
    """This rank's box of `global_tensor` (a torch tensor or numpy array of space's global shape,
    the same on every rank) in `space`: a new tensor (empty outside the partition; replicated
    boxes are copies). Not collective."""
    numpy = _framework(global_tensor) == "numpy"
    return _core.distribute(space, _contiguous(global_tensor), numpy)


def assemble(local, space, root=0):
    """The global tensor on parent rank `root` (a zero-volume tensor elsewhere), assembled from
    every rank's box `local` of `space`. Collective over the space's parent communicator."""
    numpy = _framework(local) == "numpy"
    local = _contiguous(local)
    empty = local.size == 0 if numpy else local.numel() == 0
    if empty:
        local = local.reshape(space.local_shape)
    return _core.assemble(space, local, root, numpy)


def device():
    """Where this build's tensors live, as a torch.device: ``cpu`` in a host build; in a CUDA build
    (distop built against a Kokkos with CUDA) ``cuda:k``, the GPU distop gave this rank (rank r of
    a node takes GPU r mod the node's GPU count). Tensors passed to distop must be there (the call
    raises on every rank otherwise), and its results are."""
    import torch
    kind, index = _core.tensor_device()
    return torch.device("cpu") if kind == "cpu" else torch.device(kind, index)


_device = device  # for functions whose `device` argument hides it


def zero_volume_tensor(dim=1, dtype=None, device=None):
    """A torch tensor with no entries and `dim` axes of extent 0: what a rank outside an
    operator's partition passes and receives. On ``device`` (default: distop.device())."""
    import torch
    return torch.zeros([0] * dim, dtype=dtype or torch.get_default_dtype(),
                       device=device if device is not None else _device())
