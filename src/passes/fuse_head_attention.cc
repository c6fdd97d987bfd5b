// Attention over heads that are already 4-D tensors, where the exporter's
// head splits and merges are not the reshapes the other attention passes
// match (LeViT splits one projection per head into q, k and v; Swin's
// windows), becomes one ONNX Attention (opset 23, 4-D inputs):
//
//   S = MatMul(Qh, Kt) [* c | / c] [+ bias]     Qh [b, h, sq, d], Kt [b, h, d, skv]
//   Y = MatMul(Softmax(S, -1), Vh)              Vh [b, h, skv, dv], Y [b, h, sq, dv]
//
// becomes Y = Attention(Qh, Kh, Vh[, bias], scale = c | 1/c | 1), Kh the
// input of Kt's Transpose(0132) when there is one, else such a Transpose of
// Kt. The fused kernel keeps each row tile's scores in L1, where the nodes
// wrote [b, h, sq, skv] and read it back three times (the scale, the
// masked softmax, the product with V). The bias must have one entry per key
// (Attention's float attn_mask); a relative-position bias [h, sq, skv]
// (LeViT's, folded from its Gather) broadcasts over the batch as the Add
// did. Runs after fuse_attention, fuse_sequence_first_attention and
// fuse_folded_heads_attention, which take their whole patterns first.
#include <cmath>

#include "passes/match.h"
#include "passes/pipeline.h"

namespace anvil::passes {

namespace {

struct HeadAttention {
  ir::Value *q = nullptr, *k_t = nullptr, *v = nullptr, *bias = nullptr;
  ir::Node* k_transpose = nullptr;  // Kt = Transpose(Kh, 0132), read only by the scores
  double scale = 1.0;
  ir::Node* pv = nullptr;
  std::vector<ir::Node*> nodes;  // die with the fusion
};

bool is_rank4_float(const ir::Value* v) {
  return v && v->dtype() == DType::kFloat32 && v->type.has_shape() && v->type.rank() == 4;
}

// S's producers back from the Softmax's input: [Add(., bias)] [Mul or Div by
// a scalar] MatMul, each read only by the next.
ir::Node* scores(const ir::Graph& g, ir::Value* x, HeadAttention& m) {
  if (ir::Node* add = producer_op(x, "Add"); add && used_once(g, x)) {
    for (int i = 0; i < 2 && !m.bias; ++i) {
      const ir::Value* in = add->input(i);
      ir::Node* p = in ? in->producer : nullptr;
      if (is_op(p, "MatMul") || is_op(p, "Mul") || is_op(p, "Div")) {
        m.bias = add->input(1 - i);
        x = add->input(i);
      }
    }
    if (!m.bias || m.bias->dtype() != DType::kFloat32) return nullptr;
    m.nodes.push_back(add);
  }
  if (!x || !used_once(g, x)) return nullptr;
  if (ir::Node* div = producer_op(x, "Div"); div && scalar_value(div->input(1))) {
    m.scale = 1.0 / *scalar_value(div->input(1));
    m.nodes.push_back(div);
    x = div->input(0);
  } else if (ir::Node* mul = producer_op(x, "Mul")) {
    const int at = scalar_value(mul->input(1)) ? 1 : scalar_value(mul->input(0)) ? 0 : -1;
    if (at < 0) return nullptr;
    m.scale = *scalar_value(mul->input(at));
    m.nodes.push_back(mul);
    x = mul->input(1 - at);
  }
  ir::Node* qk = producer_op(x, "MatMul");  // x may be null: a Mul of a file missing an input
  return qk && used_once(g, x) ? qk : nullptr;
}

bool match(const ir::Graph& g, ir::Node& softmax, HeadAttention& m) {
  ir::Value* p = softmax.output(0);
  if (!is_rank4_float(p) || softmax.opset < 13) return false;
  const int64_t axis = softmax.attrs.get_int("axis", -1);
  if (axis != -1 && axis != 3) return false;
  m.nodes.push_back(&softmax);
  ir::Node* qk = scores(g, softmax.input(0), m);
  // Only a finite positive scale is the same computation (0 means Attention's default).
  if (!qk || !std::isfinite(m.scale) || static_cast<float>(m.scale) <= 0.f) return false;
  if (m.bias && (!fits_attention_mask(m.bias->type, p->type) ||
                 std::find(m.nodes.begin(), m.nodes.end(), m.bias->producer) != m.nodes.end()))
    return false;
  // The bias must not broadcast the scores past the product's shape (a bias
  // of more batch items or heads than Q): Attention's output follows Q.
  if (!surely_same_shape(qk->output(0)->type, p->type)) return false;
  m.nodes.push_back(qk);
  ir::Node* pv = single_consumer(g, p);
  if (!is_op(pv, "MatMul") || pv->input(0) != p) return false;
  m.pv = pv;
  m.q = qk->input(0);
  m.k_t = qk->input(1);
  m.v = pv->input(1);
  if (!is_rank4_float(m.q) || !is_rank4_float(m.k_t) || !is_rank4_float(m.v) || !is_rank4_float(pv->output(0)))
    return false;
  // Attention does not broadcast batch or heads as MatMul would: the same, surely, in all three.
  const ir::SymShape &q = m.q->type.dims(), &kt = m.k_t->type.dims(), &v = m.v->type.dims();
  for (int axis_ : {0, 1})
    if (!surely_same_dim(q[axis_], kt[axis_]) || !surely_same_dim(q[axis_], v[axis_])) return false;
  if (!q[3].is_known() || q[3] != kt[2] || !surely_same_dim(kt[3], v[2]) || !v[3].is_known()) return false;
  if (ir::Node* t = producer_op(m.k_t, "Transpose");
      t && t->attrs.get_ints("perm") == std::vector<int64_t>{0, 1, 3, 2} && used_once(g, m.k_t))
    m.k_transpose = t;
  return true;
}

class FuseHeadAttention : public Pass {
 public:
  std::string name() const override { return "fuse_head_attention"; }
  bool run(ir::Graph& graph) override {
    return rewrite_each_node(graph, [&](ir::Node& n) {
      HeadAttention m;
      if (!is_op(&n, "Softmax") || !match(graph, n, m)) return false;
      rewrite(graph, m);
      return true;
    });
  }

 private:
  static void rewrite(ir::Graph& graph, HeadAttention& m) {
    const std::string name = m.pv->name + "/attention";
    ir::Value* k = nullptr;
    if (m.k_transpose) {
      k = m.k_transpose->input(0);
      m.nodes.push_back(m.k_transpose);
    } else {
      ir::Node* t = graph.add_node("Transpose", {m.k_t}, 1, graph.unique_name(name + "/keys"));
      t->attrs.set("perm", std::vector<int64_t>{0, 1, 3, 2});
      const ir::SymShape& kt = m.k_t->type.dims();
      t->output(0)->type = ir::Type::tensor(DType::kFloat32, ir::SymShape{kt[0], kt[1], kt[3], kt[2]});
      k = t->output(0);
    }
    std::vector<ir::Value*> inputs = {m.q, k, m.v};
    if (m.bias) inputs.push_back(m.bias);
    ir::Node* att = graph.add_node_with_outputs("Attention", std::move(inputs), {m.pv->output(0)},
                                                graph.unique_name(name));
    att->opset = 23;
    att->attrs.set("scale", static_cast<float>(m.scale));
    for (ir::Node* n : m.nodes) n->dead = true;
    m.pv->dead = true;
  }
};

}  // namespace

std::unique_ptr<Pass> make_fuse_head_attention() { return std::make_unique<FuseHeadAttention>(); }

}  // namespace anvil::passes
