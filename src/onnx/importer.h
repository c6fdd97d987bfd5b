// ONNX ModelProto -> ir::Graph. The only place that sees ONNX protobufs on the
// way in; the IR and everything after it never do.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "ir/graph.h"

namespace anvil::onnx_io {

// Opset range of the default domain Anvil implements.
constexpr int kMinOpset = 7;
constexpr int kMaxOpset = 17;

// Tells whether the engine implements (domain, op_type); checked before the
// onnx checker so that an unknown op reads as "unsupported", not "invalid".
using OpSupported = std::function<bool(const std::string& domain, const std::string& op_type)>;

// Reads, checks (op coverage, onnx checker, shape inference) and imports a
// model file. External data files are read from the model's folder. Throws anvil::Error.
std::unique_ptr<ir::Graph> import_model_file(const std::string& path, const OpSupported& supported);
// Same for bytes in memory; `base_dir` is used for external data ("" forbids it).
std::unique_ptr<ir::Graph> import_model_bytes(const std::string& bytes, const std::string& base_dir,
                                              const OpSupported& supported);

}  // namespace anvil::onnx_io
