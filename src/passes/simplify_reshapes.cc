// Removes layout shuffles that move no data, or merges them:
//   - a Transpose of the identity permutation, and a Reshape, Flatten,
//     Squeeze or Unsqueeze whose output surely has its input's shape, become
//     Identity (eliminate_identity removes them);
//   - Transpose(Transpose(x, p1), p2) becomes Transpose(x, p) with
//     p[i] = p1[p2[i]];
//   - a Transpose that keeps the order of every axis longer than 1 moves no
//     element: it becomes a Reshape, which aliases its input (no copy);
//   - a Reshape-like op (Reshape, Flatten, Squeeze, Unsqueeze) of another
//     becomes one Reshape of the first one's input, where the outer's shape
//     does not depend on the inner's dims (a static output, or a constant
//     Reshape target without the 0 that copies an input dim).
// Shapes come from inference from the graph inputs (ir::infer_run_time_facts),
// not from the model's value_info, which may be stale. Runs with the late
// passes, after the fusions that match the exporter's shuffles as they are
// (attention's head reshapes and transposes).
#include <algorithm>

#include "ir/schema.h"
#include "passes/match.h"
#include "passes/pipeline.h"

namespace anvil::passes {

namespace {

bool is_reshape_like(const ir::Node* n) {
  return is_op(n, "Reshape") || is_op(n, "Flatten") || is_op(n, "Squeeze") || is_op(n, "Unsqueeze");
}

// Transpose's permutation (reversed axes when the attribute is absent); empty
// without a known rank or when malformed.
std::vector<int64_t> permutation(const ir::Node& t, const ir::InferredFacts& facts) {
  const ir::Type& x = facts.type_of(t.input(0));
  if (!x.is_tensor() || !x.has_shape()) return {};
  return transpose_permutation(t, static_cast<size_t>(x.rank()));
}

bool is_identity(const std::vector<int64_t>& perm) {
  for (size_t i = 0; i < perm.size(); ++i)
    if (perm[i] != static_cast<int64_t>(i)) return false;
  return true;
}

// Whether the axes of `x` that may be longer than 1 keep their order under `perm`.
bool moves_only_unit_axes(const ir::SymShape& x, const std::vector<int64_t>& perm) {
  int64_t last = -1;
  for (int64_t axis : perm) {
    if (x[static_cast<size_t>(axis)] == ir::Dim::known(1)) continue;
    if (axis < last) return false;
    last = axis;
  }
  return true;
}

void make_identity(ir::Node& n) {
  n.op_type = "Identity";
  n.attrs = {};
  n.inputs.resize(1);
}

// Turns `n` into Reshape(x, its own static output shape `y`). Not for empty
// outputs: a 0 in the target would copy the input's dim.
bool make_static_reshape(ir::Graph& graph, ir::Node& n, ir::Value* x, const ir::Type& y) {
  if (n.opset < 5 || !y.is_tensor() || !y.is_static()) return false;  // Reshape's shape is an input from opset 5
  const Shape shape = y.shape_or_minus_one();
  if (std::count(shape.begin(), shape.end(), 0)) return false;
  ir::Value* target_value = int64_constant(graph, n.output(0)->name + "_shape", shape);
  n.op_type = "Reshape";
  n.attrs = {};
  n.inputs = {x, target_value};
  return true;
}

// A Reshape's constant target that does not copy dims from its input (no 0, or allowzero).
bool target_independent_of_input(const ir::Node& reshape) {
  const ir::Value* target = reshape.input(1);
  if (!is_op(&reshape, "Reshape") || !target || !target->is_constant() ||
      target->constant->dtype() != DType::kInt64)
    return false;
  if (reshape.opset >= 14 && reshape.attrs.get_int("allowzero", 0) != 0) return true;  // allowzero is opset 14's
  const int64_t* t = target->constant->data<int64_t>();
  return std::none_of(t, t + target->constant->numel(), [](int64_t d) { return d == 0; });
}

class SimplifyReshapes : public Pass {
 public:
  std::string name() const override { return "simplify_reshapes"; }

  bool run(ir::Graph& graph) override {
    // The rewrites keep every value's meaning, so the facts stay true as they go.
    const ir::InferredFacts facts = ir::infer_run_time_facts(graph);
    bool changed = false;
    for (size_t i = 0; i < graph.nodes().size(); ++i) {  // make_static_reshape adds values, not nodes
      ir::Node& n = *graph.nodes()[i];
      if (n.dead || !n.input(0) || !n.output(0)) continue;
      if (is_op(&n, "Transpose")) changed |= simplify_transpose(graph, n, facts);
      else if (is_reshape_like(&n)) changed |= simplify_reshape(graph, n, facts);
    }
    return changed;
  }

 private:
  static bool simplify_transpose(ir::Graph& graph, ir::Node& t, const ir::InferredFacts& facts) {
    std::vector<int64_t> perm = permutation(t, facts);
    if (perm.empty()) return false;
    if (is_identity(perm)) {
      make_identity(t);
      return true;
    }
    ir::Node* inner = producer_op(t.input(0), "Transpose");
    if (std::vector<int64_t> inner_perm = inner ? permutation(*inner, facts) : std::vector<int64_t>{};
        !inner_perm.empty()) {
      for (int64_t& axis : perm) axis = inner_perm[static_cast<size_t>(axis)];
      t.inputs[0] = inner->input(0);
      t.attrs.set("perm", perm);
      return true;
    }
    ir::Value* x = t.input(0);
    return moves_only_unit_axes(facts.type_of(x).dims(), perm) &&
           make_static_reshape(graph, t, x, facts.type_of(t.output(0)));
  }

  static bool simplify_reshape(ir::Graph& graph, ir::Node& r, const ir::InferredFacts& facts) {
    ir::Value* x = r.input(0);
    if (surely_same_shape(facts.type_of(x), facts.type_of(r.output(0)))) {
      make_identity(r);
      return true;
    }
    ir::Node* inner = x->producer;
    if (!is_reshape_like(inner) || !inner->input(0)) return false;
    if (target_independent_of_input(r)) {
      r.inputs[0] = inner->input(0);
      return true;
    }
    return make_static_reshape(graph, r, inner->input(0), facts.type_of(r.output(0)));
  }
};

}  // namespace

std::unique_ptr<Pass> make_simplify_reshapes() { return std::make_unique<SimplifyReshapes>(); }

}  // namespace anvil::passes
