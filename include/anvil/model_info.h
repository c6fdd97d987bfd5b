// What a model file holds, without building a session: for reports (anvil
// conformance --summary) and tools.
#pragma once

#include <string>
#include <vector>

namespace anvil {

// The distinct operators of a model, subgraphs included, as "Op" for the
// default ONNX domain and "domain.Op" for others, sorted. The file is checked
// as for a session (sizes, structure); throws anvil::Error when it is not a
// model Anvil can read.
std::vector<std::string> model_operators(const std::string& path);

}  // namespace anvil
