"""DistDL's MPIPartition and MPICartesianPartition over mpi4py communicators.

A partition is a team of workers: an mpi4py communicator (``_comm``, MPI.COMM_NULL on workers
outside it, where ``active`` is False), its group, and the ``_root`` communicator every partition
derived from it shares. Cartesian partitions add ``shape`` and this worker's ``index`` (row-major
ranks, as MPI_Cart_create without reordering numbers them).

The layers of ``distop.distdl.nn`` move data with distop's operators. For those a partition is
turned into a ``distop.Partition`` over the root communicator (``_distop_partition``): the first
use agrees, collectively over the root, on which root ranks hold which partition rank.
"""

import numpy as np
from mpi4py import MPI

import distop

__all__ = ["MPIPartition", "MPICartesianPartition"]


def _is_null_comm(comm):
    return comm is None or comm == MPI.COMM_NULL


def _is_null_group(group):
    return group is None or group == MPI.GROUP_NULL


class MPIPartition:
    """A team of workers over the mpi4py communicator `comm` (MPI.COMM_NULL: this worker is not
    in it), with its `group` and the `root` communicator shared by every partition derived from
    it (`comm` itself by default)."""

    def __init__(self, comm=MPI.COMM_NULL, group=MPI.GROUP_NULL, root=None):
        self._comm = comm
        self._root = comm if root is None else root
        self._root_order = None
        self._distop_cache = {}
        if not _is_null_comm(comm):
            self.active = True
            self._group = comm.Get_group() if _is_null_group(group) else group
            self.rank = comm.Get_rank()
            self.size = comm.Get_size()
            self.index = self.rank
        else:
            self.active = False
            self._group = group
            self.rank = MPI.PROC_NULL
            self.size = -1
            self.index = None
        self.shape = np.array([self.size], dtype=int)
        self.dim = len(self.shape)

    # ---- DistDL's interface

    def deactivate(self):
        """Releases the communicator and group (not MPI_COMM_WORLD) and makes the partition
        inactive on this worker."""
        if self.active:
            if not _is_null_comm(self._comm) and self._comm != MPI.COMM_WORLD:
                self._comm.Free()
            if not _is_null_group(self._group):
                self._group.Free()
            self._comm, self._group = MPI.COMM_NULL, MPI.GROUP_NULL
            self.active = False
            self.rank, self.size = MPI.PROC_NULL, -1
            self.shape = np.array([self.size], dtype=int)
            self.dim = len(self.shape)
            self.index = self.rank
        self._distop_cache = {}

    def __eq__(self, other):
        """Identical communicators and groups (MPI_IDENT) and the same rank; False where either
        worker is outside its partition."""
        if not isinstance(other, MPIPartition):
            return NotImplemented
        if not (self.active and other.active):
            return False
        return (MPI.Comm.Compare(self._comm, other._comm) == MPI.IDENT and
                MPI.Group.Compare(self._group, other._group) == MPI.IDENT and
                self.rank == other.rank)

    __hash__ = object.__hash__

    def print_sequential(self, val):
        if self.active:
            for r in range(self.size):
                if r == self.rank:
                    print(val, flush=True)
                self._comm.Barrier()

    def create_partition_inclusive(self, ranks):
        """A partition of the workers whose ranks in this partition are `ranks`, in that order.
        Collective over the new partition's workers (MPI_Comm_create_group)."""
        ranks = [int(r) for r in np.atleast_1d(ranks)]
        if _is_null_group(self._group):
            return MPIPartition(MPI.COMM_NULL, MPI.GROUP_NULL, root=self._root)
        group = self._group.Incl(ranks)
        comm = MPI.COMM_NULL
        if group.Get_rank() != MPI.UNDEFINED:
            comm = self._comm.Create_group(group)
        return MPIPartition(comm, group, root=self._root)

    def create_partition_union(self, other):
        """The partition of the workers of both, this partition's first (in rank order), then
        other's not already in it. Both must share a root."""
        if MPI.Comm.Compare(self._root, other._root) not in (MPI.IDENT, MPI.CONGRUENT):
            raise ValueError("create_partition_union: the partitions do not share a root")
        root_group = self._root.Get_group()
        mine = self._root_ranks()
        theirs = other._root_ranks()
        members = list(mine) + [r for r in theirs if r not in mine]
        group = root_group.Incl(members)
        comm = MPI.COMM_NULL
        if group.Get_rank() != MPI.UNDEFINED:
            comm = self._root.Create_group(group)
        return MPIPartition(comm, group, root=self._root)

    def create_cartesian_topology_partition(self, shape, **options):
        """The same workers as a Cartesian grid of `shape` (every worker of this partition is in
        it; row-major ranks). Collective over this partition."""
        shape = [int(s) for s in np.atleast_1d(shape)]
        if self.active:
            if int(np.prod(shape)) != self.size:
                raise ValueError(f"create_cartesian_topology_partition: a grid of {shape} "
                                 f"does not hold the partition's {self.size} workers")
            comm = self._comm.Create_cart(shape, **options)
            return MPICartesianPartition(comm, comm.Get_group(), self._root, shape)
        return MPICartesianPartition(MPI.COMM_NULL, self._group, self._root, shape)

    def broadcast_data(self, data, root=0, P_data=None):
        """`data` of the worker with rank `root` in `P_data` (this partition by default, else a
        subset of it holding that worker) on every worker of this partition, as a numpy array;
        None on workers outside this partition."""
        if not self.active:
            return None
        if P_data is None:
            data_root = root
        else:
            ranks = self._comm.allgather(P_data.rank if P_data.active else -1)
            if root not in ranks:
                raise ValueError("Requested root rank is not in P_data.")
            data_root = ranks.index(root)
        if self.rank == data_root:
            data = np.atleast_1d(np.asarray(data))
        return self._comm.bcast(data if self.rank == data_root else None, root=data_root)

    def allgather_data(self, data):
        """Every worker's `data` (a flat integer array, the same length everywhere) as rows of an
        array indexed by rank."""
        data = np.atleast_1d(np.asarray(data))
        return np.array(self._comm.allgather(data)).reshape(self.size, -1)

    def allreduce_data(self, data, op="sum"):
        ops = {"sum": MPI.SUM, "prod": MPI.PROD, "max": MPI.MAX, "min": MPI.MIN}
        if op not in ops:
            raise ValueError(f"Invalid operation {op}.")
        data = np.asarray(data)
        out = np.empty_like(data)
        self._comm.Allreduce(data, out, ops[op])
        return out

    # ---- distop's view

    def _grid(self, n):
        return [n]

    def _root_ranks(self):
        """The root communicator's ranks of this partition's workers, in partition-rank order.
        Collective over the root (once; cached)."""
        if self._root_order is None:
            if _is_null_comm(self._root):
                raise ValueError("a partition made without a communicator has no root")
            mine = self.rank if self.active else -1
            held = self._root.allgather(mine)
            order = [-1] * (max(held) + 1)
            for root_rank, r in enumerate(held):
                if r >= 0:
                    order[r] = root_rank
            self._root_order = order
        return self._root_order

    def _distop_partition(self, dim=None, transpose=False):
        """This partition as a distop.Partition over the root communicator: its grid (reversed
        where `transpose`: the worker at index i sits at i reversed, as DistDL's transpose_src and
        transpose_dest map it), left-padded with 1s to `dim` axes. Collective over the root."""
        key = (dim, transpose)
        part = self._distop_cache.get(key)
        if part is None:
            order = self._root_ranks()
            grid = self._grid(len(order))
            ranks = np.array(order, dtype=int).reshape(grid)
            if transpose:
                ranks = ranks.transpose()
                grid = grid[::-1]
            grid = list(grid)
            if dim is not None:
                if dim < len(grid):
                    raise ValueError(f"a partition of {len(grid)} dimensions cannot be padded to "
                                     f"{dim}")
                grid = [1] * (dim - len(grid)) + grid
            part = distop.Partition.from_comm(self._root, grid, [int(r) for r in ranks.ravel()])
            self._distop_cache[key] = part
        return part


class MPICartesianPartition(MPIPartition):
    """A partition whose workers form a Cartesian grid of `shape` (row-major ranks)."""

    def __init__(self, comm, group, root, shape):
        super().__init__(comm, group, root)
        self.shape = np.asarray(shape).astype(int)
        self.dim = len(self.shape)
        self.index = self.cartesian_index(self.rank) if self.active else None

    def deactivate(self):
        shape = self.shape
        super().deactivate()
        self.shape = np.asarray(shape).astype(int)
        self.dim = len(self.shape)
        self.index = None

    def _grid(self, n):
        if int(np.prod(self.shape)) != n:
            raise ValueError(f"the grid {list(self.shape)} does not hold the partition's {n} "
                             "workers")
        return [int(s) for s in self.shape]

    def create_cartesian_subtopology_partition(self, remain_shape):
        """The sub-grid of the axes where `remain_shape` is True that holds this worker
        (MPI_Cart_sub)."""
        remain = [bool(r) for r in remain_shape]
        if self.active:
            comm = self._comm.Sub(remain)
            return MPICartesianPartition(comm, comm.Get_group(), self._root,
                                         self.shape[np.array(remain, dtype=bool)])
        return MPIPartition(MPI.COMM_NULL, root=self._root)

    def cartesian_index(self, rank):
        if not self.active:
            raise ValueError("cartesian_index: this worker is not in the partition")
        return np.asarray(self._comm.Get_coords(rank))

    def neighbor_ranks(self, rank):
        """(left, right) neighbour ranks along each axis (MPI.PROC_NULL at the grid's ends)."""
        index = self.cartesian_index(rank)
        out = []
        for i in range(self.dim):
            left, right = list(index), list(index)
            left[i] -= 1
            right[i] += 1
            lrank = MPI.PROC_NULL if left[i] < 0 else self._comm.Get_cart_rank(left)
            rrank = MPI.PROC_NULL if right[i] >= self.shape[i] else self._comm.Get_cart_rank(right)
            out.append((lrank, rrank))
        return out
