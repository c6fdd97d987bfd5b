// libFuzzer target: the .pb (TensorProto, SequenceProto, OptionalProto) and
// .npy readers on arbitrary bytes. Each must return a value or throw anvil::Error.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "anvil/error.h"
#include "anvil/tensor_io.h"

// Allocations are capped well below the machine's memory, so a model that
// asks for gigabytes is refused (an anvil::Error) instead of tripping
// libFuzzer's RSS limit.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  setenv("ANVIL_MEMORY_LIMIT", "256M", 0);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string bytes(reinterpret_cast<const char*>(data), size);
  try {
    anvil::parse_tensor_npy(bytes, "fuzz.npy");
  } catch (const anvil::Error&) {
  }
  try {
    anvil::parse_tensor_pb(bytes, "fuzz.pb");
  } catch (const anvil::Error&) {
  }
  for (anvil::ValueKind kind : {anvil::ValueKind::kSequence, anvil::ValueKind::kOptionalSequence}) {
    try {
      anvil::parse_value_pb(bytes, "fuzz.pb", kind, anvil::DType::kFloat32);
    } catch (const anvil::Error&) {
    }
  }
  return 0;
}
