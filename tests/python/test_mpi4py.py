"""mpi4py communicators are accepted (mpi4py is optional: these tests skip without it)."""

import pytest
import torch

import distop
import distop.torch as dt

MPI = pytest.importorskip("mpi4py.MPI")


def test_mpi4py_uses_mpich_and_the_same_world(world_size, rank):
    assert MPI.Get_library_version().startswith("MPICH")
    assert MPI.COMM_WORLD.Get_rank() == rank and MPI.COMM_WORLD.Get_size() == world_size


def test_partition_and_send_recv_over_a_sub_communicator(world_size, rank):
    sub = MPI.COMM_WORLD.Split(rank % 2, rank)
    try:
        n = sub.Get_size()
        P = distop.Partition.from_comm(sub, [n, 1])
        assert P.size == n and P.index == sub.Get_rank()
        asr = dt.AllSumReduce(P, [0])
        y = asr(torch.full((1, 2), float(rank), dtype=torch.float64))
        members = [r for r in range(world_size) if r % 2 == rank % 2]
        torch.testing.assert_close(y, torch.full((1, 2), float(sum(members)), dtype=torch.float64))
        sr = dt.SendRecv(0, n - 1, comm=sub)
        x = torch.arange(3.0, dtype=torch.float64) if sub.Get_rank() == 0 else distop.zero_volume_tensor(1, torch.float64)
        got = sr(x)
        if sub.Get_rank() == n - 1:
            torch.testing.assert_close(got, torch.arange(3.0, dtype=torch.float64))
        assert distop.rank(sub) == sub.Get_rank() and distop.size(sub) == n
    finally:
        sub.Free()
