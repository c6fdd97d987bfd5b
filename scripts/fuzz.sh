#!/usr/bin/env bash
# Runs Anvil's libFuzzer targets from a seed corpus of the ONNX backend test
# models and tensors (Debian's libonnx-testdata).
#   scripts/fuzz.sh BUILD_DIR SECONDS_PER_TARGET
# Each target runs for SECONDS_PER_TARGET; crashes, leaks, hangs and
# sanitizer reports stop it with a non-zero exit and leave the input in
# BUILD_DIR/fuzz-findings/. The number of executions is printed per target.
set -euo pipefail

build="${1:?usage: fuzz.sh BUILD_DIR SECONDS}"
seconds="${2:?usage: fuzz.sh BUILD_DIR SECONDS}"
testdata=/usr/share/libonnx-testdata/data
corpus="$build/fuzz-corpus"
findings="$build/fuzz-findings"
mkdir -p "$corpus/models" "$corpus/tensors" "$findings"

# Seeds: every backend test model and its input/output tensors (copied once;
# libFuzzer adds what it finds to the same folders).
if [ -z "$(ls -A "$corpus/models")" ]; then
  i=0
  for m in "$testdata"/*/*/model.onnx; do
    cp "$m" "$corpus/models/seed_$((i++)).onnx"
  done
  i=0
  for t in "$testdata"/node/*/test_data_set_0/*.pb; do
    cp "$t" "$corpus/tensors/seed_$((i++)).pb"
  done
  "${ANVIL_PYTHON:-python3}" - "$corpus/tensors" <<'PY'
import sys, numpy as np
out = sys.argv[1]
for i, a in enumerate([np.zeros((2, 3), np.float32), np.arange(6, dtype=np.int64), np.ones((1, 1, 2), np.bool_),
                       np.zeros((0, 4), np.float16), np.array(3.5, np.float64), np.zeros((2, 2), np.uint8)]):
    np.save(f"{out}/seed_npy_{i}.npy", a)
PY
fi

# ASan's leak checker and UBSan stop at the first report; libFuzzer counts it as a crash.
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
status=0
for target in model_loader:models tensor_reader:tensors; do
  name="${target%%:*}"
  dir="$corpus/${target##*:}"
  log="$build/fuzz-$name.log"
  echo "fuzz: $name for ${seconds}s (corpus $dir, log $log)"
  if ! "$build/bin/fuzz_$name" "$dir" -max_total_time="$seconds" -timeout=20 -rss_limit_mb=2048 \
       -max_len=262144 -print_final_stats=1 -artifact_prefix="$findings/$name-" >"$log" 2>&1; then
    status=1
    echo "fuzz: $name FOUND A PROBLEM; the input is in $findings, the report in $log"
    grep -m 5 -E "ERROR|SUMMARY|runtime error" "$log" || true
  fi
  grep -E "stat::number_of_executed_units|stat::peak_rss_mb" "$log" | sed "s/^/fuzz: $name /" || true
done
exit $status
