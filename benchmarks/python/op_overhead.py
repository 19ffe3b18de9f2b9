"""The cost of one operator call from Python on a tiny tensor: distop.torch's Broadcast,
AllSumReduce and HaloExchange, forward and backward, against the same distop operator called
directly (its C++ plan through the binding, no autograd and no agreement) and against the raw
mpi4py calls that move the same bytes.

    mpiexec.mpich -n 2 python benchmarks/python/op_overhead.py [--reps 2000] [--csv]

Cases (float32, 8 B: the smallest case of bench_collectives and bench_movement, whose C++ rows
benchmarks/python/run.sh prints beside these), over the P ranks of MPI_COMM_WORLD:
  Broadcast     forward  [2] on rank 0 -> a copy on every rank      mpi4py: comm.Bcast
                backward SumReduce onto rank 0                       mpi4py: comm.Reduce(SUM)
  AllSumReduce  forward, backward (itself), over a replicated [P]    mpi4py: comm.Allreduce(SUM)
  HaloExchange  forward  [2P, 2] split by rows over [P, 1], one ghost row on each inner side
                                                                     mpi4py: copy + 2 x Sendrecv
                backward the ghosts added into their owners          mpi4py: copy + 2 x Sendrecv
                                                                             + add + zero
Rows: "(clone)" is torch's floor: one autograd node that only clones, forward and backward;
"torch" is the distop.torch module (y = module(x), or y.backward(dy) on a fresh forward
that is not timed: torch's autograd, the module's agreement on the input (one small allgather
over the parent communicator) and the operator); "op" is the distop Operator's forward /
adjoint with agreed=True (the binding and the C++ plan only); "mpi4py" is the raw call on numpy
views of the same tensors.

Timing rule (bench_collectives'): every repetition starts with a barrier; each rank times its own
call (time.perf_counter); a repetition's time is the maximum over the ranks (one Allreduce(MAX)
after the loop); the median over --reps repetitions, in microseconds, after --warmup untimed
ones.
"""

import argparse
import statistics
import sys
import time

import numpy as np
import torch

import distop
import distop.torch as dt
from mpi4py import MPI


def timed(fn, reps, warmup, comm, before=None):
    """Median over repetitions of the slowest rank's time for fn(), in microseconds."""
    times = np.zeros(reps)
    for i in range(warmup + reps):
        arg = before() if before is not None else None
        comm.Barrier()
        t0 = time.perf_counter()
        fn(arg)
        t1 = time.perf_counter()
        if i >= warmup:
            times[i - warmup] = t1 - t0
    worst = np.empty_like(times)
    comm.Allreduce(times, worst, op=MPI.MAX)
    return 1e6 * statistics.median(worst.tolist())


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=2000)
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--csv", action="store_true")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    comm = MPI.COMM_WORLD.Dup()
    rank, P = comm.Get_rank(), comm.Get_size()
    W = distop.Partition.world
    rows = []

    def run(op, direction, kind, fn, before=None):
        rows.append((op, direction, kind, timed(fn, args.reps, args.warmup, comm, before)))

    # torch's own cost of one autograd node (a clone, no communication): the floor under every
    # "torch" row.
    x = torch.arange(2, dtype=torch.float32)
    xg = x.clone().requires_grad_(True)
    dy = torch.ones(2)
    run("(clone)", "forward", "torch", lambda _: xg.clone())
    run("(clone)", "backward", "torch", lambda y: y.backward(dy), lambda: xg.clone())

    # Broadcast: [2] on rank 0 to every rank.
    bcast = dt.Broadcast(W([1]), W([P]))
    x = torch.arange(2, dtype=torch.float32) if rank == 0 else distop.zero_volume_tensor(1)
    xg = x.clone().requires_grad_(True)
    dy = torch.ones(2)
    op = bcast.operator_for(x)
    buf = np.arange(2, dtype=np.float32)
    out = np.empty(2, dtype=np.float32)
    run("Broadcast", "forward", "torch", lambda _: bcast(x))
    run("Broadcast", "forward", "op", lambda _: op.forward(x, agreed=True))
    run("Broadcast", "forward", "mpi4py", lambda _: comm.Bcast(buf, root=0))
    run("Broadcast", "backward", "torch", lambda y: y.backward(dy), lambda: bcast(xg))
    run("Broadcast", "backward", "op", lambda _: op.adjoint(dy, agreed=True))
    run("Broadcast", "backward", "mpi4py",
        lambda _: comm.Reduce(buf, out if rank == 0 else None, op=MPI.SUM, root=0))

    # AllSumReduce over a replicated [P] grid (self-adjoint).
    asr = dt.AllSumReduce(W([P]), [0])
    x = torch.arange(2, dtype=torch.float32)
    xg = x.clone().requires_grad_(True)
    op = asr.operator_for(x)
    run("AllSumReduce", "forward", "torch", lambda _: asr(x))
    run("AllSumReduce", "forward", "op", lambda _: op.forward(x, agreed=True))
    run("AllSumReduce", "forward", "mpi4py", lambda _: comm.Allreduce(buf, out, op=MPI.SUM))
    run("AllSumReduce", "backward", "torch", lambda y: y.backward(dy), lambda: asr(xg))
    run("AllSumReduce", "backward", "op", lambda _: op.adjoint(x, agreed=True))
    run("AllSumReduce", "backward", "mpi4py", lambda _: comm.Allreduce(buf, out, op=MPI.SUM))

    # HaloExchange: [2P, 2] split by rows over [P, 1], 2 interior rows each, one ghost row on each
    # inner side.
    interior = distop.TensorSpace([2 * P, 2], W([P, 1]))
    widths = [[(0 if c == 0 else 1, 0 if c == P - 1 else 1) for c in range(P)], [(0, 0)]]
    halo = dt.HaloExchange(interior, widths=widths)
    lo, hi = widths[0][rank]
    xp = torch.zeros(2 + lo + hi, 2)
    xp[lo:lo + 2] = 1.0 + rank
    xpg = xp.clone().requires_grad_(True)
    dyh = torch.ones_like(xp)
    op = halo.operator_for(xp)
    a, b = xp.numpy().copy(), np.empty_like(xp.numpy())
    scratch = np.empty((1, 2), dtype=np.float32)
    up, down = rank - 1 if rank > 0 else MPI.PROC_NULL, rank + 1 if rank < P - 1 else MPI.PROC_NULL

    def raw_forward(_):
        b[...] = a
        # Send the first owned row up, receive the lower ghost from below; then the reverse.
        comm.Sendrecv(a[lo:lo + 1], up, 0, b[lo + 2:lo + 2 + hi], down, 0)
        comm.Sendrecv(a[lo + 1:lo + 2], down, 1, b[0:lo], up, 1)

    def raw_adjoint(_):
        b[...] = a
        comm.Sendrecv(a[lo + 2:lo + 2 + hi], down, 0, scratch if lo else scratch[0:0], up, 0)
        if lo:
            b[lo:lo + 1] += scratch
        comm.Sendrecv(a[0:lo], up, 1, scratch if hi else scratch[0:0], down, 1)
        if hi:
            b[lo + 1:lo + 2] += scratch
        b[0:lo] = 0
        b[lo + 2:] = 0

    run("HaloExchange", "forward", "torch", lambda _: halo(xp))
    run("HaloExchange", "forward", "op", lambda _: op.forward(xp, agreed=True))
    run("HaloExchange", "forward", "mpi4py", raw_forward)
    run("HaloExchange", "backward", "torch", lambda y: y.backward(dyh), lambda: halo(xpg))
    run("HaloExchange", "backward", "op", lambda _: op.adjoint(dyh, agreed=True))
    run("HaloExchange", "backward", "mpi4py", raw_adjoint)

    if rank == 0:
        if args.csv:
            print("op,direction,kind,ranks,bytes,median_us")
            for r in rows:
                print(f"{r[0]},{r[1]},{r[2]},{P},8,{r[3]:.2f}")
        else:
            print(f"{'operator':14} {'direction':9} {'call':7} {'median us':>10}  ({P} ranks, 8 B)")
            for r in rows:
                print(f"{r[0]:14} {r[1]:9} {r[2]:7} {r[3]:10.2f}")
    comm.Free()
    return 0


if __name__ == "__main__":
    sys.exit(main())
