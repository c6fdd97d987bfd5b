#include "runtime/type_propagation.h"

#include <algorithm>

#include "runtime/plan.h"

namespace anvil::runtime {

namespace {
bool known(const ir::Value* v) { return v->is_static() && v->dtype() != DType::kUndefined; }
}  // namespace

void propagate_types(ir::Graph& graph) {
  for (const auto& node : graph.nodes()) {
    // Schema inference typed most nodes already: prepare only the rest.
    if (std::all_of(node->outputs.begin(), node->outputs.end(), [](const ir::Value* v) { return !v || known(v); }))
      continue;
    std::vector<kernels::TensorType> types;
    std::vector<const Tensor*> constants;
    bool ready = true;
    for (const ir::Value* v : node->inputs) {
      if (!v) {
        types.push_back({});
        constants.push_back(nullptr);
        continue;
      }
      ready &= known(v);
      types.push_back({v->dtype(), v->type.shape_or_minus_one()});
      constants.push_back(v->is_constant() ? &*v->constant : nullptr);
    }
    if (!ready || node->has_subgraphs()) continue;  // control flow: types known once a body ran
    try {
      PreparedKernel p = prepare_kernel(*node, types, constants, 1, /*ref_only=*/true);
      for (size_t o = 0; o < node->outputs.size() && o < p.output_types.size(); ++o) {
        ir::Value* out = node->outputs[o];
        if (!out) continue;
        out->type = ir::Type::tensor(p.output_types[o].dtype, p.output_types[o].shape);
      }
    } catch (const Error&) {
      // Shapes that depend on run-time values stay unknown; the planner reports real errors.
    }
  }
}

}  // namespace anvil::runtime
