// ir::Graph -> ONNX ModelProto bytes: what `anvil optimize` writes.
#pragma once

#include <string>

#include "ir/graph.h"

namespace anvil::onnx_io {

// The graph as a serialized ModelProto: the model's opsets, its constants as
// initializers, nodes in order; Anvil's fused ops and ONNX ops newer than
// the model's opset go in the com.anvil domain (onnx/anvil_domain.h). The
// constants are read: a session's released weights must be restored first.
std::string export_model(const ir::Graph& graph);

}  // namespace anvil::onnx_io
