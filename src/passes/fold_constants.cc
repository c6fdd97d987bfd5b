// Replaces nodes whose inputs are all constant by their computed outputs.
#include "passes/pipeline.h"

namespace anvil::passes {

namespace {

class FoldConstants : public Pass {
 public:
  explicit FoldConstants(ConstantEvaluator evaluator) : evaluator_(std::move(evaluator)) {}
  std::string name() const override { return "fold_constants"; }

  bool run(ir::Graph& graph) override {
    bool changed = false;
    for (size_t i = 0; i < graph.nodes().size(); ++i) {
      ir::Node& n = *graph.nodes()[i];
      if (n.dead || !foldable(n)) continue;
      std::vector<const Tensor*> inputs;
      for (const ir::Value* v : n.inputs) inputs.push_back(v ? &*v->constant : nullptr);
      std::optional<std::vector<Tensor>> results = evaluator_(n, inputs);
      if (!results) continue;
      for (size_t o = 0; o < n.outputs.size() && o < results->size(); ++o) {
        if (ir::Value* out = n.outputs[o]) become_constant(*out, std::move((*results)[o]));
      }
      n.dead = true;
      changed = true;
    }
    return changed;
  }

 private:
  static bool foldable(const ir::Node& n) {
    // Control flow runs bodies; random ops must give new values every run.
    if (n.outputs.empty() || n.has_subgraphs() || ir::is_random_op(n)) return false;
    for (const ir::Value* v : n.inputs)
      if (v && !v->is_constant()) return false;
    return true;
  }
  ConstantEvaluator evaluator_;
};

}  // namespace

std::unique_ptr<Pass> make_fold_constants(ConstantEvaluator evaluator) {
  return std::make_unique<FoldConstants>(std::move(evaluator));
}

}  // namespace anvil::passes
