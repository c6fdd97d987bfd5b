"""Helpers shared by the Python tests: running the anvil binary, tensors, tiny models.

The binary is $ANVIL_BIN, else <repo>/build/bin/anvil.  Every call has a
timeout: a hang is a test failure, never a stuck test run.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_TIMEOUT_S = 120
ERROR_PREFIX = "anvil: error: "

# Exit codes of the CLI contract.
EXIT_USAGE = 1
EXIT_INVALID_MODEL = 2
EXIT_UNSUPPORTED = 3
EXIT_INVALID_ARGUMENT = 4
EXIT_OUT_OF_MEMORY = 5
EXIT_INTERNAL = 6


def anvil_bin() -> Path:
    """Path of the anvil binary under test."""
    return Path(os.environ.get("ANVIL_BIN", REPO_ROOT / "build" / "bin" / "anvil"))


class AnvilHang(AssertionError):
    """anvil did not finish within its timeout."""


def run_anvil(*args: object, timeout: float = DEFAULT_TIMEOUT_S,
              env: dict | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """Run `anvil ARGS...`, capture text stdout/stderr; raise AnvilHang on timeout."""
    cmd = [str(anvil_bin())] + [str(a) for a in args]
    full_env = dict(os.environ, **(env or {}))
    try:
        return subprocess.run(cmd, capture_output=True, text=True, errors="replace",
                              timeout=timeout, env=full_env, cwd=cwd, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired as e:
        raise AnvilHang(f"hang: `{' '.join(cmd)}` ran past {timeout} s") from e


def describe(result: subprocess.CompletedProcess) -> str:
    """The command, exit status and output of a run, for assertion messages."""
    return (f"\n$ {' '.join(result.args)}\nexit status {result.returncode}\n"
            f"--- stdout ---\n{result.stdout[-4000:]}\n--- stderr ---\n{result.stderr[-4000:]}")


def assert_ok(result: subprocess.CompletedProcess) -> None:
    assert result.returncode == 0, "anvil failed" + describe(result)


def output_file_name(output_name: str) -> str:
    """DIR/<name>.pb file name of a model output: [A-Za-z0-9._-] kept, others -> '_'."""
    return re.sub(r"[^A-Za-z0-9._-]", "_", output_name) + ".pb"


def read_tensor_pb(path: Path) -> np.ndarray:
    tensor = TensorProto()
    tensor.ParseFromString(Path(path).read_bytes())
    return numpy_helper.to_array(tensor)


def write_tensor_pb(path: Path, array: np.ndarray, name: str = "") -> Path:
    Path(path).write_bytes(numpy_helper.from_array(np.asarray(array), name).SerializeToString())
    return Path(path)


def model_inputs(model: onnx.ModelProto) -> list:
    """The graph inputs that are real inputs (not initializers)."""
    init = {t.name for t in model.graph.initializer}
    return [i for i in model.graph.input if i.name not in init]


def relative_diff(actual: np.ndarray, expected: np.ndarray) -> float:
    """max |actual - expected| / max |expected|."""
    expected = np.asarray(expected, dtype=np.float64)
    diff = float(np.max(np.abs(np.asarray(actual, dtype=np.float64) - expected)))
    scale = float(np.max(np.abs(expected)))
    return diff / scale if scale > 0 else diff


# --------------------------------------------------------------------------
# Tiny models built with onnx.helper
# --------------------------------------------------------------------------

def save_model(graph: onnx.GraphProto, path: Path, opset: int = 13,
               extra_opsets: Iterable[tuple] = (), check: bool = True) -> Path:
    """Wrap `graph` in a ModelProto (IR 7, default-domain `opset`), save, return path."""
    opsets = [helper.make_opsetid("", opset)] + [helper.make_opsetid(d, v) for d, v in extra_opsets]
    model = helper.make_model(graph, opset_imports=opsets, producer_name="anvil-tests")
    model.ir_version = 7
    if check:
        onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return Path(path)


def float_info(name: str, shape: Sequence[int]) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, list(shape))


def make_relu_model(path: Path, opset: int = 13, input_name: str = "data_in",
                    shape: Sequence[int] = (1, 3, 4, 4), check: bool = True) -> Path:
    """data_out = Relu(data_in), float [1,3,4,4]."""
    graph = helper.make_graph(
        [helper.make_node("Relu", [input_name], ["data_out"], name="relu0")], "relu",
        [float_info(input_name, shape)], [float_info("data_out", shape)])
    return save_model(graph, path, opset, check=check)


def make_add_model(path: Path, output_name: str = "C", shape: Sequence[int] = (1, 3, 4, 4),
                   inputs: Sequence[str] = ("A", "B")) -> Path:
    """output_name = inputs[0] + inputs[1], all float of `shape`."""
    a, b = inputs
    graph = helper.make_graph(
        [helper.make_node("Add", [a, b], [output_name], name="add0")], "add",
        [float_info(a, shape), float_info(b, shape)], [float_info(output_name, shape)])
    return save_model(graph, path)


def make_conv_relu_model(path: Path, seed: int = 0) -> Path:
    """Conv 3->8 3x3 pad 1 + Relu on [1,3,8,8], weights as initializers (a few KB)."""
    rng = np.random.default_rng(seed)
    w = numpy_helper.from_array(rng.standard_normal((8, 3, 3, 3), dtype=np.float32), "W")
    b = numpy_helper.from_array(rng.standard_normal(8, dtype=np.float32), "Bias")
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "W", "Bias"], ["c"], name="conv0", pads=[1, 1, 1, 1]),
         helper.make_node("Relu", ["c"], ["y"], name="relu0")],
        "conv_relu", [float_info("x", (1, 3, 8, 8))], [float_info("y", (1, 8, 8, 8))], [w, b])
    return save_model(graph, path)
