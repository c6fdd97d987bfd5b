// A chain of float32 element-wise ops, each feeding only the next, becomes one
// anvil.ElementwiseChain node (kernels/vec/elementwise_chain.cc), which runs
// the whole chain in one pass over the data:
//   Mul(x, a) -> Add(., b) -> Sub(., 0.5) -> Sigmoid   =>   ElementwiseChain(x, a, b)
// Steps: Relu, Neg, Abs, Sqrt, Exp, Sigmoid, and Add, Sub, Mul, Div whose
// other operand is a float32 constant scalar, a tensor of x's shape, or one
// value per position of x's last axis (a bias), on either side.
//
// Runs late, so the fusions that give ops to oneDNN (activations as post-ops,
// GELU, LayerNorm, Swish) take theirs first. x must have rank 1 to 3: rank-4
// and higher activations are the CNNs', which oneDNN keeps in blocked layouts
// through its own element-wise kernels; a chain would read them plain.
#include <algorithm>

#include "ir/elementwise_chain.h"
#include "passes/match.h"
#include "passes/pipeline.h"

namespace anvil::passes {

namespace {

using ir::ChainOp;
using ir::ChainOperand;

constexpr size_t kMaxSteps = 64;  // the kernel's limit

std::optional<ChainOp> chain_op(const ir::Node* n) {
  if (!n || n->dead || !n->domain.empty() || n->outputs.size() != 1) return std::nullopt;
  static const std::pair<const char*, ChainOp> kOps[] = {
      {"Relu", ChainOp::kRelu}, {"Neg", ChainOp::kNeg}, {"Abs", ChainOp::kAbs}, {"Sqrt", ChainOp::kSqrt},
      {"Exp", ChainOp::kExp},   {"Sigmoid", ChainOp::kSigmoid}, {"Add", ChainOp::kAdd}, {"Sub", ChainOp::kSub},
      {"Mul", ChainOp::kMul},   {"Div", ChainOp::kDiv}};
  for (const auto& [name, op] : kOps) {
    if (n->op_type != name) continue;
    if (ir::is_unary(op)) return n->num_inputs() == 1 ? std::optional(op) : std::nullopt;
    return n->num_inputs() == 2 && n->opset >= 7 ? std::optional(op) : std::nullopt;  // 7: numpy broadcasting
  }
  return std::nullopt;
}

struct Chain {
  ir::Value* x = nullptr;
  std::vector<ir::Value*> inputs;  // x, then the tensor operands
  std::vector<int64_t> ops, operands, args;
  std::vector<float> scalars;
  std::vector<ir::Node*> nodes;
};

// One value per position of x's last axis: [N] or [1, ..., 1, N].
bool is_row_of(const ir::Type& t, const ir::Type& x) {
  if (!t.has_shape() || t.rank() < 1 || t.rank() > x.rank()) return false;
  const auto& d = t.dims();
  for (size_t i = 0; i + 1 < d.size(); ++i)
    if (!(d[i].is_known() && d[i].value == 1)) return false;
  const auto &last = d.back(), &x_last = x.dims().back();
  return last.is_known() ? x_last.is_known() && x_last.value == last.value && last.value > 1
                         : last.is_symbol() && x_last.is_symbol() && last.symbol == x_last.symbol;
}

// Appends node `n` as a step on the running value `v`; false when it cannot be one.
bool add_step(Chain& c, ir::Node* n, const ir::Value* v) {
  const std::optional<ChainOp> op = chain_op(n);
  if (!op || c.ops.size() == kMaxSteps) return false;
  if (ir::is_unary(*op)) {
    if (n->input(0) != v) return false;
    c.ops.push_back(static_cast<int64_t>(*op));
    c.operands.push_back(static_cast<int64_t>(ChainOperand::kNone));
    c.args.push_back(0);
  } else {
    const bool swapped = n->input(1) == v;
    if (!swapped && n->input(0) != v) return false;
    ir::Value* other = n->input(swapped ? 0 : 1);
    if (!other || other->dtype() != DType::kFloat32 || (other == v && v != c.x)) return false;
    ChainOperand kind;
    int64_t arg;
    if (const std::optional<double> s = scalar_value(other); s && other->dtype() == DType::kFloat32) {
      kind = ChainOperand::kScalar;
      arg = static_cast<int64_t>(c.scalars.size());
      c.scalars.push_back(static_cast<float>(*s));
    } else if (const bool full = surely_same_shape(other->type, c.x->type); full || is_row_of(other->type, c.x->type)) {
      kind = full ? ChainOperand::kFull : ChainOperand::kRow;
      auto it = std::find(c.inputs.begin(), c.inputs.end(), other);
      if (it == c.inputs.end()) it = c.inputs.insert(c.inputs.end(), other);
      arg = it - c.inputs.begin();
    } else {
      return false;
    }
    c.ops.push_back(static_cast<int64_t>(*op));
    c.operands.push_back(static_cast<int64_t>(kind) + (swapped ? ir::kChainOperandFirst : 0));
    c.args.push_back(arg);
  }
  c.nodes.push_back(n);
  return true;
}

// The chain starting at `n` with running value `x` (one of n's inputs).
Chain chain_from(const ir::Graph& graph, ir::Node* n, ir::Value* x) {
  Chain c;
  c.x = x;
  c.inputs = {x};
  if (!add_step(c, n, x)) return {};
  for (ir::Node* cur = n;;) {
    ir::Node* next = single_consumer(graph, cur->output(0));
    if (!next || !add_step(c, next, cur->output(0))) break;
    cur = next;
  }
  return c;
}

bool usable_head(const ir::Value* x) {
  return x && !x->is_constant() && x->dtype() == DType::kFloat32 && x->type.has_shape() && x->type.rank() >= 1 &&
         x->type.rank() <= 3;
}

class FuseElementwiseChain : public Pass {
 public:
  std::string name() const override { return "fuse_elementwise_chain"; }
  bool run(ir::Graph& graph) override {
    return rewrite_each_node(graph, [&](ir::Node& node) {
      ir::Node* n = &node;
      if (!chain_op(n)) return false;
      Chain best;
      for (size_t side = 0; side < std::min<size_t>(n->num_inputs(), 2); ++side)
        if (ir::Value* x = n->input(side); usable_head(x)) {
          Chain c = chain_from(graph, n, x);
          if (c.nodes.size() > best.nodes.size()) best = std::move(c);
        }
      if (best.nodes.size() < 2) return false;
      rewrite(graph, best);
      return true;
    });
  }

 private:
  static void rewrite(ir::Graph& graph, const Chain& c) {
    ir::Node* last = c.nodes.back();
    ir::Value* y = last->output(0);
    for (ir::Node* n : c.nodes) n->dead = true;
    ir::Node* fused = graph.add_node_with_outputs("ElementwiseChain", c.inputs, {y}, last->name);
    fused->domain = "anvil";
    fused->opset = 1;
    fused->attrs.set("ops", c.ops);
    fused->attrs.set("operands", c.operands);
    fused->attrs.set("args", c.args);
    fused->attrs.set("scalars", c.scalars);
  }
};

}  // namespace

std::unique_ptr<Pass> make_fuse_elementwise_chain() { return std::make_unique<FuseElementwiseChain>(); }

}  // namespace anvil::passes
