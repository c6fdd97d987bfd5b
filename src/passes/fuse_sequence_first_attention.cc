// Multi-head attention as torch.nn.MultiheadAttention exports it (sequence
// first, the heads folded into the batch) becomes one attention node, as
// fuse_attention.cc does for the batch-first form:
//
//   Qh = Transpose(Reshape(Q, [S, B*H, d]), 102) [/ c | * c]    Q, K, V: [S, B, H*d]
//   Kt = Transpose(Reshape(K, [S, B*H, d]), 120)
//   Vh = Transpose(Reshape(V, [S, B*H, d]), 102)
//   Y  = Reshape(Transpose(MatMul(Softmax(MatMul(Qh, Kt), -1), Vh), 102), ...)
//
// Row b*H + h of the folded batch is head h of batch item b, so this is
// attention over B items of H heads each, whose rows lie sequence first.
// - Q, K and V the three column ranges of one packed projection X [S, B,
//   3E] (Slices, as the exporter writes in_proj): anvil.QkvAttention(X,
//   sequence_first = 1) reads them in place and writes Y [S, B, E], the
//   bytes the merge's Transpose wrote, at any batch.
// - Otherwise, at a batch of one, where [S, 1, E] and [1, S, E] are the
//   same bytes: ONNX Attention (opset 23, 3-D inputs) over Reshape(X, [1,
//   -1, E]) for each of Q, K and V.
// The scale becomes the node's (1/c, c or 1). ViT-B/16's twelve layers ran
// these as 8 nodes each, 10% of the model at batch 1, and with the Slices'
// and Transposes' copies about as much at batch 4.
#include <cmath>
#include <cstdint>

#include "ir/dim_math.h"
#include "passes/match.h"
#include "passes/pipeline.h"

namespace anvil::passes {

namespace {

struct Match {
  ir::Value *q = nullptr, *k = nullptr, *v = nullptr;
  ir::Value* packed = nullptr;  // X when Q, K and V are its three column ranges
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

// t_out = Transpose(Reshape(x [S, B, H*d], [S, B*H, d]), perm): x, with the
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
  if (!xd[2].is_known() || !rd[2].is_known() || rd[2].value < 1 || xd[2].value % rd[2].value != 0) return nullptr;
  const int64_t h = xd[2].value / rd[2].value;
  if (!surely_same_dim(xd[0], rd[0]) || !surely_same_dim(rd[1], ir::dim_mul(xd[1], ir::Dim::known(h)))) return nullptr;
  *heads = h;
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

// x = Slice(X, [first], [first + width], [last axis]) with unit steps, read
// only by the head split: X, and the column range in `first` and `width`.
ir::Value* column_slice(const ir::Graph& g, const ir::Value* x, int64_t* first, int64_t* width,
                        std::vector<ir::Node*>& nodes) {
  ir::Node* s = producer_op(x, "Slice");
  if (!s || s->opset < 10 || !used_once(g, x) || s->inputs.size() < 4) return nullptr;
  ir::Value* data = s->input(0);
  const ir::Type& t = data->type;
  if (!t.has_shape() || t.rank() != 3 || !t.dims()[2].is_known()) return nullptr;
  auto one = [&](size_t i) -> std::optional<int64_t> {
    const ir::Value* v = s->input(i);
    if (!v || !v->is_constant() || v->constant->dtype() != DType::kInt64 || v->constant->numel() != 1) return std::nullopt;
    return *v->constant->data<int64_t>();
  };
  const auto start = one(1), end = one(2), axis = one(3);
  const auto step = s->input(4) ? one(4) : std::optional<int64_t>{1};
  if (!start || !end || !axis || (*axis != 2 && *axis != -1) || step != 1) return nullptr;
  const ir::SliceRange r = ir::slice_range(t.dims()[2].value, *start, *end, 1);
  *first = r.first;
  *width = r.length;
  nodes.push_back(s);
  return data;
}

// Q, K and V as the column ranges [0, E), [E, 2E), [2E, 3E) of one X [S, B,
// 3E]: X, with the Slices added to m.nodes; nullptr otherwise.
ir::Value* packed_projection(const ir::Graph& g, Match& m) {
  std::vector<ir::Node*> slices;
  int64_t first[3], width[3];
  ir::Value* x[3];
  const ir::Value* parts[3] = {m.q, m.k, m.v};
  for (int i = 0; i < 3; ++i)
    if (!(x[i] = column_slice(g, parts[i], &first[i], &width[i], slices))) return nullptr;
  const int64_t e = m.hidden;
  if (e > INT64_MAX / 3 || x[0] != x[1] || x[0] != x[2] || x[0]->type.dims()[2].value != 3 * e) return nullptr;
  for (int i = 0; i < 3; ++i)
    if (first[i] != i * e || width[i] != e) return nullptr;
  m.nodes.insert(m.nodes.end(), slices.begin(), slices.end());
  return x[0];
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
  m.packed = packed_projection(g, m);
  // Else a batch of one for each (MatMul would broadcast Q's against K's with one head).
  auto batch_of_one = [](const ir::Value* x) { return x->type.dims()[1] == ir::Dim::known(1); };
  return m.packed || (batch_of_one(m.q) && batch_of_one(m.k) && batch_of_one(m.v));
}

class FuseSequenceFirstAttention : public Pass {
 public:
  std::string name() const override { return "fuse_sequence_first_attention"; }
  bool run(ir::Graph& graph) override {
    return rewrite_each_node(graph, [&](ir::Node& n) {
      Match m;
      if (!is_op(&n, "Softmax") || !match(graph, &n, m)) return false;
      rewrite(graph, m);
      return true;
    });
  }

 private:
  // Reshape(x, dims) typed `type`, at the model's own Reshape's opset.
  static ir::Value* reshaped(ir::Graph& graph, ir::Value* x, std::vector<int64_t> dims, ir::Type type,
                             const std::string& name, int opset) {
    ir::Node* r = graph.add_node("Reshape", {x, int64_constant(graph, name + "/shape", dims)}, 1, graph.unique_name(name));
    r->opset = opset;
    r->output(0)->type = std::move(type);
    return r->output(0);
  }

  static void rewrite(ir::Graph& graph, const Match& m) {
    for (ir::Node* n : m.nodes) n->dead = true;
    if (m.packed) rewrite_packed(graph, m);
    else rewrite_batch_of_one(graph, m);
  }

  // QkvAttention over X [S, B, 3E], sequence first. Its Y [S, B, E] reaches
  // the final Reshape as [S, B*H, d], the merge Transpose's type, so a 0 in
  // that Reshape's target keeps its meaning.
  static void rewrite_packed(ir::Graph& graph, const Match& m) {
    const std::string base = m.merge->name + "/attention";
    ir::Node* att = graph.add_node("QkvAttention", {m.packed}, 1, graph.unique_name(base));
    att->domain = "anvil";
    att->opset = 1;
    att->attrs.set("q_num_heads", m.heads);
    att->attrs.set("kv_num_heads", m.heads);
    att->attrs.set("qkv_sizes", std::vector<int64_t>{m.hidden, m.hidden, m.hidden});
    att->attrs.set("scale", static_cast<float>(m.scale));
    att->attrs.set("sequence_first", int64_t{1});
    const ir::SymShape& x = m.packed->type.dims();
    att->output(0)->type = ir::Type::tensor(DType::kFloat32, ir::SymShape{x[0], x[1], ir::Dim::known(m.hidden)});
    m.merge->inputs[0] = reshaped(graph, att->output(0), {0, -1, m.hidden / m.heads}, m.merge->input(0)->type,
                                  base + "/heads", m.merge->opset);
  }

  // ONNX Attention over Q, K and V [S, 1, E] read as [1, S, E].
  static void rewrite_batch_of_one(ir::Graph& graph, const Match& m) {
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
