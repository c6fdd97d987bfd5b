"""`anvil optimize IN OUT [-O N]`: the fused graph written as ONNX, read back by
Anvil with the same outputs; at level 0 a plain ONNX file ONNX Runtime runs.

The model: y = GELU(x W + b) + r, then LayerNorm written out, as exporters
before opset 17 emit it. Expected values are computed here with numpy."""

from __future__ import annotations

import math

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from anvil_testing import assert_ok, describe, output_file_name, read_tensor_pb
from test_bad_input import check_error
from anvil_testing import EXIT_INVALID_ARGUMENT, EXIT_UNSUPPORTED, EXIT_USAGE

TIMEOUT_S = 60
K, N = 8, 6


def make_model(path):
    rng = np.random.default_rng(7)
    w = rng.standard_normal((K, N)).astype(np.float32)
    b = rng.standard_normal(N).astype(np.float32)
    inits = [numpy_helper.from_array(w, "W"), numpy_helper.from_array(b, "B")]
    c = lambda name, v: inits.append(numpy_helper.from_array(np.array(v, np.float32), name))
    for name, v in [("sqrt2", math.sqrt(2)), ("one", 1.0), ("half", 0.5), ("two", 2.0), ("eps", 1e-5)]:
        c(name, v)
    nodes = [
        helper.make_node("MatMul", ["x", "W"], ["xw"]),
        helper.make_node("Add", ["xw", "B"], ["h"]),
        # GELU, erf form
        helper.make_node("Div", ["h", "sqrt2"], ["hs"]),
        helper.make_node("Erf", ["hs"], ["e"]),
        helper.make_node("Add", ["e", "one"], ["e1"]),
        helper.make_node("Mul", ["h", "e1"], ["he"]),
        helper.make_node("Mul", ["he", "half"], ["g"]),
        helper.make_node("Add", ["g", "r"], ["s"]),
        # LayerNorm over the last axis, without gamma and beta
        helper.make_node("ReduceMean", ["s"], ["m"], axes=[-1]),
        helper.make_node("Sub", ["s", "m"], ["d"]),
        helper.make_node("Pow", ["d", "two"], ["d2"]),
        helper.make_node("ReduceMean", ["d2"], ["v"], axes=[-1]),
        helper.make_node("Add", ["v", "eps"], ["ve"]),
        helper.make_node("Sqrt", ["ve"], ["sd"]),
        helper.make_node("Div", ["d", "sd"], ["y"]),
    ]
    graph = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, K]),
                                             helper.make_tensor_value_info("r", TensorProto.FLOAT, [3, N])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, N])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 7
    onnx.save(model, str(path))
    return w, b


def expected(x, r, w, b):
    h = x @ w + b
    g = 0.5 * h * (1 + np.vectorize(math.erf)(h / math.sqrt(2)))
    s = g + r
    d = s - s.mean(-1, keepdims=True)
    return d / np.sqrt((d * d).mean(-1, keepdims=True) + 1e-5)


@pytest.fixture
def inputs(tmp_path):
    rng = np.random.default_rng(3)
    x, r = rng.standard_normal((3, K)).astype(np.float32), rng.standard_normal((3, N)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "r.npy", r)
    return x, r


def run_model(anvil, model, tmp_path, tag, *extra):
    out = tmp_path / f"out_{tag}"
    result = anvil("run", model, "-i", f"x={tmp_path / 'x.npy'}", "-i", f"r={tmp_path / 'r.npy'}", "-o", out,
                   *extra, timeout=TIMEOUT_S)
    assert_ok(result)
    return read_tensor_pb(out / output_file_name("y"))


def test_optimize_writes_fused_ops_that_anvil_reads_back(anvil, tmp_path, inputs):
    w, b = make_model(tmp_path / "mlp.onnx")
    result = anvil("optimize", tmp_path / "mlp.onnx", tmp_path / "opt.onnx", timeout=TIMEOUT_S)
    assert_ok(result)
    assert "15 nodes -> 3 nodes" in result.stdout, result.stdout
    opt = onnx.load(str(tmp_path / "opt.onnx"))
    ops = sorted((n.domain, n.op_type) for n in opt.graph.node)
    # MatMul + bias + GELU in one node (the residual comes after the activation: its own Add);
    # LayerNorm (opset 17) written in com.anvil in an opset-13 model
    assert ops == [("", "Add"), ("com.anvil", "FusedMatMul"), ("com.anvil", "LayerNormalization")], ops
    assert {(o.domain, o.version) for o in opt.opset_import} == {("", 13), ("com.anvil", 2)}
    onnx.checker.check_model(opt)
    want = expected(*inputs, w, b)
    for model, opt_level in [(tmp_path / "mlp.onnx", "0"), (tmp_path / "opt.onnx", "0"), (tmp_path / "opt.onnx", "3")]:
        got = run_model(anvil, model, tmp_path, f"{model.stem}{opt_level}", "-O", opt_level)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4, err_msg=f"{model.name} -O {opt_level}")


def test_optimize_level_0_is_plain_onnx_that_onnxruntime_runs(anvil, tmp_path, inputs):
    ort = pytest.importorskip("onnxruntime")
    w, b = make_model(tmp_path / "mlp.onnx")
    assert_ok(anvil("optimize", tmp_path / "mlp.onnx", tmp_path / "same.onnx", "-O", "0", timeout=TIMEOUT_S))
    opt = onnx.load(str(tmp_path / "same.onnx"))
    assert all(n.domain == "" for n in opt.graph.node) and len(opt.graph.node) == 15
    session = ort.InferenceSession(str(tmp_path / "same.onnx"), providers=["CPUExecutionProvider"])
    got = session.run(None, {"x": inputs[0], "r": inputs[1]})[0]
    np.testing.assert_allclose(got, expected(*inputs, w, b), rtol=1e-4, atol=1e-4)


def optimized(anvil, tmp_path, name):
    """`anvil optimize` of tmp_path/name into tmp_path/opt.onnx, loaded."""
    assert_ok(anvil("optimize", tmp_path / name, tmp_path / "opt.onnx", timeout=TIMEOUT_S))
    return onnx.load(str(tmp_path / "opt.onnx"))


def save_opset_13_model(path, nodes, inputs, outputs):
    """A float32 graph of `nodes`, its inputs and outputs given as {name: shape}."""
    info = lambda values: [helper.make_tensor_value_info(n, TensorProto.FLOAT, shape) for n, shape in values.items()]
    model = helper.make_model(helper.make_graph(nodes, path.stem, info(inputs), info(outputs)),
                              opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 7
    onnx.save(model, str(path))


def test_a_transpose_folded_into_a_matmul_reads_back(anvil, tmp_path):
    # y = MatMul(Transpose(a), b): written as com.anvil FusedMatMul with transA (domain version 2), whose
    # meaning a version-1 reader would miss; read back by Anvil, and a version-1 file still reads.
    nodes = [helper.make_node("Transpose", ["a"], ["at"], perm=[1, 0]), helper.make_node("MatMul", ["at", "b"], ["y"])]
    save_opset_13_model(tmp_path / "t.onnx", nodes, {"a": [5, 3], "b": [5, 4]}, {"y": [3, 4]})
    opt = optimized(anvil, tmp_path, "t.onnx")
    assert [(n.domain, n.op_type) for n in opt.graph.node] == [("com.anvil", "FusedMatMul")]
    assert {a.name: a.i for a in opt.graph.node[0].attribute}.get("transA") == 1
    assert ("com.anvil", 2) in {(o.domain, o.version) for o in opt.opset_import}
    rng = np.random.default_rng(11)
    a, b = rng.standard_normal((5, 3)).astype(np.float32), rng.standard_normal((5, 4)).astype(np.float32)
    np.save(tmp_path / "a.npy", a)
    np.save(tmp_path / "b.npy", b)
    out = tmp_path / "out"
    assert_ok(anvil("run", tmp_path / "opt.onnx", "-i", f"a={tmp_path / 'a.npy'}", "-i", f"b={tmp_path / 'b.npy'}",
                    "-o", out, "-O", "0", timeout=TIMEOUT_S))
    np.testing.assert_allclose(read_tensor_pb(out / output_file_name("y")), a.T @ b, rtol=1e-5, atol=1e-5)
    for o in opt.opset_import:
        if o.domain == "com.anvil":
            o.version = 1
    del opt.graph.node[0].attribute[:]  # a version-1 FusedMatMul: no transA
    opt.graph.node[0].input[0] = "at"
    opt.graph.node.insert(0, helper.make_node("Transpose", ["a"], ["at"], perm=[1, 0]))
    onnx.save(opt, str(tmp_path / "v1.onnx"))
    assert_ok(anvil("run", tmp_path / "v1.onnx", "-i", f"a={tmp_path / 'a.npy'}", "-i", f"b={tmp_path / 'b.npy'}",
                    "-o", tmp_path / "out1", "-O", "0", timeout=TIMEOUT_S))
    np.testing.assert_allclose(read_tensor_pb(tmp_path / "out1" / output_file_name("y")), a.T @ b, rtol=1e-5, atol=1e-5)


def test_hardswish_of_an_opset_13_model_reads_back(anvil, tmp_path):
    # x * HardSigmoid(x, alpha 1/6): nn.Hardswish as PyTorch exports it below opset 14, fused into one
    # HardSwish (opset 14), written in com.anvil in the opset-13 model and read back.
    nodes = [helper.make_node("HardSigmoid", ["x"], ["h"], alpha=1.0 / 6, beta=0.5),
             helper.make_node("Mul", ["x", "h"], ["y"])]
    save_opset_13_model(tmp_path / "hs.onnx", nodes, {"x": [2, 6]}, {"y": [2, 6]})
    opt = optimized(anvil, tmp_path, "hs.onnx")
    assert [(n.domain, n.op_type) for n in opt.graph.node] == [("com.anvil", "HardSwish")]
    x = np.linspace(-5, 5, 12, dtype=np.float32).reshape(2, 6)
    np.save(tmp_path / "x.npy", x)
    out = tmp_path / "out"
    assert_ok(anvil("run", tmp_path / "opt.onnx", "-i", f"x={tmp_path / 'x.npy'}", "-o", out, "-O", "0",
                    timeout=TIMEOUT_S))
    want = x * np.clip(x / 6 + 0.5, 0, 1)
    np.testing.assert_allclose(read_tensor_pb(out / output_file_name("y")), want, rtol=1e-5, atol=1e-6)


def outputs_at_levels(anvil, tmp_path, original):
    """Output y, reading x from x.npy, of `original` at -O 0 and of opt.onnx (its `anvil optimize` result) at
    -O 0 and 3: (description, array) for each."""
    for model, level in [(original, "0"), ("opt.onnx", "0"), ("opt.onnx", "3")]:
        out = tmp_path / f"out_{model}_{level}"
        assert_ok(anvil("run", tmp_path / model, "-i", f"x={tmp_path / 'x.npy'}", "-o", out, "-O", level,
                        timeout=TIMEOUT_S))
        yield f"{model} -O {level}", read_tensor_pb(out / output_file_name("y"))


def test_rms_norm_reads_back(anvil, tmp_path):
    # RMSNorm written out in an opset-17 model (LLaMA's: Pow, ReduceMean, Add, Sqrt, Div(1, r), Mul, Mul by
    # gamma): written as a com.anvil RMSNormalization (opset 23), read back by Anvil at levels 0 and 3 with the
    # values numpy gives, as is the original model.
    gamma = np.linspace(0.5, 1.5, 8).astype(np.float32)
    f32 = lambda name, v: numpy_helper.from_array(np.asarray(v, np.float32), name)
    nodes = [helper.make_node("Pow", ["x", "two"], ["sq"]),
             helper.make_node("ReduceMean", ["sq"], ["ms"], axes=[-1]),
             helper.make_node("Add", ["ms", "eps"], ["v"]), helper.make_node("Sqrt", ["v"], ["r"]),
             helper.make_node("Div", ["one", "r"], ["inv"]), helper.make_node("Mul", ["x", "inv"], ["n"]),
             helper.make_node("Mul", ["gamma", "n"], ["y"])]
    graph = helper.make_graph(nodes, "rms", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3, 8])],
                              [f32("two", 2.0), f32("eps", 1e-5), f32("one", 1.0), f32("gamma", gamma)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(tmp_path / "rms.onnx"))
    opt = optimized(anvil, tmp_path, "rms.onnx")
    assert [(n.domain, n.op_type) for n in opt.graph.node] == [("com.anvil", "RMSNormalization")]
    assert {(o.domain, o.version) for o in opt.opset_import} == {("", 17), ("com.anvil", 2)}
    x = np.random.default_rng(6).standard_normal((2, 3, 8)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    x64 = x.astype(np.float64)
    want = x64 / np.sqrt((x64 * x64).mean(-1, keepdims=True) + 1e-5) * gamma
    for what, y in outputs_at_levels(anvil, tmp_path, "rms.onnx"):
        np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-6, err_msg=what)


def test_attention_on_a_split_reads_back(anvil, tmp_path):
    # Split(x) -> Attention(q, k, v) (opset 23): written as com.anvil QkvAttention over x, read back by Anvil at
    # levels 0 and 3 with the values numpy gives, as is the original model.
    nodes = [helper.make_node("Split", ["x", "sizes"], ["q", "k", "v"], axis=2),
             helper.make_node("Attention", ["q", "k", "v"], ["y"], q_num_heads=2, kv_num_heads=2, is_causal=1)]
    graph = helper.make_graph(nodes, "qkv", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 5, 24])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 5, 8])],
                              [numpy_helper.from_array(np.array([8, 8, 8], np.int64), "sizes")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23)])
    model.ir_version = 10
    onnx.save(model, str(tmp_path / "qkv.onnx"))
    opt = optimized(anvil, tmp_path, "qkv.onnx")
    assert [(n.domain, n.op_type) for n in opt.graph.node] == [("com.anvil", "QkvAttention")]
    assert {a.name: list(a.ints) for a in opt.graph.node[0].attribute if a.ints}["qkv_sizes"] == [8, 8, 8]
    x = np.random.default_rng(5).standard_normal((1, 5, 24)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    want = np.zeros((5, 8))
    for h in range(2):  # causal softmax(q k^T / 2) v per head of 4
        q, k, v = (x[0, :, base + 4 * h: base + 4 * h + 4].astype(np.float64) for base in (0, 8, 16))
        s = q @ k.T / 2 + np.triu(np.full((5, 5), -np.inf), 1)
        p = np.exp(s - s.max(-1, keepdims=True))
        want[:, 4 * h: 4 * h + 4] = (p / p.sum(-1, keepdims=True)) @ v
    for what, y in outputs_at_levels(anvil, tmp_path, "qkv.onnx"):
        np.testing.assert_allclose(y[0], want, rtol=1e-5, atol=1e-5, err_msg=what)


def save_opset13_model(path, nodes, inputs, outputs, inits):
    """A float graph of `nodes` at opset 13, its inputs and outputs (name, shape) pairs."""
    info = lambda name, shape: helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)
    graph = helper.make_graph(nodes, path.stem, [info(*i) for i in inputs], [info(*o) for o in outputs], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 7
    onnx.save(model, str(path))


def test_a_batch_norm_and_its_relu_read_back_as_one_node(anvil, tmp_path):
    # DenseNet's layer: Concat -> BatchNormalization -> Relu (no convolution to fold the BN into), with a
    # Pad of zeros before it as torchvision's exports have: one com.anvil FusedBatchNorm; read back by Anvil.
    rng = np.random.default_rng(13)
    gamma, beta, mean = (rng.standard_normal(6).astype(np.float32) for _ in range(3))
    var = rng.uniform(0.5, 2.0, 6).astype(np.float32)
    inits = [numpy_helper.from_array(v, n) for v, n in [(gamma, "gamma"), (beta, "beta"), (mean, "mean"), (var, "var")]]
    inits.append(numpy_helper.from_array(np.zeros(8, np.int64), "pads"))
    nodes = [helper.make_node("Concat", ["a", "b"], ["c"], axis=1),
             helper.make_node("Pad", ["c", "pads"], ["p"]),
             helper.make_node("BatchNormalization", ["p", "gamma", "beta", "mean", "var"], ["n"], epsilon=1e-3),
             helper.make_node("Relu", ["n"], ["y"])]
    save_opset13_model(tmp_path / "bn.onnx", nodes, [("a", [2, 2, 3, 3]), ("b", [2, 4, 3, 3])], [("y", [2, 6, 3, 3])],
                       inits)
    opt = optimized(anvil, tmp_path, "bn.onnx")
    assert [(n.domain, n.op_type) for n in opt.graph.node] == [("", "Concat"), ("com.anvil", "FusedBatchNorm")]
    a, b = rng.standard_normal((2, 2, 3, 3)).astype(np.float32), rng.standard_normal((2, 4, 3, 3)).astype(np.float32)
    np.save(tmp_path / "a.npy", a)
    np.save(tmp_path / "b.npy", b)
    per_channel = lambda v: v.reshape(1, 6, 1, 1)
    x = np.concatenate([a, b], axis=1)
    want = np.maximum((x - per_channel(mean)) / np.sqrt(per_channel(var) + 1e-3) * per_channel(gamma)
                      + per_channel(beta), 0)
    for opt_level in ["0", "3"]:
        out = tmp_path / f"out{opt_level}"
        assert_ok(anvil("run", tmp_path / "opt.onnx", "-i", f"a={tmp_path / 'a.npy'}", "-i",
                        f"b={tmp_path / 'b.npy'}", "-o", out, "-O", opt_level, timeout=TIMEOUT_S))
        np.testing.assert_allclose(read_tensor_pb(out / output_file_name("y")), want, rtol=1e-5, atol=1e-5,
                                   err_msg=f"-O {opt_level}")


def test_a_squeeze_excite_block_reads_back_as_one_node(anvil, tmp_path):
    # MobileNetV3's block: GlobalAveragePool -> Conv -> Relu -> Conv -> HardSigmoid, the gates scaling x: one
    # com.anvil SqueezeExcite before the Mul; read back by Anvil, against numpy.
    rng = np.random.default_rng(17)
    w1, b1 = rng.standard_normal((3, 8, 1, 1)).astype(np.float32), rng.standard_normal(3).astype(np.float32)
    w2, b2 = rng.standard_normal((8, 3, 1, 1)).astype(np.float32), rng.standard_normal(8).astype(np.float32)
    inits = [numpy_helper.from_array(v, n) for v, n in [(w1, "w1"), (b1, "b1"), (w2, "w2"), (b2, "b2")]]
    nodes = [helper.make_node("GlobalAveragePool", ["x"], ["m"]),
             helper.make_node("Conv", ["m", "w1", "b1"], ["r"]),
             helper.make_node("Relu", ["r"], ["h"]),
             helper.make_node("Conv", ["h", "w2", "b2"], ["e"]),
             helper.make_node("HardSigmoid", ["e"], ["s"], alpha=1 / 6, beta=0.5),
             helper.make_node("Mul", ["x", "s"], ["y"])]
    save_opset13_model(tmp_path / "se.onnx", nodes, [("x", [2, 8, 5, 4])], [("y", [2, 8, 5, 4])], inits)
    opt = optimized(anvil, tmp_path, "se.onnx")
    assert [(n.domain, n.op_type) for n in opt.graph.node] == [("com.anvil", "SqueezeExcite"), ("", "Mul")]
    x = rng.standard_normal((2, 8, 5, 4)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    m = x.astype(np.float64).mean(axis=(2, 3))
    h = np.maximum(m @ w1[:, :, 0, 0].T + b1, 0)
    gates = np.clip((h @ w2[:, :, 0, 0].T + b2) / 6 + 0.5, 0, 1)
    want = x * gates[:, :, None, None]
    for opt_level in ["0", "3"]:
        out = tmp_path / f"out{opt_level}"
        assert_ok(anvil("run", tmp_path / "opt.onnx", "-i", f"x={tmp_path / 'x.npy'}", "-o", out, "-O", opt_level,
                        timeout=TIMEOUT_S))
        np.testing.assert_allclose(read_tensor_pb(out / output_file_name("y")), want, rtol=1e-5, atol=1e-5,
                                   err_msg=f"-O {opt_level}")


def test_a_channel_shuffle_reads_back_as_one_node(anvil, tmp_path):
    # ShuffleNet's Reshape -> Transpose -> Reshape: one com.anvil ChannelShuffle (group 3); read back by Anvil.
    inits = [numpy_helper.from_array(np.array(v, np.int64), n) for v, n in [([2, 3, 2, 4, 5], "split"),
                                                                           ([2, 6, 4, 5], "merged")]]
    nodes = [helper.make_node("Reshape", ["x", "split"], ["s"]),
             helper.make_node("Transpose", ["s"], ["t"], perm=[0, 2, 1, 3, 4]),
             helper.make_node("Reshape", ["t", "merged"], ["y"])]
    save_opset13_model(tmp_path / "shuffle.onnx", nodes, [("x", [2, 6, 4, 5])], [("y", [2, 6, 4, 5])], inits)
    opt = optimized(anvil, tmp_path, "shuffle.onnx")
    assert [(n.domain, n.op_type) for n in opt.graph.node] == [("com.anvil", "ChannelShuffle")]
    x = np.random.default_rng(17).standard_normal((2, 6, 4, 5)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    want = x.reshape(2, 3, 2, 4, 5).transpose(0, 2, 1, 3, 4).reshape(2, 6, 4, 5)
    out = tmp_path / "out"
    assert_ok(anvil("run", tmp_path / "opt.onnx", "-i", f"x={tmp_path / 'x.npy'}", "-o", out, timeout=TIMEOUT_S))
    np.testing.assert_array_equal(read_tensor_pb(out / output_file_name("y")), want)


def test_optimize_bad_arguments(anvil, tmp_path):
    make_model(tmp_path / "mlp.onnx")
    check_error(anvil("optimize", tmp_path / "absent.onnx", tmp_path / "o.onnx", timeout=TIMEOUT_S),
                EXIT_INVALID_ARGUMENT, r"absent\.onnx")
    check_error(anvil("optimize", tmp_path / "mlp.onnx", tmp_path / "no_dir" / "o.onnx", timeout=TIMEOUT_S),
                EXIT_INVALID_ARGUMENT, r"cannot write")
    check_error(anvil("optimize", tmp_path / "mlp.onnx", tmp_path / "o.onnx", "-O", "5", timeout=TIMEOUT_S), EXIT_USAGE)
    check_error(anvil("optimize", tmp_path / "mlp.onnx", timeout=TIMEOUT_S), EXIT_USAGE)


def test_unknown_com_anvil_op_is_unsupported(anvil, tmp_path):
    node = helper.make_node("Teleport", ["x"], ["y"], domain="com.anvil")
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid("com.anvil", 1)])
    onnx.save(model, str(tmp_path / "t.onnx"))
    check_error(anvil("run", tmp_path / "t.onnx", timeout=TIMEOUT_S), EXIT_UNSUPPORTED, r"com\.anvil.*Teleport")


def test_unknown_com_anvil_version_is_unsupported(anvil, tmp_path):
    node = helper.make_node("FusedMatMul", ["x", "x"], ["y"], domain="com.anvil")
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid("com.anvil", 7)])
    onnx.save(model, str(tmp_path / "v7.onnx"))
    check_error(anvil("run", tmp_path / "v7.onnx", timeout=TIMEOUT_S), EXIT_UNSUPPORTED, r"com\.anvil version 7")
