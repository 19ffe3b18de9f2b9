#!/usr/bin/env python3
"""Loads the weights examples/resnet saved (--save FILE) into torchvision's resnet18 and evaluates
them on the first N Fashion-MNIST test images padded to 32 x 32, as the program does with
--test-examples N: the accuracy and loss printed should equal the program's.

    python3 examples/resnet/torchvision_check.py FILE [N] [DATA_DIR]

Needs PyTorch and torchvision (Debian: python3-torch python3-torchvision) and numpy; reads the
safetensors file itself."""
import gzip
import json
import os
import struct
import sys

import numpy as np
import torch
import torchvision


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
    return tensors


def idx(path, offset):
    opener = gzip.open if path.endswith(".gz") else open
    return np.frombuffer(opener(path, "rb").read()[offset:], dtype=np.uint8)


def main():
    path = sys.argv[1]
    count = int(sys.argv[2]) if len(sys.argv) > 2 else 10000
    data = sys.argv[3] if len(sys.argv) > 3 else "/usr/share/datasets/fashion-mnist"
    state = read_safetensors(path)
    model = torchvision.models.resnet18(num_classes=10)
    channels = state["conv1.weight"].shape[1]
    if channels != 3:
        model.conv1 = torch.nn.Conv2d(channels, 64, 7, 2, 3, bias=False)
    model.load_state_dict(state, strict=True)
    model.eval()

    def find(stem):
        for name in (stem + ".gz", stem):
            if os.path.exists(os.path.join(data, name)):
                return os.path.join(data, name)
        sys.exit("no %s(.gz) in %s" % (stem, data))

    images = idx(find("t10k-images-idx3-ubyte"), 16).reshape(-1, 28, 28)[:count]
    labels = idx(find("t10k-labels-idx1-ubyte"), 8)[:count].astype(np.int64)
    x = torch.zeros(len(images), 1, 32, 32)
    x[:, 0, 2:30, 2:30] = torch.from_numpy(images.astype(np.float32) / 255)
    with torch.no_grad():
        logits = model(x)
    loss = torch.nn.functional.cross_entropy(logits, torch.from_numpy(labels)).item()
    accuracy = (logits.argmax(1).numpy() == labels).mean()
    print("torchvision resnet18: test accuracy %.2f%% (loss %.4f) on %d images"
          % (100 * accuracy, loss, len(images)))


if __name__ == "__main__":
    main()
