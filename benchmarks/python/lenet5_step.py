"""One LeNet-5 training step from Python: distop.torch (python/examples/lenet5.py), DistDL (the
same model written with DistDL's layers, when DistDL is installed) or, for the local compute
alone, the single-process torch model (--impl torch, 1 rank: it imports distop, for the same
torch and the same MPI, but calls nothing of it).

    mpiexec.mpich -n 2 python benchmarks/python/lenet5_step.py --impl distop|distdl|torch
                                                          [--batch 64] [--steps 100] [--csv]

A step: the forward pass on this rank's block of a [batch, 1, 28, 28] batch of random images,
the cross-entropy on rank 0, the backward pass, the sum of the convolutions' gradients over the
ranks (their weights are replicated on every rank of the spatial grid) and an SGD update with
momentum. The layout is the C++ example's at every rank count (examples/lenet5/model.hpp): the
convolutions and pools on the [1, 1, R / a, a] spatial grid, a Repartition onto fc1's input ranks
split by channel, DistributedLinear layers on linear_chain_grids(R, 3).

DistDL: DistributedFeatureConv2d and DistributedMaxPool2d on the same spatial partition,
Repartition, and DistributedLinear(P_x, P_y, P_w) on the same grids; its feature convolutions hold
a weight per rank that nothing keeps equal, so the step adds the gradients over the ranks with
one mpi4py Allreduce, as distop's does with one AllSumReduce: both steps do the same work. DistDL
at a641638 needs numpy's aliases of the builtins (np.int, np.bool, ...), removed in numpy 1.24;
the benchmark puts them back (they were the builtins) before importing it.

Timing (bench_lenet5's): each rank times each step after a barrier; a step's time is the slowest
rank's; the median of --steps steps after --warmup untimed ones, in milliseconds.
"""

import argparse
import builtins
import os
import statistics
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python", "examples"))


def distop_step(args):
    import distop
    import lenet5
    model = lenet5.LeNet5(seed=0)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    torch.manual_seed(1)
    X = torch.rand(args.batch, 1, 28, 28)
    labels = torch.randint(0, 10, (args.batch,))
    x = distop.distribute(X, model.input_space(args.batch))

    def step():
        opt.zero_grad()
        loss = model.loss(model(x), labels)
        loss.backward()
        opt.step()

    return step


def torch_step(args):
    """The single-process torch model (lenet5.reference_model): the local compute alone."""
    import lenet5
    model = lenet5.reference_model(seed=0)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    torch.manual_seed(1)
    X = torch.rand(args.batch, 1, 28, 28)
    labels = torch.randint(0, 10, (args.batch,))

    def step():
        opt.zero_grad()
        F.cross_entropy(model(X), labels).backward()
        opt.step()

    return step


def distdl_step(args):
    # DistDL (2022) uses numpy's aliases of the builtins (np.bool, np.int, ...), which numpy 1.24,
    # Debian's, removed; they were the builtins themselves, so they are put back as such.
    for name in ("bool", "int", "float", "complex", "object"):
        if name not in np.__dict__:
            setattr(np, name, getattr(builtins, name))
    from mpi4py import MPI
    from distdl.backends.mpi.partition import MPIPartition
    from distdl.nn import (DistributedFeatureConv2d, DistributedLinear, DistributedMaxPool2d,
                           Repartition)
    from distdl.utilities.slicing import compute_subshape, compute_start_index
    from grids import linear_chain_grids, square_rows

    comm = MPI.COMM_WORLD
    R, rank = comm.Get_size(), comm.Get_rank()
    a = square_rows(R)
    grids = linear_chain_grids(R, 3)
    p_in = grids[0][0][1]
    P_world = MPIPartition(comm)

    def part(shape, ranks):
        return P_world.create_partition_inclusive(ranks).create_cartesian_topology_partition(shape)

    P_conv = part([1, 1, R // a, a], list(range(R)))
    P_flat = part([1, p_in, 1, 1], grids[0][1][:p_in])

    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = DistributedFeatureConv2d(P_conv, 1, 6, 5, padding=2)
            self.pool1 = DistributedMaxPool2d(P_conv, kernel_size=2, stride=2)
            self.conv2 = DistributedFeatureConv2d(P_conv, 6, 16, 5)
            self.pool2 = DistributedMaxPool2d(P_conv, kernel_size=2, stride=2)
            self.to_fc = Repartition(P_conv, P_flat)
            sizes = [400, 120, 84, 10]
            P_x = part([1, p_in], grids[0][1][:p_in])
            fcs = []
            for layer, (shape, ranks) in enumerate(grids):
                P_w = part(shape, ranks)
                out_ranks = [ranks[i * shape[1]] for i in range(shape[0])]
                P_y = part([1, shape[0]], out_ranks)
                fcs.append(DistributedLinear(P_x, P_y, P_w, sizes[layer], sizes[layer + 1]))
                P_x = P_y
            self.fcs = torch.nn.ModuleList(fcs)
            self.P_flat, self.P_out = P_flat, P_x

        def forward(self, x):
            # ReLU after the pool, as distop's model: DistDL's pooling exchanges its halo in place
            # on its input, which must not be a ReLU's saved output.
            h = F.relu(self.pool1(self.conv1(x)))
            h = F.relu(self.pool2(self.conv2(h)))
            h = self.to_fc(h)
            if self.P_flat.active:
                h = torch.flatten(h, start_dim=1)
            for i, fc in enumerate(self.fcs):
                h = fc(h)
                if i < 2 and h.numel() > 0:
                    h = F.relu(h)
            return h

    torch.manual_seed(0)
    model = Model()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    torch.manual_seed(1)
    X = torch.rand(args.batch, 1, 28, 28)
    labels = torch.randint(0, 10, (args.batch,))
    shape = np.array([args.batch, 1, 28, 28])
    grid = np.array(P_conv.shape)
    index = np.array(P_conv.index)
    start = compute_start_index(grid, index, shape)
    sub = compute_subshape(grid, index, shape)
    x = X[tuple(slice(s, s + n) for s, n in zip(start, sub))].clone()
    tied = [model.conv1.conv_layer.weight, model.conv1.conv_layer.bias,
            model.conv2.conv_layer.weight, model.conv2.conv_layer.bias]
    holds_output = model.P_out.active

    def step():
        opt.zero_grad()
        y = model(x)
        if holds_output and tuple(y.shape) != (args.batch, 10):
            raise RuntimeError(f"DistDL's LeNet-5 gave logits of shape {tuple(y.shape)}")
        loss = F.cross_entropy(y, labels) if holds_output else y.sum() * 0
        loss.backward()
        with torch.no_grad():
            for p in tied:  # DistDL leaves a gradient that no output used as None
                if p.grad is None:
                    p.grad = torch.zeros_like(p)
            flat = torch.cat([p.grad.reshape(-1) for p in tied]).numpy()
            total = np.empty_like(flat)
            comm.Allreduce(flat, total, op=MPI.SUM)
            offset = 0
            for p in tied:
                p.grad.copy_(torch.from_numpy(total[offset:offset + p.numel()]).reshape(p.shape))
                offset += p.numel()
        opt.step()

    return step


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--impl", choices=["distop", "distdl", "torch"], default="distop")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--csv", action="store_true")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    step = {"distop": distop_step, "distdl": distdl_step, "torch": torch_step}[args.impl](args)
    from mpi4py import MPI
    comm = MPI.COMM_WORLD
    times = np.zeros(args.steps)
    for i in range(args.warmup + args.steps):
        comm.Barrier()
        t0 = time.perf_counter()
        step()
        t1 = time.perf_counter()
        if i >= args.warmup:
            times[i - args.warmup] = t1 - t0
    worst = np.empty_like(times)
    comm.Allreduce(times, worst, op=MPI.MAX)
    ms = 1e3 * statistics.median(worst.tolist())
    if comm.Get_rank() == 0:
        if args.csv:
            print("impl,ranks,batch,median_ms")
            print(f"{args.impl},{comm.Get_size()},{args.batch},{ms:.3f}")
        else:
            print(f"LeNet-5 step, {args.impl}, {comm.Get_size()} ranks, batch {args.batch}: "
                  f"{ms:.3f} ms (median of {args.steps})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
