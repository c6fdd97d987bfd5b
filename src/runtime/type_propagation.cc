#include "runtime/type_propagation.h"

#include "runtime/plan.h"

namespace anvil::runtime {

namespace {
bool known(const ir::Value* v) {
  if (!v->has_shape || v->dtype == DType::kUndefined) return false;
  for (int64_t d : v->shape)
    if (d < 0) return false;
  return true;
}
}  // namespace

void propagate_types(ir::Graph& graph) {
  for (const auto& node : graph.nodes()) {
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
      types.push_back({v->dtype, v->shape});
      constants.push_back(v->is_constant() ? &*v->constant : nullptr);
    }
    if (!ready) continue;
    try {
      PreparedKernel p = prepare_kernel(*node, types, constants, 1, /*ref_only=*/true);
      for (size_t o = 0; o < node->outputs.size() && o < p.output_types.size(); ++o) {
        ir::Value* out = node->outputs[o];
        if (!out) continue;
        out->dtype = p.output_types[o].dtype;
        out->shape = p.output_types[o].shape;
        out->has_shape = true;
      }
    } catch (const Error&) {
      // Shapes that depend on run-time values stay unknown; the planner reports real errors.
    }
  }
}

}  // namespace anvil::runtime
