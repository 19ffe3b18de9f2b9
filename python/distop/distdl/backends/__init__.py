"""DistDL's backends: only MPI, as in DistDL (``distop.distdl.backends.mpi``)."""

from . import mpi  # noqa: F401
