// Multi-head attention as PyTorch exports it becomes one ONNX Attention node
// (opset 23, 3-D inputs), which a fused kernel runs (vec/attention.cc):
//
//   Qh = Transpose(Reshape(Q, [b, s, h, d]), 0213)     Q, K, V: [b, s, h*d]
//   Kt = Transpose(Reshape(K, [b, s, h, d]), 0231)
//   Vh = Transpose(Reshape(V, [b, s, h, d]), 0213)
//   S  = MatMul(Qh [/ c | * c], Kt) [/ c | * c]
//        [+ mask | Where(causal, ., fill) | Where(padding, fill, .)]
//   Y  = Reshape(Transpose(MatMul(Softmax(S, -1), Vh), 0213), [b, s, h*d])
//
// becomes Attention(Q, K, V, mask, q_num_heads = kv_num_heads = h,
// scale = 1/c | c | 1). A float mask is added as Attention's float attn_mask
// is (it must have one entry per key: a shorter Attention mask would mean
// "masked", not "broadcast"). Where(cond, S, fill) becomes a boolean
// attn_mask when `cond` is a slice from the origin of a lower-triangular bool
// constant (the buffer GPT-style models register) and fill <= -1e4:
//  - the mask is Expand(cond, [Sq, Skv]) (from Q's and K's shapes), which
//    broadcasts exactly as Where does, and fails where Where fails;
//  - masked keys weigh exp(fill - max) = 0 in float32 either way (for scores
//    above -9900), and no row is masked in full (key 0 is visible from every
//    row of such a triangle), where the two would differ.
// Where(padding, fill, S), masked_fill as Hugging Face's DistilBERT writes it
// (padding true where a key is masked, often Expand(c, Shape(S)): c itself
// is taken), becomes the float attn_mask Where(c, fill, 0) when fill <= -1e30
// and finite: S + fill rounds to fill for any |S| below half fill's ulp
// (3.8e22 at -1e30 in float32; the reference kernel adds in double, 1.9e22
// at -3.4e38), so even a row masked in full comes out as masked_fill's
// (uniform weights).
// Every intermediate must feed only the pattern (but for the Shape nodes
// that size the merging Reshape), and the head reshapes must split exactly
// the last dimension.
#include <algorithm>
#include <cmath>
#include <map>
#include <vector>

#include "passes/match.h"
#include "passes/pipeline.h"

namespace anvil::passes {

namespace {

struct Attention {
  ir::Value *q = nullptr, *k = nullptr, *v = nullptr, *mask = nullptr;
  ir::Value* causal_cond = nullptr;   // Where's condition, expanded into the boolean mask
  ir::Value* padding_cond = nullptr;  // masked_fill's condition, made the float mask Where(cond, fill, 0)
  double fill = 0;
  int64_t heads = 0;
  double scale = 1.0;
  ir::Node* last = nullptr;  // its output becomes the Attention's
  std::vector<ir::Node*> nodes;
};

bool has_perm(const ir::Node* n, std::vector<int64_t> perm) {
  return is_op(n, "Transpose") && n->attrs.get_ints("perm") == perm;
}

ir::Node* single(const ir::Graph& g, const ir::Value* v, const char* op) {
  ir::Node* n = single_consumer(g, v);
  return is_op(n, op) ? n : nullptr;
}

bool known(const ir::Dim& d) { return d.is_known() || d.is_symbol(); }

// Every live reader of `v` is one of `nodes` (the pattern's), and it is not a graph output.
bool read_only_by(const ir::Graph& g, const ir::Value* v, const std::vector<ir::Node*>& nodes) {
  if (v->is_graph_output) return false;
  const auto uses = g.consumers();
  auto it = uses.find(v);
  if (it == uses.end()) return true;
  return std::all_of(it->second.begin(), it->second.end(), [&](const ir::Node* c) {
    return c->dead || std::find(nodes.begin(), nodes.end(), c) != nodes.end();
  });
}

// How many live nodes other than Shapes read `v` (a graph output counts).
size_t data_readers(const ir::Graph& g, const ir::Value* v) {
  size_t n = v->is_graph_output ? 1 : 0;
  const auto uses = g.consumers();
  if (auto it = uses.find(v); it != uses.end())
    for (const ir::Node* c : it->second) n += !c->dead && !is_op(c, "Shape");
  return n;
}

// x [b, s, h*d] -> Reshape [b, s, h, d] -> Transpose(perm): the transpose's
// input chain, checked; returns x and the head count and size. Shapes may
// read the Reshape too (Hugging Face's GPT-2 reads the key length so): it
// then stays for them, a view of x.
ir::Value* split_heads(const ir::Graph& g, const ir::Value* t_out, std::vector<int64_t> perm, int64_t* heads,
                       int64_t* size, std::vector<ir::Node*>& nodes) {
  ir::Node* t = t_out->producer;
  if (!has_perm(t, perm) || !used_once(g, t_out)) return nullptr;
  ir::Node* r = producer_op(t->input(0), "Reshape");
  if (!r || data_readers(g, r->output(0)) != 1) return nullptr;
  ir::Value* x = r->input(0);
  const ir::Type &in = x->type, &out = r->output(0)->type;
  if (!in.has_shape() || !out.has_shape() || in.rank() != 3 || out.rank() != 4) return nullptr;
  const ir::SymShape &a = in.dims(), &b = out.dims();
  int64_t width = 0;  // the dims come from the file: checked multiplication
  if (!b[2].is_known() || !b[3].is_known() || !a[2].is_known() ||
      __builtin_mul_overflow(b[2].value, b[3].value, &width) || a[2].value != width)
    return nullptr;
  if (!known(a[0]) || !known(a[1]) || a[0] != b[0] || a[1] != b[1]) return nullptr;
  *heads = b[2].value;
  *size = b[3].value;
  nodes.push_back(t);
  if (used_once(g, r->output(0))) nodes.push_back(r);
  return x;
}

// Where(causal, S, fill) masks like is_causal when exp(fill - row max)
// underflows to 0 in float32: any fill at most -1e4 with scores above -9900.
constexpr double kMaskedFill = -1e4;
// Where(padding, fill, S) is S + Where(padding, fill, 0) when S + fill rounds
// to fill: |S| below half of fill's ulp (2^75, 3.8e22, at -1e30 in float32).
constexpr double kAbsorbingFill = -1e30;

// A bool constant whose last two dims are lower-triangular (key j visible to
// query i when j <= i) and whose other dims are 1.
bool is_lower_triangular(const ir::Value* v) {
  if (!v || !v->is_constant() || v->constant->dtype() != DType::kBool || v->constant->rank() < 2) return false;
  const Shape& s = v->constant->shape();
  for (size_t i = 0; i + 2 < s.size(); ++i)
    if (s[i] != 1) return false;
  const int64_t rows = s[s.size() - 2], cols = s.back();
  const bool* c = v->constant->data<bool>();
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j)
      if (c[i * cols + j] != (j <= i)) return false;
  return true;
}

// Slices from the origin (starts 0, steps 1) of a lower-triangular constant
// (they stay: the expanded mask reads them).
bool is_causal_cond(const ir::Value* cond) {
  while (ir::Node* slice = producer_op(cond, "Slice")) {
    if (slice->opset < 10 || !slice->input(1) || !slice->input(1)->is_constant()) return false;
    const Tensor& starts = *slice->input(1)->constant;
    for (int64_t i = 0; i < starts.numel(); ++i)
      if (element_as_double(starts, i) != 0) return false;
    if (const ir::Value* steps = slice->input(4)) {
      if (!steps->is_constant()) return false;
      for (int64_t i = 0; i < steps->constant->numel(); ++i)
        if (element_as_double(*steps->constant, i) != 1) return false;
    }
    cond = slice->input(0);
  }
  return is_lower_triangular(cond);
}

// `v` is a MatMul's output, or one scaled by a scalar Div or Mul.
bool reaches_matmul(const ir::Value* v) {
  if (producer_op(v, "MatMul")) return true;
  if (ir::Node* div = producer_op(v, "Div")) return scalar_value(div->input(1)) && producer_op(div->input(0), "MatMul");
  if (ir::Node* mul = producer_op(v, "Mul"))
    return (scalar_value(mul->input(1)) && producer_op(mul->input(0), "MatMul")) ||
           (scalar_value(mul->input(0)) && producer_op(mul->input(1), "MatMul"));
  return false;
}

// The scores S with their scale and mask: from the Softmax's input back to the MatMul.
ir::Node* scores(const ir::Graph& g, ir::Value* x, const ir::Type& softmax_type, Attention& m) {
  if (ir::Node* add = producer_op(x, "Add"); add && used_once(g, x)) {
    for (int i = 0; i < 2 && !m.mask; ++i)
      if (reaches_matmul(add->input(i))) {
        m.mask = add->input(1 - i);
        x = add->input(i);
      }
    if (!m.mask || m.mask->dtype() != DType::kFloat32) return nullptr;
    m.nodes.push_back(add);
  } else if (ir::Node* pad = producer_op(x, "Where"); pad && used_once(g, x) && reaches_matmul(pad->input(2)) &&
             scalar_value(pad->input(1))) {
    const double fill = *scalar_value(pad->input(1));
    if (!std::isfinite(fill) || fill > kAbsorbingFill || pad->input(0)->dtype() != DType::kBool) return nullptr;
    x = pad->input(2);
    m.padding_cond = pad->input(0);
    m.fill = fill;
    m.nodes.push_back(pad);
    // Expand(c, S's shape) broadcasts c as Where would: take c where it fits
    // as a mask, and the Shape(S) that sized the Expand with it.
    const ir::Type& st = softmax_type;
    ir::Node* expand = producer_op(m.padding_cond, "Expand");
    if (expand && used_once(g, m.padding_cond) && x->type.has_shape() &&
        surely_has_dims(expand->output(0)->type, x->type.dims()) && fits_attention_mask(expand->input(0)->type, st)) {
      m.padding_cond = expand->input(0);
      m.nodes.push_back(expand);
      ir::Node* shape = producer_op(expand->input(1), "Shape");
      if (shape && shape->input(0) == x && used_once(g, expand->input(1))) m.nodes.push_back(shape);
    }
    if (!read_only_by(g, x, m.nodes)) return nullptr;  // S: the Where, and the Shape of the Expand taken with it
  } else if (ir::Node* where = producer_op(x, "Where"); where && used_once(g, x)) {
    std::optional<double> fill = scalar_value(where->input(2));
    if (!fill || *fill > kMaskedFill || !is_causal_cond(where->input(0))) return nullptr;
    auto opset = g.opsets.find("");
    if (opset == g.opsets.end() || opset->second < 10) return nullptr;  // Slice with inputs, for the expansion
    m.causal_cond = where->input(0);
    x = where->input(1);
    m.nodes.push_back(where);
  }
  if (!read_only_by(g, x, m.nodes)) return nullptr;
  if (ir::Node* div = producer_op(x, "Div"); div && scalar_value(div->input(1))) {
    m.scale = 1.0 / *scalar_value(div->input(1));
    m.nodes.push_back(div);
    x = div->input(0);
  } else if (ir::Node* mul = producer_op(x, "Mul"); mul && (scalar_value(mul->input(1)) || scalar_value(mul->input(0)))) {
    const bool right = scalar_value(mul->input(1)).has_value();
    m.scale = *scalar_value(mul->input(right ? 1 : 0));
    m.nodes.push_back(mul);
    x = mul->input(right ? 0 : 1);
  }
  ir::Node* qk = producer_op(x, "MatMul");
  return qk && read_only_by(g, x, m.nodes) ? qk : nullptr;
}

// Qh / c or Qh * c (DistilBERT scales the queries, not the scores): Qh,
// with c taken into the scale; else `q` itself.
const ir::Value* unscaled_query(const ir::Graph& g, const ir::Value* q, Attention& m) {
  ir::Node* n = q->producer;
  if (!(is_op(n, "Div") || is_op(n, "Mul")) || !used_once(g, q)) return q;
  const std::optional<double> c = scalar_value(n->input(1));
  if (!c || !n->input(0)->type.has_shape() || n->input(0)->type.rank() != 4) return q;
  m.scale *= n->op_type == "Div" ? 1.0 / *c : *c;
  m.nodes.push_back(n);
  return n->input(0);
}

// True when every use of `v` leads only into `sink` (the merge Reshape, whose
// target shape exporters compute from the attention output's Shape): those
// nodes die with the pattern and are added to `cone`.
// Each node is visited once: a node that reads one value many times (a
// Concat of it N times) must not make the walk exponential.
bool feeds_only(const std::map<const ir::Value*, std::vector<ir::Node*>>& uses, const ir::Value* v,
                const ir::Node* sink, std::vector<ir::Node*>& cone, int depth = 0) {
  if (v->is_graph_output || depth > 8) return false;
  auto it = uses.find(v);
  if (it == uses.end()) return true;
  for (ir::Node* n : it->second) {
    if (n == sink || n->dead || std::find(cone.begin(), cone.end(), n) != cone.end()) continue;
    for (const ir::Value* o : n->outputs)
      if (o && !feeds_only(uses, o, sink, cone, depth + 1)) return false;
    cone.push_back(n);
  }
  return true;
}

// P V's output goes to the head-merging Transpose, and otherwise only to
// Shape nodes that size the merge Reshape; so does the Transpose's output
// (Hugging Face's BERT reads the merged shape after the permute).
// Returns the Transpose, and the Reshape in `merge`.
ir::Node* merge_transpose(const ir::Graph& g, const ir::Value* pv_out, std::vector<ir::Node*>& cone, ir::Node** merge) {
  if (pv_out->is_graph_output) return nullptr;
  const auto uses = g.consumers();
  ir::Node* transpose = nullptr;
  std::vector<ir::Node*> shapes;
  auto pv_uses = uses.find(pv_out);
  if (pv_uses == uses.end()) return nullptr;
  for (ir::Node* n : pv_uses->second) {
    if (n->dead) continue;
    if (has_perm(n, {0, 2, 1, 3}) && !transpose) transpose = n;
    else if (is_op(n, "Shape")) shapes.push_back(n);
    else return nullptr;
  }
  if (!transpose || transpose->output(0)->is_graph_output) return nullptr;
  ir::Node* reshape = nullptr;
  auto t_uses = uses.find(transpose->output(0));
  if (t_uses == uses.end()) return nullptr;
  for (ir::Node* n : t_uses->second) {
    if (n->dead) continue;
    if (is_op(n, "Reshape") && n->input(0) == transpose->output(0) && !reshape) reshape = n;
    else if (is_op(n, "Shape")) shapes.push_back(n);
    else return nullptr;
  }
  if (!reshape) return nullptr;
  for (ir::Node* shape : shapes) {
    if (!feeds_only(uses, shape->output(0), reshape, cone)) return nullptr;
    cone.push_back(shape);
  }
  *merge = reshape;
  return transpose;
}

bool match(const ir::Graph& g, ir::Node* softmax, Attention& m) {
  const ir::Type& st = softmax->output(0)->type;
  if (!st.has_shape() || st.rank() != 4 || st.dtype() != DType::kFloat32) return false;
  const int64_t axis = softmax->attrs.get_int("axis", -1);
  if ((axis != -1 && axis != 3) || softmax->opset < 13) return false;
  m.nodes.push_back(softmax);
  ir::Node* qk = scores(g, softmax->input(0), st, m);
  // Only a finite positive scale is the same computation: Attention's
  // reference takes its square root on each side, and 0 means its default.
  if (!qk || !std::isfinite(m.scale) || static_cast<float>(m.scale) <= 0.f) return false;
  if (m.mask && !fits_attention_mask(m.mask->type, st)) return false;
  if (m.padding_cond && !fits_attention_mask(m.padding_cond->type, st)) return false;
  m.nodes.push_back(qk);
  // After the softmax: P V, heads merged back.
  ir::Node* pv = single(g, softmax->output(0), "MatMul");
  if (!pv || pv->input(0) != softmax->output(0)) return false;
  ir::Node* merge_r = nullptr;
  ir::Node* merge_t = merge_transpose(g, pv->output(0), m.nodes, &merge_r);
  if (!merge_t) return false;
  m.nodes.insert(m.nodes.end(), {pv, merge_t, merge_r});
  int64_t qh = 0, qd = 0, kh = 0, kd = 0, vh = 0, vd = 0;
  m.q = split_heads(g, unscaled_query(g, qk->input(0), m), {0, 2, 1, 3}, &qh, &qd, m.nodes);
  if (!std::isfinite(m.scale) || static_cast<float>(m.scale) <= 0.f) return false;
  m.k = split_heads(g, qk->input(1), {0, 2, 3, 1}, &kh, &kd, m.nodes);
  m.v = split_heads(g, pv->input(1), {0, 2, 1, 3}, &vh, &vd, m.nodes);
  if (!m.q || !m.k || !m.v || qh != kh || qh != vh || qd != kd) return false;
  // One batch for Q, K and V (MatMul would broadcast a batch of 1; Attention does not).
  const ir::Dim &qb = m.q->type.dims()[0], &kb = m.k->type.dims()[0], &vb = m.v->type.dims()[0];
  if (!known(qb) || qb != kb || qb != vb) return false;
  const ir::Type& y = merge_r->output(0)->type;
  if (!y.has_shape() || y.rank() != 3 || !y.dims()[2].is_known() || y.dims()[2].value != vh * vd) return false;
  if (y.dims()[0] != m.q->type.dims()[0] || y.dims()[1] != m.q->type.dims()[1] || !known(y.dims()[0]) ||
      !known(y.dims()[1]))
    return false;
  m.heads = qh;
  m.last = merge_r;
  // A mask computed inside the pattern (Softmax(S + S)) would lose its producer.
  for (const ir::Value* outside : {m.mask, m.padding_cond, m.causal_cond})
    if (outside && std::find(m.nodes.begin(), m.nodes.end(), outside->producer) != m.nodes.end()) return false;
  return true;
}

class FuseAttention : public Pass {
 public:
  std::string name() const override { return "fuse_attention"; }
  bool run(ir::Graph& graph) override {
    return rewrite_each_node(graph, [&](ir::Node& n) {
      Attention m;
      if (!is_op(&n, "Softmax") || !match(graph, &n, m)) return false;
      rewrite(graph, m);
      return true;
    });
  }

 private:
  static ir::Value* int64s(ir::Graph& graph, const std::string& name, int64_t v) { return int64_constant(graph, name, {v}); }

  // Expand(cond, [Sq, Skv]), with Sq and Skv read from Q's and K's shapes at run time.
  static ir::Value* expanded_mask(ir::Graph& graph, const Attention& m) {
    const std::string base = m.last->name + "/causal";
    auto length = [&](ir::Value* x) {
      ir::Value* shape = graph.add_node("Shape", {x}, 1, base + "/shape")->output(0);
      shape->type = ir::Type::tensor(DType::kInt64, Shape{3});
      ir::Value* len = graph.add_node("Slice", {shape, int64s(graph, base + "/one", 1), int64s(graph, base + "/two", 2),
                                                int64s(graph, base + "/zero", 0)}, 1, base + "/length")->output(0);
      len->type = ir::Type::tensor(DType::kInt64, Shape{1});
      return len;
    };
    ir::Node* dims = graph.add_node("Concat", {length(m.q), length(m.k)}, 1, base + "/dims");
    dims->attrs.set("axis", int64_t{0});
    dims->output(0)->type = ir::Type::tensor(DType::kInt64, Shape{2});
    ir::Value* mask = graph.add_node("Expand", {m.causal_cond, dims->output(0)}, 1, base + "/mask")->output(0);
    mask->type = ir::Type::tensor(DType::kBool);
    return mask;
  }

  // Where(cond, fill, 0): masked_fill's condition as an additive float mask.
  static ir::Value* padding_mask(ir::Graph& graph, const Attention& m) {
    const std::string base = m.last->name + "/padding";
    auto scalar = [&](const char* name, float v) {
      Tensor t(DType::kFloat32, {});
      *t.data<float>() = v;
      return graph.add_constant(graph.unique_name(base + name), t);
    };
    ir::Node* w = graph.add_node("Where", {m.padding_cond, scalar("/fill", static_cast<float>(m.fill)), scalar("/zero", 0.f)},
                                 1, graph.unique_name(base + "/mask"));
    const ir::Type& c = m.padding_cond->type;
    w->output(0)->type = c.has_shape() ? ir::Type::tensor(DType::kFloat32, c.dims()) : ir::Type::tensor(DType::kFloat32);
    return w->output(0);
  }

  static void rewrite(ir::Graph& graph, const Attention& m) {
    ir::Value* y = m.last->output(0);
    for (ir::Node* n : m.nodes) n->dead = true;
    std::vector<ir::Value*> inputs{m.q, m.k, m.v};
    if (m.mask) inputs.push_back(m.mask);
    if (m.causal_cond) inputs.push_back(expanded_mask(graph, m));
    if (m.padding_cond) inputs.push_back(padding_mask(graph, m));
    add_attention(graph, std::move(inputs), y, m.last->name, m.heads, m.scale);
  }
};

}  // namespace

std::unique_ptr<Pass> make_fuse_attention() { return std::make_unique<FuseAttention>(); }

}  // namespace anvil::passes
