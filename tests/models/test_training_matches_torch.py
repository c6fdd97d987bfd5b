"""`anvil train` against PyTorch, step for step: a small CNN (convolutions with
and without bias, ReLUs between convolutions and before overlapping and
plain max pooling, a linear head) exported by PyTorch with seeded weights,
trained by both for four SGD steps on the same batches; the weights Anvil
exports must have moved as PyTorch's did.

    max |(anvil - initial) - (torch - initial)| <= 2e-3 * max |torch - initial|

per tensor. Anvil trains as it plans by default: its gradients keep the
forward convolutions' layout (NHWC or channel blocks, by ISA; this suite
also runs under ANVIL_MAX_ISA=avx2 and sse41), which this test checks
against an independent implementation.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from anvil_testing import assert_ok

TRAIN_TIMEOUT_S = 300
TOLERANCE = 2e-3


def make_cnn():
    import torch
    from torch import nn

    torch.manual_seed(7)
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(),
        nn.Conv2d(16, 16, 3, padding=1, bias=False), nn.ReLU(),
        nn.MaxPool2d(3, stride=2, padding=1),                     # overlapping windows
        nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(32 * 3 * 3, 10))


@pytest.mark.slow
def test_cnn_sgd_steps_match_pytorch(anvil, tmp_path):
    import torch

    rng = np.random.default_rng(3)
    x = rng.uniform(0, 1, (64, 3, 12, 12)).astype(np.float32)
    y = rng.integers(0, 10, 64).astype(np.int64)
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", y)

    model = make_cnn()
    torch.onnx.export(model, torch.zeros(1, 3, 12, 12), str(tmp_path / "cnn.onnx"), input_names=["x"],
                      output_names=["logits"], dynamic_axes={"x": {0: "batch"}, "logits": {0: "batch"}},
                      opset_version=13, do_constant_folding=False)
    initial = {k: v.detach().numpy().copy() for k, v in model.state_dict().items()}

    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    loss_fn = torch.nn.CrossEntropyLoss()
    for _ in range(2):  # two epochs of two batches, in order
        for i in range(0, 64, 32):
            opt.zero_grad()
            loss_fn(model(torch.from_numpy(x[i:i + 32])), torch.from_numpy(y[i:i + 32])).backward()
            opt.step()
    trained_torch = {k: v.detach().numpy() for k, v in model.state_dict().items()}

    out = tmp_path / "trained.onnx"
    result = anvil("train", "--model", tmp_path / "cnn.onnx", "--data", tmp_path / "x.npy", "--labels",
                   tmp_path / "y.npy", "--optimizer", "sgd", "--lr", "0.05", "--batch", "32", "--epochs", "2",
                   "--no-shuffle", "--threads", "2", "--export", out, timeout=TRAIN_TIMEOUT_S)
    assert_ok(result)
    trained_anvil = {t.name: numpy_helper.to_array(t) for t in onnx.load(str(out)).graph.initializer}

    assert set(trained_torch) <= set(trained_anvil), sorted(trained_anvil)
    for name, want in trained_torch.items():
        moved_torch = want - initial[name]
        moved_anvil = trained_anvil[name] - initial[name]
        scale = float(np.abs(moved_torch).max())
        assert scale > 0, f"{name} did not move in PyTorch"
        diff = float(np.abs(moved_anvil - moved_torch).max())
        assert diff <= TOLERANCE * scale, f"{name}: max|diff| {diff:.3g} against a move of {scale:.3g}"
