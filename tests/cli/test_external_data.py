"""Models whose weights live in external data files next to the model."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from anvil_testing import ERROR_PREFIX, EXIT_INVALID_MODEL, assert_ok, read_tensor_pb


def make_matmul_model(folder, location: str):
    """y = x @ W with W (64x32, 8 KiB) stored in the external file `location`."""
    w = np.random.default_rng(3).standard_normal((64, 32), dtype=np.float32)
    init = numpy_helper.from_array(w, "W")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["y"])], "ext",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 32])], [init])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 7
    onnx.external_data_helper.convert_model_to_external_data(model, all_tensors_to_one_file=True,
                                                             location="weights.bin", size_threshold=0)
    path = folder / "model.onnx"
    onnx.save_model(model, str(path))
    if location != "weights.bin":
        # Point the initializer somewhere else after saving the real file.
        m = onnx.load(str(path), load_external_data=False)
        for entry in m.graph.initializer[0].external_data:
            if entry.key == "location":
                entry.value = location
        onnx.save_model(m, str(path))
    return path, w


def test_external_data_is_read_from_the_model_folder(anvil, tmp_path):
    path, w = make_matmul_model(tmp_path, "weights.bin")
    x = np.random.default_rng(4).standard_normal((2, 64), dtype=np.float32)
    np.save(tmp_path / "x.npy", x)
    result = anvil("run", path, "-i", f"x={tmp_path / 'x.npy'}", "-o", tmp_path / "out")
    assert_ok(result)
    y = read_tensor_pb(tmp_path / "out" / "y.pb")
    np.testing.assert_allclose(y, x @ w, rtol=1e-5, atol=1e-5)


def test_external_data_outside_the_model_folder_is_refused(anvil, tmp_path):
    folder = tmp_path / "model"
    folder.mkdir()
    (tmp_path / "outside.bin").write_bytes(b"\0" * 64 * 32 * 4)
    path, _ = make_matmul_model(folder, "../outside.bin")
    result = anvil("run", path)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == EXIT_INVALID_MODEL, result.stderr
    assert len(lines) == 1 and lines[0].startswith(ERROR_PREFIX)
    assert "leaves the model's folder" in lines[0]


def test_missing_external_data_file(anvil, tmp_path):
    path, _ = make_matmul_model(tmp_path, "weights.bin")
    (tmp_path / "weights.bin").unlink()
    result = anvil("run", path)
    assert result.returncode == EXIT_INVALID_MODEL, result.stderr
    assert "weights.bin" in result.stderr


def test_large_external_weights_are_mapped_and_give_the_right_values(anvil, tmp_path):
    """W1 (512 KiB, at offset 0: mapped) and W2 (at an offset that is not 64-byte aligned: read)."""
    rng = np.random.default_rng(5)
    w1 = rng.standard_normal((256, 512), dtype=np.float32)
    w2 = rng.standard_normal((512, 33), dtype=np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W1"], ["h"]), helper.make_node("Relu", ["h"], ["r"]),
         helper.make_node("MatMul", ["r", "W2"], ["y"])], "ext",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 256])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 33])],
        [numpy_helper.from_array(w1, "W1"), numpy_helper.from_array(w2, "W2")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 7
    onnx.external_data_helper.convert_model_to_external_data(model, all_tensors_to_one_file=True,
                                                             location="weights.bin", size_threshold=0)
    path = tmp_path / "model.onnx"
    onnx.save_model(model, str(path))
    offsets = {t.name: int(next((e.value for e in t.external_data if e.key == "offset"), "0"))
               for t in onnx.load(str(path), load_external_data=False).graph.initializer}
    assert offsets["W1"] % 64 == 0 or offsets["W2"] % 64 != 0
    # Two batch sizes on one session: the second plan comes after the first released the
    # pages of the weights it packed (a private file mapping reads them back from the file).
    inputs = {}
    for case, batch in (("c0", 3), ("c1", 5)):
        (tmp_path / case).mkdir()
        inputs[case] = rng.standard_normal((batch, 256), dtype=np.float32)
        np.save(tmp_path / case / "x.npy", inputs[case])
    result = anvil("run", path, "--case", tmp_path / "c0", "--case", tmp_path / "c1", "-o", tmp_path / "out",
                   "-O", "3")
    assert_ok(result)
    for case, x in inputs.items():
        y = read_tensor_pb(tmp_path / "out" / case[1:] / "y.pb")  # out/<case index>/
        np.testing.assert_allclose(y, np.maximum(x @ w1, 0) @ w2, rtol=1e-4, atol=1e-3)
