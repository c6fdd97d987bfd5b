// Replaces an If whose condition is a constant with the nodes of the branch
// it takes. PyTorch exports `x.squeeze(d)` of a dim it cannot see as
// If(Shape(x)[d] == 1, Squeeze(x, d), Identity(x)); Hugging Face's LLaMA
// squeezes its rotary tables so, twice a layer. Once fold_shapes knows that
// dim, the condition is a constant, but the If still hides the branch's
// output type: every node after it, the products included, would be typed
// and planned only at run time. Inlined, the graph is typed end to end.
//
// Not inlined: a branch whose own nodes hold subgraphs (their captures would
// have to be re-pointed at the outer graph), and a malformed one (can_inline),
// which the If kernel then refuses at run time as before.
#include "passes/pipeline.h"

#include <map>
#include <set>

namespace anvil::passes {

namespace {

// The condition's single element, when it is a constant bool and the If's
// one explicit input.
std::optional<bool> constant_condition(const ir::Node& n) {
  const ir::Value* cond = n.num_explicit_inputs() == 1 ? n.input(0) : nullptr;
  if (!cond || !cond->is_constant() || cond->constant->dtype() != DType::kBool || cond->constant->numel() != 1)
    return std::nullopt;
  return *cond->constant->data<bool>();
}

// Whether the branch has no inputs of its own (as an If's must), its
// captures name implicit inputs the owner has, every value its nodes read,
// and every output, is a capture, a constant, or made by one of its nodes
// before, none of its nodes holds a subgraph, and its outputs match the
// If's in number and in the element types both name: what the If kernel
// checks at run time, so that an inlined model fails no later than it would.
bool can_inline(const ir::Node& owner, const ir::Graph& branch) {
  if (!branch.inputs().empty() || branch.outputs().size() != owner.outputs.size()) return false;
  std::set<const ir::Value*> known;
  for (const ir::Graph::Capture& c : branch.captures) {
    if (c.implicit_index >= owner.num_implicit_inputs) return false;
    known.insert(c.inner);
  }
  const auto readable = [&](const ir::Value* v) { return !v || v->is_constant() || known.count(v); };
  for (const auto& node : branch.nodes()) {
    if (node->dead) continue;
    if (node->has_subgraphs()) return false;
    for (const ir::Value* in : node->inputs)
      if (!readable(in)) return false;
    known.insert(node->outputs.begin(), node->outputs.end());
  }
  for (size_t i = 0; i < owner.outputs.size(); ++i) {
    const ir::Value* inner = branch.outputs()[i];
    const ir::Value* out = owner.outputs[i];
    if (!inner || !readable(inner)) return false;
    const bool both_typed = out && inner->dtype() != DType::kUndefined && out->dtype() != DType::kUndefined;
    if (both_typed && inner->dtype() != out->dtype()) return false;
  }
  return true;
}

// Copies `branch`'s live nodes into `graph` and returns, for each inner
// value they read or the branch outputs, the outer value standing for it:
// a capture's implicit input of `owner`, a copy of an inner constant, or a
// copied node's output.
std::map<const ir::Value*, ir::Value*> copy_branch(ir::Graph& graph, const ir::Node& owner, const ir::Graph& branch) {
  std::map<const ir::Value*, ir::Value*> outer;
  for (const ir::Graph::Capture& c : branch.captures)
    outer[c.inner] = owner.input(owner.num_explicit_inputs() + c.implicit_index);
  const auto outer_of = [&](const ir::Value* inner) -> ir::Value* {
    if (!inner) return nullptr;
    if (auto it = outer.find(inner); it != outer.end()) return it->second;
    // Only constants are left (can_inline).
    ir::Value* copy = graph.add_constant(graph.unique_name(inner->name), *inner->constant);
    return outer[inner] = copy;
  };
  for (const auto& node : branch.nodes()) {
    if (node->dead) continue;
    std::vector<ir::Value*> inputs;
    for (const ir::Value* in : node->inputs) inputs.push_back(outer_of(in));
    std::vector<ir::Value*> outputs;
    for (const ir::Value* out : node->outputs) {
      if (!out) {
        outputs.push_back(nullptr);
        continue;
      }
      ir::Value* copy = graph.add_value(graph.unique_name(out->name));
      copy->type = out->type;
      outputs.push_back(outer[out] = copy);
    }
    const std::string name = owner.name + "/" + node->name;
    ir::Node* copy = graph.add_node_with_outputs(node->op_type, std::move(inputs), std::move(outputs), name);
    copy->domain = node->domain;
    copy->opset = node->opset;
    copy->attrs = node->attrs;
  }
  for (const ir::Value* out : branch.outputs()) outer_of(out);
  return outer;
}

bool inline_if(ir::Graph& graph, ir::Node& n) {
  if (n.dead || n.op_type != "If" || !n.domain.empty()) return false;
  const std::optional<bool> cond = constant_condition(n);
  if (!cond) return false;
  const ir::Graph* branch = n.attrs.get_graph(*cond ? "then_branch" : "else_branch");
  if (!branch || !can_inline(n, *branch)) return false;
  const std::map<const ir::Value*, ir::Value*> outer = copy_branch(graph, n, *branch);
  // Each If output keeps its value (and name, maybe a graph output's): an
  // Identity writes it, which eliminate_identity then removes.
  for (size_t i = 0; i < n.outputs.size(); ++i) {
    ir::Value* out = n.outputs[i];
    if (!out) continue;
    graph.add_node_with_outputs("Identity", {outer.at(branch->outputs()[i])}, {out}, n.name + "/output");
  }
  n.outputs.clear();
  n.dead = true;
  return true;
}

class InlineConstantIf : public Pass {
 public:
  std::string name() const override { return "inline_constant_if"; }
  bool run(ir::Graph& graph) override {
    return rewrite_each_node(graph, [&](ir::Node& n) { return inline_if(graph, n); });
  }
};

}  // namespace

std::unique_ptr<Pass> make_inline_constant_if() { return std::make_unique<InlineConstantIf>(); }

}  // namespace anvil::passes
