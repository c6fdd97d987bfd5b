"""Tensors with an empty dimension through every op family Anvil runs on oneDNN or its own kernels.

oneDNN 2.6.3 can divide by zero creating a primitive for an empty tensor (a fuzzed Gemm of [0, 10] by
[10, 3] did), so each kernel must hand such cases to the reference kernel or skip its work. Each case
puts a zero in one dimension of the input (batch, channels, a spatial axis; M, K or N of a product),
runs `anvil run` at -O 0 and -O 3, and compares the outputs with ONNX Runtime's on the same inputs:
the shapes must agree and the values too (K = 0 products give zeros plus the bias; a mean over
nothing is NaN, as in ONNX's reference implementation, where ONNX Runtime gives 0). Where ONNX Runtime itself refuses the model, Anvil must still end
cleanly: exit 0 or one error line with an exit code in 1..127, never a signal.
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from anvil_testing import read_tensor_pb, save_model

TIMEOUT_S = 60
RNG = np.random.default_rng(0)


def value(name, shape):
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def const(name, array):
    return numpy_helper.from_array(np.asarray(array, dtype=np.float32), name)


def image_cases():
    """(label, nodes, initializers, opset) over x of each empty 4-D shape."""
    for xs in [(0, 3, 8, 8), (1, 0, 8, 8), (1, 3, 0, 8), (2, 3, 8, 0)]:
        c, tag = xs[1], "x".join(map(str, xs))
        w = const("w", RNG.standard_normal((4, c, 3, 3)))
        yield f"conv_{tag}", xs, [helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])], [w], 17
        yield (f"conv_transpose_{tag}", xs, [helper.make_node("ConvTranspose", ["x", "w"], ["y"])],
               [const("w", RNG.standard_normal((c, 4, 3, 3)))], 17)
        if c:
            yield (f"depthwise_{tag}", xs, [helper.make_node("Conv", ["x", "w"], ["y"], group=c, pads=[1, 1, 1, 1])],
                   [const("w", RNG.standard_normal((c, 1, 3, 3)))], 17)
        for op, attrs in [("MaxPool", {"kernel_shape": [2, 2]}), ("AveragePool", {"kernel_shape": [2, 2]}),
                          ("GlobalAveragePool", {}), ("GlobalMaxPool", {}), ("LRN", {"size": 3})]:
            yield f"{op}_{tag}", xs, [helper.make_node(op, ["x"], ["y"], **attrs)], [], 17
        for op in ["Relu", "Sigmoid", "Tanh", "Exp", "Abs", "Gelu", "HardSwish", "Elu", "Softmax", "LogSoftmax"]:
            yield f"{op}_{tag}", xs, [helper.make_node(op, ["x"], ["y"])], [], 20
        yield f"add_{tag}", xs, [helper.make_node("Add", ["x", "x"], ["y"])], [], 17
        yield (f"add_channels_{tag}", xs, [helper.make_node("Add", ["x", "b"], ["y"])],
               [const("b", RNG.standard_normal((1, c, 1, 1)))], 17)
        yield f"concat_{tag}", xs, [helper.make_node("Concat", ["x", "x"], ["y"], axis=1)], [], 17
        ones, zeros = const("s", np.ones(c)), const("b", np.zeros(c))
        yield (f"batch_norm_{tag}", xs, [helper.make_node("BatchNormalization", ["x", "s", "b", "b", "s"], ["y"])],
               [ones, zeros], 17)
        yield (f"layer_norm_{tag}", xs, [helper.make_node("LayerNormalization", ["x", "g", "h"], ["y"], axis=-1)],
               [const("g", np.ones(xs[-1])), const("h", np.zeros(xs[-1]))], 17)
        yield (f"instance_norm_{tag}", xs, [helper.make_node("InstanceNormalization", ["x", "s", "b"], ["y"])],
               [ones, zeros], 17)
        yield f"reduce_mean_{tag}", xs, [helper.make_node("ReduceMean", ["x"], ["y"], axes=[2, 3])], [], 17
        yield (f"resize_{tag}", xs, [helper.make_node("Resize", ["x", "", "scales"], ["y"], mode="linear")],
               [const("scales", [1, 1, 2, 2])], 17)


def product_cases():
    for m, k, n in [(0, 10, 3), (4, 0, 3), (4, 10, 0)]:
        tag = f"{m}_{k}_{n}"
        w = const("w", RNG.standard_normal((k, n)))
        yield f"matmul_const_{tag}", (m, k), [helper.make_node("MatMul", ["x", "w"], ["y"])], [w], 17
        yield f"matmul_batched_{tag}", (1, m, k), [helper.make_node("MatMul", ["x", "w"], ["y"])], [w], 17
        yield (f"gemm_bias_{tag}", (m, k), [helper.make_node("Gemm", ["x", "w", "c"], ["y"])],
               [w, const("c", RNG.standard_normal(n))], 17)
        yield (f"matmul_relu_{tag}", (1, m, k), [helper.make_node("MatMul", ["x", "w"], ["t"]),
                                                 helper.make_node("Relu", ["t"], ["y"])], [w], 17)


CASES = list(image_cases()) + list(product_cases())


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return tmp_path_factory.mktemp("empty")


@pytest.mark.parametrize("label,x_shape,nodes,inits,opset", CASES, ids=[c[0] for c in CASES])
def test_empty_dimension(anvil, folder, label, x_shape, nodes, inits, opset):
    import onnxruntime as ort

    graph = helper.make_graph(nodes, "g", [value("x", x_shape)], [value("y", None)], inits)
    model = save_model(graph, folder / f"{label}.onnx", opset=opset, check=False)
    x = np.zeros(x_shape, dtype=np.float32)
    np.save(folder / f"{label}.npy", x)
    try:
        want = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    except Exception:  # noqa: BLE001 - ONNX Runtime refuses some of these; Anvil must still end cleanly
        want = None
    if want is not None and label.startswith("reduce_mean") and 0 in x_shape[2:]:
        want = np.full(want.shape, np.nan, np.float32)  # the mean of nothing: NaN in ONNX's reference, 0 in ORT's
    for opt in ["0", "3"]:
        out = folder / f"{label}_{opt}"
        result = anvil("run", model, "-O", opt, "-i", f"x={folder / f'{label}.npy'}", "-o", str(out),
                       timeout=TIMEOUT_S)
        assert result.returncode >= 0, f"-O {opt}: killed by signal {-result.returncode}: {result.stderr}"
        if result.returncode != 0:
            lines = [line for line in result.stderr.splitlines() if line.strip()]
            assert result.returncode <= 127 and len(lines) == 1, f"-O {opt}: {result.stderr}"
            assert want is None, f"-O {opt}: ONNX Runtime runs it, Anvil failed: {result.stderr}"
            continue
        if want is None:
            continue
        got = read_tensor_pb(out / "y.pb")
        assert got.shape == want.shape, f"-O {opt}"
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, err_msg=f"-O {opt}")
