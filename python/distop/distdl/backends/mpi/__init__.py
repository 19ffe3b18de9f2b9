"""The MPI backend: partitions over mpi4py communicators (``partition.MPIPartition``)."""

from . import partition  # noqa: F401
from .partition import MPICartesianPartition, MPIPartition  # noqa: F401

Partition = MPIPartition
