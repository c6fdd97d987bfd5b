// Folds shape computations that give the same numbers at every run, even
// where the graph's inputs have symbolic dims: Shape(x)[2] of an x typed
// [batch, seq, 768] is 768, whatever batch and seq are. Type inference from
// the graph inputs tracks such small integer tensors element by element
// (ir::infer_run_time_facts; the model's own value_info is not trusted);
// a node's output whose every element is a known number becomes that
// constant, and fold_constants carries it on through the Concat / Unsqueeze /
// Reshape chains that PyTorch's exporter builds around it. The elements that
// depend on a symbol stay computed, and the planner folds them per input
// shape.
#include "ir/schema.h"
#include "passes/pipeline.h"

namespace anvil::passes {

namespace {

// `v`'s elements as a constant of its inferred type, when they are all known numbers.
std::optional<Tensor> known_constant(const ir::Value& v, const ir::InferredFacts& facts) {
  auto it = facts.values.find(&v);
  const ir::Type& type = facts.type_of(&v);
  if (it == facts.values.end() || v.is_constant() || !type.is_static()) return std::nullopt;
  const std::optional<std::vector<int64_t>> numbers = ir::numbers_of(it->second);
  const Shape shape = type.shape_or_minus_one();
  if (!numbers || static_cast<int64_t>(numbers->size()) != shape_numel(shape)) return std::nullopt;
  if (type.dtype() != DType::kInt64 && type.dtype() != DType::kInt32) return std::nullopt;
  Tensor t(type.dtype(), shape);
  for (size_t i = 0; i < numbers->size(); ++i) {
    if (type.dtype() == DType::kInt64) t.data<int64_t>()[i] = (*numbers)[i];
    else t.data<int32_t>()[i] = static_cast<int32_t>((*numbers)[i]);
  }
  return t;
}

class FoldShapes : public Pass {
 public:
  std::string name() const override { return "fold_shapes"; }

  bool run(ir::Graph& graph) override {
    const ir::InferredFacts facts = ir::infer_run_time_facts(graph);
    bool changed = false;
    for (const auto& node : graph.nodes()) {
      ir::Node& n = *node;
      if (n.dead || n.outputs.size() != 1 || !n.output(0) || n.has_subgraphs() || ir::is_random_op(n)) continue;
      std::optional<Tensor> t = known_constant(*n.output(0), facts);
      if (!t) continue;
      become_constant(*n.output(0), std::move(*t));
      n.dead = true;
      changed = true;
    }
    return changed;
  }
};

}  // namespace

std::unique_ptr<Pass> make_fold_shapes() { return std::make_unique<FoldShapes>(); }

}  // namespace anvil::passes
