"""Real networks exported by PyTorch: Anvil's output must match PyTorch's and ONNX Runtime's.

Each model (seeded random weights, see export_models.py) is exported once
into the cache ($ANVIL_MODEL_CACHE, else build/models), run with
`anvil run MODEL.onnx -i input=input.npy -o DIR --threads 2` (some also with
`--threads 1`, whose plans differ), and compared:

    max |anvil - reference| <= 1e-4 * max |reference|

for reference = the PyTorch eval-mode output and the ONNX Runtime output,
at optimization level 0 (the graph as exported) and 3 (the default: fusions
and blocked layouts).
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest

import export_models
from anvil_testing import assert_ok, model_inputs, output_file_name, read_tensor_pb, relative_diff

RELATIVE_TOLERANCE = 1e-4
RUN_TIMEOUT_S = 300


@pytest.fixture(scope="session")
def model_cache():
    return export_models.default_cache_dir()


@pytest.mark.slow
@pytest.mark.parametrize("opt", ["0", "3"])
@pytest.mark.parametrize("name", export_models.MODEL_NAMES)
def test_model_matches_torch_and_ort(name, opt, anvil, model_cache, tmp_path):
    check_model(name, opt, "2", anvil, model_cache, tmp_path)


# Some plans differ at one thread: MobileNetV2's and MobileNetV3's stride-2
# expansions and their depthwise convolutions run as one oneDNN kernel where
# oneDNN has one that computes both in one pass (anvil.FusedConvDepthwise;
# AVX-512 at one thread). EfficientNet-B0's stride-1 expansion once ran so
# from NHWC and gave wrong outputs there (kernels/dnnl/conv.cc: the kernel
# now takes channel blocks); its expansions, all with a SiLU, now run apart.
@pytest.mark.slow
@pytest.mark.parametrize("name", ["mobilenet_v2", "efficientnet_b0", "mobilenet_v3_large"])
def test_one_thread_plan_matches_torch_and_ort(name, anvil, model_cache, tmp_path):
    check_model(name, "3", "1", anvil, model_cache, tmp_path)


def check_model(name, opt, threads, anvil, model_cache, tmp_path):
    files = export_models.export_model(name, model_cache)
    model = onnx.load(str(files.onnx), load_external_data=False)
    (input_info,) = model_inputs(model)
    (output_info,) = model.graph.output

    result = anvil("run", files.onnx, "-i", f"{input_info.name}={files.input}",
                   "-o", tmp_path, "--threads", threads, "-O", opt, timeout=RUN_TIMEOUT_S)
    assert_ok(result)
    out_path = tmp_path / output_file_name(output_info.name)
    assert out_path.is_file(), f"anvil wrote no {out_path.name}; files: {sorted(p.name for p in tmp_path.iterdir())}"
    actual = read_tensor_pb(out_path)

    torch_out = np.load(files.torch_output)
    ort_out = np.load(files.ort_output)
    assert actual.dtype == np.float32, f"output dtype {actual.dtype}, expected float32"
    assert actual.shape == torch_out.shape, f"output shape {actual.shape}, expected {torch_out.shape}"
    assert np.all(np.isfinite(actual)), "output has NaN or Inf"

    diffs = {"PyTorch": relative_diff(actual, torch_out), "ONNX Runtime": relative_diff(actual, ort_out)}
    report = ", ".join(f"vs {k}: {v:.3g}" for k, v in diffs.items())
    assert all(d <= RELATIVE_TOLERANCE for d in diffs.values()), (
        f"{name} -O {opt} --threads {threads}: max|diff|/max|ref| {report} (limit {RELATIVE_TOLERANCE:g})")
