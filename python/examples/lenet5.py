"""DistDL's LeNet-5 written with distop.torch, trained on Fashion-MNIST.

    mpiexec.mpich -n 4 python python/examples/lenet5.py [--epochs 1] [--batch 64] [--lr 0.02]

The layout is the C++ example's (examples/lenet5/model.hpp): at R ranks the convolutions and
pools run on a [1, 1, R / a, a] spatial grid (a = the squarest split, the height taking the larger
share: [1, 1, 2, 1] at 2 ranks, [1, 1, 2, 2] at 4), every rank holding its block of each image;
a Repartition moves the [N, 16, 5, 5] feature maps onto fc1's input ranks split by channel, where
each rank's block of 16 / P_in channels is exactly its block of the 400 flattened features; the
fully connected layers are DistributedLinear on the weight grids of linear_chain_grids(R, 3)
(examples/common/grids.hpp), and the logits end on rank 0, which computes the loss. Runs at any R
for which fc1's P_in divides 16 (1, 2, 4 and 8 ranks).

The model is DistDL's LeNet-5 (and torch's classic one): conv1 1->6 5x5 padding 2, ReLU, 2x2 max
pool; conv2 6->16 5x5, ReLU, 2x2 max pool (each ReLU run after its pool, as the C++ example does:
the same values and gradients); flatten (channel, row, column); fc1 400->120, ReLU;
fc2 120->84, ReLU; fc3 84->10. Its state_dict names are torch's. `reference_model` builds the
single-process torch model with the same initial weights (tests/python/test_lenet5.py checks that
both give the same loss and gradients).

The convolutions' weights and biases are tied: every rank of the spatial grid holds the whole
tensors, and the layer's backward sums the ranks' parts of their gradient (one all-reduce per
layer), so that every copy holds torch's gradient and the copies stay equal under any optimizer.
"""

import argparse
import gzip
import os
import struct
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

import distop
import distop.nn
import distop.torch
from grids import linear_chain_grids, square_rows  # python/examples/grids.py

DATA_DIR = "/usr/share/datasets/fashion-mnist"


class LeNet5(torch.nn.Module):
    """LeNet-5 over the ranks of MPI_COMM_WORLD (see the module's comment). Input: this rank's
    box of [N, 1, 28, 28] in `input_space(N)`; output: the logits [N, 10] on rank 0, a
    zero-volume tensor elsewhere. Collective over MPI_COMM_WORLD."""

    def __init__(self, seed=0, dtype=torch.float32):
        super().__init__()
        R = distop.size()
        a = square_rows(R)
        grids = linear_chain_grids(R, 3)
        p_in = grids[0][0][1]
        if 16 % p_in != 0:
            raise distop.Error(f"[LeNet5] fc1's input is split {p_in} ways, which does not divide "
                               "its 16 channels; run at 1, 2, 4 or 8 ranks")
        W = distop.Partition.world
        self.P_conv = W([1, 1, R // a, a])
        self.P_channels = W([1, p_in, 1, 1], grids[0][1][:p_in])
        self.conv1 = distop.nn.DistributedConv2d(self.P_conv, 1, 6, 5, padding=2, seed=seed,
                                                 dtype=dtype)
        self.pool1 = distop.nn.DistributedMaxPool2d(self.P_conv, 2)
        self.conv2 = distop.nn.DistributedConv2d(self.P_conv, 6, 16, 5, seed=seed + 1, dtype=dtype)
        self.pool2 = distop.nn.DistributedMaxPool2d(self.P_conv, 2)
        self.to_fc = distop.torch.Repartition(self.P_conv, self.P_channels)
        sizes = [400, 120, 84, 10]
        P_x = W([1, p_in], grids[0][1][:p_in])
        for layer, (shape, ranks) in enumerate(grids):
            P_w = W(shape, ranks)
            fc = distop.nn.DistributedLinear(P_x, P_w, sizes[layer], sizes[layer + 1],
                                             seed=seed + 2 + layer, dtype=dtype)
            setattr(self, f"fc{layer + 1}", fc)
            P_x = fc.P_y
        self.P_out = self.fc3.P_y

    def input_space(self, batch):
        return distop.TensorSpace([batch, 1, 28, 28], self.P_conv)

    def holds_output(self):
        return self.P_out.active

    def forward(self, x):
        # relu(pool(.)) is pool(relu(.)) value for value and gradient for gradient (ReLU is
        # monotone; examples/lenet5/model.hpp), on a quarter of the entries.
        h = F.relu(self.pool1(self.conv1(x)))
        h = F.relu(self.pool2(self.conv2(h)))
        h = self.to_fc(h)
        h = h.reshape(h.shape[0], -1) if h.numel() > 0 else h.reshape(0, 0)
        h = F.relu(self.fc1(h))
        h = F.relu(self.fc2(h))
        return self.fc3(h)

    def loss(self, logits, labels):
        """Cross-entropy (mean over the batch) on rank 0; elsewhere 0 with the zero-volume logits
        kept in the graph, so that every rank's backward runs the adjoints."""
        if self.holds_output():
            return F.cross_entropy(logits, labels)
        return logits.sum() * 0


def reference_model(seed=0, dtype=torch.float32):
    """The single-process torch LeNet-5 with the initial weights LeNet5(seed) draws."""
    model = torch.nn.Sequential()
    layers = []
    for i, (ci, co, k, p) in enumerate([(1, 6, 5, 2), (6, 16, 5, 0)]):
        torch.manual_seed(seed + i)
        layers += [torch.nn.Conv2d(ci, co, k, padding=p, dtype=dtype), torch.nn.ReLU(),
                   torch.nn.MaxPool2d(2)]
    layers.append(torch.nn.Flatten())
    sizes = [400, 120, 84, 10]
    for i in range(3):
        torch.manual_seed(seed + 2 + i)
        layers.append(torch.nn.Linear(sizes[i], sizes[i + 1], dtype=dtype))
        if i < 2:
            layers.append(torch.nn.ReLU())
    for i, layer in enumerate(layers):
        model.add_module(str(i), layer)
    return model


def read_idx(path):
    """An IDX file (gzip-compressed or not) as a numpy array."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        data = f.read()
    _, _, dtype, ndim = struct.unpack(">BBBB", data[:4])
    if dtype != 0x08:
        raise ValueError(f"{path}: only unsigned-byte IDX files are read, not type {dtype:#x}")
    shape = struct.unpack(">" + "I" * ndim, data[4:4 + 4 * ndim])
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(shape)


def load(split, data_dir=DATA_DIR):
    """(images [n, 1, 28, 28] float32 in [0, 1], labels [n] int64) of `split` (train or t10k)."""
    images = read_idx(os.path.join(data_dir, f"{split}-images-idx3-ubyte.gz"))
    labels = read_idx(os.path.join(data_dir, f"{split}-labels-idx1-ubyte.gz"))
    x = torch.from_numpy(images.astype(np.float32) / 255.0).reshape(-1, 1, 28, 28)
    return x, torch.from_numpy(labels.astype(np.int64))


def evaluate(model, images, labels, batch):
    """Accuracy (on rank 0; None elsewhere) over the whole set."""
    correct = 0
    with torch.no_grad():
        for b in range(0, len(labels), batch):
            X = images[b:b + batch]
            logits = model(distop.distribute(X, model.input_space(len(X))))
            if model.holds_output():
                correct += int((logits.argmax(1) == labels[b:b + batch]).sum())
    return correct / len(labels) if model.holds_output() else None


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--lr", type=float, default=0.02)
    ap.add_argument("--momentum", type=float, default=0.9)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-steps", type=int, default=0, help="stop each epoch after so many steps")
    ap.add_argument("--data-dir", default=DATA_DIR)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    rank = distop.rank()
    model = LeNet5(seed=args.seed)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum)
    train_x, train_y = load("train", args.data_dir)
    test_x, test_y = load("t10k", args.data_dir)
    g = torch.Generator().manual_seed(args.seed)  # the same order on every rank
    steps = len(train_y) // args.batch
    if args.max_steps:
        steps = min(steps, args.max_steps)
    for epoch in range(args.epochs):
        order = torch.randperm(len(train_y), generator=g)
        start, total = time.perf_counter(), 0.0
        for s in range(steps):
            idx = order[s * args.batch:(s + 1) * args.batch]
            x = distop.distribute(train_x[idx], model.input_space(args.batch))
            opt.zero_grad()
            loss = model.loss(model(x), train_y[idx])
            loss.backward()
            opt.step()
            total += float(loss)
        seconds = time.perf_counter() - start
        acc = evaluate(model, test_x, test_y, 1000)
        if rank == 0:
            print(f"epoch {epoch + 1}: {steps} steps of {args.batch}, mean loss "
                  f"{total / steps:.4f}, test accuracy {acc:.4f}, "
                  f"{1e3 * seconds / steps:.2f} ms/step", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
