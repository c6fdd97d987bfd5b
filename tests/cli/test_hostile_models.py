"""Hostile model files: each class of malformed model that once crashed or hung
Anvil (inside libonnx's checker and shape inference, or in Anvil's own
allocation) must now end with one clean error line and the contract's exit code.

The cases are built with onnx.helper without the checker (they are invalid on
purpose), and every run has a timeout: a hang fails the test.
"""

from __future__ import annotations

import os
import re

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from anvil_testing import (EXIT_INVALID_ARGUMENT, EXIT_INVALID_MODEL, EXIT_OUT_OF_MEMORY, EXIT_UNSUPPORTED,
                           float_info, read_tensor_pb, save_model)
from test_bad_input import check_error

TIMEOUT_S = 60


@pytest.fixture(scope="module")
def cases(tmp_path_factory):
    return tmp_path_factory.mktemp("hostile")


def save(graph, path, opset=13):
    return save_model(graph, path, opset=opset, check=False)


def run(anvil, model, *extra):
    return anvil("run", model, *extra, timeout=TIMEOUT_S)


# --------------------------------------------------------------------------
# Attributes that divide or size loops
# --------------------------------------------------------------------------

@pytest.mark.parametrize("op,attr,value", [
    ("Conv", "strides", [0, 1]),
    ("Conv", "dilations", [1, 0]),
    ("Conv", "group", 0),
    ("MaxPool", "strides", [0, 0]),
    ("MaxPool", "kernel_shape", [0, 2]),
    ("AveragePool", "pads", [-1, 0, 0, 0]),
])
def test_window_attribute_out_of_range(anvil, cases, op, attr, value):
    inputs = ["x", "w"] if op == "Conv" else ["x"]
    attrs = {"kernel_shape": [2, 2]} if op != "Conv" else {}
    attrs[attr] = value
    w = numpy_helper.from_array(np.ones((4, 3, 2, 2), np.float32), "w")
    graph = helper.make_graph([helper.make_node(op, inputs, ["y"], name="n0", **attrs)], "g",
                              [float_info("x", (1, 3, 8, 8))], [float_info("y", (1, 4, 7, 7))],
                              [w] if op == "Conv" else [])
    model = save(graph, cases / f"{op}_{attr}.onnx")
    check_error(run(anvil, model), EXIT_INVALID_MODEL, op, attr, strip=(cases,))


@pytest.mark.parametrize("label,attrs,pattern", [
    ("past_inputs", dict(ops=[6], operands=[3], args=[7], scalars=[0.0]), "input 7"),
    ("negative_op", dict(ops=[-1], operands=[0], args=[0], scalars=[0.0]), "not a chain step"),
    ("too_many_steps", dict(ops=[0] * 100, operands=[0] * 100, args=[0] * 100, scalars=[0.0]), "steps"),
    ("lists_disagree", dict(ops=[6, 6], operands=[1], args=[0], scalars=[1.0]), "steps"),
])
def test_elementwise_chain_program_from_a_file(anvil, cases, label, attrs, pattern):
    """anvil optimize writes com.anvil ElementwiseChain nodes; a file's program is checked before it runs."""
    graph = helper.make_graph([helper.make_node("ElementwiseChain", ["x"], ["y"], domain="com.anvil", **attrs)], "g",
                              [float_info("x", (2, 4))], [float_info("y", (2, 4))])
    model = save_model(graph, cases / f"chain_{label}.onnx", check=False, extra_opsets=[("com.anvil", 1)])
    check_error(run(anvil, model), EXIT_INVALID_MODEL, "ElementwiseChain", pattern, strip=(cases,))


def test_fused_gemm_from_a_file_that_does_not_multiply(anvil, cases):
    """anvil optimize writes com.anvil FusedGemm nodes; a file's operands are checked before they run."""
    graph = helper.make_graph([helper.make_node("FusedGemm", ["a", "b"], ["y"], domain="com.anvil", activation="Relu")],
                              "g", [float_info("a", (3, 4)), float_info("b", (5, 6))], [float_info("y", (3, 6))])
    model = save_model(graph, cases / "fused_gemm.onnx", check=False, extra_opsets=[("com.anvil", 1)])
    check_error(run(anvil, model), EXIT_INVALID_MODEL, "FusedGemm", strip=(cases,))


@pytest.mark.parametrize("label,w_shape,w_dw_shape,attrs,pattern", [
    ("stride_3", (8, 4, 1, 1), (8, 1, 3, 3), dict(stride=3), "stride 3 must be 1 or 2"),
    ("no_stride", (8, 4, 1, 1), (8, 1, 3, 3), {}, "stride"),
    ("3x3_first", (8, 4, 3, 3), (8, 1, 3, 3), dict(stride=1), "1x1 window"),
    ("dw_channels", (8, 4, 1, 1), (6, 1, 3, 3), dict(stride=1), "depthwise 3x3"),
    ("dw_5x5", (8, 4, 1, 1), (8, 1, 5, 5), dict(stride=1), "depthwise 3x3"),
    ("activation", (8, 4, 1, 1), (8, 1, 3, 3), dict(stride=1, activation="Nope"), "Nope"),
    ("no_channels", (0, 4, 1, 1), (0, 1, 3, 3), dict(stride=1), "no output channels"),
])
def test_fused_conv_depthwise_from_a_file(anvil, cases, label, w_shape, w_dw_shape, attrs, pattern):
    """The session writes nothing, but a file may hold com.anvil FusedConvDepthwise nodes: each is checked."""
    weights = [numpy_helper.from_array(np.ones(w_shape, np.float32), "w"),
               numpy_helper.from_array(np.ones(w_dw_shape, np.float32), "w_dw")]
    graph = helper.make_graph([helper.make_node("FusedConvDepthwise", ["x", "w", "", "w_dw"], ["y"], name="f0",
                                                domain="com.anvil", **attrs)],
                              "g", [float_info("x", (1, 4, 6, 6))], [float_info("y", (1, 8, 6, 6))], weights)
    model = save_model(graph, cases / f"conv_dw_{label}.onnx", check=False, extra_opsets=[("com.anvil", 2)])
    check_error(run(anvil, model), EXIT_INVALID_MODEL, "FusedConvDepthwise", pattern, strip=(cases,))


@pytest.mark.parametrize("label,op,inputs,x_shape,attrs,pattern", [
    ("overflow", "TokensToImage", ["x"], (1, 4, 2), dict(spatial=[1 << 40, 1 << 40]), "fits int64"),
    ("negative", "TokensToImage", ["x"], (1, 4, 2), dict(spatial=[-2, -2]), "must be positive"),
    ("four_dims", "TokensToImage", ["x"], (1, 4, 2), dict(spatial=[1, 1, 2, 2]), "1 to 3 are supported"),
    ("no_spatial", "TokensToImage", ["x"], (1, 4, 2), {}, "spatial"),
    ("misfit", "TokensToImage", ["x"], (1, 6, 2), dict(spatial=[4, 4]), "the image 4x4 holds 16"),
    ("tokens_rank_2", "TokensToImage", ["x"], (4, 2), dict(spatial=[2]), r"\[N, positions..., C\]"),
    ("image_rank_6", "ImageToTokens", ["x"], (1, 2, 2, 2, 2, 2), {}, "1 to 3 spatial dims"),
    ("two_inputs", "ImageToTokens", ["x", "x"], (1, 2, 2, 2), {}, "takes one input, got 2"),
])
def test_tokens_and_images_from_a_file(anvil, cases, label, op, inputs, x_shape, attrs, pattern):
    """anvil optimize writes com.anvil TokensToImage / ImageToTokens nodes; a file's are checked before they run."""
    graph = helper.make_graph([helper.make_node(op, inputs, ["y"], name="t0", domain="com.anvil", **attrs)], "g",
                              [float_info("x", x_shape)], [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = save_model(graph, cases / f"tokens_{label}.onnx", check=False, extra_opsets=[("com.anvil", 2)])
    check_error(run(anvil, model), EXIT_INVALID_MODEL, op, pattern, strip=(cases,))


@pytest.mark.parametrize("layer", ["MatMul", "Gemm"])
def test_linear_then_batchnorm_of_the_wrong_length(anvil, cases, layer):
    """A BatchNormalization after a linear layer whose parameters do not match its features is left for the
    normalization's kernel to refuse (fold_linear_batchnorm folds only what fits)."""
    inits = [numpy_helper.from_array(np.ones((8, 5), np.float32), "w")]
    inits += [numpy_helper.from_array(np.ones(4, np.float32), n) for n in ("g", "b", "m", "v")]
    graph = helper.make_graph([helper.make_node(layer, ["x", "w"], ["p"], name="linear"),
                               helper.make_node("BatchNormalization", ["p", "g", "b", "m", "v"], ["y"], name="bn")],
                              "g", [float_info("x", (4, 8))], [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              inits)
    model = save_model(graph, cases / f"linear_bn_{layer}.onnx", check=False)
    check_error(run(anvil, model), EXIT_INVALID_ARGUMENT, "BatchNormalization", r"scale.*\[4\]", strip=(cases,))


def test_fused_conv_depthwise_of_doubles_from_a_file(anvil, cases):
    """The node is float32 only (what the pass makes): other types are refused, not run."""
    weights = [numpy_helper.from_array(np.ones((8, 4, 1, 1)), "w"), numpy_helper.from_array(np.ones((8, 1, 3, 3)), "w_dw")]
    graph = helper.make_graph([helper.make_node("FusedConvDepthwise", ["x", "w", "", "w_dw"], ["y"], name="f0",
                                                domain="com.anvil", stride=1)],
                              "g", [helper.make_tensor_value_info("x", TensorProto.DOUBLE, (1, 4, 6, 6))],
                              [helper.make_tensor_value_info("y", TensorProto.DOUBLE, (1, 8, 6, 6))], weights)
    model = save_model(graph, cases / "conv_dw_doubles.onnx", check=False, extra_opsets=[("com.anvil", 2)])
    result = run(anvil, model)
    check_error(result, result.returncode, "FusedConvDepthwise", "float64|double", strip=(cases,))
    assert result.returncode in (EXIT_INVALID_MODEL, EXIT_UNSUPPORTED), result.returncode


def test_internal_domain_is_not_read_from_files(anvil, cases):
    """Training's internal ops (domain 'anvil') are refused by name, not run from a file."""
    graph = helper.make_graph([helper.make_node("GemmReluGrad", ["a", "b", "g"], ["y"], domain="anvil")], "g",
                              [float_info("a", (3, 4)), float_info("b", (4, 6)), float_info("g", (3, 6))],
                              [float_info("y", (3, 6))])
    model = save_model(graph, cases / "internal.onnx", check=False, extra_opsets=[("anvil", 1)])
    check_error(run(anvil, model), EXIT_UNSUPPORTED, "internal", strip=(cases,))


def test_depth_to_space_huge_blocksize(anvil, cases):
    graph = helper.make_graph([helper.make_node("DepthToSpace", ["x"], ["y"], name="d2s", blocksize=2**32)], "g",
                              [float_info("x", (1, 4, 2, 2))], [float_info("y", (1, 1, 4, 4))])
    model = save(graph, cases / "d2s.onnx")
    check_error(run(anvil, model), EXIT_INVALID_MODEL, r"blocksize", strip=(cases,))


@pytest.mark.parametrize("declared", ["scalar", "unshaped"])
def test_max_unpool_of_a_scalar(anvil, cases, declared):
    """MaxUnpool with output_shape and X a scalar (found by make fuzz): declared, the schema refuses it; with
    no shape declared and a scalar fed, the kernel does. Its spatial count wrapped around before."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [] if declared == "scalar" else None)
    graph = helper.make_graph([helper.make_node("MaxUnpool", ["x", "i", "shape"], ["y"], name="unpool",
                                                kernel_shape=[2, 2], strides=[2, 2])], "g",
                              [x, helper.make_tensor_value_info("i", TensorProto.INT64, (1, 1, 2, 2))],
                              [float_info("y", (1, 1, 4, 4))],
                              [numpy_helper.from_array(np.array([1, 1, 4, 4], dtype=np.int64), "shape")])
    model = save(graph, cases / f"unpool_{declared}.onnx", opset=11)
    np.save(cases / "scalar.npy", np.array(1.0, dtype=np.float32))
    np.save(cases / "indices.npy", np.arange(4, dtype=np.int64).reshape(1, 1, 2, 2))
    extra = [] if declared == "scalar" else ["--input", f"x={cases / 'scalar.npy'}", f"i={cases / 'indices.npy'}"]
    code = EXIT_INVALID_MODEL if declared == "scalar" else EXIT_INVALID_ARGUMENT
    check_error(run(anvil, model, *extra), code, r"must be \[N, C, D1, \.\.\.\]", strip=(cases,))


@pytest.mark.parametrize("indices", ["omitted", "float"])
def test_max_unpool_without_int64_indices(anvil, cases, indices):
    """MaxUnpool's indices I are required and int64. Omitted (an empty name, found by make fuzz) the kernel read a
    null input (UBSan: reference binding to null); as float32 it read them as int64, past their end. The schema
    refuses both in one line (the kernel checks again, for types known only at run time)."""
    if indices == "omitted":
        inputs, i_info = ["x", ""], []
    else:
        inputs = ["x", "i"]
        i_info = [helper.make_tensor_value_info("i", TensorProto.FLOAT, (1, 1, 2, 2))]
    graph = helper.make_graph([helper.make_node("MaxUnpool", inputs, ["y"], kernel_shape=[2, 2], strides=[2, 2])],
                              "g", [float_info("x", (1, 1, 2, 2))] + i_info, [float_info("y", (1, 1, 4, 4))])
    model = save(graph, cases / f"unpool_indices_{indices}.onnx", opset=11)
    np.save(cases / "unpool_x.npy", np.ones((1, 1, 2, 2), np.float32))
    np.save(cases / "unpool_i_float.npy", np.arange(4, dtype=np.float32).reshape(1, 1, 2, 2))
    extra = ["--input", f"x={cases / 'unpool_x.npy'}"]
    if indices != "omitted":
        extra.append(f"i={cases / 'unpool_i_float.npy'}")
    check_error(run(anvil, model, *extra), EXIT_INVALID_MODEL, r"MaxUnpool",
                r"input 1 is required but missing|indices I must be int64, got float32", strip=(cases,))


@pytest.mark.parametrize("op,indices", [("ScatterElements", [0, 3]), ("ScatterND", [[0], [3]])])
def test_scatter_updates_of_another_type(anvil, cases, op, indices):
    """float32 updates into float64 data: the kernels read the updates as the data's type (8 bytes each from a
    buffer of 4 each) unless the type is refused."""
    idx = np.array(indices, np.int64)
    graph = helper.make_graph([helper.make_node(op, ["d", "i", "u"], ["y"], name="scatter")], "g",
                              [helper.make_tensor_value_info("d", TensorProto.DOUBLE, [4]), float_info("u", (2,))],
                              [helper.make_tensor_value_info("y", TensorProto.DOUBLE, [4])],
                              [numpy_helper.from_array(idx, "i")])
    model = save(graph, cases / f"{op}_types.onnx")
    check_error(run(anvil, model), EXIT_INVALID_MODEL, r"updates are float32 but the data float64", strip=(cases,))


# --------------------------------------------------------------------------
# Initializers whose data does not match their dims
# --------------------------------------------------------------------------

def short_int64(name, dims):
    """An int64 initializer whose raw_data holds one element fewer than dims say."""
    t = TensorProto()
    t.name = name
    t.data_type = TensorProto.INT64
    t.dims.extend(dims)
    count = int(np.prod(dims))
    t.raw_data = np.arange(max(count - 1, 0), dtype=np.int64).tobytes()
    return t


@pytest.mark.parametrize("op", ["Reshape", "Slice", "Split", "Pad", "ReduceSum"])
def test_short_raw_data(anvil, cases, op):
    if op == "Reshape":
        nodes, inits = [helper.make_node("Reshape", ["x", "s"], ["y"])], [short_int64("s", [2])]
    elif op == "Slice":
        nodes = [helper.make_node("Slice", ["x", "s", "e"], ["y"])]
        inits = [short_int64("s", [2]), numpy_helper.from_array(np.array([1, 1], np.int64), "e")]
    elif op == "Split":
        nodes, inits = [helper.make_node("Split", ["x", "s"], ["y", "z"], axis=1)], [short_int64("s", [2])]
    elif op == "Pad":
        nodes, inits = [helper.make_node("Pad", ["x", "s"], ["y"])], [short_int64("s", [8])]
    else:
        nodes, inits = [helper.make_node("ReduceSum", ["x", "s"], ["y"])], [short_int64("s", [1])]
    outputs = [float_info("y", (1,))] + ([float_info("z", (1,))] if op == "Split" else [])
    graph = helper.make_graph(nodes, "g", [float_info("x", (2, 2, 2, 2))], outputs, inits)
    model = save(graph, cases / f"short_{op}.onnx")
    check_error(run(anvil, model), EXIT_INVALID_MODEL, r"'s'", r"raw data|bytes", strip=(cases,))


def test_typed_data_count_mismatch(anvil, cases):
    w = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[3, 3], float_data=[1.0, 2.0])  # 2 of 9 values
    graph = helper.make_graph([helper.make_node("Add", ["x", "w"], ["y"])], "g",
                              [float_info("x", (3, 3))], [float_info("y", (3, 3))], [w])
    model = save(graph, cases / "typed_short.onnx")
    check_error(run(anvil, model), EXIT_INVALID_MODEL, r"'w'", r"values", strip=(cases,))


def test_negative_initializer_dim(anvil, cases):
    w = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[-3])
    graph = helper.make_graph([helper.make_node("Add", ["x", "w"], ["y"])], "g",
                              [float_info("x", (3,))], [float_info("y", (3,))], [w])
    check_error(run(anvil, save(graph, cases / "negdim.onnx")), EXIT_INVALID_MODEL, r"'w'", r"negative",
                strip=(cases,))


# --------------------------------------------------------------------------
# Counts that overflow int64, and sizes larger than memory
# --------------------------------------------------------------------------

def test_initializer_element_count_overflows(anvil, cases):
    w = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[2**40, 2**40])
    graph = helper.make_graph([helper.make_node("Add", ["x", "w"], ["y"])], "g",
                              [float_info("x", (1,))], [float_info("y", (1,))], [w])
    check_error(run(anvil, save(graph, cases / "overflow_init.onnx")), EXIT_INVALID_MODEL, r"'w'", r"overflow",
                strip=(cases,))


def test_input_element_count_overflows(anvil, cases):
    """Random inputs for a declared shape whose element count overflows int64."""
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                              [float_info("x", (2**40, 2**40))], [float_info("y", (2**40, 2**40))])
    result = run(anvil, save(graph, cases / "overflow_input.onnx"))
    check_error(result, EXIT_INVALID_ARGUMENT, r"overflow", strip=(cases,))


def test_input_larger_than_memory(anvil, cases):
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                              [float_info("x", (2**20, 2**20))], [float_info("y", (2**20, 2**20))])
    result = run(anvil, save(graph, cases / "huge_input.onnx"))
    check_error(result, EXIT_OUT_OF_MEMORY, r"bytes", strip=(cases,))


def test_huge_pad(anvil, cases):
    """A Pad of 2^40 must fail at once, not allocate until the machine swaps."""
    pads = numpy_helper.from_array(np.array([0, 2**40, 0, 2**40], np.int64), "pads")
    graph = helper.make_graph([helper.make_node("Pad", ["x", "pads"], ["y"], name="pad0")], "g",
                              [float_info("x", (2, 2))], [float_info("y", (2, None))], [pads])
    result = run(anvil, save(graph, cases / "huge_pad.onnx"))
    check_error(result, EXIT_OUT_OF_MEMORY, r"bytes", strip=(cases,))


def test_attention_without_key_heads(anvil, cases):
    """An Attention whose K has 0 heads (found by make fuzz): the schema divided the query heads by it."""
    graph = helper.make_graph([helper.make_node("Attention", ["q", "k", "v"], ["y"], name="attention")], "g",
                              [float_info("q", (2, 4, 4, 8)), float_info("k", (2, 0, 6, 8)),
                               float_info("v", (2, 2, 6, 6))], [float_info("y", (2, 4, 4, 6))])
    model = save(graph, cases / "attention_no_heads.onnx", opset=23)
    check_error(run(anvil, model), EXIT_INVALID_MODEL, r"no key/value heads", strip=(cases,))


@pytest.mark.parametrize("opt", ["0", "3"])
def test_attention_types(anvil, cases, opt):
    """ONNX's Attention takes Q, K and past_key in one type (T1), V and past_value in another (T2). A float16 K
    beside a float32 Q (found by make fuzz) was read as float32, past its end; now the model is refused. A
    float16 V (valid ONNX) is declined by the kernels, in one line. (The float16 operands are Casts: `anvil run`
    makes float inputs.)"""
    def attention_with_half(name, causal):
        cast = helper.make_node("Cast", [name], [name + "16"], to=TensorProto.FLOAT16)
        inputs = [n + "16" if n == name else n for n in ("q", "k", "v")]
        node = helper.make_node("Attention", inputs, ["y"], is_causal=causal)
        graph = helper.make_graph([cast, node], "g", [float_info(n, (1, 2, 2, 8)) for n in ("q", "k", "v")],
                                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
        return save(graph, cases / f"attention_half_{name}.onnx", opset=23)

    check_error(run(anvil, attention_with_half("k", 1), "-O", opt), EXIT_INVALID_MODEL,
                r"K is float16 but Q is float32", strip=(cases,))
    check_error(run(anvil, attention_with_half("v", 0), "-O", opt), EXIT_UNSUPPORTED,
                r"V as float16 beside Q as float32", strip=(cases,))


def _typed_case(label):
    """The models of test_inputs_of_one_type: (graph, opset), each pairing a float64 input with a float32 one
    that the op's kernel read as float64 (found by a review after the Attention finding; ASan confirmed an
    out-of-bounds read in each), or a string ConstantOfShape value copied into 8 bytes."""
    D, F = TensorProto.DOUBLE, TensorProto.FLOAT
    ones = lambda n, shape: numpy_helper.from_array(np.ones(shape, np.float32), n)
    zeros = lambda n, shape: numpy_helper.from_array(np.zeros(shape, np.float32), n)
    out = [helper.make_tensor_value_info("y", D, None)]
    if label == "instance_norm":
        return helper.make_graph([helper.make_node("InstanceNormalization", ["x", "s", "b"], ["y"])], "g",
                                 [helper.make_tensor_value_info("x", D, (1, 64, 4, 4))], out,
                                 [ones("s", 64), zeros("b", 64)]), 18
    if label == "group_norm":
        return helper.make_graph([helper.make_node("GroupNormalization", ["x", "s", "b"], ["y"], num_groups=4)], "g",
                                 [helper.make_tensor_value_info("x", D, (1, 64, 4, 4))], out,
                                 [ones("s", 64), zeros("b", 64)]), 21
    if label in ("nll_loss", "softmax_ce_loss"):
        op = "NegativeLogLikelihoodLoss" if label == "nll_loss" else "SoftmaxCrossEntropyLoss"
        t = numpy_helper.from_array(np.array([63, 62, 40, 33], np.int64), "t")
        return helper.make_graph([helper.make_node(op, ["x", "t", "w"], ["y"])], "g",
                                 [helper.make_tensor_value_info("x", D, (4, 64))], out, [t, ones("w", 64)]), 18
    if label == "deform_conv":
        return helper.make_graph([helper.make_node("DeformConv", ["x", "w", "off"], ["y"], kernel_shape=[3, 3])], "g",
                                 [helper.make_tensor_value_info("x", D, (1, 8, 6, 6))], out,
                                 [ones("w", (8, 8, 3, 3)), zeros("off", (1, 18, 4, 4))]), 19
    if label == "grid_sample":
        return helper.make_graph([helper.make_node("GridSample", ["x", "grid"], ["y"])], "g",
                                 [helper.make_tensor_value_info("x", D, (1, 1, 4, 4)), float_info("grid", (1, 64, 64, 2))],
                                 out), 16
    if label == "rms_norm":
        return helper.make_graph([helper.make_node("RMSNormalization", ["x", "s"], ["y"])], "g",
                                 [helper.make_tensor_value_info("x", D, (2, 64))], out, [ones("s", 64)]), 23
    assert label == "constant_of_shape_string"
    value = helper.make_tensor("v", TensorProto.STRING, [1], [b"a string longer than eight bytes"])
    shape = numpy_helper.from_array(np.array([3], np.int64), "shape")
    return helper.make_graph([helper.make_node("ConstantOfShape", ["shape"], ["y"], value=value)], "g", [],
                             [helper.make_tensor_value_info("y", TensorProto.STRING, None)], [shape]), 13


@pytest.mark.parametrize("label,code,message", [
    ("instance_norm", EXIT_INVALID_MODEL, r"scale is float32 but input is float64"),
    ("group_norm", EXIT_INVALID_MODEL, r"scale is float32 but X is float64"),
    ("nll_loss", EXIT_INVALID_MODEL, r"weight is float32 but input is float64"),
    ("softmax_ce_loss", EXIT_INVALID_MODEL, r"weights is float32 but scores is float64"),
    ("deform_conv", EXIT_INVALID_MODEL, r"W is float32 but X is float64"),
    ("grid_sample", EXIT_UNSUPPORTED, r"a float32 grid beside float64 X"),     # valid ONNX: T1 and T2
    ("rms_norm", EXIT_UNSUPPORTED, r"a float32 scale beside float64 X"),       # valid ONNX: T and V
    ("constant_of_shape_string", EXIT_INVALID_MODEL, r"value is a string tensor"),
])
def test_inputs_of_one_type(anvil, cases, label, code, message):
    """Inputs that ONNX gives one type variable must have one dtype (OpSchema::same_types); where ONNX allows two
    and the kernel reads both as one, the kernel declines. Each case read past a buffer's end before."""
    graph, opset = _typed_case(label)
    model = save(graph, cases / f"typed_{label}.onnx", opset=opset)
    check_error(run(anvil, model), code, message, strip=(cases,))


def test_if_branches_of_two_types(anvil, cases):
    """An If whose branches give one output two dtypes: its consumers were typed for the then-branch's at import
    and ran on the else-branch's; ONNX gives the branches one type per output, and the model is now refused."""
    def branch(name, dtype, elem):
        value = numpy_helper.from_array(np.ones(8, dtype), name + "_v")
        return helper.make_graph([helper.make_node("Constant", [], [name + "_out"], value=value)], name, [],
                                 [helper.make_tensor_value_info(name + "_out", elem, [8])])
    node = helper.make_node("If", ["cond"], ["y"], then_branch=branch("then", np.float32, TensorProto.FLOAT),
                            else_branch=branch("else", np.float64, TensorProto.DOUBLE))
    graph = helper.make_graph([node, helper.make_node("Relu", ["y"], ["z"])], "g",
                              [helper.make_tensor_value_info("cond", TensorProto.BOOL, [])],
                              [helper.make_tensor_value_info("z", TensorProto.FLOAT, None)])
    model = save(graph, cases / "if_two_types.onnx")
    check_error(run(anvil, model), EXIT_INVALID_MODEL, r"output 0 is float32 in then_branch but float64 in else_branch",
                strip=(cases,))


@pytest.mark.parametrize("padding", ["zeros", "border", "reflection"])
def test_grid_sample_of_an_empty_image(anvil, cases, padding):
    """GridSample over an image with an empty spatial axis (found by make fuzz): the border and reflection modes
    clamped to index -1; there is nothing to sample, and it is refused as ONNX Runtime refuses it."""
    graph = helper.make_graph([helper.make_node("GridSample", ["x", "grid"], ["y"], padding_mode=padding)], "g",
                              [float_info("x", (1, 1, 3, 0)), float_info("grid", (1, 2, 1, 2))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = save(graph, cases / f"grid_sample_empty_{padding}.onnx", opset=16)
    check_error(run(anvil, model), EXIT_INVALID_ARGUMENT, r"X \[1,1,3,0\] has an empty spatial axis", strip=(cases,))


def test_grid_sample_of_an_integer_image(anvil, cases):
    """ONNX lets GridSample's X be any type (T1); Anvil's kernel samples floats. Declined (exit 3), not refused as an
    invalid model."""
    graph = helper.make_graph([helper.make_node("GridSample", ["x", "grid"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.INT32, (1, 1, 2, 2)),
                               float_info("grid", (1, 2, 2, 2))],
                              [helper.make_tensor_value_info("y", TensorProto.INT32, None)])
    model = save(graph, cases / "grid_sample_int.onnx", opset=16)
    check_error(run(anvil, model), EXIT_UNSUPPORTED, r"GridSample: no kernel takes input dtypes \(int32, float32\)",
                strip=(cases,))


@pytest.mark.parametrize("label,frame_step,window", [
    ("empty_step", np.zeros(0, np.int64), None),              # found by make fuzz: .at(0) of no integers
    ("two_steps", np.array([2, 3], np.int64), None),
    ("scalar_window", np.array(2, np.int64), np.float32(1.0)),  # the window's length read from a rank-0 shape
])
def test_stft_lengths_of_the_wrong_shape(anvil, cases, label, frame_step, window):
    """STFT's frame_step must be one integer and its window one axis: otherwise one line, exit 4."""
    inits = [numpy_helper.from_array(frame_step, "frame_step")]
    inputs = ["signal", "frame_step"]
    if window is not None:
        inits.append(numpy_helper.from_array(np.asarray(window), "window"))
        inputs.append("window")
    graph = helper.make_graph([helper.make_node("STFT", inputs, ["y"])], "g", [float_info("signal", (1, 16, 1))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    model = save(graph, cases / f"stft_{label}.onnx", opset=17)
    what = "the window" if window is not None else "frame_step must hold one integer"
    check_error(run(anvil, model), EXIT_INVALID_ARGUMENT, what, strip=(cases,))


@pytest.mark.parametrize("label,starts,ends,code,message", [
    ("no_ends", [1], None, EXIT_INVALID_MODEL, r"needs its inputs 'starts' and 'ends'"),  # found by make fuzz
    ("no_starts", None, [3], EXIT_INVALID_MODEL, r"needs its inputs 'starts' and 'ends'"),
    ("empty_ends", [1], [], EXIT_INVALID_MODEL, r"starts|ends"),
])
def test_slice_without_its_bounds(anvil, cases, label, starts, ends, code, message):
    """A channel Slice of a 4-D image whose starts or ends are omitted or empty: one line, not a read of a bound
    that is not there (the channel-slice kernel took *constant(1) of an omitted input)."""
    inits, names = [], []
    for name, values in (("starts", starts), ("ends", ends)):
        if values is None:
            names.append("")
            continue
        inits.append(numpy_helper.from_array(np.array(values, np.int64), name))
        names.append(name)
    inits.append(numpy_helper.from_array(np.array([1], np.int64), "axes"))
    graph = helper.make_graph([helper.make_node("Slice", ["x", *names, "axes"], ["y"])], "g",
                              [float_info("x", (1, 4, 3, 3))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    model = save(graph, cases / f"slice_{label}.onnx", opset=13)
    for opt in ("0", "3"):
        check_error(run(anvil, model, "-O", opt), code, message, strip=(cases,))


@pytest.mark.parametrize("shape", [(3, 0), (2, 3)])
def test_reduce_ignores_an_axes_attribute_from_opset_18(anvil, cases, shape):
    """From opset 18 a Reduce's axes are an input; a stray `axes` attribute is not ONNX's. The schema ignored it (all
    axes reduced) while the kernel laid its loops out by it: over [3, 0] it divided by the empty kept axis (found by
    make fuzz; UBSan: division by zero). Both now reduce every axis, as numpy does."""
    graph = helper.make_graph([helper.make_node("ReduceLogSum", ["x"], ["y"], axes=[-2])], "g",
                              [float_info("x", shape)], [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = save(graph, cases / f"reduce_log_sum_{shape[1]}.onnx", opset=18)
    x = np.arange(1, 1 + int(np.prod(shape)), dtype=np.float32).reshape(shape)
    np.save(cases / f"reduce_log_sum_{shape[1]}_x.npy", x)
    out = cases / f"reduce_log_sum_{shape[1]}_out"
    result = run(anvil, model, "-i", f"x={cases / f'reduce_log_sum_{shape[1]}_x.npy'}", "-o", str(out))
    assert result.returncode == 0, result.stderr
    with np.errstate(divide="ignore"):
        want = np.log(np.sum(x, keepdims=True))
    got = read_tensor_pb(out / "y.pb")
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-6)


@pytest.mark.parametrize("label,equation,x_shape,y_shape", [
    ("empty_output", "bij,hjk->bik", (4, 0, 3), (5, 3, 2)),   # found by make fuzz: 4 x 1 x 2 elements written
    ("empty_contraction", "ij,jk->ik", (3, 0), (0, 2)),       # an empty sum: zeros
])
def test_einsum_with_empty_dims(anvil, cases, label, equation, x_shape, y_shape):
    """Einsum took each label's size as the largest of its dims, so an empty one (0) became 1: the kernel wrote
    elements of an empty output and read an empty input's. Compared with numpy's einsum."""
    graph = helper.make_graph([helper.make_node("Einsum", ["x", "y"], ["z"], equation=equation)], "g",
                              [float_info("x", x_shape), float_info("y", y_shape)],
                              [helper.make_tensor_value_info("z", TensorProto.FLOAT, None)])
    model = save(graph, cases / f"einsum_{label}.onnx", opset=13)
    x = np.ones(x_shape, np.float32)
    y = np.full(y_shape, 2.0, np.float32)
    np.save(cases / f"einsum_{label}_x.npy", x)
    np.save(cases / f"einsum_{label}_y.npy", y)
    out = cases / f"einsum_{label}_out"
    result = run(anvil, model, "-i", f"x={cases / f'einsum_{label}_x.npy'}", "-i", f"y={cases / f'einsum_{label}_y.npy'}",
                 "-o", str(out))
    assert result.returncode == 0, result.stderr
    want = np.einsum(equation, x, y)
    got = read_tensor_pb(out / "z.pb")
    assert got.shape == want.shape
    np.testing.assert_array_equal(got, want)


def test_resize_roi_in_float16(anvil, cases):
    """tf_crop_and_resize with a float16 roi (ONNX's T2 allows it) was read as float32, past the roi's end;
    the result now matches ONNX Runtime's with the same roi values in float32."""
    import onnxruntime as ort

    roi = np.array([0, 0, 0.25, 0.25, 1, 1, 0.75, 0.75], np.float16)

    def graph(roi_array):
        # sizes, not scales: with scales the spec sizes the output by the roi too, and ONNX Runtime does not
        node = helper.make_node("Resize", ["x", "roi", "", "sizes"], ["y"], mode="linear",
                                coordinate_transformation_mode="tf_crop_and_resize")
        inits = [numpy_helper.from_array(roi_array, "roi"),
                 numpy_helper.from_array(np.array([1, 1, 6, 6], np.int64), "sizes")]
        return helper.make_graph([node], "g", [float_info("x", (1, 1, 4, 4))],
                                 [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)

    x = np.arange(16, dtype=np.float32).reshape(1, 1, 4, 4)
    np.save(cases / "resize_x.npy", x)
    wide = save(graph(roi.astype(np.float32)), cases / "resize_roi32.onnx")
    want = ort.InferenceSession(str(wide), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    half = save(graph(roi), cases / "resize_roi16.onnx")
    result = run(anvil, half, "-i", f"x={cases / 'resize_x.npy'}", "-o", str(cases / "resize_roi16_out"))
    assert result.returncode == 0, result.stderr
    np.testing.assert_allclose(read_tensor_pb(cases / "resize_roi16_out" / "y.pb"), want, rtol=1e-6, atol=1e-5)


def test_resize_that_would_sample_without_end(anvil, cases):
    """Resizes whose sampling would never finish or read before the input: an axis empty in the input but
    not in the output (sizes), and an antialiased filter of 2e8 taps per output (a crop stretched wide, scale
    1e-8). One clear line and exit status each, quickly."""
    empty = helper.make_graph([helper.make_node("Resize", ["x", "", "", "sizes"], ["y"])], "g", [float_info("x", (1, 0))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(np.array([1, 2], np.int64), "sizes")])
    check_error(run(anvil, save(empty, cases / "resize_from_empty.onnx")), EXIT_INVALID_ARGUMENT,
                r"axis 1 is empty in the input but 2 long", strip=(cases,))
    node = helper.make_node("Resize", ["x", "roi", "scales"], ["y"], mode="linear", antialias=1,
                            coordinate_transformation_mode="tf_crop_and_resize")
    wide = helper.make_graph([node], "g", [float_info("x", (1, 4))],
                             [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                             [numpy_helper.from_array(np.array([0, 0, 1, 1e9], np.float32), "roi"),
                              numpy_helper.from_array(np.array([1, 1e-8], np.float32), "scales")])
    check_error(run(anvil, save(wide, cases / "resize_wide_filter.onnx", opset=18)), EXIT_INVALID_ARGUMENT,
                r"takes \d+ taps for each of \d+ outputs", strip=(cases,))


@pytest.mark.parametrize("label,a_shape,w_shape,op,bias", [
    ("gemm_m0", (0, 10), (10, 3), "Gemm", False),      # found by make fuzz: oneDNN divided by zero
    ("gemm_k0_bias", (4, 0), (0, 3), "Gemm", True),
    ("matmul_3d_k0", (1, 4, 0), (0, 3), "MatMul", False),  # the flattening to 2-D divided by K
    ("matmul_n0", (2, 4, 5), (5, 0), "MatMul", False),
])
@pytest.mark.parametrize("opt", ["0", "3"])
def test_empty_products(anvil, cases, label, a_shape, w_shape, op, bias, opt):
    """Products with an empty dimension run (on the reference kernel) and give what the formula does: an empty
    output, or for K = 0 zeros plus the bias; before, oneDNN 2.6.3 or Anvil's own flattening divided by zero."""
    w = np.arange(int(np.prod(w_shape)), dtype=np.float32).reshape(w_shape)
    c = np.array([1.5, -2.0, 3.0], dtype=np.float32)
    inits = [numpy_helper.from_array(w, "w")] + ([numpy_helper.from_array(c, "c")] if bias else [])
    node = helper.make_node(op, ["a", "w"] + (["c"] if bias else []), ["y"], name="product")
    graph = helper.make_graph([node, helper.make_node("Relu", ["y"], ["z"])], "g", [float_info("a", a_shape)],
                              [helper.make_tensor_value_info("z", TensorProto.FLOAT, None)], inits)
    model = save(graph, cases / f"{label}.onnx")
    out = cases / f"{label}_{opt}"
    result = run(anvil, model, "-O", opt, "-o", str(out))
    assert result.returncode == 0, result.stderr
    z = read_tensor_pb(out / "z.pb")
    want_shape = tuple(a_shape[:-1]) + (w_shape[1],)
    assert z.shape == want_shape
    want = np.zeros(want_shape, np.float32) + (np.maximum(c, 0) if bias else 0)
    np.testing.assert_array_equal(z, want)


# --------------------------------------------------------------------------
# External data
# --------------------------------------------------------------------------

def external_model(cases, name, location, extra=()):
    w = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[4])
    w.data_location = TensorProto.EXTERNAL
    for key, value in (("location", location),) + tuple(extra):
        entry = w.external_data.add()
        entry.key, entry.value = key, value
    graph = helper.make_graph([helper.make_node("Add", ["x", "w"], ["y"])], "g",
                              [float_info("x", (4,))], [float_info("y", (4,))], [w])
    folder = cases / name
    folder.mkdir(exist_ok=True)
    return save(graph, folder / "model.onnx"), folder


def test_external_data_fifo(anvil, cases):
    model, folder = external_model(cases, "fifo", "weights.fifo")
    os.mkfifo(folder / "weights.fifo")
    check_error(run(anvil, model), EXIT_INVALID_MODEL, r"regular file", strip=(cases,))


def test_external_data_directory(anvil, cases):
    model, folder = external_model(cases, "dir", "weights.d")
    (folder / "weights.d").mkdir(exist_ok=True)
    check_error(run(anvil, model), EXIT_INVALID_MODEL, r"regular file", strip=(cases,))


@pytest.mark.parametrize("key,value", [("offset", "-4"), ("offset", "12abc"), ("length", "99999999999999999999"),
                                       ("offset", "9223372036854775800")])
def test_external_data_bad_fields(anvil, cases, key, value):
    model, folder = external_model(cases, f"field_{key}_{abs(hash(value))}", "w.bin", ((key, value),))
    (folder / "w.bin").write_bytes(np.ones(4, np.float32).tobytes())
    check_error(run(anvil, model), EXIT_INVALID_MODEL, r"'w'", strip=(cases,))


# --------------------------------------------------------------------------
# Names: control characters never reach the terminal, the message stays one line
# --------------------------------------------------------------------------

def test_control_characters_in_names_are_escaped(anvil, cases):
    graph = helper.make_graph([helper.make_node("NoSuchOp", ["x"], ["y"], name="evil\nname\x1b[31m")], "g",
                              [float_info("x", (1,))], [float_info("y", (1,))])
    result = run(anvil, save(graph, cases / "evil.onnx"))
    line = check_error(result, 3, r"NoSuchOp", r"evil\\x0aname\\x1b", strip=(cases,))
    assert "\x1b" not in result.stderr


def test_subgraph_nesting_is_bounded(anvil, cases):
    leaf = helper.make_graph([helper.make_node("Identity", ["c"], ["o"])], "leaf", [], [float_info("o", (1,))])
    body = leaf
    for depth in range(20):  # one nested branch per level: the file stays linear in the depth
        node = helper.make_node("If", ["c"], ["o"], then_branch=body, else_branch=leaf, name=f"if{depth}")
        body = helper.make_graph([node], f"level{depth}", [], [float_info("o", (1,))])
    graph = helper.make_graph(body.node, "g", [helper.make_tensor_value_info("c", TensorProto.BOOL, [])],
                              [float_info("o", (1,))])
    check_error(run(anvil, save(graph, cases / "deep.onnx")), EXIT_INVALID_MODEL, r"nested", strip=(cases,))


@pytest.mark.parametrize("label,attrs,x_shape,pattern", [
    ("group_0", dict(group=0), (1, 6, 4, 4), "group 0 must be at least 1"),
    ("no_group", {}, (1, 6, 4, 4), "group"),
    ("indivisible", dict(group=4), (1, 6, 4, 4), "not a multiple of the group 4"),
    ("rank_2", dict(group=2), (6, 4), "must be \\[N, C, D1, ...\\]"),
])
def test_channel_shuffle_from_a_file(anvil, cases, label, attrs, x_shape, pattern):
    """A file may hold com.anvil ChannelShuffle nodes (anvil optimize writes them): each is checked."""
    graph = helper.make_graph([helper.make_node("ChannelShuffle", ["x"], ["y"], name="s0", domain="com.anvil",
                                                **attrs)],
                              "g", [float_info("x", x_shape)], [float_info("y", x_shape)])
    model = save_model(graph, cases / f"shuffle_{label}.onnx", check=False, extra_opsets=[("com.anvil", 2)])
    check_error(run(anvil, model), EXIT_INVALID_MODEL, "ChannelShuffle", pattern, strip=(cases,))


@pytest.mark.parametrize("label,param_shape,attrs,code,pattern", [
    ("params_3", (3,), dict(activation="Relu"), EXIT_INVALID_MODEL, "input 1 \\[3\\] must be \\[C\\]"),
    ("activation", (4,), dict(activation="Nope"), EXIT_INVALID_MODEL, "unknown activation 'Nope'"),
])
def test_fused_batch_norm_from_a_file(anvil, cases, label, param_shape, attrs, code, pattern):
    """A file may hold com.anvil FusedBatchNorm nodes (anvil optimize writes them): each is checked."""
    params = [numpy_helper.from_array(np.ones(param_shape, np.float32), n) for n in ("s", "b", "m", "v")]
    graph = helper.make_graph([helper.make_node("FusedBatchNorm", ["x", "s", "b", "m", "v"], ["y"], name="bn0",
                                                domain="com.anvil", **attrs)],
                              "g", [float_info("x", (1, 4, 3, 3))], [float_info("y", (1, 4, 3, 3))], params)
    model = save_model(graph, cases / f"bn_{label}.onnx", check=False, extra_opsets=[("com.anvil", 2)])
    check_error(run(anvil, model), code, "FusedBatchNorm", pattern, strip=(cases,))


@pytest.mark.parametrize("label,w1_shape,w2_shape,attrs,x_shape,code,pattern", [
    ("w2_reads_3", (2, 8, 1, 1), (8, 3, 1, 1), {}, (1, 8, 3, 3), EXIT_INVALID_MODEL, "W2 \\[8,3,1,1\\] \\[8, R, 1, 1\\]"),
    ("window_3x3", (2, 8, 3, 3), (8, 2, 1, 1), {}, (1, 8, 3, 3), EXIT_INVALID_MODEL, "1x1 windows"),
    ("x_rank_3", (2, 8, 1, 1), (8, 2, 1, 1), {}, (1, 8, 3), EXIT_INVALID_MODEL, "must be 4-D"),
    ("empty_plane", (2, 8, 1, 1), (8, 2, 1, 1), {}, (1, 8, 0, 3), EXIT_INVALID_MODEL, "empty plane"),
    ("gate", (2, 8, 1, 1), (8, 2, 1, 1), dict(gate="Nope"), (1, 8, 3, 3), EXIT_INVALID_MODEL, "unknown gate 'Nope'"),
])
def test_squeeze_excite_from_a_file(anvil, cases, label, w1_shape, w2_shape, attrs, x_shape, code, pattern):
    """A file may hold com.anvil SqueezeExcite nodes (anvil optimize writes them): each is checked."""
    weights = [numpy_helper.from_array(np.ones(s, np.float32), n) for n, s in (("w1", w1_shape), ("w2", w2_shape))]
    graph = helper.make_graph([helper.make_node("SqueezeExcite", ["x", "w1", "", "w2"], ["y"], name="se0",
                                                domain="com.anvil", **attrs)],
                              "g", [float_info("x", x_shape)], [float_info("y", (*x_shape[:2], *[1] * (len(x_shape) - 2)))],
                              weights)
    model = save_model(graph, cases / f"se_{label}.onnx", check=False, extra_opsets=[("com.anvil", 2)])
    check_error(run(anvil, model), code, "SqueezeExcite", pattern, strip=(cases,))


def test_squeeze_excite_of_a_sequence_from_a_file(anvil, cases):
    """A SqueezeExcite whose X is a sequence, not a tensor: one error naming the node, no crash."""
    weights = [numpy_helper.from_array(np.ones(s, np.float32), n) for n, s in (("w1", (2, 8, 1, 1)), ("w2", (8, 2, 1, 1)))]
    graph = helper.make_graph([helper.make_node("SequenceConstruct", ["x"], ["s"]),
                               helper.make_node("SqueezeExcite", ["s", "w1", "", "w2"], ["y"], name="se0",
                                                domain="com.anvil")],
                              "g", [float_info("x", (1, 8, 3, 3))], [float_info("y", (1, 8, 1, 1))], weights)
    model = save_model(graph, cases / "se_sequence.onnx", check=False, extra_opsets=[("com.anvil", 2)])
    check_error(run(anvil, model), EXIT_INVALID_MODEL, "SqueezeExcite", "not a tensor", strip=(cases,))


# --------------------------------------------------------------------------
# dim_params written like the symbols inference makes
# --------------------------------------------------------------------------

def test_dim_params_spelled_like_inferred_symbols_stay_unknown(anvil, cases):
    """An input dim named "min(seq,512)", "64*seq" or "4" would otherwise read
    as the min, the product or the number inference makes (broadcast against
    `seq` as seq, divided by 64, multiplied out): such a name is an unknown
    dim, and a run that gives it its own size is not mistaken for another."""
    graph = helper.make_graph(
        [helper.make_node("Add", ["a", "b"], ["y"]), helper.make_node("Identity", ["c"], ["z"]),
         helper.make_node("Flatten", ["d"], ["w"], axis=2)], "named",
        [helper.make_tensor_value_info("a", TensorProto.FLOAT, ["seq"]),
         helper.make_tensor_value_info("b", TensorProto.FLOAT, ["min(seq,512)"]),
         helper.make_tensor_value_info("c", TensorProto.FLOAT, ["64*seq"]),
         helper.make_tensor_value_info("d", TensorProto.FLOAT, ["4", 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None),
         helper.make_tensor_value_info("z", TensorProto.FLOAT, None),
         helper.make_tensor_value_info("w", TensorProto.FLOAT, None)])
    model = save(graph, cases / "named_dims.onnx")
    result = anvil("inspect", model, timeout=TIMEOUT_S)
    assert result.returncode == 0, result.stderr
    for name, dims in (("a", "seq"), ("b", "?"), ("c", "?"), ("d", "?,3"), ("y", "?"), ("w", "?,1")):
        assert re.search(rf"^\s+{name}\s+float32\[{re.escape(dims)}\]$", result.stdout, re.MULTILINE), result.stdout
    result = run(anvil, model, "--shape", "a=1", "--shape", "b=7", "--shape", "c=3", "--shape", "d=5x3",
                 "-o", cases / "named_out")
    assert result.returncode == 0, result.stderr
    assert read_tensor_pb(cases / "named_out" / "y.pb").shape == (7,)
    assert read_tensor_pb(cases / "named_out" / "w.pb").shape == (15, 1)


def test_inputs_giving_one_dim_param_two_sizes_fail_in_one_line(anvil, cases):
    """ONNX gives a dim_param one size in every input: a run that binds `n`
    to 3 in one input and to 1 in another fails with one line naming both."""
    graph = helper.make_graph(
        [helper.make_node("Add", ["a", "b"], ["y"])], "one_name",
        [helper.make_tensor_value_info("a", TensorProto.FLOAT, ["n", 2]),
         helper.make_tensor_value_info("b", TensorProto.FLOAT, ["n", 1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = save(graph, cases / "one_name.onnx")
    np.save(cases / "a3.npy", np.ones((3, 2), np.float32))
    np.save(cases / "b1.npy", np.ones((1, 1), np.float32))
    check_error(run(anvil, model, "-i", f"a={cases / 'a3.npy'}", "-i", f"b={cases / 'b1.npy'}"),
                EXIT_INVALID_ARGUMENT, r"input 'b' has n = 1 \(axis 0\), but input 'a' has n = 3")
    np.save(cases / "b3.npy", np.ones((3, 1), np.float32))
    result = run(anvil, model, "-i", f"a={cases / 'a3.npy'}", "-i", f"b={cases / 'b3.npy'}")
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("label,lo,hi", [("min_above_max", 1.0, -1.0), ("max_nan", 0.0, float("nan"))])
@pytest.mark.parametrize("opt", ["0", "3"])
def test_conv_clip_with_crossed_bounds(anvil, cases, label, lo, hi, opt):
    """A Clip whose min is above its max (or NaN) is not a oneDNN clip post-op: oneDNN refuses the post-op, which
    ended a Conv + Clip fused by the pass (and a com.anvil FusedConv found by make fuzz) in an internal error. The
    pass now leaves such a Clip to its own kernel, which matches ONNX Runtime: min above max gives max everywhere,
    a NaN max clips nothing above."""
    import onnxruntime as ort

    w = np.linspace(-1, 1, 2 * 2 * 3 * 3, dtype=np.float32).reshape(2, 2, 3, 3)
    inits = [numpy_helper.from_array(w, "w"), numpy_helper.from_array(np.array(lo, np.float32), "lo"),
             numpy_helper.from_array(np.array(hi, np.float32), "hi")]
    graph = helper.make_graph([helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
                               helper.make_node("Clip", ["c", "lo", "hi"], ["y"])], "g",
                              [float_info("x", (1, 2, 5, 5))], [float_info("y", (1, 2, 5, 5))], inits)
    model = save(graph, cases / f"conv_clip_{label}.onnx")
    x = np.linspace(-3, 3, 50, dtype=np.float32).reshape(1, 2, 5, 5)
    np.save(cases / "conv_clip_x.npy", x)
    out = cases / f"conv_clip_{label}_{opt}_out"
    result = run(anvil, model, "-O", opt, "-i", f"x={cases / 'conv_clip_x.npy'}", "-o", str(out))
    assert result.returncode == 0, result.stderr
    want = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(read_tensor_pb(out / "y.pb"), want, rtol=1e-6, atol=1e-6)


def test_fused_conv_clip_with_crossed_bounds_from_a_file(anvil, cases):
    """A com.anvil FusedConv holding such a Clip (found by make fuzz: max NaN) ended in an internal error; oneDNN's
    kernel now declines it, and another runs it with Clip's meaning (as ONNX Runtime's Conv + Clip gives it)."""
    import onnxruntime as ort

    w = np.linspace(-1, 1, 2 * 2 * 3 * 3, dtype=np.float32).reshape(2, 2, 3, 3)
    fused = helper.make_graph([helper.make_node("FusedConv", ["x", "w"], ["y"], domain="com.anvil", pads=[1, 1, 1, 1],
                                                activation="Clip", activation_alpha=0.0,
                                                activation_beta=float("nan"))],
                              "g", [float_info("x", (1, 2, 5, 5))], [float_info("y", (1, 2, 5, 5))],
                              [numpy_helper.from_array(w, "w")])
    model = save_model(fused, cases / "fused_conv_clip_nan.onnx", check=False, extra_opsets=[("com.anvil", 2)])
    x = np.linspace(-3, 3, 50, dtype=np.float32).reshape(1, 2, 5, 5)
    np.save(cases / "fused_conv_clip_x.npy", x)
    out = cases / "fused_conv_clip_nan_out"
    result = run(anvil, model, "-i", f"x={cases / 'fused_conv_clip_x.npy'}", "-o", str(out))
    assert result.returncode == 0, result.stderr
    inits = [numpy_helper.from_array(w, "w"), numpy_helper.from_array(np.array(0, np.float32), "lo"),
             numpy_helper.from_array(np.array(np.nan, np.float32), "hi")]
    plain = helper.make_graph([helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
                               helper.make_node("Clip", ["c", "lo", "hi"], ["y"])], "g",
                              [float_info("x", (1, 2, 5, 5))], [float_info("y", (1, 2, 5, 5))], inits)
    reference = save(plain, cases / "conv_clip_nan_plain.onnx")
    want = ort.InferenceSession(str(reference), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(read_tensor_pb(out / "y.pb"), want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("kind", ["graph", "graphs"])
def test_graph_attribute_on_an_op_without_subgraphs(anvil, cases, kind):
    """A Conv carrying a Scan's body (found by make fuzz, X a scalar and W unshaped) looked like control flow to the
    planner, which then skipped the schema's shape checks at run time; its kernel indexed X's missing dims (SIGSEGV
    in a release build). Only If, Loop, Scan and SequenceMap may hold graph attributes; others are refused."""
    body = helper.make_graph([helper.make_node("Identity", ["a"], ["b"])], "body", [float_info("a", ())],
                             [float_info("b", ())])
    conv = helper.make_node("Conv", ["x", "w"], ["y"])
    conv.attribute.append(helper.make_attribute("body", body if kind == "graph" else [body, body]))
    graph = helper.make_graph([conv], "g", [float_info("x", ()), helper.make_tensor_value_info("w", TensorProto.FLOAT,
                                                                                                None)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = save(graph, cases / f"conv_with_{kind}.onnx", opset=9)
    check_error(run(anvil, model), EXIT_INVALID_MODEL, r"Conv takes no graph attribute, but has 'body'", strip=(cases,))


def _single_node_model(cases, name, node, inputs, outputs, inits=(), opset=13):
    graph = helper.make_graph([node], "g", inputs, outputs, list(inits))
    return save(graph, cases / f"{name}.onnx", opset=opset)


def test_required_inputs_left_out(anvil, cases):
    """Required inputs given an empty name, which the schemas did not all check (found by a review after make fuzz
    found MaxUnpool's): QLinearConv without x_scale dereferenced the null input (SIGSEGV); TopK without K and
    HannWindow without size ended in an internal error (exit 6). Each is now refused in one line (exit 2)."""
    u8 = lambda n, v: numpy_helper.from_array(np.array(v, np.uint8), n)
    f32 = lambda n, v: numpy_helper.from_array(np.array(v, np.float32), n)
    qconv = _single_node_model(
        cases, "qconv_no_x_scale", helper.make_node("QLinearConv", ["x", "", "xz", "w", "ws", "wz", "ys", "yz"], ["y"]),
        [helper.make_tensor_value_info("x", TensorProto.UINT8, (1, 1, 2, 2))],
        [helper.make_tensor_value_info("y", TensorProto.UINT8, None)],
        [u8("xz", 0), u8("w", np.ones((1, 1, 1, 1))), f32("ws", 1.0), u8("wz", 0), f32("ys", 1.0), u8("yz", 0)])
    topk = _single_node_model(cases, "topk_no_k", helper.make_node("TopK", ["x", ""], ["v", "i"]), [float_info("x", (4,))],
                              [helper.make_tensor_value_info("v", TensorProto.FLOAT, None),
                               helper.make_tensor_value_info("i", TensorProto.INT64, None)])
    hann = _single_node_model(cases, "hann_no_size", helper.make_node("HannWindow", [""], ["y"]), [],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], opset=17)
    for model, op, index in [(qconv, "QLinearConv", 1), (topk, "TopK", 1), (hann, "HannWindow", 0)]:
        check_error(run(anvil, model), EXIT_INVALID_MODEL, op, f"input {index} is required but missing", strip=(cases,))


def test_sequence_fed_to_a_tensor_op(anvil, cases):
    """A sequence given to an op that takes tensors (Relu) skipped the schema's shape checks (a sequence's dims are
    unknown) and reached the kernel, which ran on the sequence's missing bytes. It is refused in one line."""
    model = save(helper.make_graph([helper.make_node("SequenceConstruct", ["x"], ["s"]),
                                    helper.make_node("Relu", ["s"], ["y"])], "g", [float_info("x", (2,))],
                                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)]),
                 cases / "sequence_relu.onnx")
    result = run(anvil, model)
    check_error(result, result.returncode, "Relu", "input 0 is a sequence, but the op takes tensors", strip=(cases,))
    assert result.returncode in (EXIT_INVALID_MODEL, EXIT_INVALID_ARGUMENT), result.returncode


@pytest.mark.parametrize("case", ["if_third_graph", "loop_body_as_graphs"])
def test_control_flow_with_a_stray_graph(anvil, cases, case):
    """Control flow takes its graphs under their own names, one graph each (If's then_branch and else_branch, the
    others' body); any other graph attribute is refused, not imported as a subgraph no kernel runs."""
    def branch(name):
        return helper.make_graph([helper.make_node("Identity", ["x"], ["o"])], name, [], [float_info("o", (2,))])
    if case == "if_third_graph":
        node = helper.make_node("If", ["c"], ["y"], then_branch=branch("t"), else_branch=branch("e"))
        node.attribute.append(helper.make_attribute("extra", branch("z")))
        inputs = [helper.make_tensor_value_info("c", TensorProto.BOOL, ()), float_info("x", (2,))]
        pattern = r"If takes no graph attribute 'extra'"
    else:
        body = helper.make_graph([helper.make_node("Identity", ["v"], ["v_out"]),
                                  helper.make_node("Identity", ["cond"], ["cond_out"])], "body",
                                 [helper.make_tensor_value_info("i", TensorProto.INT64, ()),
                                  helper.make_tensor_value_info("cond", TensorProto.BOOL, ()), float_info("v", (2,))],
                                 [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, ()),
                                  float_info("v_out", (2,))])
        node = helper.make_node("Loop", ["", "", "x"], ["y"])
        node.attribute.append(helper.make_attribute("body", [body]))
        inputs = [float_info("x", (2,))]
        pattern = r"Loop takes no graph attribute 'body' holding several graphs"
    graph = helper.make_graph([node], "g", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = save(graph, cases / f"{case}.onnx")
    check_error(run(anvil, model), EXIT_INVALID_MODEL, pattern, strip=(cases,))
