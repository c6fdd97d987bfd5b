// Multi-head attention as torch.nn.MultiheadAttention exports it (sequence
// first, the heads folded into the batch), at a batch of one, becomes one
// ONNX Attention node (opset 23, 3-D inputs), as fuse_attention.cc does for
// the batch-first form:
//
//   Qh = Transpose(Reshape(Q, [S, H, d]), 102) [/ c | * c]    Q, K, V: [S, 1, H*d]
//   Kt = Transpose(Reshape(K, [S, H, d]), 120)
//   Vh = Transpose(Reshape(V, [S, H, d]), 102)
//   Y  = Reshape(Transpose(MatMul(Softmax(MatMul(Qh, Kt), -1), Vh), 102), ...)
//
// becomes Y = Reshape(Attention(Q', K', V', q_num_heads = kv_num_heads = H,
// scale = 1/c | c | 1), ...), with X' = Reshape(X, [1, -1, H*d]): at a batch
// of one, [S, 1, E] and [1, S, E] are the same bytes. ViT-B/16's twelve
// layers ran these as 8 nodes each, 10% of the model.
#include <cmath>

#include "passes/match.h"
#include "passes/pipeline.h"

namespace anvil::passes {

namespace {

struct Match {
  ir::Value *q = nullptr, *k = nullptr, *v = nullptr;
  int64_t heads = 0, hidden = 0;
  double scale = 1.0;
  ir::Node* merge = nullptr;  // the final Reshape, kept: it reads the Attention's output
  std::vector<ir::Node*> nodes;
};

// The node that alone reads `v`, when it is an `op`.
ir::Node* only_reader(const ir::Graph& g, const ir::Value* v, const char* op) {
  ir::Node* n = single_consumer(g, v);
  return is_op(n, op) ? n : nullptr;
}

// t_out = Transpose(Reshape(x [S, 1, H*d], [S, H, d]), perm): x, with the
// head count and size; nullptr when the chain differs.
ir::Value* split_heads(const ir::Graph& g, const ir::Value* t_out, const std::vector<int64_t>& perm, int64_t* heads,
                       int64_t* size, std::vector<ir::Node*>& nodes) {
  ir::Node* t = producer_op(t_out, "Transpose");
  if (!t || !used_once(g, t_out) || t->attrs.get_ints("perm") != perm) return nullptr;
  ir::Node* r = producer_op(t->input(0), "Reshape");
  if (!r || !used_once(g, r->output(0))) return nullptr;
  ir::Value* x = r->input(0);
  const ir::Type &xt = x->type, &rt = r->output(0)->type;
  if (!xt.has_shape() || !rt.has_shape() || xt.rank() != 3 || rt.rank() != 3 || xt.dtype() != DType::kFloat32) return nullptr;
  const ir::SymShape &xd = xt.dims(), &rd = rt.dims();
  if (!xd[1].is_known() || xd[1].value != 1 || !xd[2].is_known() || !rd[1].is_known() || !rd[2].is_known()) return nullptr;
  if (!surely_same_dim(xd[0], rd[0]) || rd[1].value * rd[2].value != xd[2].value) return nullptr;
  *heads = rd[1].value;
  *size = rd[2].value;
  nodes.insert(nodes.end(), {t, r});
  return x;
}

// MatMul's first operand: Qh, or Qh divided or multiplied by a scalar.
const ir::Value* scaled_query(const ir::Graph& g, const ir::Value* a, Match& m) {
  ir::Node* n = a->producer;
  if (!(is_op(n, "Div") || is_op(n, "Mul")) || !used_once(g, a)) return a;
  const std::optional<double> c = scalar_value(n->input(1));
  const double scale = !c ? 0.0 : n->op_type == "Div" ? 1.0 / *c : *c;
  // Attention's reference takes the scale's square root on each side, and 0
  // means its default: only a finite positive scale is the same computation.
  if (!std::isfinite(scale) || static_cast<float>(scale) <= 0.f) return a;
  m.scale = scale;
  m.nodes.push_back(n);
  return n->input(0);
}

bool match(const ir::Graph& g, ir::Node* softmax, Match& m) {
  const ir::Type& st = softmax->output(0)->type;
  if (!st.has_shape() || st.rank() != 3 || st.dtype() != DType::kFloat32 || softmax->opset < 13) return false;
  const int64_t axis = softmax->attrs.get_int("axis", -1);
  if (axis != -1 && axis != 2) return false;
  ir::Node* qk = producer_op(softmax->input(0), "MatMul");
  ir::Node* pv = only_reader(g, softmax->output(0), "MatMul");
  if (!qk || !used_once(g, qk->output(0)) || !pv || pv->input(0) != softmax->output(0)) return false;
  ir::Node* merge_t = only_reader(g, pv->output(0), "Transpose");
  if (!merge_t || merge_t->attrs.get_ints("perm") != std::vector<int64_t>{1, 0, 2}) return false;
  ir::Node* merge = only_reader(g, merge_t->output(0), "Reshape");
  if (!merge) return false;
  m.nodes = {softmax, qk, pv, merge_t};
  int64_t qh = 0, qd = 0, kh = 0, kd = 0, vh = 0, vd = 0;
  m.q = split_heads(g, scaled_query(g, qk->input(0), m), {1, 0, 2}, &qh, &qd, m.nodes);
  m.k = split_heads(g, qk->input(1), {1, 2, 0}, &kh, &kd, m.nodes);
  m.v = split_heads(g, pv->input(1), {1, 0, 2}, &vh, &vd, m.nodes);
  if (!m.q || !m.k || !m.v || qh != kh || qh != vh || qd != kd || qd != vd || m.scale == 0) return false;
  m.heads = qh;
  m.hidden = qh * qd;
  m.merge = merge;
  return true;
}

class FuseSequenceFirstAttention : public Pass {
 public:
  std::string name() const override { return "fuse_sequence_first_attention"; }
  bool run(ir::Graph& graph) override {
    bool changed = false;
    const size_t count = graph.nodes().size();  // rewriting appends nodes
    for (size_t i = 0; i < count; ++i) {
      ir::Node* n = graph.nodes()[i].get();
      Match m;
      if (!is_op(n, "Softmax") || !match(graph, n, m)) continue;
      rewrite(graph, m);
      changed = true;
    }
    return changed;
  }

 private:
  // x [S, 1, E] as [1, S, E].
  // Reshape(x, dims) typed `type`, at the model's own Reshape's opset.
  static ir::Value* reshaped(ir::Graph& graph, ir::Value* x, std::vector<int64_t> dims, ir::Type type,
                             const std::string& name, int opset) {
    Tensor shape(DType::kInt64, {static_cast<int64_t>(dims.size())});
    std::copy(dims.begin(), dims.end(), shape.data<int64_t>());
    ir::Node* r = graph.add_node("Reshape", {x, graph.add_constant(graph.unique_name(name + "/shape"), shape)}, 1,
                                 graph.unique_name(name));
    r->opset = opset;
    r->output(0)->type = std::move(type);
    return r->output(0);
  }

  static void rewrite(ir::Graph& graph, const Match& m) {
    for (ir::Node* n : m.nodes) n->dead = true;
    const std::string base = m.merge->name + "/attention";
    const int opset = m.merge->opset;
    std::vector<ir::Value*> inputs;  // each x [S, 1, E] as [1, S, E]
    for (const auto& [x, tag] : {std::pair{m.q, "/q"}, std::pair{m.k, "/k"}, std::pair{m.v, "/v"}}) {
      const ir::SymShape dims{ir::Dim::known(1), x->type.dims()[0], ir::Dim::known(m.hidden)};
      inputs.push_back(reshaped(graph, x, {1, -1, m.hidden}, ir::Type::tensor(DType::kFloat32, dims), base + tag, opset));
    }
    ir::Node* att = graph.add_node("Attention", inputs, 1, graph.unique_name(base));
    att->opset = 23;  // Attention's first version, whatever the model's opset
    att->attrs.set("q_num_heads", m.heads);
    att->attrs.set("kv_num_heads", m.heads);
    att->attrs.set("scale", static_cast<float>(m.scale));
    att->output(0)->type = inputs[0]->type;
    // The final Reshape reads [S, H, d] as before, so a 0 in its target (copy
    // that input dimension) keeps its meaning; simplify_reshapes merges the
    // two where its target has none.
    const int64_t size = m.hidden / m.heads;
    const ir::SymShape split{m.q->type.dims()[0], ir::Dim::known(m.heads), ir::Dim::known(size)};
    m.merge->inputs[0] = reshaped(graph, att->output(0), {-1, m.heads, size}, ir::Type::tensor(DType::kFloat32, split),
                                  base + "/heads", opset);
  }
};

}  // namespace

std::unique_ptr<Pass> make_fuse_sequence_first_attention() { return std::make_unique<FuseSequenceFirstAttention>(); }

}  // namespace anvil::passes
