"""`anvil train`: an ONNX MLP learns a non-linear rule from .npy data; the
exported model gives ONNX Runtime the same logits as Anvil; bad data and
options fail in one line with the contract's exit code."""

from __future__ import annotations

import re

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from anvil_testing import ERROR_PREFIX, EXIT_INVALID_ARGUMENT, EXIT_UNSUPPORTED, assert_ok, read_tensor_pb

TRAIN_TIMEOUT_S = 300


def mlp_model(path, hidden=32, classes=2, features=2, seed=0):
    """logits = relu(x W1^T + b1) W2^T + b2 with a dynamic batch axis, seeded weights."""
    rng = np.random.default_rng(seed)
    inits = [numpy_helper.from_array((rng.standard_normal((hidden, features)) * 0.7).astype(np.float32), "W1"),
             numpy_helper.from_array(np.zeros(hidden, np.float32), "b1"),
             numpy_helper.from_array((rng.standard_normal((classes, hidden)) * 0.2).astype(np.float32), "W2"),
             numpy_helper.from_array(np.zeros(classes, np.float32), "b2")]
    graph = helper.make_graph(
        [helper.make_node("Gemm", ["x", "W1", "b1"], ["h"], transB=1), helper.make_node("Relu", ["h"], ["r"]),
         helper.make_node("Gemm", ["r", "W2", "b2"], ["logits"], transB=1)], "mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", features])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", classes])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 7
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path


def sign_data(n, seed):
    x = np.random.default_rng(seed).uniform(-1, 1, (n, 2)).astype(np.float32)
    return x, (x[:, 0] * x[:, 1] > 0).astype(np.int64)


def test_an_mlp_learns_and_its_export_runs_in_onnxruntime(anvil, tmp_path):
    model = mlp_model(tmp_path / "mlp.onnx")
    x, y = sign_data(2000, 1)
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", y)
    out = tmp_path / "trained.onnx"
    result = anvil("train", "--model", model, "--data", tmp_path / "x.npy", "--labels", tmp_path / "y.npy",
                   "--epochs", "40", "--batch", "64", "--lr", "0.02", "--seed", "3", "--until-accuracy", "0.97",
                   "--export", out, "--threads", "2", timeout=TRAIN_TIMEOUT_S)
    assert_ok(result)
    accuracies = [float(a) for a in re.findall(r"accuracy ([0-9.]+)%", result.stdout)]
    assert accuracies and accuracies[-1] >= 97.0, result.stdout
    assert "the accuracy target is reached" in result.stdout

    # Held-out points through ONNX Runtime, and the same logits from anvil run.
    test_x, test_y = sign_data(1000, 2)
    session = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    ort_logits = session.run(None, {"x": test_x})[0]
    assert (ort_logits.argmax(1) == test_y).mean() >= 0.93
    np.save(tmp_path / "test_x.npy", test_x)
    ran = anvil("run", out, "-i", f"x={tmp_path / 'test_x.npy'}", "-o", tmp_path / "out")
    assert_ok(ran)
    np.testing.assert_allclose(read_tensor_pb(tmp_path / "out" / "logits.pb"), ort_logits, rtol=1e-4, atol=1e-4)
    # The trained weights differ from the initial ones; the graph is the same.
    trained = {t.name: numpy_helper.to_array(t) for t in onnx.load(str(out)).graph.initializer}
    initial = {t.name: numpy_helper.to_array(t) for t in onnx.load(str(model)).graph.initializer}
    assert trained.keys() == initial.keys() and not np.allclose(trained["W1"], initial["W1"])


def test_uint8_features_are_scaled(anvil, tmp_path):
    model = mlp_model(tmp_path / "mlp.onnx")
    x, y = sign_data(512, 4)
    np.save(tmp_path / "x.npy", np.round((x + 1) * 127.5).astype(np.uint8))
    np.save(tmp_path / "y.npy", (x[:, 0] + x[:, 1] > 0).astype(np.int32))
    result = anvil("train", "--model", model, "--data", tmp_path / "x.npy", "--labels", tmp_path / "y.npy",
                   "--epochs", "30", "--batch", "32", "--lr", "0.05", "--optimizer", "sgd", "--momentum", "0.9",
                   timeout=TRAIN_TIMEOUT_S)
    assert_ok(result)
    assert float(re.findall(r"accuracy ([0-9.]+)%", result.stdout)[-1]) >= 90.0, result.stdout


def test_keep_denormals_is_accepted(anvil, tmp_path):
    """The flag is accepted and changes no result here (this small MLP's values never fall below 1.2e-38); what it
    changes is covered by the unit test Denormals.FlushedOnEveryThreadOfTheScopeOnly."""
    model = mlp_model(tmp_path / "mlp.onnx")
    x, y = sign_data(512, 5)
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", y)
    losses = []
    for extra in ([], ["--keep-denormals"]):
        result = anvil("train", "--model", model, "--data", tmp_path / "x.npy", "--labels", tmp_path / "y.npy",
                       "--epochs", "3", "--batch", "64", "--lr", "0.02", "--seed", "3", "--threads", "2",
                       "--deterministic", *extra, timeout=TRAIN_TIMEOUT_S)
        assert_ok(result)
        losses.append(re.findall(r"loss ([0-9.]+)", result.stdout))
    assert losses[0] and losses[0] == losses[1], losses


def test_profile_shows_each_node_of_the_full_batches_after_the_first(anvil, tmp_path):
    """500 samples at batch 64 over 2 epochs: 7 full batches and one of 52 each epoch. The profile averages the 13
    full ones after the run's first step, node by node: the forward Gemms, the gradient graph's nodes, the
    optimizer's update and the wait for data, whose shares add up to the step."""
    model = mlp_model(tmp_path / "mlp.onnx")
    x, y = sign_data(500, 6)
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", y)
    args = ["train", "--model", model, "--data", tmp_path / "x.npy", "--labels", tmp_path / "y.npy", "--lr", "0.02",
            "--threads", "2", "--profile"]
    result = anvil(*args, "--epochs", "2", "--batch", "64", timeout=TRAIN_TIMEOUT_S)
    assert_ok(result)
    assert "per-node profile: mean of 13 steps" in result.stdout, result.stdout
    table = result.stdout.split("per-node profile")[1].split("by op type")[0]
    rows = [line for line in table.splitlines()[2:] if line.strip()]
    assert [row.split()[0] for row in rows[:2]] == ["anvil.FusedGemm", "Gemm"], rows  # the forward
    assert sum("'grad_" in row for row in rows) >= 5, rows  # the gradient graph
    assert rows[-2].startswith("optimizer update") and rows[-1].startswith("wait for the batch"), rows
    shares = [float(row.rsplit(None, 1)[1].rstrip("%")) for row in rows]
    assert 50 < sum(shares) <= 100.5, shares  # the rest: the executor's own work between nodes

    # One step an epoch: only the second counts.
    one_step = anvil(*args, "--epochs", "2", "--batch", "500", timeout=TRAIN_TIMEOUT_S)
    assert_ok(one_step)
    assert "per-node profile: mean of 1 step," in one_step.stdout, one_step.stdout
    single = anvil(*args, "--epochs", "1", "--batch", "500", timeout=TRAIN_TIMEOUT_S)
    assert_ok(single)
    assert "profile: no step to show" in single.stdout, single.stdout


def one_error_line(result, code, text):
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == code, f"exit {result.returncode}: {result.stderr}"
    assert len(lines) == 1 and lines[0].startswith(ERROR_PREFIX), result.stderr
    assert text in lines[0], lines[0]


def test_bad_data_and_options_fail_in_one_line(anvil, tmp_path):
    model = mlp_model(tmp_path / "mlp.onnx")
    x, y = sign_data(64, 5)
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", y)
    np.save(tmp_path / "y_bad.npy", y + 5)
    np.save(tmp_path / "x3.npy", np.zeros((64, 3), np.float32))
    np.save(tmp_path / "empty.npy", np.zeros((0, 2), np.float32))
    np.save(tmp_path / "y_empty.npy", np.zeros(0, np.int64))
    np.save(tmp_path / "y_short.npy", y[:10])
    np.save(tmp_path / "y_float.npy", y.astype(np.float32))
    base = ["train", "--model", model]

    def run(*args):
        return anvil(*base, *args, timeout=TRAIN_TIMEOUT_S)

    one_error_line(run("--data", tmp_path / "x.npy", "--labels", tmp_path / "y_bad.npy"), EXIT_INVALID_ARGUMENT,
                   "out of range")
    one_error_line(run("--data", tmp_path / "x3.npy", "--labels", tmp_path / "y.npy"), EXIT_INVALID_ARGUMENT,
                   "the feature rows are")
    one_error_line(run("--data", tmp_path / "empty.npy", "--labels", tmp_path / "y_empty.npy"),
                   EXIT_INVALID_ARGUMENT, "empty")
    one_error_line(run("--data", tmp_path / "x.npy", "--labels", tmp_path / "y_short.npy"), EXIT_INVALID_ARGUMENT,
                   "64 feature rows but 10 labels")
    one_error_line(run("--data", tmp_path / "x.npy", "--labels", tmp_path / "y_float.npy"), EXIT_INVALID_ARGUMENT,
                   "int64 or int32")
    one_error_line(run("--data", tmp_path / "missing.npy", "--labels", tmp_path / "y.npy"), EXIT_INVALID_ARGUMENT,
                   "missing.npy")
    one_error_line(run("--data", tmp_path / "x.npy", "--labels", tmp_path / "y.npy", "--optimizer", "adagrad"),
                   EXIT_INVALID_ARGUMENT, "unknown optimizer 'adagrad'")
    one_error_line(run("--data", tmp_path / "x.npy", "--labels", tmp_path / "y.npy", "--schedule", "linear"),
                   EXIT_INVALID_ARGUMENT, "unknown schedule")
    one_error_line(run("--data", tmp_path / "x.npy", "--labels", tmp_path / "y.npy", "--lr", "1e30", "--epochs", "3"),
                   EXIT_INVALID_ARGUMENT, "the loss is")


def test_a_model_with_an_op_without_gradient_is_unsupported(anvil, tmp_path):
    """Sin has no gradient rule: the message names the node and the op."""
    w = numpy_helper.from_array(np.ones((3, 2), np.float32), "W")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["h"]), helper.make_node("Sin", ["h"], ["logits"])], "sin",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 2])], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 7
    onnx.save(model, str(tmp_path / "sin.onnx"))
    np.save(tmp_path / "x.npy", np.zeros((4, 3), np.float32))
    np.save(tmp_path / "y.npy", np.zeros(4, np.int64))
    result = anvil("train", "--model", tmp_path / "sin.onnx", "--data", tmp_path / "x.npy", "--labels",
                   tmp_path / "y.npy", timeout=TRAIN_TIMEOUT_S)
    one_error_line(result, EXIT_UNSUPPORTED, "no gradient for Sin")
