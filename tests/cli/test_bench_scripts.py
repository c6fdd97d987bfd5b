"""The benchmark model exporters and bench tools refuse bad arguments with
one line on stderr and exit status 1 (the exporters before they import
PyTorch)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from anvil_testing import anvil_bin

DECODER_STEP = Path(__file__).resolve().parents[2] / "bench" / "models" / "decoder_step.py"


@pytest.mark.parametrize("args, says", [
    (["--layers", "0"], "--layers: 0 is not in 1-48"),
    (["--past", "x"], "--past: invalid parse value"),
    (["--arch", "bert"], "--arch: invalid choice"),
    ([], "the following arguments are required: output"),
])
def test_decoder_step_refuses_bad_arguments(args, says, tmp_path):
    output = [str(tmp_path / "step.onnx")] if args else []
    result = subprocess.run([sys.executable, str(DECODER_STEP), *output, *args], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 1, result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("decoder_step.py: error: ") and says in lines[0], result.stderr
    assert not (tmp_path / "step.onnx").exists()


def test_decoder_step_refuses_an_output_without_a_folder(tmp_path):
    result = subprocess.run([sys.executable, str(DECODER_STEP), str(tmp_path / "missing" / "step.onnx")],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 1, result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("decoder_step.py: error: no folder for"), result.stderr


# bench/tools/conv1d_ab.cc: one usage line and exit status 1 for bad arguments.
@pytest.mark.parametrize("args", [
    [],
    ["512", "512", "3199", "3", "2", "0"],          # ROUNDS missing
    ["512", "512", "3199", "3", "0", "0", "10"],    # stride 0
    ["512", "512", "2", "5", "1", "1", "10"],       # shorter than the window, padded
    ["512", "x", "3199", "3", "2", "0", "10"],
    ["65536", "65536", "3199", "3", "2", "0", "10"],  # weights past the tool's 1e9 floats
])
def test_conv1d_ab_refuses_bad_arguments(args):
    tool = anvil_bin().parent / "anvil_conv1d_ab"  # built beside anvil
    if not tool.exists():
        pytest.skip(f"{tool} is not built")
    result = subprocess.run([str(tool), *args], capture_output=True, text=True, timeout=60)
    assert result.returncode == 1, result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("usage: "), result.stderr
