// ONNX ModelProto -> ir::Graph. The only place that sees ONNX protobufs on the
// way in; the IR and everything after it never do.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "anvil/error.h"
#include "ir/graph.h"

namespace anvil::onnx_io {

// Opset range of the default domain Anvil imports; which op versions run is
// the kernels' business (OpSupported).
constexpr int kMinOpset = 1;
constexpr int kMaxOpset = 28;

// Why the engine cannot run an op at an opset (kind: kUnsupported or kInvalidModel).
struct OpProblem {
  ErrorKind kind;
  std::string message;
};
// nullopt when the engine implements (domain, op_type) at the model's opset
// of that domain; checked for every node, subgraphs included, before the graph is built.
using OpSupported =
    std::function<std::optional<OpProblem>(const std::string& domain, const std::string& op_type, int opset)>;

// Reads, checks (op coverage, onnx checker, shape inference) and imports a
// model file. External data files are read from the model's folder. Throws anvil::Error.
std::unique_ptr<ir::Graph> import_model_file(const std::string& path, const OpSupported& supported);
// Same for bytes in memory; `base_dir` is used for external data ("" forbids it).
std::unique_ptr<ir::Graph> import_model_bytes(const std::string& bytes, const std::string& base_dir,
                                              const OpSupported& supported);

// The model file at `path` serialized again with the initializers named in
// `values` replaced (a trained model). Initializers kept from external data
// files are stored inline, so the result stands alone. Throws anvil::Error.
std::string model_with_initializers(const std::string& path, const std::map<std::string, Tensor>& values);
// Same for a model in memory (no external data).
std::string model_bytes_with_initializers(const std::string& bytes, const std::map<std::string, Tensor>& values);

// The distinct "domain.Op" names of a model file (anvil::model_operators).
std::vector<std::string> operators_of_model_file(const std::string& path);

}  // namespace anvil::onnx_io
