// Multi-head attention with the heads folded into the batch, as Hugging
// Face's BART-family attention writes it with torch.bmm (BART, mBART,
// Marian, Pegasus, CLIP, Whisper, Wav2Vec2), becomes one ONNX Attention
// (opset 23, 3-D inputs), as fuse_attention.cc does for the 4-D form:
//
//   Xf = Reshape(Transpose(Reshape(X, [b, s, h, d]), 0213), [b*h, s, d])
//        for X = Q (or Q * c), K and V, each [b, s, h*d]
//   S  = MatMul(Qf, Transpose(Kf, 021))
//        [-> Reshape [b, h, s, s] -> + mask [+ mask...] -> Reshape [b*h, s, s]]...
//   Y  = Reshape(Transpose(Reshape(MatMul(Softmax(S, -1), Vf), [b, h, s, d]), 0213), [b, s, h*d])
//
// becomes Y = Attention(Q, K, V[, mask], q_num_heads = kv_num_heads = h,
// scale = c | 1). Several float masks (CLIP adds a causal one and a
// padding one) are summed first, broadcast as the Adds did; each must have
// one entry per key, as Attention's mask must. Shape nodes that read the
// pattern's values (BART reads K's length from Kf) must feed only the
// pattern's own Reshapes; they go with it. Each of BART's layers ran about
// 20 nodes so, besides the shape arithmetic; fuse_qkv_attention then reads
// Q, K and V in place from their Split.
#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <set>

#include "ir/dim_math.h"
#include "passes/match.h"
#include "passes/pipeline.h"

namespace anvil::passes {

namespace {

using Uses = std::map<const ir::Value*, std::vector<ir::Node*>>;

struct Match {
  ir::Value *q = nullptr, *k = nullptr, *v = nullptr;
  std::vector<ir::Value*> masks;
  std::vector<const ir::Value*> score_views;  // the scores' 4-D views, [b, h, s, s']
  const ir::Value* merge_view = nullptr;      // the product's, [b, h, s, d]
  int64_t heads = 0, hidden = 0;
  double scale = 1.0;
  ir::Node* merge = nullptr;  // the final Reshape: its output becomes the Attention's
  std::vector<ir::Node*> nodes;
};

bool has_perm(const ir::Node* n, std::vector<int64_t> perm) {
  return is_op(n, "Transpose") && n->attrs.get_ints("perm") == perm;
}

// f = Reshape(Transpose(Reshape(x [b, s, h*d], [b, s, h, d]), 0213), [b*h, s, d]):
// x, with h and d; nullptr when the chain differs.
ir::Value* folded_heads(const ir::Value* f, int64_t* heads, int64_t* size, std::vector<ir::Node*>& nodes) {
  ir::Node* fold = producer_op(f, "Reshape");
  ir::Node* t = fold ? producer_op(fold->input(0), "Transpose") : nullptr;
  ir::Node* split = t && has_perm(t, {0, 2, 1, 3}) ? producer_op(t->input(0), "Reshape") : nullptr;
  if (!split) return nullptr;
  ir::Value* x = split->input(0);
  const ir::Type &xt = x->type, &st = split->output(0)->type, &ft = fold->output(0)->type;
  if (!xt.has_shape() || !st.has_shape() || !ft.has_shape() || xt.rank() != 3 || st.rank() != 4 || ft.rank() != 3 ||
      xt.dtype() != DType::kFloat32)
    return nullptr;
  const ir::SymShape &a = xt.dims(), &s = st.dims(), &fd = ft.dims();
  int64_t width = 0;
  if (!s[2].is_known() || !s[3].is_known() || !a[2].is_known() ||
      __builtin_mul_overflow(s[2].value, s[3].value, &width) || a[2].value != width)
    return nullptr;
  if (!surely_same_dim(a[0], s[0]) || !surely_same_dim(a[1], s[1]) || !surely_same_dim(fd[1], a[1]) || fd[2] != s[3] ||
      !surely_same_dim(fd[0], ir::dim_mul(a[0], s[2])))
    return nullptr;
  *heads = s[2].value;
  *size = s[3].value;
  nodes.insert(nodes.end(), {fold, t, split});
  return x;
}

// Q * c or Q / c by a scalar: Q, with c taken into the scale.
ir::Value* unscaled(ir::Value* q, Match& m) {
  ir::Node* n = q->producer;
  if (!(is_op(n, "Mul") || is_op(n, "Div"))) return q;
  const std::optional<double> c = scalar_value(n->input(1));
  const ir::Type& x = n->input(0)->type;
  if (!c || !x.has_shape() || x.rank() != 3 || x.dtype() != DType::kFloat32) return q;
  m.scale *= n->op_type == "Div" ? 1.0 / *c : *c;
  m.nodes.push_back(n);
  return n->input(0);
}

// `v` is the product's 4-D view, or a sum of it and masks.
bool leads_to_product(const ir::Value* v, int depth = 0) {
  if (depth > 8) return false;
  if (ir::Node* add = producer_op(v, "Add"))
    return leads_to_product(add->input(0), depth + 1) || leads_to_product(add->input(1), depth + 1);
  ir::Node* view = producer_op(v, "Reshape");
  if (!view) return false;
  if (producer_op(view->input(0), "MatMul")) return true;
  ir::Node* back = producer_op(view->input(0), "Reshape");  // the view back of an earlier sum
  return back && leads_to_product(back->input(0), depth + 1);
}

// S's producers back to the Q K^T MatMul: its masks, added to its 4-D view
// (CLIP adds two, each between a view and a view back).
ir::Node* scores(ir::Value* s, Match& m) {
  while (ir::Node* back = producer_op(s, "Reshape")) {  // [b*h, s, s'] from [b, h, s, s'] + masks
    m.nodes.push_back(back);
    ir::Value* x = back->input(0);
    std::vector<ir::Value*> masks;
    while (ir::Node* add = producer_op(x, "Add")) {
      const int product = leads_to_product(add->input(0)) ? 0 : leads_to_product(add->input(1)) ? 1 : -1;
      if (product < 0) return nullptr;
      masks.push_back(add->input(1 - product));
      m.nodes.push_back(add);
      x = add->input(product);
    }
    ir::Node* view = producer_op(x, "Reshape");  // [b, h, s, s'] of the product
    if (!view) return nullptr;
    const ir::Type& vt = view->output(0)->type;
    if (!vt.has_shape() || vt.rank() != 4) return nullptr;
    for (ir::Value* mask : masks) {
      if (mask->dtype() != DType::kFloat32 || !fits_attention_mask(mask->type, vt)) return nullptr;
      m.masks.push_back(mask);
    }
    m.score_views.push_back(view->output(0));
    m.nodes.push_back(view);
    s = view->input(0);
  }
  ir::Node* qk = producer_op(s, "MatMul");
  if (!qk) return nullptr;
  m.nodes.push_back(qk);
  return qk;
}

// Every value the pattern makes but its last is read only inside it, or by
// Shape nodes whose results feed only the pattern's nodes (their Reshape
// targets); those Shapes and their arithmetic join it.
bool confined(const Uses& uses, Match& m) {
  std::set<const ir::Node*> inside(m.nodes.begin(), m.nodes.end());
  std::vector<ir::Node*> cone;
  // Whether every use of `v` ends in the pattern, within a few steps of shape arithmetic.
  std::set<const ir::Node*> seen;  // each node walked once: a Concat of one value N times stays linear
  std::function<bool(const ir::Value*, int)> ends_inside = [&](const ir::Value* v, int depth) {
    if (v->is_graph_output || depth > 8) return false;
    auto it = uses.find(v);
    if (it == uses.end()) return true;
    for (ir::Node* n : it->second) {
      if (n->dead || inside.count(n) || !seen.insert(n).second) continue;
      for (const ir::Value* o : n->outputs)
        if (o && !ends_inside(o, depth + 1)) return false;
      cone.push_back(n);
    }
    return true;
  };
  for (const ir::Node* n : m.nodes) {
    if (n == m.merge) continue;
    for (const ir::Value* o : n->outputs) {
      if (!o) continue;
      if (o->is_graph_output) return false;
      auto it = uses.find(o);
      if (it == uses.end()) continue;
      for (ir::Node* c : it->second)
        if (!c->dead && !inside.count(c) && !seen.count(c) &&
            !(is_op(c, "Shape") && ends_inside(c->output(0), 0) && seen.insert(c).second && (cone.push_back(c), true)))
          return false;
    }
  }
  m.nodes.insert(m.nodes.end(), cone.begin(), cone.end());
  return true;
}

bool match(const ir::Graph& g, ir::Node* softmax, Match& m) {
  const ir::Type& st = softmax->output(0)->type;
  if (!st.has_shape() || st.rank() != 3 || st.dtype() != DType::kFloat32 || softmax->opset < 13) return false;
  const int64_t axis = softmax->attrs.get_int("axis", -1);
  if (axis != -1 && axis != 2) return false;
  m.nodes.push_back(softmax);
  ir::Node* qk = scores(softmax->input(0), m);
  if (!qk) return false;
  ir::Node* kt = producer_op(qk->input(1), "Transpose");
  ir::Node* pv = single_consumer(g, softmax->output(0));
  if (!kt || !has_perm(kt, {0, 2, 1}) || !is_op(pv, "MatMul") || pv->input(0) != softmax->output(0)) return false;
  m.nodes.insert(m.nodes.end(), {kt, pv});
  // The merge: Reshape [b, h, s, d] -> Transpose 0213 -> Reshape [b, s, h*d].
  ir::Node* view = single_consumer(g, pv->output(0));
  ir::Node* t = is_op(view, "Reshape") ? single_consumer(g, view->output(0)) : nullptr;
  ir::Node* merge = has_perm(t, {0, 2, 1, 3}) ? single_consumer(g, t->output(0)) : nullptr;
  if (!is_op(merge, "Reshape") || merge->input(0) != t->output(0)) return false;
  m.nodes.insert(m.nodes.end(), {view, t, merge});
  m.merge = merge;
  m.merge_view = view->output(0);
  int64_t qh = 0, qd = 0, kh = 0, kd = 0, vh = 0, vd = 0;
  m.q = folded_heads(qk->input(0), &qh, &qd, m.nodes);
  m.k = folded_heads(kt->input(0), &kh, &kd, m.nodes);
  m.v = folded_heads(pv->input(1), &vh, &vd, m.nodes);
  if (!m.q || !m.k || !m.v || qh != kh || qh != vh || qd != kd) return false;
  m.q = unscaled(m.q, m);
  if (!std::isfinite(m.scale) || static_cast<float>(m.scale) <= 0.f) return false;
  // One batch for Q, K and V, as Attention wants (MatMul would broadcast a batch of 1).
  const ir::Dim &qb = m.q->type.dims()[0], &kb = m.k->type.dims()[0], &vb = m.v->type.dims()[0];
  if (!surely_same_dim(qb, kb) || !surely_same_dim(qb, vb)) return false;
  const ir::Type& y = merge->output(0)->type;
  if (!y.has_shape() || y.rank() != 3 || !surely_same_dim(y.dims()[0], qb) || !surely_same_dim(y.dims()[1], m.q->type.dims()[1]) ||
      y.dims()[2] != ir::Dim::known(vh * vd))
    return false;
  m.heads = qh;
  // The 4-D views split the folded batch as [b, h] (not heads first).
  const ir::Dim h = ir::Dim::known(qh), sq = m.q->type.dims()[1], sk = m.k->type.dims()[1];
  for (const ir::Value* view : m.score_views)
    if (!surely_has_dims(view->type, {qb, h, sq, sk})) return false;
  if (!surely_has_dims(m.merge_view->type, {qb, h, sq, ir::Dim::known(vd)})) return false;
  if (!confined(g.consumers(), m)) return false;
  // What the Attention reads must outlive the pattern (a mask computed from
  // its Shapes, K read from Q's scaled value, ...).
  for (const ir::Value* in : {m.q, m.k, m.v})
    if (std::find(m.nodes.begin(), m.nodes.end(), in->producer) != m.nodes.end()) return false;
  for (const ir::Value* mask : m.masks)
    if (std::find(m.nodes.begin(), m.nodes.end(), mask->producer) != m.nodes.end()) return false;
  return true;
}

class FuseFoldedHeadsAttention : public Pass {
 public:
  std::string name() const override { return "fuse_folded_heads_attention"; }
  bool run(ir::Graph& graph) override {
    return rewrite_each_node(graph, [&](ir::Node& n) {
      Match m;
      if (!is_op(&n, "Softmax") || !match(graph, &n, m)) return false;
      rewrite(graph, m);
      return true;
    });
  }

 private:
  static void rewrite(ir::Graph& graph, const Match& m) {
    ir::Value* y = m.merge->output(0);
    for (ir::Node* n : m.nodes) n->dead = true;
    std::vector<ir::Value*> inputs{m.q, m.k, m.v};
    if (!m.masks.empty()) {
      ir::Value* mask = m.masks[0];
      for (size_t i = 1; i < m.masks.size(); ++i) {
        ir::Node* sum = graph.add_node("Add", {mask, m.masks[i]}, 1, graph.unique_name(m.merge->name + "/mask"));
        sum->output(0)->type = ir::Type::tensor(DType::kFloat32);  // inference gives it its broadcast shape
        mask = sum->output(0);
      }
      inputs.push_back(mask);
    }
    add_attention(graph, std::move(inputs), y, m.merge->name, m.heads, m.scale);
  }
};

}  // namespace

std::unique_ptr<Pass> make_fuse_folded_heads_attention() { return std::make_unique<FuseFoldedHeadsAttention>(); }

}  // namespace anvil::passes
