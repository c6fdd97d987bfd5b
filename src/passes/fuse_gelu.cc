// GELU written out with Erf or Tanh, as exporters emit it, becomes one Gelu
// node (ONNX opset 20), which oneDNN runs as one eltwise pass (and the
// MatMul fusion can take as a post-op):
//   erf:  x * 0.5 * (1 + erf(x / sqrt(2)))                 -> Gelu(approximate="none")
//   tanh: x * 0.5 * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3))) -> Gelu(approximate="tanh")
// The tanh's argument may also come factored as sqrt(2/pi) x (1 + 0.044715
// x x), as BLOOM writes it. Every intermediate must feed only the pattern;
// the products may come in either order and the 0.5 may scale x or the sum.
#include <vector>

#include "passes/match.h"
#include "passes/pipeline.h"

namespace anvil::passes {

namespace {

constexpr double kSqrt2 = 1.4142135623730951;
constexpr double kSqrt2OverPi = 0.7978845608028654;

struct Match {
  ir::Value* x = nullptr;
  ir::Node* last = nullptr;            // its output becomes the Gelu's
  std::vector<ir::Node*> nodes;        // every node of the pattern
};

// Either operand of a binary node is the scalar `c`: returns the other one.
ir::Value* operand_beside_scalar(const ir::Node& n, double c) {
  if (n.num_inputs() != 2) return nullptr;
  if (is_scalar(n.input(1), c)) return n.input(0);
  if (is_scalar(n.input(0), c)) return n.input(1);
  return nullptr;
}

ir::Node* only_consumer(const ir::Graph& g, const ir::Node* n, const char* op) {
  ir::Node* next = single_consumer(g, n->output(0));
  return is_op(next, op) ? next : nullptr;
}

// From `inner` (erf(...) or tanh(...)): + 1, then the products with x and 0.5.
bool match_tail(const ir::Graph& g, ir::Node* inner, Match& m) {
  ir::Node* plus_one = only_consumer(g, inner, "Add");
  if (!plus_one || operand_beside_scalar(*plus_one, 1.0) != inner->output(0)) return false;
  ir::Node* m1 = only_consumer(g, plus_one, "Mul");
  if (!m1) return false;
  ir::Value* other = other_operand(*m1, plus_one->output(0));
  m.nodes.insert(m.nodes.end(), {inner, plus_one, m1});
  if (other == m.x || is_scalar(other, 0.5)) {  // (x * s) * 0.5  or  (0.5 * s) * x
    ir::Node* m2 = only_consumer(g, m1, "Mul");
    if (!m2) return false;
    ir::Value* rest = other_operand(*m2, m1->output(0));
    if (!(other == m.x ? is_scalar(rest, 0.5) : rest == m.x)) return false;
    m.nodes.push_back(m2);
    m.last = m2;
    return true;
  }
  ir::Node* half_x = producer_op(other, "Mul");  // (x * 0.5) * s
  if (!half_x || !used_once(g, other) || operand_beside_scalar(*half_x, 0.5) != m.x) return false;
  m.nodes.push_back(half_x);
  m.last = m1;
  return true;
}

// erf(x / sqrt(2)) or erf(x * (1 / sqrt(2))).
bool match_erf(const ir::Graph& g, ir::Node* erf, Match& m) {
  ir::Value* u = erf->input(0);
  if (!used_once(g, u)) return false;
  if (ir::Node* div = producer_op(u, "Div"); div && is_scalar(div->input(1), kSqrt2)) {
    m.x = div->input(0);
    m.nodes.push_back(div);
  } else if (ir::Node* mul = producer_op(u, "Mul"); mul && (m.x = operand_beside_scalar(*mul, 1 / kSqrt2))) {
    m.nodes.push_back(mul);
  } else {
    return false;
  }
  return match_tail(g, erf, m);
}

// x * x, read only by the pattern: its node, or null.
ir::Node* square_of(const ir::Graph& g, const ir::Value* v, const ir::Value* x) {
  ir::Node* mul = producer_op(v, "Mul");
  return mul && used_once(g, v) && mul->input(0) == x && mul->input(1) == x ? mul : nullptr;
}

// x^3 as Pow(x, 3), x * (x * x) or (x * x) * x.
bool is_cube(const ir::Graph& g, const ir::Value* v, const ir::Value* x, std::vector<ir::Node*>& nodes) {
  if (!used_once(g, v)) return false;
  if (ir::Node* pow = producer_op(v, "Pow"); pow && pow->input(0) == x && is_scalar(pow->input(1), 3.0)) {
    nodes.push_back(pow);
    return true;
  }
  ir::Node* outer = producer_op(v, "Mul");
  if (!outer) return false;
  ir::Node* inner = square_of(g, other_operand(*outer, x), x);
  if (!inner) return false;
  nodes.insert(nodes.end(), {outer, inner});
  return true;
}

// tanh(sqrt(2/pi) * (x + 0.044715 * x^3)).
bool match_tanh(const ir::Graph& g, ir::Node* tanh, Match& m) {
  ir::Value* u = tanh->input(0);
  ir::Node* scale = producer_op(u, "Mul");
  if (!scale || !used_once(g, u)) return false;
  ir::Value* sum = operand_beside_scalar(*scale, kSqrt2OverPi);
  ir::Node* add = producer_op(sum, "Add");
  if (!add || !used_once(g, sum)) return false;
  m.nodes.insert(m.nodes.end(), {scale, add});
  for (int i = 0; i < 2 && !m.x; ++i) {  // x + 0.044715 x^3, in either order
    ir::Value* cand_x = add->input(i);
    ir::Value* scaled = add->input(1 - i);
    ir::Node* coef = producer_op(scaled, "Mul");
    if (!coef || !used_once(g, scaled)) continue;
    ir::Value* cube = operand_beside_scalar(*coef, 0.044715);
    std::vector<ir::Node*> cube_nodes;
    if (cube && is_cube(g, cube, cand_x, cube_nodes)) {
      m.x = cand_x;
      m.nodes.push_back(coef);
      m.nodes.insert(m.nodes.end(), cube_nodes.begin(), cube_nodes.end());
    }
  }
  return m.x && match_tail(g, tanh, m);
}

// c * x * x as (x * c) * x, x * (x * c), (x * x) * c or c * (x * x).
bool is_scaled_square(const ir::Graph& g, const ir::Value* v, const ir::Value* x, double c,
                      std::vector<ir::Node*>& nodes) {
  ir::Node* outer = producer_op(v, "Mul");
  if (!outer || !used_once(g, v)) return false;
  ir::Node* inner = nullptr;
  if (ir::Value* square = operand_beside_scalar(*outer, c)) {  // (x * x) * c
    inner = square_of(g, square, x);
  } else if (ir::Value* scaled = other_operand(*outer, x)) {  // (x * c) * x
    inner = producer_op(scaled, "Mul");
    if (inner && !(used_once(g, scaled) && operand_beside_scalar(*inner, c) == x)) inner = nullptr;
  }
  if (!inner) return false;
  nodes.insert(nodes.end(), {outer, inner});
  return true;
}

// tanh(sqrt(2/pi) * x * (1 + 0.044715 * x * x)): (sqrt(2/pi) x) times the
// sum, in either order.
bool match_tanh_factored(const ir::Graph& g, ir::Node* tanh, Match& m) {
  ir::Value* u = tanh->input(0);
  ir::Node* product = producer_op(u, "Mul");
  if (!product || !used_once(g, u) || product->num_inputs() != 2) return false;
  for (int i = 0; i < 2; ++i) {
    ir::Value* scaled_x = product->input(i);
    ir::Value* sum = product->input(1 - i);
    ir::Node* scale = producer_op(scaled_x, "Mul");
    ir::Node* add = producer_op(sum, "Add");
    if (!scale || !add || !used_once(g, scaled_x) || !used_once(g, sum)) continue;
    ir::Value* x = operand_beside_scalar(*scale, kSqrt2OverPi);
    ir::Value* square = operand_beside_scalar(*add, 1.0);
    std::vector<ir::Node*> square_nodes;
    if (!x || !square || !is_scaled_square(g, square, x, 0.044715, square_nodes)) continue;
    m.x = x;
    m.nodes.insert(m.nodes.end(), {product, scale, add});
    m.nodes.insert(m.nodes.end(), square_nodes.begin(), square_nodes.end());
    return match_tail(g, tanh, m);
  }
  return false;
}

class FuseGelu : public Pass {
 public:
  std::string name() const override { return "fuse_gelu"; }
  bool run(ir::Graph& graph) override {
    return rewrite_each_node(graph, [&](ir::Node& node) {
      ir::Node* n = &node;
      Match m;
      const bool erf = is_op(n, "Erf");
      bool matched = erf ? match_erf(graph, n, m) : is_op(n, "Tanh") && match_tanh(graph, n, m);
      if (!matched && !erf && is_op(n, "Tanh")) {
        m = Match{};  // match_tanh may have filled it before it failed
        matched = match_tanh_factored(graph, n, m);
      }
      if (!matched) return false;
      // A rank-0 x would become [1] through a [1]-shaped constant: only x of rank >= 1.
      if (!m.x || !is_float(m.x->dtype()) || !m.x->type.has_shape() || m.x->type.rank() < 1) return false;
      rewrite(graph, m, erf ? "none" : "tanh");
      return true;
    });
  }

 private:
  static bool is_float(DType t) { return t == DType::kFloat32 || t == DType::kFloat16 || t == DType::kBFloat16 || t == DType::kFloat64; }

  static void rewrite(ir::Graph& graph, const Match& m, const char* approximate) {
    ir::Value* y = m.last->output(0);
    for (ir::Node* n : m.nodes) n->dead = true;
    ir::Node* gelu = graph.add_node_with_outputs("Gelu", {m.x}, {y}, m.last->name);
    gelu->opset = 20;  // Gelu's first version, whatever the model's opset
    gelu->attrs.set("approximate", std::string(approximate));
  }
};

}  // namespace

std::unique_ptr<Pass> make_fuse_gelu() { return std::make_unique<FuseGelu>(); }

}  // namespace anvil::passes
