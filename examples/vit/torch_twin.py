#!/usr/bin/env python3
"""The torch twin of examples/vit: the same Vision Transformer written with torch.nn modules, whose
state_dict names and shapes are the program's.

Check mode: loads the weights the program saved (--save FILE) and evaluates them on the first N
test images, as the program does with --test-examples N: the accuracy and loss printed should
equal the program's.

    python3 examples/vit/torch_twin.py FILE [--test-examples N] [--data DIR]

Train mode: trains the twin alone with the program's defaults (AdamW, lr 1e-3, weight decay 0.01,
batches of 64, shuffled) for --steps steps and prints its mean step time (the steps after the
first five) and its test accuracy, for comparing the program's speed on the same machine.

    python3 examples/vit/torch_twin.py --train [--steps 100] [--threads 1] [--embed-dim 64] ...

Needs PyTorch (Debian: python3-torch, 1.13) and numpy; reads the safetensors file and the data
sets itself (Fashion-MNIST's IDX files, or CIFAR-10's binary batches with --dataset cifar10)."""
import argparse
import gzip
import json
import os
import struct
import sys
import time

import numpy as np
import torch
from torch import nn


class ViT(nn.Module):
    """examples/vit/model.hpp's ViT: the registration order gives torch's state_dict order."""

    def __init__(self, channels, image, patch, embed_dim, heads, depth, mlp_dim, classes=10):
        super().__init__()
        tokens = (image // patch) ** 2 + 1
        self.cls_token = nn.Parameter(torch.zeros(1, 1, embed_dim))
        self.pos_embedding = nn.Parameter(torch.randn(1, tokens, embed_dim) * 0.02)
        self.patch_embed = nn.Conv2d(channels, embed_dim, patch, stride=patch)
        self.layers = nn.ModuleList([
            nn.TransformerEncoderLayer(embed_dim, heads, mlp_dim, dropout=0.0, activation="gelu",
                                       batch_first=True, norm_first=True) for _ in range(depth)])
        self.norm = nn.LayerNorm(embed_dim)
        self.head = nn.Linear(embed_dim, classes)

    def forward(self, x):
        h = self.patch_embed(x).flatten(2).transpose(1, 2)
        h = torch.cat([self.cls_token.expand(h.shape[0], -1, -1), h], 1) + self.pos_embedding
        for layer in self.layers:
            h = layer(h)
        return self.head(self.norm(h[:, 0]))


def read_safetensors(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    data = raw[8 + n:]
    dtypes = {"F32": np.float32, "F64": np.float64, "I64": np.int64}
    tensors = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        begin, end = entry["data_offsets"]
        array = np.frombuffer(data[begin:end], dtype=dtypes[entry["dtype"]])
        tensors[name] = torch.from_numpy(array.reshape(entry["shape"]).copy())
    return tensors, header.get("__metadata__", {})


def load_data(dataset, data, train):
    """Images [N, C, H, W] as byte / 255 (the program's data::Dataset) and labels [N]."""
    if dataset == "cifar10":
        files = ["data_batch_%d.bin" % i for i in range(1, 6)] if train else ["test_batch.bin"]
        raw = np.concatenate([np.fromfile(os.path.join(data, f), dtype=np.uint8) for f in files])
        records = raw.reshape(-1, 3073)
        images = records[:, 1:].reshape(-1, 3, 32, 32)
        labels = records[:, 0]
    else:
        def find(stem):
            for name in (stem + ".gz", stem):
                if os.path.exists(os.path.join(data, name)):
                    return os.path.join(data, name)
            sys.exit("no %s(.gz) in %s" % (stem, data))

        def idx(path, offset):
            opener = gzip.open if path.endswith(".gz") else open
            return np.frombuffer(opener(path, "rb").read()[offset:], dtype=np.uint8)

        stem = "train" if train else "t10k"
        images = idx(find(stem + "-images-idx3-ubyte"), 16).reshape(-1, 1, 28, 28)
        labels = idx(find(stem + "-labels-idx1-ubyte"), 8)
    return (torch.from_numpy(images.astype(np.float32) / 255),
            torch.from_numpy(labels.astype(np.int64)))


def evaluate(model, images, labels):
    model.eval()
    with torch.no_grad():
        logits = torch.cat([model(images[i:i + 256]) for i in range(0, len(images), 256)])
    loss = nn.functional.cross_entropy(logits, labels).item()
    accuracy = (logits.argmax(1) == labels).double().mean().item()
    return accuracy, loss


def check(args):
    state, meta = read_safetensors(args.file)
    dataset = meta.get("dataset", args.dataset)
    channels = state["patch_embed.weight"].shape[1]
    patch = state["patch_embed.weight"].shape[2]
    embed_dim = state["patch_embed.weight"].shape[0]
    depth = len({k.split(".")[1] for k in state if k.startswith("layers.")})
    mlp_dim = state["layers.0.linear1.weight"].shape[0]
    heads = int(meta["heads"])
    image = 32 if dataset == "cifar10" else 28
    model = ViT(channels, image, patch, embed_dim, heads, depth, mlp_dim)
    model.load_state_dict(state, strict=True)
    images, labels = load_data(dataset, args.data, False)
    if args.test_examples is not None:
        images, labels = images[:args.test_examples], labels[:args.test_examples]
    accuracy, loss = evaluate(model, images, labels)
    print("torch twin: test accuracy %.2f%% (loss %.4f) on %d images"
          % (100 * accuracy, loss, len(images)))


def train(args):
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    images, labels = load_data(args.dataset, args.data, True)
    image = images.shape[-1]
    patch = args.patch or (4 if args.dataset == "cifar10" else 7)
    model = ViT(images.shape[1], image, patch, args.embed_dim, args.heads, args.depth,
                args.mlp_dim)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01)
    order = torch.randperm(len(images))
    times = []
    model.train()
    for step in range(args.steps):
        rows = order[(step * args.batch_size) % len(images):][:args.batch_size]
        start = time.perf_counter()
        optimizer.zero_grad()
        loss = nn.functional.cross_entropy(model(images[rows]), labels[rows])
        loss.backward()
        optimizer.step()
        times.append(time.perf_counter() - start)
        if step % 50 == 0 or step + 1 == args.steps:
            print("step %d: loss %.4f" % (step + 1, loss.item()))
    steady = times[5:] if len(times) > 5 else times
    print("torch twin (torch %s, %d thread(s)): %.2f ms per step of %d images (mean of %d steps)"
          % (torch.__version__, args.threads, 1e3 * sum(steady) / len(steady), args.batch_size,
             len(steady)))
    test_images, test_labels = load_data(args.dataset, args.data, False)
    if args.test_examples is not None:
        test_images, test_labels = test_images[:args.test_examples], test_labels[:args.test_examples]
    accuracy, loss = evaluate(model, test_images, test_labels)
    print("torch twin: test accuracy %.2f%% (loss %.4f) on %d images after %d steps"
          % (100 * accuracy, loss, len(test_images), args.steps))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("file", nargs="?", help="the program's --save file (check mode)")
    p.add_argument("--train", action="store_true", help="train the twin alone and time its steps")
    p.add_argument("--dataset", default="fashion-mnist", choices=["fashion-mnist", "cifar10"])
    p.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--test-examples", type=int, default=None)
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--patch", type=int, default=0)
    p.add_argument("--embed-dim", type=int, default=64)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--depth", type=int, default=4)
    p.add_argument("--mlp-dim", type=int, default=128)
    args = p.parse_args()
    if args.train:
        train(args)
    elif args.file:
        check(args)
    else:
        p.error("give the program's saved weights, or --train")


if __name__ == "__main__":
    main()
