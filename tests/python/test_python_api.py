"""The Python module: onnxruntime's API, numpy in and out, errors, async runs, the GIL.

Expected values are hand-computed (tiny models) or ONNX Runtime's (the real
networks, through rt_script.py run under both engines).
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import export_models
import export_sequence_models
from anvil_testing import float_info, make_add_model, make_relu_model, relative_diff, save_model

try:
    import anvil as rt
except ImportError as e:  # a broken build must fail, not skip
    pytest.fail(f"cannot import the anvil module ({e}): build it (make test) and put build/python on PYTHONPATH",
                pytrace=False)

HERE = Path(__file__).resolve().parent
SEQUENCE_MODELS = ("bert", "gpt2", "gru", "lstm", "loop", "if")


# --- the same script under onnxruntime and anvil --------------------------------------------------

@pytest.mark.slow
def test_one_script_gives_the_same_outputs_under_both_engines(tmp_path):
    cache = export_models.default_cache_dir()
    folders = [export_models.export_model(name, cache).onnx.parent for name in export_models.MODEL_NAMES]
    folders += [export_sequence_models.export_model(name, cache).parent for name in SEQUENCE_MODELS]
    outputs = {}
    for engine in ("onnxruntime", "anvil"):
        out = tmp_path / f"{engine}.npz"
        result = subprocess.run([sys.executable, str(HERE / "rt_script.py"), engine, str(out), *map(str, folders)],
                                capture_output=True, text=True, timeout=900)
        assert result.returncode == 0, f"{engine} script failed:\n{result.stdout}\n{result.stderr}"
        outputs[engine] = dict(np.load(out))
    assert outputs["anvil"].keys() == outputs["onnxruntime"].keys()
    assert len(outputs["anvil"]) >= len(folders)
    for key, expected in outputs["onnxruntime"].items():
        actual = outputs["anvil"][key]
        assert actual.dtype == expected.dtype and actual.shape == expected.shape, key
        assert relative_diff(actual, expected) <= 1e-4, f"{key}: {relative_diff(actual, expected):.3g}"


# --- the API ----------------------------------------------------------------------------------------

@pytest.fixture
def relu_model(tmp_path):
    return make_relu_model(tmp_path / "relu.onnx", input_name="x", shape=(2, 3))


def symbolic_add_model(path: Path) -> Path:
    """z = x + y over float [batch, 4] and [1, 4]; `batch` is symbolic."""
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "y"], ["z"])], "add",
        [float_info("x", ["batch", 4]), float_info("y", [1, 4])], [float_info("z", ["batch", 4])])
    return save_model(graph, path)


def test_inputs_and_outputs_are_described_like_onnxruntime(tmp_path):
    s = rt.InferenceSession(str(symbolic_add_model(tmp_path / "add.onnx")))
    (x, y), (z,) = s.get_inputs(), s.get_outputs()
    assert (x.name, x.shape, x.type) == ("x", ["batch", 4], "tensor(float)")
    assert (y.name, y.shape) == ("y", [1, 4])
    assert (z.name, z.shape, z.type) == ("z", ["batch", 4], "tensor(float)")
    assert s.get_providers() == ["CPUExecutionProvider"]
    assert "CPUExecutionProvider" in rt.get_available_providers()


def test_run_returns_hand_computed_values(tmp_path):
    s = rt.InferenceSession(str(symbolic_add_model(tmp_path / "add.onnx")))
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    y = np.array([[10, 20, 30, 40]], dtype=np.float32)
    (z,) = s.run(None, {"x": x, "y": y})
    np.testing.assert_array_equal(z, x + y)
    (z,) = s.run(["z"], {"x": x[:1], "y": y})  # another batch size: another plan
    np.testing.assert_array_equal(z, x[:1] + y)


def test_outputs_take_over_the_runs_memory(relu_model):
    s = rt.InferenceSession(str(relu_model))
    (y,) = s.run(None, {"x": np.array([[-1, 2, -3], [4, -5, 6]], dtype=np.float32)})
    np.testing.assert_array_equal(y, [[0, 2, 0], [4, 0, 6]])
    assert not y.flags["OWNDATA"] and type(y.base).__name__ == "PyCapsule"  # no copy: Anvil's buffer
    assert y.flags["WRITEABLE"] and y.flags["C_CONTIGUOUS"]
    y[0, 0] = 7  # the array's own memory: changing it changes nothing else
    (again,) = s.run(None, {"x": np.array([[-1, 2, -3], [4, -5, 6]], dtype=np.float32)})
    assert again[0, 0] == 0


def test_strided_and_byte_swapped_inputs_are_copied_correctly(relu_model):
    s = rt.InferenceSession(str(relu_model))
    base = np.array([[-1, 9, 2, 9, -3, 9], [4, 9, -5, 9, 6, 9]], dtype=np.float32)
    (y,) = s.run(None, {"x": base[:, ::2]})  # not contiguous
    np.testing.assert_array_equal(y, [[0, 2, 0], [4, 0, 6]])
    swapped = np.array([[-1, 2, -3], [4, -5, 6]], dtype=">f4")
    (y,) = s.run(None, {"x": swapped})
    np.testing.assert_array_equal(y, [[0, 2, 0], [4, 0, 6]])
    (y,) = s.run(None, {"x": np.asfortranarray(np.array([[-1, 2, -3], [4, -5, 6]], dtype=np.float32))})
    np.testing.assert_array_equal(y, [[0, 2, 0], [4, 0, 6]])


def test_misaligned_and_odd_bool_inputs_are_read_correctly(tmp_path, relu_model):
    s = rt.InferenceSession(str(relu_model))
    raw = np.array([-1, 2, -3, 4, -5, 6], dtype=np.float32).tobytes()
    misaligned = np.frombuffer(b"\0" + raw, dtype=np.float32, offset=1).reshape(2, 3)
    assert not misaligned.flags["ALIGNED"]
    (y,) = s.run(None, {"x": misaligned})
    np.testing.assert_array_equal(y, [[0, 2, 0], [4, 0, 6]])
    graph = helper.make_graph([helper.make_node("Not", ["b"], ["n"])], "not",
                              [helper.make_tensor_value_info("b", TensorProto.BOOL, [4])],
                              [helper.make_tensor_value_info("n", TensorProto.BOOL, [4])])
    s = rt.InferenceSession(str(save_model(graph, tmp_path / "not.onnx")))
    odd = np.array([0, 2, 1, 255], dtype=np.uint8).view(np.bool_)  # bytes other than 0 and 1
    (n,) = s.run(None, {"b": odd})
    np.testing.assert_array_equal(n, [True, False, False, False])
    # A Fortran-ordered bool matrix and a 0-d bool (numpy's ufuncs keep the
    # one's order and turn the other into a scalar).
    graph = helper.make_graph([helper.make_node("Not", ["b"], ["n"]), helper.make_node("Not", ["c"], ["m"])], "not2",
                              [helper.make_tensor_value_info("b", TensorProto.BOOL, [2, 3]),
                               helper.make_tensor_value_info("c", TensorProto.BOOL, [])],
                              [helper.make_tensor_value_info("n", TensorProto.BOOL, [2, 3]),
                               helper.make_tensor_value_info("m", TensorProto.BOOL, [])])
    s = rt.InferenceSession(str(save_model(graph, tmp_path / "not2.onnx")))
    b = np.array([[True, False, False], [True, True, False]])
    n, m = s.run(None, {"b": np.asfortranarray(b), "c": np.array(True)})
    np.testing.assert_array_equal(n, ~b)
    assert m.shape == () and not m


def test_a_session_dropped_inside_its_own_callback_is_released_safely(relu_model):
    done = threading.Event()
    results = []

    def start():
        s = rt.InferenceSession(str(relu_model))

        def callback(outputs, session, error):
            results.append(outputs[0][0, 1])
            done.set()

        # The callback's user_data holds the only reference once start() returns.
        s.run_async(None, {"x": np.ones((2, 3), np.float32)}, callback, s)

    start()
    assert done.wait(30)
    time.sleep(0.2)  # the session is destroyed on another thread, after the callback
    assert results == [1.0]


def test_model_bytes_load_like_a_path(relu_model):
    s = rt.InferenceSession(relu_model.read_bytes())
    (y,) = s.run(None, {"x": -np.ones((2, 3), np.float32)})
    np.testing.assert_array_equal(y, np.zeros((2, 3)))


def string_model(path: Path) -> Path:
    """t = lower-case s; j = i + 1."""
    graph = helper.make_graph(
        [helper.make_node("StringNormalizer", ["s"], ["t"], case_change_action="LOWER"),
         helper.make_node("Add", ["i", "one"], ["j"])], "strings",
        [helper.make_tensor_value_info("s", TensorProto.STRING, [2]),
         helper.make_tensor_value_info("i", TensorProto.INT64, [3])],
        [helper.make_tensor_value_info("t", TensorProto.STRING, [2]),
         helper.make_tensor_value_info("j", TensorProto.INT64, [3])],
        [helper.make_tensor("one", TensorProto.INT64, [1], [1])])
    return save_model(graph, path)


def test_strings_and_integers_round_trip(tmp_path):
    s = rt.InferenceSession(str(string_model(tmp_path / "s.onnx")))
    assert [i.type for i in s.get_inputs()] == ["tensor(string)", "tensor(int64)"]
    t, j = s.run(None, {"s": np.array(["Hello", "WORLD"]), "i": np.array([1, 2, 3], dtype=np.int64)})
    assert t.dtype == object and list(t) == ["hello", "world"]
    np.testing.assert_array_equal(j, [2, 3, 4])
    t, _ = s.run(None, {"s": np.array(["A", b"B"], dtype=object), "i": np.zeros(3, np.int64)})
    assert list(t) == ["a", "b"]
    raises(rt.InvalidArgument, lambda: s.run(None, {"s": np.array([1, "b"], dtype=object), "i": np.zeros(3, np.int64)}),
           "int where a string")
    raises(rt.InvalidArgument, lambda: s.run(None, {"s": np.array(["\udc80", "b"]), "i": np.zeros(3, np.int64)}),
           "convert")


# --- errors: one exception class per kind, never another exception ---------------------------------

def raises(kind, fn, match=None):
    with pytest.raises(kind, match=match) as info:
        fn()
    assert isinstance(info.value, rt.Error)
    assert "\n" not in str(info.value)
    return info.value


def test_bad_inputs_raise_invalid_argument(relu_model):
    s = rt.InferenceSession(str(relu_model))
    good = np.zeros((2, 3), np.float32)
    raises(rt.InvalidArgument, lambda: s.run(None, {}), "'x' is missing")
    raises(rt.InvalidArgument, lambda: s.run(None, {"x": good, "nosuch": good}), "no input named 'nosuch'")
    raises(rt.InvalidArgument, lambda: s.run(None, {"x": np.zeros((2, 4), np.float32)}), "shape")
    raises(rt.InvalidArgument, lambda: s.run(None, {"x": good.astype(np.float64)}), "must be float32, got float64")
    raises(rt.InvalidArgument, lambda: s.run(None, {"x": [[0, 0, 0], [0, 0, 0]]}), "numpy array, got list")
    raises(rt.InvalidArgument, lambda: s.run(None, [good]), "dict")
    raises(rt.InvalidArgument, lambda: s.run(None, {1: good}), "strings")
    raises(rt.InvalidArgument, lambda: s.run(["nosuch"], {"x": good}), "no output named 'nosuch'")
    raises(rt.InvalidArgument, lambda: s.run("data_out", {"x": good}), "list of names")
    raises(rt.InvalidArgument, lambda: s.run(None, {"x": np.zeros((2, 3), np.complex64)}), "no type for")
    assert issubclass(rt.InvalidArgument, ValueError)


def test_bad_models_and_options_raise_their_kind(tmp_path, relu_model):
    raises(rt.InvalidArgument, lambda: rt.InferenceSession(str(tmp_path / "missing.onnx")), "does not exist")
    raises(rt.InvalidModel, lambda: rt.InferenceSession(b"\x08\x07garbage"))
    raises(rt.InvalidArgument, lambda: rt.InferenceSession(42), "file path or the model's bytes")
    graph = helper.make_graph([helper.make_node("Frobnicate", ["x"], ["y"], domain="com.example")], "g",
                              [float_info("x", [1])], [float_info("y", [1])])
    unsupported = save_model(graph, tmp_path / "u.onnx", extra_opsets=[("com.example", 1)], check=False)
    raises(rt.Unsupported, lambda: rt.InferenceSession(str(unsupported)), "Frobnicate")
    options = rt.SessionOptions()
    raises(rt.InvalidArgument, lambda: setattr(options, "intra_op_num_threads", -1), ">= 0|between")
    raises(rt.InvalidArgument, lambda: setattr(options, "intra_op_num_threads", "2"), "int")
    raises(rt.InvalidArgument, lambda: setattr(options, "execution_mode", "fast"), "execution_mode")
    raises(rt.InvalidArgument, lambda: setattr(options, "graph_optimization_level", 7), "graph_optimization_level")
    options.intra_op_num_threads = 1
    options.execution_mode = rt.ExecutionMode.THROUGHPUT
    options.streams = 2
    raises(rt.InvalidArgument, lambda: rt.InferenceSession(str(relu_model), options), "streams")
    raises(rt.InvalidArgument, lambda: rt.InferenceSession(str(relu_model), sess_options="fast"), "SessionOptions")


def test_tune_writes_its_cache_and_keeps_the_results(tmp_path):
    """SessionOptions.tune / tune_cache: a MatMul with constant weights is timed both ways, the choice cached."""
    import json
    from onnx import numpy_helper
    w = np.random.default_rng(5).standard_normal((32, 24)).astype(np.float32)
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "mm", [float_info("x", [8, 32])],
                              [float_info("y", [8, 24])], [numpy_helper.from_array(w, "w")])
    model = save_model(graph, tmp_path / "mm.onnx")
    options = rt.SessionOptions()
    options.tune = True
    options.tune_cache = tmp_path / "tune.json"
    x = np.random.default_rng(6).standard_normal((8, 32)).astype(np.float32)
    y = rt.InferenceSession(str(model), options).run(None, {"x": x})[0]
    np.testing.assert_allclose(y, x @ w, rtol=1e-4, atol=1e-4)
    assert len(json.loads((tmp_path / "tune.json").read_text())["choices"]) == 1
    raises(rt.InvalidArgument, lambda: setattr(options, "tune", "yes"), "bool")


# --- execution modes and async runs -------------------------------------------------------------

def test_throughput_mode_and_async_runs(relu_model):
    options = rt.SessionOptions()
    options.intra_op_num_threads = 2
    options.execution_mode = rt.ExecutionMode.THROUGHPUT
    s = rt.InferenceSession(str(relu_model), options)
    assert (s.streams, s.threads_per_stream) == (2, 1)
    inputs = [np.full((2, 3), k - 10, np.float32) for k in range(20)]
    futures = [s.run_async(None, {"x": x}) for x in inputs]
    for k, f in enumerate(futures):
        np.testing.assert_array_equal(f.result(timeout=30)[0], np.full((2, 3), max(k - 10, 0), np.float32))

    done = threading.Event()
    seen = []

    def callback(outputs, user_data, error):
        seen.append((outputs[0][0, 0], user_data, error))
        done.set()

    assert s.run_async(["data_out"], {"x": np.full((2, 3), 5, np.float32)}, callback, "tag") is None
    assert done.wait(30)
    assert seen == [(5.0, "tag", "")]
    raises(rt.InvalidArgument, lambda: s.run_async(None, {"x": np.zeros(3, np.float32)}), "shape")


def test_async_errors_reach_the_future(tmp_path):
    # Shapes only known at run time: Reshape to a shape given as an input.
    graph = helper.make_graph([helper.make_node("Reshape", ["x", "shape"], ["y"])], "g",
                              [float_info("x", [6]), helper.make_tensor_value_info("shape", TensorProto.INT64, [2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    s = rt.InferenceSession(str(save_model(graph, tmp_path / "reshape.onnx", check=False)))
    x = np.arange(6, dtype=np.float32)
    np.testing.assert_array_equal(s.run_async(None, {"x": x, "shape": np.array([2, 3])}).result(30)[0],
                                  x.reshape(2, 3))
    future = s.run_async(None, {"x": x, "shape": np.array([4, 4])})
    with pytest.raises(rt.Error):
        future.result(30)


def test_runs_release_the_gil(tmp_path):
    """While one thread is inside run(), another keeps executing Python."""
    cache = export_models.default_cache_dir()
    files = export_models.export_model("resnet18", cache)
    options = rt.SessionOptions()
    options.intra_op_num_threads = 1
    s = rt.InferenceSession(str(files.onnx), options)
    x = np.load(files.input)
    s.run(None, {"input": x})  # plans
    spans = []

    def runner():
        for _ in range(3):
            t0 = time.perf_counter()
            s.run(None, {"input": x})
            spans.append((t0, time.perf_counter()))

    thread = threading.Thread(target=runner)
    ticks = []
    thread.start()
    while thread.is_alive():
        ticks.append(time.perf_counter())
    thread.join()
    for start, end in spans:
        inside = [t for t in ticks if start < t < end]
        # With the GIL held for the whole run, no tick would land inside it.
        assert len(inside) > 100, f"{len(inside)} ticks during a {1e3 * (end - start):.1f} ms run"


def test_profiling_records_every_node(tmp_path, relu_model, monkeypatch):
    monkeypatch.chdir(tmp_path)
    options = rt.SessionOptions()
    options.enable_profiling = True
    options.profile_file_prefix = "p"
    s = rt.InferenceSession(str(relu_model), options)
    s.run(None, {"x": np.zeros((2, 3), np.float32)})
    s.run(None, {"x": np.zeros((2, 3), np.float32)})
    runs = s.last_profiles()
    assert len(runs) == 2 and [n["op"] for n in runs[0]["nodes"]] == ["Relu"]
    s.run(None, {"x": np.zeros((2, 3), np.float32)})
    path = s.end_profiling()
    import json
    events = json.loads(Path(path).read_text())
    assert sum(e["cat"] == "Node" for e in events) == 3  # every run since the session started


def test_other_modules_keep_their_exceptions():
    """Anvil's exception translation applies to Anvil's functions only."""
    with pytest.raises(onnx.checker.ValidationError):
        onnx.checker.check_model(helper.make_model(helper.make_graph([], "g", [], [helper.make_tensor_value_info(
            "y", TensorProto.FLOAT, None)])))


def test_two_inputs_share_nothing_with_the_outputs(tmp_path):
    s = rt.InferenceSession(str(make_add_model(tmp_path / "add.onnx", shape=(2, 2))))
    a = np.ones((2, 2), np.float32)
    b = np.full((2, 2), 2, np.float32)
    c, c_again = s.run(["C", "C"], {"A": a, "B": b})
    c[0, 0] = 100
    assert c_again[0, 0] == 3 and a[0, 0] == 1
