// libFuzzer target: the model loader on arbitrary bytes.
//
// Import (parse + validation + graph), then a session (passes, constant
// folding, type propagation) and, for models whose inputs are small, one plan
// and one run on zero inputs. Every outcome must be a result or an
// anvil::Error; a crash, a sanitizer report, a hang or any other exception is
// a finding.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "anvil/error.h"
#include "anvil/session.h"
#include "kernels/registry.h"
#include "onnx/importer.h"

namespace {

// Inputs larger than this are not materialised: the fuzzer looks for bugs, not
// for models that legitimately need gigabytes.
constexpr int64_t kMaxInputElements = 1 << 16;

bool small_enough(const anvil::Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0 || d > kMaxInputElements) return false;
    n *= d;
    if (n > kMaxInputElements) return false;
  }
  return true;
}

void load_and_run(const std::string& bytes) {
  auto supported = [](const std::string& domain, const std::string& op,
                      int opset) -> std::optional<anvil::onnx_io::OpProblem> {
    auto problem = anvil::kernels::Registry::global().check_support(domain, op, opset);
    if (!problem) return std::nullopt;
    return anvil::onnx_io::OpProblem{problem->kind, problem->message};
  };
  anvil::SessionOptions options;
  options.num_threads = 1;
  anvil::Session session =
      anvil::Session::from_graph(anvil::onnx_io::import_model_bytes(bytes, "", supported), options);
  std::map<std::string, anvil::Tensor> inputs;
  for (const anvil::ValueInfo& in : session.inputs()) {
    anvil::Shape shape = in.shape;
    for (int64_t& d : shape)
      if (d < 0) d = 1;
    if (!small_enough(shape) || in.dtype == anvil::DType::kUndefined) return;
    inputs.emplace(in.name, anvil::Tensor(in.dtype, shape));
  }
  session.run(inputs);
}

}  // namespace

// Allocations are capped well below the machine's memory, so a model that
// asks for gigabytes is refused (an anvil::Error) instead of tripping
// libFuzzer's RSS limit.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  setenv("ANVIL_MEMORY_LIMIT", "256M", 0);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    load_and_run(std::string(reinterpret_cast<const char*>(data), size));
  } catch (const anvil::Error&) {
    // A clean, reported failure: what bad input must produce.
  }
  return 0;
}
