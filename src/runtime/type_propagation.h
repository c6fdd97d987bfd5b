// Fills in value dtypes and static shapes by running the reference kernels'
// prepare() over the graph, for graphs whose input shapes are all static (the
// builder's zoo models, or ONNX models shape inference left incomplete).
// Fusion passes use the shapes to check that a rewrite keeps the semantics.
#pragma once

#include "ir/graph.h"

namespace anvil::runtime {

void propagate_types(ir::Graph& graph);

}  // namespace anvil::runtime
