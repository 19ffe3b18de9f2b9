"""DistDL's LeNet-5 written with distop.torch (python/examples/lenet5.py) against the single-process
torch model with the same weights: the logits, the loss, every parameter's gradient and the loss
after one SGD step agree to float32 rounding at 1, 2 and 4 ranks (3 ranks cannot split fc1's 16
channels evenly: the model refuses, on every rank)."""

import os
import sys

import pytest
import torch

import distop

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "python", "examples"))
import lenet5  # noqa: E402

BATCH = 3


def blocks(n, parts):
    b = [n // parts + (1 if i < n % parts else 0) for i in range(parts)]
    return [sum(b[:i]) for i in range(parts + 1)]


def test_lenet5_refused_where_channels_do_not_split(world_size):
    if world_size in (1, 2, 4):
        pytest.skip("LeNet-5 runs at this rank count")
    with pytest.raises(distop.Error, match=r"\[LeNet5\].*does not divide its 16 channels"):
        lenet5.LeNet5()


def test_lenet5_equals_torch(world_size, rank):
    if world_size not in (1, 2, 4):
        pytest.skip("fc1's 16 input channels split over 1, 2, 4 or 8 ranks only")
    torch.manual_seed(11)
    X = torch.rand(BATCH, 1, 28, 28)
    labels = torch.tensor([3, 0, 7])
    model = lenet5.LeNet5(seed=4)
    ref = lenet5.reference_model(seed=4)
    names = [f"{layer}.{p}" for layer in ("conv1", "conv2", "fc1", "fc2", "fc3")
             for p in ("weight", "bias")]
    assert [n for n, _ in model.named_parameters()] == names
    ref_params = dict(zip(names, ref.parameters()))

    # The same initial weights: the convolutions' on every rank, the linear layers' assembled.
    for layer in ("conv1", "conv2"):
        for p in ("weight", "bias"):
            torch.testing.assert_close(getattr(getattr(model, layer), p).detach(),
                                       ref_params[f"{layer}.{p}"].detach(), rtol=0, atol=0)
    for layer in ("fc1", "fc2", "fc3"):
        sd = getattr(model, layer).global_state_dict(root=0)
        if rank == 0:
            for p in ("weight", "bias"):
                torch.testing.assert_close(sd[p], ref_params[f"{layer}.{p}"].detach(),
                                           rtol=0, atol=0)

    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    for step in range(2):
        x = distop.distribute(X, model.input_space(BATCH))
        logits = model(x)
        loss = model.loss(logits, labels)
        ref_logits = ref(X)
        ref_loss = torch.nn.functional.cross_entropy(ref_logits, labels)
        if model.holds_output():
            torch.testing.assert_close(logits, ref_logits)
            torch.testing.assert_close(loss, ref_loss)
        else:
            assert logits.numel() == 0 and float(loss) == 0.0
        if step == 1:
            break  # the loss after one step of SGD agreed too
        opt.zero_grad()
        ref_opt.zero_grad()
        loss.backward()
        ref_loss.backward()
        for layer in ("conv1", "conv2"):
            for p in ("weight", "bias"):
                torch.testing.assert_close(getattr(getattr(model, layer), p).grad,
                                           ref_params[f"{layer}.{p}"].grad)
        for layer in ("fc1", "fc2", "fc3"):
            fc = getattr(model, layer)
            W, B = ref_params[f"{layer}.weight"].grad, ref_params[f"{layer}.bias"].grad
            p_out, p_in = fc.P_w.shape
            rows, cols = blocks(fc.out_features, p_out), blocks(fc.in_features, p_in)
            if fc.P_w.active:
                i, j = fc.P_w.coords
                torch.testing.assert_close(fc.weight.grad,
                                           W[rows[i]:rows[i + 1], cols[j]:cols[j + 1]])
            else:
                assert fc.weight.numel() == 0
            if fc.P_y.active:
                i = fc.P_y.coords[1]
                torch.testing.assert_close(fc.bias.grad, B[rows[i]:rows[i + 1]])
        opt.step()
        ref_opt.step()
