// Shapes read before the shuffles that only move data:
//   Shape(Transpose(x, perm))  ->  Gather(Shape(x), perm); a Transpose
//                                  only Shapes read then dies, copy and all
//   Shape(Reshape(x, target))  ->  target, when no element of the target is
//                                  0 (copy a dim) or -1 (infer one), nor a
//                                  symbol that may be 0 where x's dim
//                                  differs: its values are the output's dims
// The same numbers, read without the shuffle, so the patterns around it
// match: Hugging Face's GPT-2 transposes its keys a second time, and
// reshapes them, only to read their length for the causal mask, which kept
// its attention from fusing. The Reshape rule runs late (`reshapes`), after
// the fusions: the attention fusion takes the Shapes that size its merge
// Reshape only while they feed nothing else, and reading Reshapes' targets
// early would merge those with other shape arithmetic.
#include <algorithm>

#include "ir/schema.h"
#include "passes/match.h"
#include "passes/pipeline.h"

namespace anvil::passes {

namespace {

// The Reshape's target is its output's shape: every element a positive
// number, or a symbolic dim that, should it be 0 (which copies the input's
// dim unless allowzero), is the input's dim at that place anyway.
bool target_is_its_shape(const ir::Node& reshape, const ir::InferredFacts& facts) {
  const ir::Value* target = reshape.input(1);
  auto it = target ? facts.values.find(target) : facts.values.end();
  if (it == facts.values.end() || target->dtype() != DType::kInt64) return false;
  const bool allowzero = reshape.opset >= 14 && reshape.attrs.get_int("allowzero", 0) != 0;
  const ir::Type& x = facts.type_of(reshape.input(0));
  for (size_t i = 0; i < it->second.size(); ++i) {
    const ir::SymInt& v = it->second[i];
    if (v.is_number() ? *v.number > 0 : v.dim.is_known() && v.dim.value > 0) continue;
    if (!v.is_number() && v.dim.is_symbol() &&
        (allowzero || (x.has_shape() && i < x.dims().size() && x.dims()[i] == v.dim)))
      continue;
    return false;
  }
  return true;
}

class ShapeOfShuffle : public Pass {
 public:
  explicit ShapeOfShuffle(bool reshapes) : reshapes_(reshapes) {}
  std::string name() const override { return reshapes_ ? "shape_of_shuffle(reshapes)" : "shape_of_shuffle"; }

  bool run(ir::Graph& graph) override {
    // Only the Reshape rule reads values: inference over the graph once per round, when it runs.
    const ir::InferredFacts facts = reshapes_ ? ir::infer_run_time_facts(graph) : ir::InferredFacts{};
    return rewrite_each_node(graph, [&](ir::Node& shape) {
      if (!is_op(&shape, "Shape") || shape.attrs.has("start") || shape.attrs.has("end") || !shape.output(0)) return false;
      if (ir::Node* t = producer_op(shape.input(0), "Transpose"); t && t->input(0)->type.has_shape()) {
        const std::vector<int64_t> perm = transpose_permutation(*t, static_cast<size_t>(t->input(0)->type.rank()));
        if (perm.empty()) return false;
        gather_inner_shape(graph, shape, *t->input(0), perm);
        return true;
      }
      ir::Node* r = producer_op(shape.input(0), "Reshape");
      if (!reshapes_ || !r || shape.output(0)->is_graph_output || !target_is_its_shape(*r, facts)) return false;
      graph.replace_uses(shape.output(0), r->input(1));
      shape.dead = true;
      return true;
    });
  }

 private:
  // `shape` becomes the Gather of x's Shape at `perm`.
  static void gather_inner_shape(ir::Graph& graph, ir::Node& shape, ir::Value& x, const std::vector<int64_t>& perm) {
    ir::Node* inner = graph.add_node("Shape", {&x}, 1, graph.unique_name(shape.name + "/before_transpose"));
    inner->opset = shape.opset;
    inner->output(0)->type = ir::Type::tensor(DType::kInt64, Shape{static_cast<int64_t>(perm.size())});
    shape.op_type = "Gather";
    shape.opset = graph.default_opset();
    shape.attrs = {};
    shape.attrs.set("axis", int64_t{0});
    shape.inputs = {inner->output(0), int64_constant(graph, shape.name + "/perm", perm)};
  }

  bool reshapes_;
};

}  // namespace

std::unique_ptr<Pass> make_shape_of_shuffle(bool reshapes) { return std::make_unique<ShapeOfShuffle>(reshapes); }

}  // namespace anvil::passes
