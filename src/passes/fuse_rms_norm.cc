// RMS normalization written out, as PyTorch exports LLaMA-, Mistral- and
// T5-style models' RMSNorm, becomes one RMSNormalization node (opset 23),
// which Anvil's vectorized kernel runs in one pass over each row:
//
//   ms = ReduceMean(Pow(x, 2) | x * x, trailing axes)
//   r  = Sqrt(ms + eps)
//   y  = x * (1 / r) | x * Reciprocal(r) | x / r      [* gamma, either side]
//
// gamma must be a float constant with one value per normalized element;
// without it the node gets a scale of ones. Every intermediate must feed
// only the next step (x itself may have other readers). The written-out form
// ran its Pow on the reference kernel: a LLaMA-style decoder's nine RMSNorms
// took 17% of its run.
#include <vector>

#include "passes/match.h"
#include "passes/pipeline.h"

namespace anvil::passes {

namespace {

struct RmsNorm {
  ir::Value *x = nullptr, *gamma = nullptr;
  int64_t axis = -1;  // the first normalized axis, as a positive index
  int64_t size = 1;   // elements per normalized row
  double eps = 0;
  ir::Node* last = nullptr;
  std::vector<ir::Node*> nodes;
};

// The square of x: Pow(x, 2) or x * x.
ir::Value* squared(const ir::Node* n) {
  if (is_op(n, "Pow") && is_scalar(n->input(1), 2.0, 0.0)) return n->input(0);
  if (is_op(n, "Mul") && n->input(0) == n->input(1)) return n->input(0);
  return nullptr;
}

// From the square's ReduceMean on: eps, the Sqrt, and y = x / r in one of its forms.
bool match(const ir::Graph& g, ir::Node* mean, RmsNorm& m) {
  const ir::Node* square = mean->input(0) ? mean->input(0)->producer : nullptr;
  m.x = square ? squared(square) : nullptr;
  if (!m.x || !used_once(g, mean->input(0))) return false;
  const ir::Type& xt = m.x->type;
  if (!xt.has_shape() || xt.rank() < 1 || xt.dtype() != DType::kFloat32) return false;
  const std::optional<int64_t> axis = trailing_axis(*mean, xt.rank());
  if (!axis) return false;
  m.axis = *axis;
  for (int64_t i = m.axis; i < xt.rank(); ++i) {
    if (!xt.dims()[static_cast<size_t>(i)].is_known()) return false;
    m.size *= xt.dims()[static_cast<size_t>(i)].value;
  }
  ir::Node* add_eps = single_consumer(g, mean->output(0));
  if (!is_op(add_eps, "Add") || !scalar_value(other_operand(*add_eps, mean->output(0)))) return false;
  m.eps = *scalar_value(other_operand(*add_eps, mean->output(0)));
  ir::Node* sqrt = single_consumer(g, add_eps->output(0));
  if (!is_op(sqrt, "Sqrt")) return false;
  m.nodes = {const_cast<ir::Node*>(square), mean, add_eps, sqrt};
  ir::Node* next = single_consumer(g, sqrt->output(0));
  if (is_op(next, "Div") && next->input(0) == m.x && next->input(1) == sqrt->output(0)) {  // x / r
    m.last = next;
  } else {
    const bool inverse = (is_op(next, "Div") && next->input(1) == sqrt->output(0) && is_scalar(next->input(0), 1.0, 0.0)) ||
                         is_op(next, "Reciprocal");
    if (!inverse) return false;
    ir::Node* mul = single_consumer(g, next->output(0));
    if (!is_op(mul, "Mul") || other_operand(*mul, next->output(0)) != m.x) return false;
    m.nodes.push_back(next);
    m.last = mul;
  }
  m.nodes.push_back(m.last);
  if (ir::Node* mul = single_consumer(g, m.last->output(0));
      is_op(mul, "Mul") && per_element(other_operand(*mul, m.last->output(0)), xt.dims(), m.axis, m.size)) {
    m.gamma = other_operand(*mul, m.last->output(0));
    m.nodes.push_back(mul);
    m.last = mul;
  }
  return true;
}

class FuseRmsNorm : public Pass {
 public:
  std::string name() const override { return "fuse_rms_norm"; }
  bool run(ir::Graph& graph) override {
    return rewrite_each_node(graph, [&](ir::Node& n) {
      RmsNorm m;
      if (!is_op(&n, "ReduceMean") || !match(graph, &n, m)) return false;
      rewrite(graph, m);
      return true;
    });
  }

 private:
  static void rewrite(ir::Graph& graph, const RmsNorm& m) {
    ir::Value* y = m.last->output(0);
    for (ir::Node* n : m.nodes) n->dead = true;
    ir::Value* gamma = m.gamma ? m.gamma : ones_constant(graph, m.size, m.last->name + "/scale");
    ir::Node* norm = graph.add_node_with_outputs("RMSNormalization", {m.x, gamma}, {y}, m.last->name);
    norm->opset = 23;  // RMSNormalization's first version, whatever the model's opset
    norm->attrs.set("axis", m.axis);
    norm->attrs.set("epsilon", static_cast<float>(m.eps));
  }
};

}  // namespace

std::unique_ptr<Pass> make_fuse_rms_norm() { return std::make_unique<FuseRmsNorm>(); }

}  // namespace anvil::passes
