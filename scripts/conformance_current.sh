#!/usr/bin/env bash
# The current ONNX backend test suite: generated once from the pinned PyPI
# onnx (scripts/gen_onnx_suite.py, cached in the build folder), then every
# case listed in the expectation file must pass.
#   scripts/conformance_current.sh ANVIL PYTHON SUITE_DIR EXPECTED
set -euo pipefail
anvil="$1" python="$2" suite="$3" expected="$4"
"$python" "$(dirname "$0")/gen_onnx_suite.py" "$suite"
exec "$anvil" conformance "$suite/node" "$suite/pytorch-converted" "$suite/pytorch-operator" "$suite/simple" \
  --quiet --expect "$expected" --json "$suite/results.json"
