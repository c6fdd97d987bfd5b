// The importer's "can the engine run this op" predicate, answered by the
// kernel registry: what every model file is imported with (Session, training).
#pragma once

#include <optional>
#include <string>

#include "kernels/registry.h"
#include "onnx/importer.h"

namespace anvil::runtime {

inline std::optional<onnx_io::OpProblem> kernel_support(const std::string& domain, const std::string& op, int opset) {
  auto problem = kernels::Registry::global().check_support(domain, op, opset);
  if (!problem) return std::nullopt;
  return onnx_io::OpProblem{problem->kind, problem->message};
}

}  // namespace anvil::runtime
