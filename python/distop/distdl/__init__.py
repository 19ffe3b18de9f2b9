"""DistDL's public API over distop: a DistDL program runs by changing its imports from ``distdl``
to ``distop.distdl``.

The module paths mirror DistDL's (``backends.mpi.partition.MPIPartition``, ``nn.broadcast.Broadcast``,
``utilities.torch.zero_volume_tensor``, ...), with DistDL's constructor arguments and semantics;
the data movement runs distop's C++ operators (``distop.torch``), whose adjoints are distop's.

One difference in contract: every call of a primitive is collective over the root communicator of
its partitions (the communicator the program's first ``MPIPartition`` wraps), so every rank of it
calls every layer, as DistDL programs do (ranks outside the layer's partitions pass a zero-volume
tensor). DistDL lets ranks outside both partitions skip the call.
"""

from . import backends, nn, utilities  # noqa: F401

__all__ = ["backends", "nn", "utilities"]
