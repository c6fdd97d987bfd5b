// The IR verifier: checks the invariants every pass relies on.
//
//   - SSA: each value is produced by at most one node, and node->outputs and
//     value->producer agree;
//   - order and scope: a node reads only values defined before it in its own
//     graph (inputs, constants, captures, earlier outputs) — a subgraph reads
//     an enclosing graph's value only through a capture, which maps to an
//     implicit input of the node that owns the subgraph;
//   - types: constants carry the type of their tensor; graph outputs exist.
//
// It runs after import and after every pass when verification is enabled:
// always in debug builds, and with ANVIL_VERIFY=1 (the test suites set it).
#pragma once

#include <string>

#include "anvil/error.h"
#include "ir/graph.h"

namespace anvil::ir {

// Throws Error(kind) naming `stage` ("import", "after pass fold_constants") and
// the first broken invariant.
void verify(const Graph& graph, ErrorKind kind, const std::string& stage);

bool verification_enabled();

}  // namespace anvil::ir
