"""`anvil train` on real data and JSON model specs: an MLP and a small CNN
learn scikit-learn's digits (Debian's python3-sklearn) to >= 97% held-out
accuracy, checked through ONNX Runtime on the exported models; reruns with
--deterministic give the same bytes, whatever the loader's workers; a resumed
run ends where an uninterrupted one does; bce and mse train; bad specs, CSV
files and checkpoints fail in one line."""

from __future__ import annotations

import json
import re

import numpy as np
import onnxruntime as ort
import pytest

from anvil_testing import EXIT_INVALID_ARGUMENT, assert_ok, read_tensor_pb
from test_train import TRAIN_TIMEOUT_S, one_error_line

MLP_SPEC = {"input": [64], "layers": [{"type": "linear", "out": 128}, {"type": "relu"},
                                      {"type": "dropout", "p": 0.1}, {"type": "linear", "out": 10}]}
CNN_SPEC = {"input": [1, 8, 8], "layers": [
    {"type": "conv2d", "out": 16, "kernel": 3, "padding": 1}, {"type": "batch_norm"}, {"type": "relu"},
    {"type": "conv2d", "out": 32, "kernel": 3, "padding": 1}, {"type": "relu"}, {"type": "max_pool2d", "kernel": 2},
    {"type": "flatten"}, {"type": "dropout", "p": 0.1}, {"type": "linear", "out": 64}, {"type": "gelu"},
    {"type": "linear", "out": 10}]}


@pytest.fixture(scope="module")
def digits(tmp_path_factory):
    """The digits as .npy: 1,437 training and 360 held-out images (a seeded split)."""
    from sklearn.datasets import load_digits

    d = load_digits()
    x = (d.images / 16.0).astype(np.float32)
    order = np.random.default_rng(0).permutation(len(x))
    train, test = order[:1437], order[1437:]
    folder = tmp_path_factory.mktemp("digits")
    paths = {}
    for name, idx in (("train", train), ("test", test)):
        for shape, tag in (((-1, 64), "flat"), ((-1, 1, 8, 8), "image")):
            paths[f"{name}_{tag}"] = folder / f"{name}_{tag}.npy"
            np.save(paths[f"{name}_{tag}"], x[idx].reshape(shape))
        paths[f"{name}_y"] = folder / f"{name}_y.npy"
        np.save(paths[f"{name}_y"], d.target[idx].astype(np.int64))
    return paths


def write_spec(path, spec):
    path.write_text(json.dumps(spec))
    return path


def held_out_accuracy(model, x_path, y_path):
    session = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    logits = session.run(None, {"x": np.load(x_path)})[0]
    return float((logits.argmax(1) == np.load(y_path)).mean())


def train(anvil, *args):
    return anvil("train", *[str(a) for a in args], timeout=TRAIN_TIMEOUT_S)


def test_digits_mlp_from_a_spec_reaches_97_percent(anvil, digits, tmp_path):
    spec = write_spec(tmp_path / "mlp.json", MLP_SPEC)
    out = tmp_path / "mlp.onnx"
    result = train(anvil, "--model", spec, "--data", digits["train_flat"], "--labels", digits["train_y"],
                   "--epochs", 30, "--batch", 32, "--lr", 2e-3, "--seed", 1, "--workers", 2, "--export", out)
    assert_ok(result)
    assert held_out_accuracy(out, digits["test_flat"], digits["test_y"]) >= 0.97, result.stdout


def test_digits_cnn_from_a_spec_reaches_97_percent(anvil, digits, tmp_path):
    spec = write_spec(tmp_path / "cnn.json", CNN_SPEC)
    out = tmp_path / "cnn.onnx"
    result = train(anvil, "--model", spec, "--data", digits["train_image"], "--labels", digits["train_y"],
                   "--epochs", 15, "--batch", 32, "--lr", 2e-3, "--seed", 1, "--schedule", "cosine", "--export", out)
    assert_ok(result)
    assert held_out_accuracy(out, digits["test_image"], digits["test_y"]) >= 0.97, result.stdout
    # Anvil runs the exported model (BatchNormalization with the running statistics) as ONNX Runtime does.
    ran = anvil("run", out, "-i", f"x={digits['test_image']}", "-o", tmp_path / "out")
    assert_ok(ran)
    session = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    expected = session.run(None, {"x": np.load(digits["test_image"])})[0]
    np.testing.assert_allclose(read_tensor_pb(tmp_path / "out" / "logits.pb"), expected, rtol=1e-4, atol=1e-4)


def test_deterministic_reruns_give_the_same_bytes_whatever_the_workers(anvil, digits, tmp_path):
    spec = write_spec(tmp_path / "mlp.json", MLP_SPEC)  # dropout included: its masks are seeded too
    outputs = []
    for workers in (["--workers", 0], ["--workers", 0], ["--workers", 2, "--worker-processes"]):
        out = tmp_path / f"run{len(outputs)}.onnx"
        assert_ok(train(anvil, "--model", spec, "--data", digits["train_flat"], "--labels", digits["train_y"],
                        "--epochs", 2, "--batch", 64, "--seed", 7, "--threads", 2, "--deterministic", *workers,
                        "--export", out))
        outputs.append(out.read_bytes())
    assert outputs[0] == outputs[1] == outputs[2]
    other = tmp_path / "other_seed.onnx"
    assert_ok(train(anvil, "--model", spec, "--data", digits["train_flat"], "--labels", digits["train_y"],
                    "--epochs", 2, "--batch", 64, "--seed", 8, "--threads", 2, "--deterministic", "--export", other))
    assert other.read_bytes() != outputs[0]


def test_a_resumed_run_ends_where_an_uninterrupted_one_does(anvil, digits, tmp_path):
    spec = write_spec(tmp_path / "cnn.json", CNN_SPEC)  # batch norm and dropout: both must resume exactly
    common = ["--model", spec, "--data", digits["train_image"], "--labels", digits["train_y"], "--batch", 64,
              "--seed", 3, "--threads", 2, "--deterministic", "--optimizer", "sgd", "--momentum", 0.9, "--lr", 0.05]
    whole = tmp_path / "whole.onnx"
    assert_ok(train(anvil, *common, "--epochs", 3, "--checkpoint", tmp_path / "a", "--export", whole))
    assert (tmp_path / "a" / "latest").read_text().strip() == "epoch-3"
    assert_ok(train(anvil, *common, "--epochs", 2, "--checkpoint", tmp_path / "b"))
    resumed = tmp_path / "resumed.onnx"
    result = train(anvil, *common, "--epochs", 3, "--checkpoint", tmp_path / "b", "--resume", "--export", resumed)
    assert_ok(result)
    assert "resumed after epoch 2" in result.stdout
    assert len(re.findall(r"^epoch ", result.stdout, re.M)) == 1  # only epoch 3 ran
    assert resumed.read_bytes() == whole.read_bytes()

    # A loss that blows up keeps the last good checkpoint, and says where it is.
    blown = train(anvil, *common[:-2], "--lr", 1e30, "--epochs", 4, "--checkpoint", tmp_path / "b", "--resume")
    one_error_line(blown, EXIT_INVALID_ARGUMENT, "the last good checkpoint, epoch 3")
    assert (tmp_path / "b" / "latest").read_text().strip() == "epoch-3"
    good = tmp_path / "b" / "epoch-3" / "model.onnx"
    assert held_out_accuracy(good, digits["test_image"], digits["test_y"]) > 0.5


def test_bce_and_mse_train_on_float_targets(anvil, tmp_path):
    rng = np.random.default_rng(0)
    x = rng.uniform(-1, 1, (1024, 2)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "binary.npy", (x[:, 0] * x[:, 1] > 0).astype(np.float32))
    np.save(tmp_path / "value.npy", (x[:, :1] - 2 * x[:, 1:]).astype(np.float32))
    spec = write_spec(tmp_path / "net.json", {"input": [2], "layers": [
        {"type": "linear", "out": 32}, {"type": "tanh"}, {"type": "linear", "out": 1}]})
    bce = train(anvil, "--model", spec, "--data", tmp_path / "x.npy", "--labels", tmp_path / "binary.npy",
                "--loss", "bce", "--epochs", 40, "--batch", 32, "--lr", 1e-2, "--export", tmp_path / "bce.onnx")
    assert_ok(bce)
    assert float(re.findall(r"accuracy ([0-9.]+)%", bce.stdout)[-1]) >= 95.0, bce.stdout
    mse = train(anvil, "--model", spec, "--data", tmp_path / "x.npy", "--labels", tmp_path / "value.npy",
                "--loss", "mse", "--epochs", 30, "--batch", 32, "--lr", 1e-2, "--export", tmp_path / "mse.onnx")
    assert_ok(mse)
    assert "accuracy" not in mse.stdout.split("epoch", 2)[-1]
    session = ort.InferenceSession(str(tmp_path / "mse.onnx"), providers=["CPUExecutionProvider"])
    predicted = session.run(None, {"x": x})[0]
    assert np.mean((predicted - (x[:, :1] - 2 * x[:, 1:])) ** 2) < 0.01


def test_csv_data_with_a_header_and_a_label_column(anvil, tmp_path):
    rng = np.random.default_rng(1)
    x = rng.uniform(-1, 1, (600, 2))
    y = (x[:, 0] + x[:, 1] > 0).astype(int)
    lines = ["label,a,b"] + [f"{label},{a:.6f},{b:.6f}" for label, (a, b) in zip(y, x)]
    (tmp_path / "data.csv").write_text("\n".join(lines) + "\n")
    spec = write_spec(tmp_path / "net.json", {"input": [2], "layers": [{"type": "linear", "out": 2}]})
    result = train(anvil, "--model", spec, "--data", tmp_path / "data.csv", "--label-column", 0, "--epochs", 30,
                   "--batch", 32, "--lr", 0.05)
    assert_ok(result)
    assert float(re.findall(r"accuracy ([0-9.]+)%", result.stdout)[-1]) >= 95.0, result.stdout


def test_bad_specs_csv_files_and_checkpoints_fail_in_one_line(anvil, tmp_path):
    np.save(tmp_path / "x.npy", np.zeros((8, 4), np.float32))
    np.save(tmp_path / "y.npy", np.zeros(8, np.int64))
    data = ["--data", tmp_path / "x.npy", "--labels", tmp_path / "y.npy"]

    def spec_error(spec, text):
        path = tmp_path / "bad.json"
        path.write_text(spec if isinstance(spec, str) else json.dumps(spec))
        one_error_line(train(anvil, "--model", path, *data), EXIT_INVALID_ARGUMENT, text)

    spec_error("{not json", "not valid JSON")
    spec_error({"layers": []}, "needs \"input\"")
    spec_error({"input": [4], "layers": [{"type": "lstm"}]}, "unknown type 'lstm'")
    spec_error({"input": [1, 2, 2], "layers": [{"type": "linear", "out": 2}]}, "add a flatten")
    spec_error({"input": [4], "layers": [{"type": "linear"}]}, "'out' is required")
    spec_error({"input": [4], "layers": [{"type": "linear", "out": -3}]}, "out must be > 0")
    spec_error({"input": [1, 4, 4], "layers": [{"type": "conv2d", "out": 2, "kernel": 9}]}, "leaves nothing")
    spec_error({"input": [4], "layers": [{"type": "dropout", "p": 1.5}, {"type": "linear", "out": 2}]},
               "p must be in [0, 1)")

    spec = tmp_path / "ok.json"
    spec.write_text(json.dumps({"input": [4], "layers": [{"type": "linear", "out": 2}]}))
    (tmp_path / "ragged.csv").write_text("1,2,3\n4,5\n")
    one_error_line(train(anvil, "--model", spec, "--data", tmp_path / "ragged.csv"), EXIT_INVALID_ARGUMENT,
                   "ragged.csv:2")
    one_error_line(train(anvil, "--model", spec, "--data", tmp_path / "ragged.csv", "--labels", tmp_path / "y.npy"),
                   EXIT_INVALID_ARGUMENT, "drop --labels")
    one_error_line(train(anvil, "--model", spec, "--data", tmp_path / "x.npy"), EXIT_INVALID_ARGUMENT,
                   "--labels is required")
    one_error_line(train(anvil, "--model", spec, *data, "--loss", "hinge"), EXIT_INVALID_ARGUMENT,
                   "unknown loss 'hinge'")
    one_error_line(train(anvil, "--model", spec, *data, "--resume"), EXIT_INVALID_ARGUMENT, "--checkpoint")
    one_error_line(train(anvil, "--model", spec, *data, "--resume", "--checkpoint", tmp_path / "none"),
                   EXIT_INVALID_ARGUMENT, "no checkpoint to resume from")
    (tmp_path / "damaged").mkdir()
    (tmp_path / "damaged" / "latest").write_text("../../etc\n")
    one_error_line(train(anvil, "--model", spec, *data, "--resume", "--checkpoint", tmp_path / "damaged"),
                   EXIT_INVALID_ARGUMENT, "does not name a checkpoint")
    np.save(tmp_path / "t.npy", np.full((8, 2), 3.0, np.float32))
    one_error_line(train(anvil, "--model", spec, "--data", tmp_path / "x.npy", "--labels", tmp_path / "t.npy",
                         "--loss", "bce"), EXIT_INVALID_ARGUMENT, "outside [0, 1]")


def test_one_element_weights_train_and_batch_norm_refuses_a_batch_of_one(anvil, tmp_path):
    """A [1] bias (a bce head) is a parameter like any other; it must move to fit 80% positive targets."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    inits = [numpy_helper.from_array(np.zeros((1, 3), np.float32), "W"),
             numpy_helper.from_array(np.zeros(1, np.float32), "b")]
    graph = helper.make_graph([helper.make_node("Gemm", ["x", "W", "b"], ["logit"], transB=1)], "head",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3])],
                              [helper.make_tensor_value_info("logit", TensorProto.FLOAT, ["batch", 1])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 7
    onnx.save(model, str(tmp_path / "head.onnx"))
    np.save(tmp_path / "x.npy", np.zeros((100, 3), np.float32))
    np.save(tmp_path / "t.npy", (np.arange(100) % 5 != 0).astype(np.float32).reshape(100, 1))
    out = tmp_path / "trained.onnx"
    assert_ok(train(anvil, "--model", tmp_path / "head.onnx", "--data", tmp_path / "x.npy", "--labels",
                    tmp_path / "t.npy", "--loss", "bce", "--epochs", 200, "--batch", 100, "--lr", 0.05,
                    "--export", out))
    bias = {t.name: numpy_helper.to_array(t) for t in onnx.load(str(out)).graph.initializer}["b"]
    np.testing.assert_allclose(bias, [np.log(4)], atol=0.05)  # sigmoid(b) = 0.8

    spec = write_spec(tmp_path / "bn.json", {"input": [3], "layers": [{"type": "linear", "out": 4},
                                                                      {"type": "batch_norm"}, {"type": "linear",
                                                                                               "out": 2}]})
    np.save(tmp_path / "x9.npy", np.random.default_rng(0).standard_normal((9, 3)).astype(np.float32))
    np.save(tmp_path / "y9.npy", np.arange(9, dtype=np.int64) % 2)
    one_error_line(train(anvil, "--model", spec, "--data", tmp_path / "x9.npy", "--labels", tmp_path / "y9.npy",
                         "--batch", 4, "--no-shuffle"), EXIT_INVALID_ARGUMENT, "more than one value per channel")
    assert_ok(train(anvil, "--model", spec, "--data", tmp_path / "x9.npy", "--labels", tmp_path / "y9.npy",
                    "--batch", 4, "--drop-last"))
