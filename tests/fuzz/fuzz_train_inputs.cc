// libFuzzer target: what `anvil train` reads from files besides models and
// tensors — a JSON model spec (parsed, then written as ONNX) and a CSV data
// file. The first byte picks which; each must give a value or an anvil::Error.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "anvil/error.h"
#include "anvil/nn.h"
#include "train/data_loader.h"

// Allocations are capped, so a spec asking for gigabytes of weights is an
// anvil::Error (out of memory) rather than libFuzzer's RSS limit.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  setenv("ANVIL_MEMORY_LIMIT", "256M", 0);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string text(reinterpret_cast<const char*>(data) + 1, size - 1);
  try {
    if (data[0] % 2 == 0) {
      anvil::nn::Sequential::from_json(text).to_onnx(0);
    } else {
      anvil::train::csv_dataset_from_text(text, "fuzz.csv", static_cast<int>(data[0] % 7) - 3);
    }
  } catch (const anvil::Error&) {
  }
  return 0;
}
