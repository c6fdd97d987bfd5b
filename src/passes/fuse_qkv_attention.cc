// An Attention whose Q, K and V are the three parts of one Split along the
// last axis (a packed Q|K|V projection, or the one fuse_shared_input_matmuls
// made) reads them in place: the Split's copies go.
//   Split(X, axis = last) -> Q, K, V -> Attention(Q, K, V[, attn_mask])
//   =>   anvil.QkvAttention(X[, attn_mask]), qkv_sizes = the three widths
// Taken when the parts are 3-D float32, in Q, K, V order, each read by the
// Attention and otherwise only by Shape nodes that read their batch and
// sequence lengths (those read the Split's input instead), and the
// Attention has no past, no nonpad_kv_seqlen, no
// output but Y, no softcap and no sliding window (the kernels read
// attention's other inputs and attributes only from ONNX's Attention). In
// the GPT-2-style decoder the four Splits were 2.4% of a run.
#include <algorithm>
#include <map>
#include <optional>
#include <vector>

#include "passes/match.h"
#include "passes/pipeline.h"

namespace anvil::passes {

namespace {

using Uses = std::map<const ir::Value*, std::vector<ir::Node*>>;

// The value of a constant int64 tensor of one element.
std::optional<int64_t> one_int64(const ir::Value* v) {
  if (!v || !v->is_constant() || v->constant->dtype() != DType::kInt64 || v->constant->numel() != 1)
    return std::nullopt;
  return *v->constant->data<int64_t>();
}

// Gather(dims, i) of a 3-D input's Shape picks only its first two elements.
bool gathers_leading_dims(const ir::Node& gather) {
  const ir::Value* i = gather.input(1);
  if (gather.attrs.get_int("axis", 0) != 0 || !i || !i->is_constant() || i->constant->dtype() != DType::kInt64 ||
      i->constant->rank() > 1)
    return false;
  const int64_t* at = i->constant->data<int64_t>();
  return std::all_of(at, at + i->constant->numel(), [](int64_t k) { return k == 0 || k == 1 || k == -3 || k == -2; });
}

// Shape node `shape` of a 3-D part is read only by Slices and Gathers of its
// first two elements: the batch and sequence lengths, which the Split's
// parts share with its input. (The causal mask fuse_attention builds reads
// Q's sequence length so; Hugging Face's GPT-2 reads x.size()[:-1].)
bool reads_leading_dims(const Uses& uses, const ir::Node& shape) {
  const ir::Value* dims = shape.output(0);
  if (shape.attrs.has("start") || shape.attrs.has("end") || !dims || dims->is_graph_output) return false;
  auto it = uses.find(dims);
  if (it == uses.end()) return true;
  for (const ir::Node* n : it->second) {
    if (n->dead) continue;
    if (n->input(0) != dims) return false;
    if (is_op(n, "Gather") && gathers_leading_dims(*n)) continue;
    if (!is_op(n, "Slice") || n->opset < 10 || n->num_inputs() < 3) return false;
    std::optional<int64_t> begin = one_int64(n->input(1)), end = one_int64(n->input(2));
    const bool axis_0 = n->num_inputs() < 4 || !n->input(3) || one_int64(n->input(3)) == int64_t{0};
    const bool step_1 = n->num_inputs() < 5 || !n->input(4) || one_int64(n->input(4)) == int64_t{1};
    if (!begin || !end || !axis_0 || !step_1) return false;
    if (*begin < 0) *begin += 3;  // the parts are 3-D (qkv_split checks)
    if (*end < 0) *end += 3;
    if (*begin < 0 || *end > 2 || *begin >= *end) return false;
  }
  return true;
}

// The widths Split `split` cuts the last axis (`width` long) into, as the
// node itself says: its constant `split` input or attribute, or equal
// thirds; empty when they depend on run-time values. Not the parts' types:
// those may carry widths a file declared, which the run would not follow.
std::vector<int64_t> split_widths(const ir::Node& split, int64_t width) {
  if (split.num_inputs() > 1 && split.input(1)) {
    const ir::Value* sizes = split.input(1);
    if (!sizes->is_constant() || sizes->constant->dtype() != DType::kInt64 || sizes->constant->numel() != 3) return {};
    return std::vector<int64_t>(sizes->constant->data<int64_t>(), sizes->constant->data<int64_t>() + 3);
  }
  if (split.attrs.has("split")) return split.attrs.get_ints("split");
  if (width % 3 != 0) return {};
  return {width / 3, width / 3, width / 3};
}

// A Split whose three outputs are an Attention's Q, K and V.
struct QkvSplit {
  ir::Node* split = nullptr;
  std::vector<int64_t> widths;    // the parts' last-axis widths
  std::vector<ir::Node*> shapes;  // Shape nodes of the parts, to read the Split's input instead
};

// `split` as a QkvSplit when it cuts a 3-D float32 input's last axis into
// three known positive widths, each part read by `attention` once and
// otherwise only by Shape nodes reading their leading dims; nullopt otherwise.
std::optional<QkvSplit> qkv_split(const Uses& uses, ir::Node* split, const ir::Node& attention) {
  if (split->num_inputs() < 1 || split->outputs.size() != 3 || !split->input(0)) return std::nullopt;
  const ir::Type& x = split->input(0)->type;
  if (split->input(0)->dtype() != DType::kFloat32 || !x.has_shape() || x.rank() != 3 || !x.dims()[2].is_known())
    return std::nullopt;
  const int64_t axis = split->attrs.get_int("axis", 0);
  if (axis != -1 && axis != 2) return std::nullopt;
  const int64_t width = x.dims()[2].value;
  QkvSplit m{split, split_widths(*split, width), {}};
  if (m.widths.size() != 3) return std::nullopt;
  int64_t total = 0;
  for (int64_t w : m.widths) {
    if (w < 1 || w > width - total) return std::nullopt;  // constants from a file: no overflow
    total += w;
  }
  if (total != width) return std::nullopt;
  for (size_t o = 0; o < 3; ++o) {
    const ir::Value* part = split->output(o);
    if (!part || part->is_graph_output) return std::nullopt;
    size_t reads = 0;
    for (ir::Node* n : uses.at(part)) {
      if (n->dead) continue;
      if (n == &attention) ++reads;
      else if (is_op(n, "Shape") && reads_leading_dims(uses, *n)) m.shapes.push_back(n);
      else return std::nullopt;
    }
    if (reads != 1) return std::nullopt;
  }
  return m;
}

// Attention `a` uses nothing QkvAttention lacks.
bool plain_attention(const ir::Node& a) {
  if (a.opset < 23 || a.num_inputs() < 3) return false;
  for (size_t i = 4; i < a.num_inputs(); ++i)
    if (a.input(i)) return false;
  for (size_t o = 1; o < a.outputs.size(); ++o)
    if (a.output(o)) return false;
  return a.attrs.get_float("softcap", 0.f) == 0.f && a.attrs.get_int("left_window_size", -1) == -1 &&
         a.attrs.get_int("right_window_size", -1) == -1 && a.attrs.get_int("q_num_heads", 0) > 0 &&
         a.attrs.get_int("kv_num_heads", 0) > 0;
}

class FuseQkvAttention : public Pass {
 public:
  std::string name() const override { return "fuse_qkv_attention"; }

  bool run(ir::Graph& graph) override {
    bool changed = false;
    const Uses uses = graph.consumers();  // rewrites only add uses of Splits' inputs, which no match reads
    for (const auto& node : graph.nodes()) {
      ir::Node* attention = node.get();
      if (!is_op(attention, "Attention") || !plain_attention(*attention)) continue;
      ir::Node* split = producer_op(attention->input(0), "Split");
      if (!split || attention->input(0) != split->output(0) || attention->input(1) != split->output(1) ||
          attention->input(2) != split->output(2))
        continue;
      if (const std::optional<QkvSplit> m = qkv_split(uses, split, *attention)) {
        rewrite(*attention, *m);
        changed = true;
      }
    }
    return changed;
  }

 private:
  static void rewrite(ir::Node& attention, const QkvSplit& m) {
    ir::Value* x = m.split->inputs[0];
    ir::Value* mask = attention.num_inputs() > 3 ? attention.input(3) : nullptr;
    ir::Attributes attrs;
    attrs.set("q_num_heads", attention.attrs.get_int("q_num_heads", 0));
    attrs.set("kv_num_heads", attention.attrs.get_int("kv_num_heads", 0));
    attrs.set("is_causal", attention.attrs.get_int("is_causal", 0));
    if (attention.attrs.has("scale")) attrs.set("scale", attention.attrs.get_float("scale", 0.f));
    attrs.set("qkv_sizes", m.widths);
    attention.op_type = "QkvAttention";
    attention.domain = "anvil";
    attention.opset = 1;
    attention.attrs = std::move(attrs);
    attention.inputs = {x};
    if (mask) attention.inputs.push_back(mask);
    attention.outputs.resize(1);
    for (ir::Node* shape : m.shapes) shape->inputs[0] = x;
    m.split->dead = true;
  }
};

}  // namespace

std::unique_ptr<Pass> make_fuse_qkv_attention() { return std::make_unique<FuseQkvAttention>(); }

}  // namespace anvil::passes
