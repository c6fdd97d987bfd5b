#!/usr/bin/env bash
# Installs everything Anvil needs on a fresh Debian 12 machine. Idempotent.
#   scripts/setup.sh           build + test dependencies, venv with onnxruntime
#   scripts/setup.sh --peers   also the benchmark-only peers (openvino, apache-tvm)
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
venv="${ANVIL_VENV:-$root/build/venv}"
peers=0
for arg in "$@"; do
  case "$arg" in
    --peers) peers=1 ;;
    -h|--help) sed -n '2,4p' "$0"; exit 0 ;;
    *) echo "setup.sh: unknown argument '$arg' (try --help)" >&2; exit 2 ;;
  esac
done

debian_packages=(
  build-essential cmake ninja-build pkg-config
  libdnnl-dev libonnx-dev libprotobuf-dev protobuf-compiler
  libcli11-dev nlohmann-json3-dev libfmt-dev libgtest-dev libgmock-dev libbenchmark-dev libre2-dev locales
  pybind11-dev python3-dev libcpp-httplib-dev wrk curl
  libjpeg62-turbo-dev libpng-dev libtiff-dev libwebp-dev libopenjp2-7-dev
  libonnx-testdata
  python3 python3-venv python3-pip python3-numpy python3-torch python3-torchvision python3-onnx
  python3-sklearn libopenblas0-pthread
)

missing=()
for p in "${debian_packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  sudo=""; [ "$(id -u)" -ne 0 ] && sudo="sudo"
  echo "setup: installing Debian packages: ${missing[*]}"
  $sudo apt-get update -q
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q "${missing[@]}"
fi

# StringNormalizer changes case under a locale: the tests use en_US.UTF-8.
if ! locale -a 2>/dev/null | grep -qi '^en_US\.utf-\?8$'; then
  sudo=""; [ "$(id -u)" -ne 0 ] && sudo="sudo"
  echo "setup: generating the en_US.UTF-8 locale"
  $sudo sed -i 's/^# *\(en_US\.UTF-8 UTF-8\)/\1/' /etc/locale.gen
  grep -q '^en_US\.UTF-8 UTF-8' /etc/locale.gen || echo 'en_US.UTF-8 UTF-8' | $sudo tee -a /etc/locale.gen >/dev/null
  $sudo locale-gen >/dev/null
fi

# Peers come from PyPI into a venv made from Debian's python, so that Debian's
# torch/onnx stay importable next to PyPI's onnxruntime.
if [ ! -x "$venv/bin/python" ]; then
  echo "setup: creating virtual environment $venv"
  /usr/bin/python3 -m venv --system-site-packages "$venv"
fi
pip=("$venv/bin/python" -m pip install -q --disable-pip-version-check)
# numpy stays below 2: Debian's torch 1.13 was built against numpy 1.x.
numpy_pin="numpy<2"
# tritonclient[http]: the KServe v2 client the server tests use.
# transformers: Hugging Face's BERT and GPT-2 modules, which the model tests
# export themselves (random weights), pinned to a release that runs on
# Debian's torch 1.13.
transformers_pin="transformers==4.30.2"
"$venv/bin/python" -c "import onnxruntime, pytest, numpy, tritonclient.http, transformers, sys; sys.exit(int(numpy.__version__.split('.')[0]) >= 2 or transformers.__version__ != '${transformers_pin#transformers==}')" 2>/dev/null \
  || "${pip[@]}" "onnxruntime>=1.30" pytest "tritonclient[http]" "$transformers_pin" "$numpy_pin"
if [ "$peers" = 1 ]; then
  "$venv/bin/python" -c "import openvino" 2>/dev/null || "${pip[@]}" openvino "$numpy_pin"
  "$venv/bin/python" -c "import tvm" 2>/dev/null || "${pip[@]}" apache-tvm "$numpy_pin" \
    || echo "setup: apache-tvm does not install here; benchmarks skip it"
fi
# The current ONNX backend test suite is generated from PyPI's onnx, pinned so
# the case list is stable, in a venv of its own (Debian's torch exports with
# Debian's onnx 1.12, which this one would shadow).
onnx_venv="$root/build/venv-onnx"
onnx_pin="onnx==1.23.0"
if [ ! -x "$onnx_venv/bin/python" ]; then
  echo "setup: creating virtual environment $onnx_venv"
  /usr/bin/python3 -m venv "$onnx_venv"
fi
"$onnx_venv/bin/python" -c "import onnx, sys; sys.exit(onnx.__version__ != '${onnx_pin#onnx==}')" 2>/dev/null \
  || "$onnx_venv/bin/python" -m pip install -q --disable-pip-version-check "$onnx_pin" "numpy<2.3"
touch "$root/build/.setup-done"
echo "setup: done"
