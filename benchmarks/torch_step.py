#!/usr/bin/env python3
"""PyTorch twin of distop's training-step benchmarks: one data-parallel training step (forward,
cross-entropy, backward with DistributedDataParallel's gradient all-reduce, SGD with momentum) of
examples/cnn's ConvNet or of LeNet-5, on random inputs, in processes that it spawns itself
(torch.multiprocessing, gloo over localhost): no MPI launcher.

    python3 benchmarks/torch_step.py --model cnn --batch 64 --steps 30     # 64 per replica
    python3 benchmarks/torch_step.py --model lenet5 --batch 32 --steps 200 # global batch 64

Each process runs one thread (torch.set_num_threads(1)), as each distop rank runs one BLAS thread.
Two modes take turns in blocks of 5 steps: `ddp` (the gradients averaged during backward, DDP's
default buckets) and `compute` (the same step under DDP's no_sync(): no reduction). A step is timed
from a barrier to its end on every process; its time is the slowest process's; the figures are the
medians over --steps steps per mode after --warmup. `forward` is the forward pass and the loss, the
rest of the step being backward (and DDP's reduction) and the optimizer. Prints one line per mode,
or CSV rows (--csv): framework,model,processes,batch_per_replica,mode,step_ms,forward_ms.

Exit status 2 (and a line saying so) where PyTorch is not installed. OpenBLAS, which PyTorch calls
for its fully connected layers, is given the CPU's widest kernel family (OPENBLAS_CORETYPE SkylakeX
or Haswell, unless the variable is set), as libdistop makes it run where OpenBLAS 0.3.21 does not
recognise the CPU, so that both sides run the best kernels they can; PyTorch's convolutions run on
oneDNN, which detects the CPU itself.
"""

import argparse
import os
import statistics
import sys
import time


def cpu_flags():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def best_openblas_kernels():
    """The OPENBLAS_CORETYPE distop's choice amounts to on this CPU, or None."""
    flags = cpu_flags()
    if {"avx512f", "avx512cd", "avx512bw", "avx512dq", "avx512vl"} <= flags:
        return "SkylakeX"
    if {"avx2", "fma"} <= flags:
        return "Haswell"
    return None


def build_model(name, nn):
    if name == "cnn":
        # examples/cnn/model.hpp: each ReLU after its max pool (the same values and gradients).
        return nn.Sequential(
            nn.Conv2d(1, 32, 3, padding=1), nn.MaxPool2d(2), nn.ReLU(),
            nn.Conv2d(32, 64, 3, padding=1), nn.MaxPool2d(2), nn.ReLU(),
            nn.Conv2d(64, 128, 3, padding=1), nn.MaxPool2d(2), nn.ReLU(),
            nn.Flatten(), nn.Linear(128 * 3 * 3, 1024), nn.ReLU(), nn.Dropout(0.5),
            nn.Linear(1024, 10))
    # examples/lenet5/model.hpp
    return nn.Sequential(
        nn.Conv2d(1, 6, 5, padding=2), nn.MaxPool2d(2), nn.ReLU(),
        nn.Conv2d(6, 16, 5), nn.MaxPool2d(2), nn.ReLU(),
        nn.Flatten(), nn.Linear(400, 120), nn.ReLU(), nn.Linear(120, 84), nn.ReLU(),
        nn.Linear(84, 10))


def worker(rank, args, port, results):
    import torch
    import torch.distributed as dist
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel

    torch.set_num_threads(1)
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=args.procs)
    torch.manual_seed(1)
    model = DistributedDataParallel(build_model(args.model, nn))
    opt = torch.optim.SGD(model.parameters(), lr=1e-4, momentum=0.9)
    gen = torch.Generator().manual_seed(7 + rank)
    x = torch.rand(args.batch, 1, 28, 28, generator=gen) * 2 - 1
    y = torch.arange(args.batch) % 10
    loss_fn = nn.CrossEntropyLoss()

    def step(reduce):
        opt.zero_grad(set_to_none=False)
        t0 = time.perf_counter()
        if reduce:
            loss = loss_fn(model(x), y)
            t1 = time.perf_counter()
            loss.backward()
        else:
            with model.no_sync():
                loss = loss_fn(model(x), y)
                t1 = time.perf_counter()
                loss.backward()
        opt.step()
        return t1 - t0

    def slowest(v):
        t = torch.tensor([v], dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return t.item()

    for _ in range(args.warmup):
        step(True)
    times = {"ddp": [], "compute": []}
    forwards = {"ddp": [], "compute": []}
    block = 5
    order = ["ddp", "compute"]
    r = 0
    while min(len(v) for v in times.values()) < args.steps:
        for mode in order[r % 2:] + order[:r % 2]:
            for _ in range(block):
                dist.barrier()
                t0 = time.perf_counter()
                fwd = step(mode == "ddp")
                t = time.perf_counter() - t0
                times[mode].append(slowest(t))
                forwards[mode].append(slowest(fwd))
        r += 1
    if rank == 0:
        for mode in order:
            results[mode] = (statistics.median(times[mode][:args.steps]) * 1e3,
                             statistics.median(forwards[mode][:args.steps]) * 1e3)
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", choices=["cnn", "lenet5"], default="cnn")
    p.add_argument("--batch", type=int, default=64, help="examples per replica per step")
    p.add_argument("--procs", type=int, default=2, help="processes (replicas)")
    p.add_argument("--steps", type=int, default=30, help="timed steps per mode")
    p.add_argument("--warmup", type=int, default=5, help="untimed steps first")
    p.add_argument("--port", type=int, default=0, help="rendezvous port (0: a free one)")
    p.add_argument("--csv", action="store_true", help="comma-separated rows")
    args = p.parse_args()

    if "OPENBLAS_CORETYPE" not in os.environ and best_openblas_kernels():
        os.environ["OPENBLAS_CORETYPE"] = best_openblas_kernels()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    try:
        import torch
        import torch.multiprocessing as mp
    except ImportError:
        print("torch_step.py: PyTorch is not installed for %s; skipped (Debian: apt-get install "
              "python3-torch, then run with /usr/bin/python3)" % sys.executable)
        return 2

    port = args.port
    if port == 0:
        import socket
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
    with mp.Manager() as manager:
        results = manager.dict()
        mp.spawn(worker, args=(args, port, results), nprocs=args.procs, join=True)
        results = dict(results)
    if args.csv:
        print("framework,model,processes,batch_per_replica,mode,step_ms,forward_ms")
        for mode, (step_ms, fwd_ms) in results.items():
            print("torch-%s,%s,%d,%d,%s,%.3f,%.3f" % (torch.__version__, args.model, args.procs,
                                                      args.batch, mode, step_ms, fwd_ms))
    else:
        print("# PyTorch %s DDP (gloo), %s, %d processes of one thread, batch %d per replica; "
              "OPENBLAS_CORETYPE=%s" % (torch.__version__, args.model, args.procs, args.batch,
                                        os.environ.get("OPENBLAS_CORETYPE", "")))
        for mode, (step_ms, fwd_ms) in results.items():
            print("%-8s step %8.3f ms  forward %8.3f ms" % (mode, step_ms, fwd_ms))
    return 0


if __name__ == "__main__":
    sys.exit(main())
