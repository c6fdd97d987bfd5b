"""Bad input never crashes or hangs the anvil command.

Every case must end, within a timeout, with
  * the contract's exit code (all of them are in 1..127; a negative return
    code -- death by a signal -- always fails),
  * exactly one non-empty line on stderr, starting with "anvil: error: ",
  * that line naming the problem (the patterns below; they are matched
    against the message with the case folder's path removed, so a word that
    is only in a file's path never counts).

Exit codes (see anvil_testing): 1 bad CLI usage, 2 invalid model,
3 unsupported op/opset, 4 invalid argument (input name/dtype/shape/file).
Decisions the contract leaves open and these tests pin down:
  * a model path that does not exist (or zoo:NAME that is not built in) -> 2,
  * a path that does not exist anywhere else (-i file, conformance dir) -> 4,
  * a flag value out of range (--threads -3, --iters 0, --cycles 0) -> 1,
  * some but not all inputs given with -i -> 4 (only no -i at all means
    "make random inputs").
"""

from __future__ import annotations

import re

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from anvil_testing import (ERROR_PREFIX, EXIT_INVALID_ARGUMENT, EXIT_INVALID_MODEL,
                           EXIT_UNSUPPORTED, EXIT_USAGE, describe, float_info, make_add_model,
                           make_conv_relu_model, make_relu_model, save_model, write_tensor_pb)

TIMEOUT_S = 60
SHAPE = (1, 3, 4, 4)


# --------------------------------------------------------------------------
# Checking one failure
# --------------------------------------------------------------------------

def check_error(result, code: int, *patterns: str, strip: tuple = ()) -> str:
    """Assert `result` is a clean failure with `code`; every regex in `patterns`
    must occur (case-insensitively) in the error line once the strings in
    `strip` (case folders) are removed from it.  Returns the error line."""
    info = describe(result)
    assert result.returncode >= 0, f"anvil was killed by signal {-result.returncode}" + info
    assert 1 <= result.returncode <= 127, f"exit status {result.returncode} outside 1..127" + info
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, f"expected exactly one non-empty stderr line, got {len(lines)}" + info
    line = lines[0]
    assert line.startswith(ERROR_PREFIX), f"stderr line does not start with {ERROR_PREFIX!r}" + info
    message = line[len(ERROR_PREFIX):]
    assert message.strip(), "empty error message" + info
    assert result.returncode == code, f"exit status {result.returncode}, expected {code}" + info
    for s in sorted(map(str, strip), key=len, reverse=True):
        message = message.replace(s, "<dir>")
    for pattern in patterns:
        assert re.search(pattern, message, re.IGNORECASE), (
            f"error message does not match /{pattern}/: {message!r}" + info)
    return line


# Words that say "this file is not a valid model / tensor".
NOT_PARSEABLE = r"pars|protobuf|truncat|invalid|corrupt|malformed|decod|not an? |read|load|model"
NOT_A_TENSOR = r"pars|protobuf|truncat|invalid|corrupt|malformed|decod|read|load|npy|numpy|tensor|format|header"


# --------------------------------------------------------------------------
# Fixtures: a neutral case folder with tiny models
# --------------------------------------------------------------------------

@pytest.fixture(scope="module")
def cases(tmp_path_factory):
    """A case folder whose path holds no word any pattern looks for."""
    return tmp_path_factory.mktemp("cases")


@pytest.fixture(scope="module")
def relu_model(cases):
    """Relu on one float input 'data_in' of shape [1,3,4,4]."""
    return make_relu_model(cases / "relu.onnx")


@pytest.fixture(scope="module")
def good_input(cases):
    return np_save(cases / "good.npy", np.ones(SHAPE, np.float32))


def np_save(path, array):
    np.save(path, array)
    return path


@pytest.fixture(params=["run", "bench"])
def command(request):
    """The start of a command line that loads a model and feeds it inputs."""
    if request.param == "run":
        return ["run"]
    return ["bench", "--cycles", "1", "--iters", "1", "--warmup", "1"]


def anvil_model(anvil, command, model, *extra):
    """`anvil run|bench MODEL EXTRA...`"""
    return anvil(command[0], model, *command[1:], *extra, timeout=TIMEOUT_S)


# --------------------------------------------------------------------------
# Bad model files
# --------------------------------------------------------------------------

def test_missing_model_file(anvil, command, cases):
    result = anvil_model(anvil, command, cases / "absent_model.onnx")
    check_error(result, EXIT_INVALID_ARGUMENT, r"absent_model", strip=())


def test_unknown_zoo_model(anvil):
    result = anvil("bench", "zoo:no_such_net", "--cycles", "1", "--iters", "1", timeout=TIMEOUT_S)
    check_error(result, EXIT_INVALID_ARGUMENT, r"no_such_net")


def test_truncated_model(anvil, command, cases):
    whole = make_conv_relu_model(cases / "whole.onnx").read_bytes()
    cut = cases / "cut.onnx"
    cut.write_bytes(whole[: len(whole) // 2])
    check_error(anvil_model(anvil, command, cut), EXIT_INVALID_MODEL, NOT_PARSEABLE, strip=(cases,))


def test_garbage_model(anvil, command, cases):
    junk = cases / "junk.onnx"
    junk.write_bytes(np.random.default_rng(7).integers(0, 256, 4096, dtype=np.uint8).tobytes())
    check_error(anvil_model(anvil, command, junk), EXIT_INVALID_MODEL, NOT_PARSEABLE, strip=(cases,))


def test_empty_model_file(anvil, command, cases):
    """0 bytes parse as an empty ModelProto: the checker must reject it."""
    empty = cases / "empty.onnx"
    empty.write_bytes(b"")
    check_error(anvil_model(anvil, command, empty), EXIT_INVALID_MODEL, NOT_PARSEABLE, strip=(cases,))


def test_model_path_is_a_directory(anvil, cases):
    folder = cases / "folder.onnx"
    folder.mkdir(exist_ok=True)
    check_error(anvil("run", folder, timeout=TIMEOUT_S), EXIT_INVALID_ARGUMENT, r"folder\.onnx")


# --------------------------------------------------------------------------
# Unsupported ops and opsets
# --------------------------------------------------------------------------

def test_unsupported_op(anvil, command, cases):
    """MaxRoiPool is valid ONNX that Anvil does not implement (yet)."""
    graph = helper.make_graph(
        [helper.make_node("MaxRoiPool", ["x", "rois"], ["y"], pooled_shape=[2, 2], name="roipool0")],
        "roipool", [float_info("x", (1, 3, 4, 4)), float_info("rois", (1, 5))], [float_info("y", (1, 3, 2, 2))])
    model = save_model(graph, cases / "roipool.onnx", opset=17, check=False)
    check_error(anvil_model(anvil, command, model), EXIT_UNSUPPORTED,
                r"MaxRoiPool", r"roipool0", strip=(cases,))


def test_unsupported_custom_domain_op(anvil, command, cases):
    graph = helper.make_graph(
        [helper.make_node("Frobnicate", ["x"], ["y"], domain="com.example.anvil", name="frob0")],
        "frob", [float_info("x", SHAPE)], [float_info("y", SHAPE)])
    model = save_model(graph, cases / "frob.onnx", extra_opsets=[("com.example.anvil", 1)])
    check_error(anvil_model(anvil, command, model), EXIT_UNSUPPORTED, r"Frobnicate", strip=(cases,))


@pytest.mark.parametrize("opset", [99, 3])
def test_unsupported_opset(anvil, command, cases, opset):
    """Opset 99 is outside 1..21; in opset 3, Relu is Relu-1, older than Anvil's Relu-6."""
    # The file name must not contain the words looked for.
    model = make_relu_model(cases / f"relu_{'future' if opset > 17 else 'ancient'}.onnx", opset=opset)
    check_error(anvil_model(anvil, command, model), EXIT_UNSUPPORTED,
                r"opset", rf"(?<!\d){opset}(?!\d)", strip=(cases,))


def test_unsupported_op_version_names_op_and_version(anvil, command, cases):
    """Upsample-10 (deprecated, Resize took its place) is newer than the versions Anvil implements."""
    scales = numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "scales")
    graph = helper.make_graph([helper.make_node("Upsample", ["x", "scales"], ["y"], name="up0")], "up",
                              [float_info("x", (1, 3, 4, 4))], [float_info("y", (1, 3, 8, 8))], [scales])
    model = save_model(graph, cases / "upsample10.onnx", opset=10, check=False)
    check_error(anvil_model(anvil, command, model), EXIT_UNSUPPORTED, r"Upsample", r"version 10", r"up0",
                strip=(cases,))


def test_op_newer_than_the_models_opset_is_invalid(anvil, command, cases):
    """LayerNormalization exists from opset 17: in an opset-13 model it is an error in the model."""
    scale = numpy_helper.from_array(np.ones(4, np.float32), "scale")
    graph = helper.make_graph([helper.make_node("LayerNormalization", ["x", "scale"], ["y"], name="ln0")], "ln",
                              [float_info("x", SHAPE)], [float_info("y", SHAPE)], [scale])
    model = save_model(graph, cases / "ln13.onnx", opset=13, check=False)
    check_error(anvil_model(anvil, command, model), EXIT_INVALID_MODEL, r"LayerNormalization", r"opset 13",
                strip=(cases,))


def test_opset_21_model_runs(anvil, cases):
    """Versions after 17 that only add element types run: Reshape-21, Transpose-21."""
    shape = numpy_helper.from_array(np.array([3, 16], np.int64), "shape")
    graph = helper.make_graph([helper.make_node("Reshape", ["x", "shape"], ["r"]),
                               helper.make_node("Transpose", ["r"], ["y"], perm=[1, 0])], "r21",
                              [float_info("x", SHAPE)], [float_info("y", (16, 3))], [shape])
    model = save_model(graph, cases / "r21.onnx", opset=21, check=False)
    result = anvil("run", model, timeout=TIMEOUT_S)
    assert result.returncode == 0, describe(result)
    assert "[16,3]" in result.stdout, result.stdout


# --------------------------------------------------------------------------
# Bad inputs
# --------------------------------------------------------------------------

def test_wrong_dtype(anvil, command, cases, relu_model):
    ints = np_save(cases / "ints.npy", np.ones(SHAPE, np.int64))
    result = anvil_model(anvil, command, relu_model, "-i", f"data_in={ints}")
    check_error(result, EXIT_INVALID_ARGUMENT, r"data_in", r"type|int64|float", strip=(cases,))


def test_wrong_rank(anvil, command, cases, relu_model):
    three_axes = np_save(cases / "three_axes.npy", np.ones(SHAPE[1:], np.float32))
    result = anvil_model(anvil, command, relu_model, "-i", f"data_in={three_axes}")
    check_error(result, EXIT_INVALID_ARGUMENT, r"data_in", r"rank|shape|dim", strip=(cases,))


def test_wrong_shape(anvil, command, cases, relu_model):
    wide = np_save(cases / "wide.npy", np.ones((1, 3, 5, 4), np.float32))
    result = anvil_model(anvil, command, relu_model, "-i", f"data_in={wide}")
    check_error(result, EXIT_INVALID_ARGUMENT, r"data_in", r"shape|dim", strip=(cases,))


def test_wrong_dtype_in_pb(anvil, cases, relu_model):
    ints = write_tensor_pb(cases / "ints.pb", np.ones(SHAPE, np.int32), "data_in")
    result = anvil("run", relu_model, "-i", f"data_in={ints}", timeout=TIMEOUT_S)
    check_error(result, EXIT_INVALID_ARGUMENT, r"data_in", r"type|int32|float", strip=(cases,))


def test_unknown_input_name(anvil, command, relu_model, good_input):
    result = anvil_model(anvil, command, relu_model, "-i", f"nosuch={good_input}")
    check_error(result, EXIT_INVALID_ARGUMENT, r"nosuch")


def test_missing_input(anvil, cases):
    """Some but not all inputs given: the missing one is named."""
    model = make_add_model(cases / "add.onnx", inputs=("lhs", "rhs"))
    lhs = np_save(cases / "lhs.npy", np.ones(SHAPE, np.float32))
    result = anvil("run", model, "-i", f"lhs={lhs}", timeout=TIMEOUT_S)
    check_error(result, EXIT_INVALID_ARGUMENT, r"rhs", strip=(cases,))


def test_missing_input_file(anvil, command, cases, relu_model):
    result = anvil_model(anvil, command, relu_model, "-i", f"data_in={cases / 'absent_input.npy'}")
    check_error(result, EXIT_INVALID_ARGUMENT, r"absent_input")


@pytest.mark.parametrize("kind", ["npy", "pb"])
def test_garbage_input_file(anvil, command, cases, relu_model, kind):
    junk = cases / f"junk_tensor.{kind}"
    junk.write_bytes(b"\x93NUMPY but not really\n" + bytes(range(256)) * 4)
    result = anvil_model(anvil, command, relu_model, "-i", f"data_in={junk}")
    check_error(result, EXIT_INVALID_ARGUMENT, r"junk_tensor", strip=())
    check_error(result, EXIT_INVALID_ARGUMENT, NOT_A_TENSOR, strip=(cases,))


def test_truncated_npy(anvil, command, cases, relu_model):
    """A valid .npy header whose data ends early."""
    whole = np_save(cases / "whole_in.npy", np.ones(SHAPE, np.float32)).read_bytes()
    short = cases / "short_in.npy"
    short.write_bytes(whole[:-10])
    result = anvil_model(anvil, command, relu_model, "-i", f"data_in={short}")
    check_error(result, EXIT_INVALID_ARGUMENT, r"short_in")


@pytest.mark.parametrize("preamble", [b"\x93NUMPY\x01\x00\x00\x00xx", b"\x93NUMPY\x01\x00\x00\x00x",
                                      b"\x93NUMPY\x02\x00\x00\x00x", b"\x93NUMPY\x01\x00\xff\xff"])
def test_npy_header_shorter_than_its_preamble(anvil, command, cases, relu_model, preamble):
    """A header of length 0 (the data would start inside the preamble), a version-2 preamble cut short, a header
    longer than the file."""
    short = cases / "empty_header.npy"
    short.write_bytes(preamble)
    result = anvil_model(anvil, command, relu_model, "-i", f"data_in={short}")
    check_error(result, EXIT_INVALID_ARGUMENT, r"empty_header", strip=())
    check_error(result, EXIT_INVALID_ARGUMENT, NOT_A_TENSOR, strip=(cases,))


def test_input_file_is_a_directory(anvil, cases, relu_model):
    folder = cases / "in_folder.npy"
    folder.mkdir(exist_ok=True)
    result = anvil("run", relu_model, "-i", f"data_in={folder}", timeout=TIMEOUT_S)
    check_error(result, EXIT_INVALID_ARGUMENT, r"in_folder")


# --------------------------------------------------------------------------
# Bad command lines
# --------------------------------------------------------------------------

def test_unknown_subcommand(anvil):
    check_error(anvil("frobnicate", timeout=TIMEOUT_S), EXIT_USAGE, r"frobnicate")


def test_unknown_flag(anvil, relu_model):
    result = anvil("run", relu_model, "--no-such-flag", timeout=TIMEOUT_S)
    check_error(result, EXIT_USAGE, r"no-such-flag")


def test_run_without_model(anvil):
    check_error(anvil("run", timeout=TIMEOUT_S), EXIT_USAGE, r"model")


def test_input_without_equals(anvil, cases, relu_model, good_input):
    result = anvil("run", relu_model, "-i", str(good_input), timeout=TIMEOUT_S)
    check_error(result, EXIT_INVALID_ARGUMENT, r"-i\b|--input|NAME=FILE|=", strip=(cases,))


@pytest.mark.parametrize("value", ["-3", "abc"])
def test_bad_threads(anvil, command, relu_model, value):
    result = anvil_model(anvil, command, relu_model, "--threads", value)
    check_error(result, EXIT_USAGE, r"threads")


@pytest.mark.parametrize("flag", ["--iters", "--cycles"])
def test_bench_zero_count(anvil, relu_model, flag):
    result = anvil("bench", relu_model, flag, "0", timeout=TIMEOUT_S)
    check_error(result, EXIT_USAGE, flag.lstrip("-"))


@pytest.mark.parametrize("mode", ["latency", "throughput"])
def test_bench_batch_on_a_fixed_batch_model(anvil, relu_model, mode):
    # The relu model's first dimension is fixed at 1: a throughput counted as
    # 4 rows per run would be made up.
    result = anvil("bench", relu_model, "--batch", "4", "--mode", mode, "--cycles", "1", "--iters", "1",
                   "--requests", "1", timeout=TIMEOUT_S)
    check_error(result, EXIT_INVALID_ARGUMENT, r"--batch 4 sizes no input")


def test_bench_batch_on_a_symbolic_batch_model(anvil, cases):
    model = make_relu_model(cases / "relu_batch.onnx", shape=("batch", 3, 4, 4))
    result = anvil("bench", model, "--batch", "4", "--cycles", "1", "--iters", "1", "--warmup", "0",
                   timeout=TIMEOUT_S)
    assert result.returncode == 0, result.stderr
    assert "batch 4" in result.stdout


def test_conformance_missing_folder(anvil, cases):
    result = anvil("conformance", cases / "no_such_case", timeout=TIMEOUT_S)
    check_error(result, EXIT_INVALID_ARGUMENT, r"no_such_case")


# --------------------------------------------------------------------------
# anvil inspect
# --------------------------------------------------------------------------

def test_inspect_missing_and_truncated_models(anvil, cases):
    check_error(anvil("inspect", cases / "absent_model.onnx", timeout=TIMEOUT_S), EXIT_INVALID_ARGUMENT,
                r"absent_model", strip=())
    whole = make_conv_relu_model(cases / "whole_inspect.onnx").read_bytes()
    cut = cases / "cut_inspect.onnx"
    cut.write_bytes(whole[: len(whole) // 2])
    check_error(anvil("inspect", cut, timeout=TIMEOUT_S), EXIT_INVALID_MODEL, NOT_PARSEABLE, strip=(cases,))


def test_inspect_declared_type_contradicting_the_op(anvil, cases):
    """Relu of a [2,3] input declared [3,2]: schema inference refuses it, naming node and value."""
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"], name="relu0")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 2])])
    path = cases / "contradiction.onnx"
    path.write_bytes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString())
    for command in ("inspect", "run"):
        check_error(anvil(command, path, timeout=TIMEOUT_S), EXIT_INVALID_MODEL,
                    r"relu0.*declared float32\[3,2\] but the op computes float32\[2,3\]")
