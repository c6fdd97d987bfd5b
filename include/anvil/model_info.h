// What a model file holds, without building a session: for reports (anvil
// conformance --summary) and tools.
#pragma once

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

namespace anvil {

// The distinct operators of a model, subgraphs included, as "Op" for the
// default ONNX domain and "domain.Op" for others, sorted. The file is checked
// as for a session (sizes, structure); throws anvil::Error when it is not a
// model Anvil can read.
std::vector<std::string> model_operators(const std::string& path);

struct OptimizeResult {
  size_t nodes_before = 0, nodes_after = 0;      // main graph
  std::vector<std::pair<std::string, size_t>> ops;  // the written graph's operators and counts, sorted
};

// Reads the model at `in`, runs the graph passes of optimization `level` (0-3;
// level 3 writes what level 2 does: its layouts are chosen when plans are
// built) and writes the graph to `out` as an ONNX model: Anvil's fused ops,
// and ONNX ops newer than the model's opset, in the com.anvil domain, which
// Anvil reads back. Throws anvil::Error (an unreadable model, an unwritable
// `out`); `out` is written whole or not at all.
OptimizeResult optimize_model(const std::string& in, const std::string& out, int level);

}  // namespace anvil
