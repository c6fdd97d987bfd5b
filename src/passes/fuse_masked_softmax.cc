// Softmax(X + Mask) over the last axis, as attention that the attention
// fusion did not take writes it (an additive padding or causal mask), becomes
// one anvil.MaskedSoftmax node: the sum is never stored, and the mask is read
// where it broadcasts instead of being expanded.
//   Add(X, Mask) -> Softmax(axis = last)   =>   MaskedSoftmax(X, Mask)
// Both float32 with known ranks; the sum must feed only the Softmax.
#include <algorithm>

#include "passes/match.h"
#include "passes/pipeline.h"

namespace anvil::passes {

namespace {

// An Add the fusion may take; *rank is then its output's rank, the larger of
// its inputs' (its own type may not be inferred yet when a pass runs).
bool fusable_add(const ir::Graph& graph, const ir::Node* add, size_t* rank) {
  if (!add || add->opset < 7 || add->num_inputs() != 2) return false;  // before 7: Add's own broadcast rules
  if (!used_once(graph, add->output(0))) return false;
  *rank = 0;
  for (const ir::Value* v : {add->input(0), add->input(1)}) {
    if (!v || v->dtype() != DType::kFloat32 || !v->type.has_shape()) return false;
    *rank = std::max(*rank, static_cast<size_t>(v->type.rank()));
  }
  if (add->input(0)->is_constant() && add->input(1)->is_constant()) return false;  // constant folding's job
  return *rank >= 1;
}

bool over_last_axis(const ir::Node& softmax, size_t rank) {
  const int64_t axis = softmax.attrs.get_int("axis", softmax.opset < 13 ? 1 : -1);
  return axis == -1 || axis == static_cast<int64_t>(rank) - 1;
}

class FuseMaskedSoftmax : public Pass {
 public:
  std::string name() const override { return "fuse_masked_softmax"; }
  bool run(ir::Graph& graph) override {
    bool changed = false;
    for (const auto& node : graph.nodes()) {
      ir::Node* softmax = node.get();
      if (!is_op(softmax, "Softmax")) continue;
      ir::Node* add = producer_op(softmax->input(0), "Add");
      size_t rank = 0;
      if (!fusable_add(graph, add, &rank) || !over_last_axis(*softmax, rank)) continue;
      softmax->op_type = "MaskedSoftmax";
      softmax->domain = "anvil";
      softmax->opset = 1;
      softmax->attrs = {};
      softmax->inputs = {add->inputs[0], add->inputs[1]};
      add->dead = true;
      changed = true;
    }
    return changed;
  }
};

}  // namespace

std::unique_ptr<Pass> make_fuse_masked_softmax() { return std::make_unique<FuseMaskedSoftmax>(); }

}  // namespace anvil::passes
