// LayerNormalization written out, as exporters before opset 17 emit it,
// becomes one LayerNormalization node (opset 17), which oneDNN runs in one pass:
//
//   mean = ReduceMean(x, trailing axes)      d = x - mean
//   var  = ReduceMean(d^2 | d*d, same axes)  y = d / Sqrt(var + eps) [* gamma] [+ beta]
//
// gamma and beta must be float constants with one value per normalized
// element; without gamma the node gets a scale of ones. `d` may feed only the
// square and the division; every other intermediate only the next step.
#include <vector>

#include "passes/match.h"
#include "passes/pipeline.h"

namespace anvil::passes {

namespace {

struct LayerNorm {
  ir::Value *x = nullptr, *gamma = nullptr, *beta = nullptr;
  int64_t axis = -1;  // the first normalized axis, as a positive index
  int64_t size = 1;   // elements per normalized row
  double eps = 0;
  ir::Node* last = nullptr;
  std::vector<ir::Node*> nodes;
};

bool match(const ir::Graph& g, ir::Node* mean, LayerNorm& m) {
  m.x = mean->input(0);
  const ir::Type& xt = m.x->type;
  if (!xt.has_shape() || xt.rank() < 1 || xt.dtype() != DType::kFloat32) return false;
  std::optional<int64_t> axis = trailing_axis(*mean, xt.rank());
  if (!axis) return false;
  m.axis = *axis;
  for (int64_t i = m.axis; i < xt.rank(); ++i) {
    if (!xt.dims()[static_cast<size_t>(i)].is_known()) return false;
    m.size *= xt.dims()[static_cast<size_t>(i)].value;
  }
  ir::Node* sub = single_consumer(g, mean->output(0));
  if (!is_op(sub, "Sub") || sub->input(0) != m.x || sub->input(1) != mean->output(0)) return false;
  // d feeds the square and the division, nothing else.
  ir::Value* d = sub->output(0);
  ir::Node *square = nullptr, *div = nullptr;
  if (d->is_graph_output) return false;
  const auto uses = g.consumers();
  auto d_uses = uses.find(d);
  if (d_uses == uses.end()) return false;
  for (ir::Node* n : d_uses->second) {
    if (n->dead || n == square || n == div) continue;  // d * d lists the Mul twice
    if (!square && ((is_op(n, "Pow") && n->input(0) == d && is_scalar(n->input(1), 2.0)) ||
                    (is_op(n, "Mul") && n->input(0) == d && n->input(1) == d)))
      square = n;
    else if (!div && is_op(n, "Div") && n->input(0) == d) div = n;
    else return false;
  }
  if (!square || !div) return false;
  ir::Node* var = single_consumer(g, square->output(0));
  if (!is_op(var, "ReduceMean") || var->input(0) != square->output(0) || trailing_axis(*var, xt.rank()) != m.axis)
    return false;
  ir::Node* add_eps = single_consumer(g, var->output(0));
  if (!is_op(add_eps, "Add") || !scalar_value(other_operand(*add_eps, var->output(0)))) return false;
  m.eps = *scalar_value(other_operand(*add_eps, var->output(0)));
  ir::Node* sqrt = single_consumer(g, add_eps->output(0));
  if (!is_op(sqrt, "Sqrt") || !used_once(g, sqrt->output(0)) || div->input(1) != sqrt->output(0)) return false;
  m.nodes = {mean, sub, square, var, add_eps, sqrt, div};
  m.last = div;
  if (ir::Node* mul = single_consumer(g, div->output(0)); is_op(mul, "Mul") && per_element(other_operand(*mul, div->output(0)), xt.dims(), m.axis, m.size)) {
    m.gamma = other_operand(*mul, div->output(0));
    m.nodes.push_back(mul);
    m.last = mul;
  }
  if (ir::Node* add = single_consumer(g, m.last->output(0)); is_op(add, "Add") && per_element(other_operand(*add, m.last->output(0)), xt.dims(), m.axis, m.size)) {
    m.beta = other_operand(*add, m.last->output(0));
    m.nodes.push_back(add);
    m.last = add;
  }
  return true;
}

class FuseLayerNorm : public Pass {
 public:
  std::string name() const override { return "fuse_layer_norm"; }
  bool run(ir::Graph& graph) override {
    return rewrite_each_node(graph, [&](ir::Node& n) {
      LayerNorm m;
      if (!is_op(&n, "ReduceMean") || !match(graph, &n, m)) return false;
      rewrite(graph, m);
      return true;
    });
  }

 private:
  static void rewrite(ir::Graph& graph, const LayerNorm& m) {
    ir::Value* y = m.last->output(0);
    for (ir::Node* n : m.nodes) n->dead = true;
    ir::Value* gamma = m.gamma ? m.gamma : ones_constant(graph, m.size, m.last->name + "/scale");
    std::vector<ir::Value*> inputs{m.x, gamma};
    if (m.beta) inputs.push_back(m.beta);
    ir::Node* ln = graph.add_node_with_outputs("LayerNormalization", inputs, {y}, m.last->name);
    ln->opset = 17;  // LayerNormalization's first version, whatever the model's opset
    ln->attrs.set("axis", m.axis);
    ln->attrs.set("epsilon", static_cast<float>(m.eps));
  }
};

}  // namespace

std::unique_ptr<Pass> make_fuse_layer_norm() { return std::make_unique<FuseLayerNorm>(); }

}  // namespace anvil::passes
