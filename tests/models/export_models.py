#!/usr/bin/env python3
"""Export the networks of the model tests to ONNX, with reference outputs.

Each model is a real architecture (torchvision or the PyTorch
super-resolution example) with seeded random weights -- nothing is
downloaded.  For every model the cache folder gets a sub-folder

    <cache>/<name>/<name>.onnx       opset 13, batch 1, static shapes
    <cache>/<name>/input.npy         seeded random input (float32, NCHW)
    <cache>/<name>/torch_output.npy  PyTorch eval-mode output for input.npy
    <cache>/<name>/ort_output.npy    ONNX Runtime output of the .onnx file
    <cache>/<name>/meta.json         recipe, input/output names, timings

Files that already exist are reused (the cache), unless the recipe stamp
in meta.json differs from this script's (then the folder is rebuilt) or
--force is given.  Writes are atomic (temporary file + rename) and each
model is exported under a file lock, so parallel test runs and interrupted
runs never leave a half-written file behind.

BatchNorm layers get random running statistics and affine parameters:
freshly initialised ones (mean 0, var 1, weight 1, bias 0) would make BN a
no-op and hide folding bugs.  The export keeps the BatchNormalization nodes
(TrainingMode.PRESERVE on an eval-mode model) instead of letting the
exporter fold them into the convolutions, so Anvil's own BN handling is
what gets tested.

Usage:
    build/venv/bin/python tests/models/export_models.py [NAME...] [--cache-dir DIR] [--force]
Cache folder: --cache-dir, else $ANVIL_MODEL_CACHE, else <repo>/build/models.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import fcntl
import json
import os
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Callable, Dict, Iterator, Tuple

import numpy as np

REPO_ROOT = Path(__file__).resolve().parents[2]
OPSET = 13
SEED = 20240601
# Bump when anything that changes the exported files changes.
RECIPE_VERSION = 1
INPUT_NAME = "input"
OUTPUT_NAME = "output"


@dataclasses.dataclass(frozen=True)
class ModelSpec:
    """How to build one test network."""

    name: str
    build: Callable[[], object]  # returns a torch.nn.Module (torch is imported lazily)
    input_shape: Tuple[int, ...]


@dataclasses.dataclass(frozen=True)
class ModelFiles:
    """Paths of one exported model's cached files."""

    name: str
    folder: Path
    input_name: str = INPUT_NAME
    output_name: str = OUTPUT_NAME

    @property
    def onnx(self) -> Path:
        return self.folder / f"{self.name}.onnx"

    @property
    def input(self) -> Path:
        return self.folder / "input.npy"

    @property
    def torch_output(self) -> Path:
        return self.folder / "torch_output.npy"

    @property
    def ort_output(self) -> Path:
        return self.folder / "ort_output.npy"

    @property
    def meta(self) -> Path:
        return self.folder / "meta.json"


# --------------------------------------------------------------------------
# Model definitions
# --------------------------------------------------------------------------

def _torchvision(arch: str) -> Callable[[], object]:
    def build():
        import torchvision

        return getattr(torchvision.models, arch)(weights=None)

    return build


def _super_resolution():
    """The network of PyTorch's super-resolution ONNX export tutorial."""
    import torch.nn as nn
    import torch.nn.init as init

    class SuperResolutionNet(nn.Module):
        def __init__(self, upscale_factor: int):
            super().__init__()
            self.relu = nn.ReLU()
            self.conv1 = nn.Conv2d(1, 64, (5, 5), (1, 1), (2, 2))
            self.conv2 = nn.Conv2d(64, 64, (3, 3), (1, 1), (1, 1))
            self.conv3 = nn.Conv2d(64, 32, (3, 3), (1, 1), (1, 1))
            self.conv4 = nn.Conv2d(32, upscale_factor ** 2, (3, 3), (1, 1), (1, 1))
            self.pixel_shuffle = nn.PixelShuffle(upscale_factor)
            init.orthogonal_(self.conv1.weight, init.calculate_gain("relu"))
            init.orthogonal_(self.conv2.weight, init.calculate_gain("relu"))
            init.orthogonal_(self.conv3.weight, init.calculate_gain("relu"))
            init.orthogonal_(self.conv4.weight)

        def forward(self, x):
            x = self.relu(self.conv1(x))
            x = self.relu(self.conv2(x))
            x = self.relu(self.conv3(x))
            return self.pixel_shuffle(self.conv4(x))

    return SuperResolutionNet(upscale_factor=3)


IMAGE = (1, 3, 224, 224)
MODELS: Dict[str, ModelSpec] = {
    spec.name: spec
    for spec in (
        ModelSpec("resnet18", _torchvision("resnet18"), IMAGE),
        ModelSpec("resnet50", _torchvision("resnet50"), IMAGE),
        ModelSpec("mobilenet_v2", _torchvision("mobilenet_v2"), IMAGE),
        ModelSpec("squeezenet1_1", _torchvision("squeezenet1_1"), IMAGE),
        # BatchNormalization + ReLU after each Concat: anvil.FusedBatchNorm in channel blocks
        ModelSpec("densenet121", _torchvision("densenet121"), IMAGE),
        # grouped convolutions between 1x1 ones (NHWC on AVX-512), squeeze-and-excitation
        ModelSpec("regnet_y_400mf", _torchvision("regnet_y_400mf"), IMAGE),
        # channel shuffles and channel Slices between NHWC convolutions
        ModelSpec("shufflenet_v2_x1_0", _torchvision("shufflenet_v2_x1_0"), IMAGE),
        # zero Pads before AveragePools (count_include_pad) and 1x7 / 7x1 windows
        ModelSpec("inception_v3", _torchvision("inception_v3"), IMAGE),
        # SiLU after every convolution (run after it on Anvil's loop), depthwise expansions at
        # strides 1 and 2, squeeze-and-excitation
        ModelSpec("efficientnet_b0", _torchvision("efficientnet_b0"), IMAGE),
        # HardSwish and ReLU, squeeze-and-excitation gated by HardSigmoid
        ModelSpec("mobilenet_v3_large", _torchvision("mobilenet_v3_large"), IMAGE),
        ModelSpec("super_resolution", _super_resolution, (1, 1, 224, 224)),
    )
}
MODEL_NAMES = tuple(MODELS)


# --------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------

def default_cache_dir() -> Path:
    """$ANVIL_MODEL_CACHE, else <repo>/build/models."""
    env = os.environ.get("ANVIL_MODEL_CACHE")
    return Path(env) if env else REPO_ROOT / "build" / "models"


def model_seed(name: str) -> int:
    """A per-model seed, so a model's weights do not depend on export order."""
    return SEED + sum((i + 1) * ord(c) for i, c in enumerate(name))


def recipe(spec: ModelSpec) -> dict:
    """Everything that determines the exported files; stored in meta.json."""
    import torch
    import torchvision

    return {
        "recipe_version": RECIPE_VERSION,
        "model": spec.name,
        "opset": OPSET,
        "seed": model_seed(spec.name),
        "input_shape": list(spec.input_shape),
        "torch": torch.__version__,
        "torchvision": torchvision.__version__,
    }


def randomize_batchnorm(model, generator) -> int:
    """Give every BatchNorm layer random running stats and affine params.

    The ranges keep activations at a sane scale through deep networks
    (var in [0.5, 2], |mean| small) while making every BN channel different.
    Returns the number of BN layers changed.
    """
    import torch

    count = 0
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, torch.nn.modules.batchnorm._BatchNorm):
                c = module.num_features

                def uniform(lo, hi):
                    return torch.rand(c, generator=generator) * (hi - lo) + lo

                module.running_mean.copy_(torch.randn(c, generator=generator) * 0.1)
                module.running_var.copy_(uniform(0.5, 2.0))
                if module.affine:
                    module.weight.copy_(uniform(0.5, 1.5))
                    module.bias.copy_(torch.randn(c, generator=generator) * 0.1)
                count += 1
    return count


def build_model(spec: ModelSpec):
    """Build the eval-mode network with seeded weights."""
    import torch

    torch.manual_seed(model_seed(spec.name))
    model = spec.build()
    randomize_batchnorm(model, torch.Generator().manual_seed(model_seed(spec.name) + 1))
    return model.eval()


def make_input(spec: ModelSpec) -> np.ndarray:
    """The seeded random input: standard normal float32 of the input shape."""
    rng = np.random.default_rng(model_seed(spec.name) + 2)
    return rng.standard_normal(spec.input_shape, dtype=np.float32)


@contextlib.contextmanager
def atomic_path(path: Path) -> Iterator[Path]:
    """Yield a temporary path next to `path`; rename it into place on success."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=path.suffix, dir=path.parent)
    os.close(fd)
    tmp_path = Path(tmp)
    umask = os.umask(0)
    os.umask(umask)
    try:
        yield tmp_path
        os.chmod(tmp_path, 0o666 & ~umask)  # mkstemp makes files 0600
        os.replace(tmp_path, path)
    finally:
        if tmp_path.exists():
            tmp_path.unlink()


def save_npy(path: Path, array: np.ndarray) -> None:
    with atomic_path(path) as tmp:
        np.save(tmp, np.ascontiguousarray(array))


@contextlib.contextmanager
def locked(folder: Path) -> Iterator[None]:
    """Hold an exclusive lock on `folder` (a .lock file inside it)."""
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def relative_diff(a: np.ndarray, b: np.ndarray) -> float:
    """max |a - b| / max |b| (0 when both are all zero)."""
    scale = float(np.max(np.abs(b))) if b.size else 0.0
    diff = float(np.max(np.abs(a.astype(np.float64) - b))) if b.size else 0.0
    return diff / scale if scale > 0 else diff


# --------------------------------------------------------------------------
# The export steps
# --------------------------------------------------------------------------

def export_onnx(model, example: np.ndarray, path: Path) -> None:
    """torch.onnx.export with the test recipe, then the ONNX checker."""
    import onnx
    import torch

    with atomic_path(path) as tmp, torch.no_grad(), warnings.catch_warnings():
        # PRESERVE + constant folding warns about models in training mode;
        # ours is in eval mode, so folding is exact.
        warnings.filterwarnings("ignore", message=".*constant folding.*")
        torch.onnx.export(
            model,
            torch.from_numpy(example),
            str(tmp),
            opset_version=OPSET,
            input_names=[INPUT_NAME],
            output_names=[OUTPUT_NAME],
            do_constant_folding=True,
            # Keep BatchNormalization nodes (the default, EVAL, folds them
            # into the convolutions during export).
            training=torch.onnx.TrainingMode.PRESERVE,
        )
        onnx.checker.check_model(str(tmp))


def torch_output(model, example: np.ndarray) -> np.ndarray:
    import torch

    with torch.no_grad():
        return model(torch.from_numpy(example)).numpy()


def ort_output(onnx_path: Path, example: np.ndarray) -> np.ndarray:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = min(2, os.cpu_count() or 1)
    session = ort.InferenceSession(str(onnx_path), options, providers=["CPUExecutionProvider"])
    return session.run([OUTPUT_NAME], {INPUT_NAME: example})[0]


def _stale(files: ModelFiles, want: dict) -> bool:
    """True when meta.json is missing or records another recipe."""
    try:
        meta = json.loads(files.meta.read_text())
    except (OSError, ValueError):
        return True
    return meta.get("recipe") != want


def export_model(name: str, cache_dir: Path | None = None, force: bool = False,
                 log: Callable[[str], None] = lambda _: None) -> ModelFiles:
    """Make sure every cached file of model `name` exists; return their paths.

    Only missing files are produced.  meta.json is written last, so an
    interrupted export is redone (from scratch) on the next call.
    """
    if name not in MODELS:
        raise KeyError(f"unknown model '{name}' (known: {', '.join(MODEL_NAMES)})")
    spec = MODELS[name]
    files = ModelFiles(name, Path(cache_dir or default_cache_dir()) / name)
    with locked(files.folder):
        want = recipe(spec)
        wanted = (files.onnx, files.input, files.torch_output, files.ort_output)
        if not force and all(p.exists() for p in wanted) and not _stale(files, want):
            return files
        if force or _stale(files, want):
            for p in wanted + (files.meta,):
                p.unlink(missing_ok=True)

        timings: Dict[str, float] = {}
        if not _stale(files, want):  # keep the timings of the steps not redone
            timings.update(json.loads(files.meta.read_text()).get("timings_s", {}))
        model = None
        example = make_input(spec)

        def step(label: str, fn: Callable[[], None]) -> None:
            t0 = time.perf_counter()
            fn()
            timings[label] = round(time.perf_counter() - t0, 3)
            log(f"  {name}: {label} {timings[label]:.2f} s")

        if not files.input.exists():
            step("input", lambda: save_npy(files.input, example))
        example = np.load(files.input)
        if not files.onnx.exists() or not files.torch_output.exists():
            t0 = time.perf_counter()
            model = build_model(spec)
            timings["build"] = round(time.perf_counter() - t0, 3)
        if not files.onnx.exists():
            files.ort_output.unlink(missing_ok=True)  # it was made from the old file
            step("onnx_export", lambda: export_onnx(model, example, files.onnx))
        if not files.torch_output.exists():
            step("torch_run", lambda: save_npy(files.torch_output, torch_output(model, example)))
        if not files.ort_output.exists():
            step("ort_run", lambda: save_npy(files.ort_output, ort_output(files.onnx, example)))

        torch_out = np.load(files.torch_output)
        ort_out = np.load(files.ort_output)
        meta = {
            "recipe": want,
            "input_name": INPUT_NAME,
            "output_name": OUTPUT_NAME,
            "output_shape": list(torch_out.shape),
            "max_abs_output": float(np.max(np.abs(torch_out))),
            "ort_vs_torch_relative_diff": relative_diff(ort_out, torch_out),
            "timings_s": timings,
        }
        with atomic_path(files.meta) as tmp:
            tmp.write_text(json.dumps(meta, indent=2) + "\n")
    return files


def export_all(cache_dir: Path | None = None, force: bool = False,
               log: Callable[[str], None] = lambda _: None) -> Dict[str, ModelFiles]:
    return {name: export_model(name, cache_dir, force, log) for name in MODEL_NAMES}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("models", nargs="*", metavar="NAME",
                        help=f"models to export (default: all of {', '.join(MODEL_NAMES)})")
    parser.add_argument("--cache-dir", type=Path, default=None,
                        help="cache folder (default: $ANVIL_MODEL_CACHE or build/models)")
    parser.add_argument("--force", action="store_true", help="re-export even if cached")
    args = parser.parse_args(argv)

    unknown = [m for m in args.models if m not in MODELS]
    if unknown:
        parser.error(f"unknown model(s) {', '.join(unknown)}; known: {', '.join(MODEL_NAMES)}")
    cache = args.cache_dir or default_cache_dir()
    for name in args.models or MODEL_NAMES:
        t0 = time.perf_counter()
        files = export_model(name, cache, args.force, log=print)
        meta = json.loads(files.meta.read_text())
        print(f"{name}: {files.onnx}  ({time.perf_counter() - t0:.1f} s, output "
              f"{meta['output_shape']}, max|out| {meta['max_abs_output']:.3g}, "
              f"ORT vs torch {meta['ort_vs_torch_relative_diff']:.2e})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
