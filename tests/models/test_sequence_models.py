"""Transformers exported by PyTorch with dynamic batch and sequence axes
(export_sequence_models.py): one Anvil session serves three input shapes, and
every output matches PyTorch's and ONNX Runtime's:

    max |anvil - reference| <= 1e-4 * max |reference|

The run goes through `anvil run MODEL --case DIR...`, which runs every case on
one session; the session must end with one cached plan per shape (plans are
keyed by shapes, never by the token values). Both at optimization level 0
(the graph as exported) and 3 (the default: fusions).
"""

from __future__ import annotations

import re

import numpy as np
import onnx
import pytest

import export_sequence_models as seq
from anvil_testing import assert_ok, output_file_name, read_tensor_pb, relative_diff

RELATIVE_TOLERANCE = 1e-4
RUN_TIMEOUT_S = 600


@pytest.mark.slow
@pytest.mark.parametrize("opt", ["0", "3"])
@pytest.mark.parametrize("name", seq.MODEL_NAMES)
def test_sequence_model_matches_torch_and_ort_at_three_shapes(name, opt, anvil, tmp_path):
    model = seq.export_model(name)
    cases = seq.case_dirs(name)
    args = ["run", model, "--threads", "2", "-O", opt, "-o", tmp_path]
    for case in cases:
        args += ["--case", case]
    result = anvil(*args, timeout=RUN_TIMEOUT_S)
    assert_ok(result)
    assert re.search(rf"{len(cases)} cases, {len(cases)} plans cached", result.stdout), result.stdout

    output = seq.OUTPUTS[name][0]
    for k, case in enumerate(cases):
        actual = read_tensor_pb(tmp_path / str(k) / output_file_name(output))
        torch_out = np.load(case / "expected" / "torch.npy")
        ort_out = np.load(case / "expected" / "ort.npy")
        assert actual.shape == torch_out.shape, f"case {k}: shape {actual.shape}, expected {torch_out.shape}"
        assert np.all(np.isfinite(actual)), f"case {k}: NaN or Inf in the output"
        diffs = {"PyTorch": relative_diff(actual, torch_out), "ONNX Runtime": relative_diff(actual, ort_out)}
        report = ", ".join(f"vs {ref}: {d:.3g}" for ref, d in diffs.items())
        assert all(d <= RELATIVE_TOLERANCE for d in diffs.values()), (
            f"{name} -O {opt} case {k} {actual.shape}: max|diff|/max|ref| {report} (limit {RELATIVE_TOLERANCE:g})")


def _declared_type(value) -> str:
    tensor = value.type.tensor_type
    dims = [d.dim_param or str(d.dim_value) for d in tensor.shape.dim]
    dtype = onnx.TensorProto.DataType.Name(tensor.elem_type).lower()
    dtype = {"float": "float32", "double": "float64"}.get(dtype, dtype)
    return f"{dtype}[{','.join(dims)}]"


# The Loop model's output is declared [batch, Loopy_dim_1], Hugging Face's
# GPT-2's [batch, sequence, Reshapelast_hidden_state_dim_2]: PyTorch's
# exporter could not name a dim (Anvil infers 64 for GPT-2's), so there is
# nothing to compare with. The decoding steps' presents are declared with
# a name of their own, `present`, where Anvil infers past + 1; wav2vec2's
# frames likewise (`frames`, a floor division of the samples that Anvil
# leaves unnamed). SegFormer's logits are declared [batch, 3,
# Convlogits_dim_2, Convlogits_dim_3], PyTorch's names for dims it could not
# infer; from the input types alone Anvil infers no rank for them (the
# decode head resizes to sizes read from a Shape), so there is nothing to
# compare with either. LeViT's tokens are declared
# Addlast_hidden_state_dim_1, where Anvil infers the 1 they are at 64 x 64.
@pytest.mark.parametrize("name", [n for n in seq.MODEL_NAMES
                                  if n not in ("loop", "hf_gpt2", "hf_gpt2_step", "hf_llama_step", "hf_wav2vec2",
                                               "hf_segformer", "hf_levit")])
def test_inference_recovers_the_declared_output_types(name, anvil, tmp_path):
    """With every intermediate and output shape removed, Anvil's schemas infer
    the outputs' symbolic types from the inputs alone, as PyTorch declared them."""
    original = onnx.load(str(seq.export_model(name)))
    expected = {o.name: _declared_type(o) for o in original.graph.output}
    stripped = onnx.load(str(seq.export_model(name)))
    del stripped.graph.value_info[:]
    for o in stripped.graph.output:
        o.type.tensor_type.ClearField("shape")
    path = tmp_path / f"{name}_stripped.onnx"
    onnx.save(stripped, str(path))
    result = anvil("inspect", path, timeout=120)
    assert_ok(result)
    outputs = result.stdout.split("outputs:")[1]
    for output, declared in expected.items():
        assert re.search(rf"^\s+{re.escape(output)}\s+{re.escape(declared)}$", outputs, re.MULTILINE), (
            f"{output}: expected {declared}\n{result.stdout}")


# The exporters compute shapes around attention in their own ways (Shape
# nodes of symbolic dims, buffers sliced to the sequence length, casts of a
# type to itself, sequence-first heads): each layer must still become one
# attention node reading the packed projection in place. The outputs of the
# optimized graph are checked above at -O 3.
@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(seq.ATTENTION_LAYERS))
def test_every_attention_layer_fuses(name, anvil, tmp_path):
    result = anvil("optimize", seq.export_model(name), tmp_path / f"{name}_opt.onnx", timeout=RUN_TIMEOUT_S)
    assert_ok(result)
    fused = re.search(r"^\s+anvil\.QkvAttention\s+(\d+)$", result.stdout, re.MULTILINE)
    assert fused and int(fused.group(1)) == seq.ATTENTION_LAYERS[name], (
        f"{name}: expected {seq.ATTENTION_LAYERS[name]} anvil.QkvAttention nodes\n{result.stdout}")


# Hugging Face's LLaMA squeezes its rotary tables through Ifs of a shape
# test (PyTorch's export of squeeze on a dim it cannot see). Once the shapes
# fold, each is a constant and must give way to its branch: an If left in
# would hide the types of everything after it, and the products would be
# planned, and their weights packed, only at run time.
@pytest.mark.slow
def test_constant_ifs_give_way_to_their_branches(anvil, tmp_path):
    model = seq.export_model("hf_llama_step")
    original = onnx.load(str(model))
    assert any(n.op_type == "If" for n in original.graph.node), "the export no longer has the Ifs this test is for"
    result = anvil("optimize", model, tmp_path / "llama_opt.onnx", timeout=RUN_TIMEOUT_S)
    assert_ok(result)
    assert not re.search(r"^\s+If\s+\d+$", result.stdout, re.MULTILINE), result.stdout


# SegFormer turns its tokens into images for convolutions and back in every
# block and in its decode head, as Transpose + Reshape pairs: each must
# become one anvil.TokensToImage or anvil.ImageToTokens (a view in the
# plan's channels-last layout), none left as a Transpose.
@pytest.mark.slow
def test_segformer_tokens_become_images_and_back(anvil, tmp_path):
    model = seq.export_model("hf_segformer")
    transposes = sum(n.op_type == "Transpose" for n in onnx.load(str(model)).graph.node)
    assert transposes == 46, f"the export has {transposes} Transposes; this test was written for 46"
    result = anvil("optimize", model, tmp_path / "segformer_opt.onnx", timeout=RUN_TIMEOUT_S)
    assert_ok(result)
    counts = {op: re.search(rf"^\s+{re.escape(op)}\s+(\d+)$", result.stdout, re.MULTILINE)
              for op in ("anvil.TokensToImage", "anvil.ImageToTokens", "Transpose")}
    assert counts["anvil.TokensToImage"] and int(counts["anvil.TokensToImage"].group(1)) == 15, result.stdout
    assert counts["anvil.ImageToTokens"] and int(counts["anvil.ImageToTokens"].group(1)) == 11, result.stdout
    assert not counts["Transpose"], result.stdout


# LeViT writes each Linear + BatchNorm1d as MatMul, Flatten,
# BatchNormalization and a Reshape back, and its attention over heads split
# per head from one projection, with a position bias: every BatchNorm must
# fold into its product and every attention become one Attention node.
@pytest.mark.slow
def test_levit_batchnorms_fold_and_attention_fuses(anvil, tmp_path):
    model = seq.export_model("hf_levit")
    ops = [n.op_type for n in onnx.load(str(model)).graph.node]
    assert ops.count("BatchNormalization") >= 10 and ops.count("Softmax") == 5, (
        f"the export has {ops.count('BatchNormalization')} BatchNorms and {ops.count('Softmax')} Softmaxes; "
        "this test was written for LeViT's 5 attentions")
    result = anvil("optimize", model, tmp_path / "levit_opt.onnx", timeout=RUN_TIMEOUT_S)
    assert_ok(result)
    count = {op: re.search(rf"^\s+{re.escape(op)}\s+(\d+)$", result.stdout, re.MULTILINE)
             for op in ("BatchNormalization", "Softmax", "Attention", "Flatten")}
    assert not count["BatchNormalization"] and not count["Softmax"] and not count["Flatten"], result.stdout
    assert count["Attention"] and int(count["Attention"].group(1)) == 5, result.stdout
