// A two-class classifier's gradient into the ReLU layer below its head,
// kept as its factors. With softmax cross-entropy over two classes, each row
// of the head's gradient dZ [N, 2] is (u, -u) up to rounding (softmax minus
// one-hot, scaled per row), so the gated gradient
//
//   dZ2 = ReluGrad(dZ W, H) = diag(u) G diag(w),  G = [H > 0], w = W[0] - W[1],
//
// and the two products that read it multiply a 0/1 matrix:
//
//   the layer's input gradient   ReluGrad(dZ2 W2, H1) = [H1 > 0] o diag(u) G (diag(w) W2)
//   and its weight gradient      dZ2^T H1             = diag(w) G^T (diag(u) H1).
//
// anvil.GemmReluGrad(dZ, W, H) becomes anvil.TwoClassReluGrad(dZ, W, H) ->
// (u, w, G by rows, G by columns, then its column sums and dZ^T H where the
// GemmReluGrad had them), and each product of dZ2 an anvil.BitGemm, which
// adds looked-up table entries instead of multiplying
// (kernels/vec/bit_gemm.cc): about half of the arithmetic of a step of
// issue 9's MLP. dZ2 itself (100 MB at batch 25,000 and width 1,024) is no
// longer written. Taken only where the advisor says it pays (AVX-512, or
// AVX2 where each logical CPU's share of its L2 is 1 MiB or more), and only
// when every reader of dZ2 is one of those products:
//
//   anvil.GemmReluGrad(dZ2, W2, H1) [transA 0, no third output]
//       -> BitGemm(G by rows, W2, u, w, H1) [W2's transB], its outputs kept
//   Gemm(dZ2, X) [transA 1, alpha 1, no C]
//       -> BitGemm(G by columns, X, w, u) [X's transB]
//
// The rows of dZ must sum to zero by construction: dZ = (Softmax(s) -
// OneHot(labels, 2, [0, 1])) * scale, scale one value per row (the loss's
// reduction), as the autodiff writes it (train/gradients/softmax_loss.cc),
// beside a SoftmaxCrossEntropyLoss(s, labels) that refuses a label outside
// [0, 2) when it runs (OneHot would give that row zeros). u = (dZ[:, 0] -
// dZ[:, 1]) / 2 absorbs their rounding; the difference from the unfused
// graph is of the order of the softmax's own rounding.
#include <map>

#include "passes/match.h"
#include "passes/pipeline.h"

namespace anvil::passes {

namespace {

bool is_known(const ir::Dim& d, int64_t v) { return d.is_known() && d.value == v; }

// A constant of exactly these values.
bool has_values(const ir::Value* v, DType dtype, const std::vector<double>& values) {
  if (!v || !v->is_constant() || v->constant->dtype() != dtype || v->constant->numel() != static_cast<int64_t>(values.size()))
    return false;
  for (size_t i = 0; i < values.size(); ++i) {
    const double x = dtype == DType::kFloat32 ? v->constant->data<float>()[i]
                                              : static_cast<double>(v->constant->data<int64_t>()[i]);
    if (x != values[i]) return false;
  }
  return true;
}

using Consumers = std::map<const ir::Value*, std::vector<ir::Node*>>;

// A SoftmaxCrossEntropyLoss over `scores` and `labels` that checks each label
// when it runs (no class weights, no ignore_index): OneHot leaves the row of
// a label outside [-2, 2) all zeros, and that row of dZ would not sum to zero.
bool labels_checked_by_loss(const Consumers& consumers, const ir::Value* scores, const ir::Value* labels) {
  const auto found = consumers.find(labels);
  if (found == consumers.end()) return false;
  for (const ir::Node* loss : found->second)
    if (is_op(loss, "SoftmaxCrossEntropyLoss") && loss->input(0) == scores && loss->input(1) == labels &&
        !loss->input(2) && !loss->attrs.has("ignore_index"))
      return true;
  return false;
}

// Softmax(s) - OneHot(labels, 2, [0, 1]) over the last axis of [N, 2], the
// labels checked by the loss: rows that sum to 1 - 1.
bool is_softmax_minus_one_hot(const Consumers& consumers, const ir::Value* v) {
  const ir::Node* sub = producer_op(v, "Sub");
  if (!sub) return false;
  const ir::Node* softmax = producer_op(sub->input(0), "Softmax");
  const ir::Node* one_hot = producer_op(sub->input(1), "OneHot");
  if (!softmax || !one_hot || softmax->opset < 13 || !is_float32_matrix(softmax->output(0))) return false;
  const int64_t axis = softmax->attrs.get_int("axis", -1), hot_axis = one_hot->attrs.get_int("axis", -1);
  return (axis == -1 || axis == 1) && (hot_axis == -1 || hot_axis == 1) &&
         is_known(softmax->output(0)->type.dims()[1], 2) && has_values(one_hot->input(1), DType::kInt64, {2}) &&
         has_values(one_hot->input(2), DType::kFloat32, {0, 1}) &&
         labels_checked_by_loss(consumers, softmax->input(0), one_hot->input(0));
}

// One value for every row of a [N, 2] product: a scalar, [1] or [N, 1].
bool is_row_constant(const ir::Value* v) {
  if (!v || !v->type.has_shape()) return false;
  const ir::SymShape& d = v->type.dims();
  if (d.size() == 0) return true;
  if (d.size() == 1) return is_known(d[0], 1);
  return d.size() == 2 && is_known(d[1], 1);
}

// dZ's rows sum to zero by construction (see the top of the file).
bool rows_sum_to_zero(const Consumers& consumers, const ir::Value* dz) {
  if (is_softmax_minus_one_hot(consumers, dz)) return true;
  const ir::Node* mul = producer_op(dz, "Mul");
  if (!mul) return false;
  for (int i = 0; i < 2; ++i)
    if (is_softmax_minus_one_hot(consumers, mul->input(i)) && is_row_constant(mul->input(1 - i))) return true;
  return false;
}

// The gradient into the layer below a two-class head.
bool is_two_class_head(const Consumers& consumers, const ir::Node& grad) {
  if (!is_anvil_op(&grad, "GemmReluGrad") || grad.attrs.get_int("transA", 0) != 0) return false;
  const ir::Value *dz = grad.input(0), *w = grad.input(1), *dz2 = grad.output(0);
  if (!is_float32_matrix(dz) || !is_known(dz->type.dims()[1], 2) || !is_float32_matrix(w) || !dz2 ||
      dz2->is_graph_output)
    return false;
  return rows_sum_to_zero(consumers, dz);
}

enum class Reader { kNone, kInputGrad, kWeightGrad };

// How a reader of dZ2 becomes a BitGemm, if it can.
Reader reader_kind(const ir::Node& reader, const ir::Value* dz2) {
  if (is_anvil_op(&reader, "GemmReluGrad") && reader.input(0) == dz2 && reader.input(1) != dz2 &&
      reader.input(2) != dz2 && reader.attrs.get_int("transA", 0) == 0 && !reader.output(2) &&
      is_float32_matrix(reader.input(1)))
    return Reader::kInputGrad;
  if (is_op(&reader, "Gemm") && reader.input(0) == dz2 && reader.input(1) != dz2 && !reader.input(2) &&
      reader.attrs.get_int("transA", 0) == 1 && reader.attrs.get_float("alpha", 1.f) == 1.f &&
      reader.outputs.size() == 1 && is_float32_matrix(reader.input(1)))
    return Reader::kWeightGrad;
  return Reader::kNone;
}

ir::Dim bytes_for_bits(const ir::Dim& bits) {
  return bits.is_known() ? ir::Dim::known((bits.value + 7) / 8) : ir::Dim::unknown();
}

class FuseTwoClassGateGrad : public Pass {
 public:
  explicit FuseTwoClassGateGrad(FusionAdvisor advisor) : advisor_(std::move(advisor)) {}
  std::string name() const override { return "fuse_two_class_gate_grad"; }

  bool run(ir::Graph& graph) override {
    bool changed = false;
    const auto consumers = graph.consumers();
    for (const auto& node : graph.nodes()) {
      ir::Node& head = *node;
      if (head.dead || !is_two_class_head(consumers, head)) continue;
      const auto found = consumers.find(head.output(0));
      if (found == consumers.end() || found->second.empty()) continue;
      std::vector<ir::Node*> readers = found->second;
      bool all = true;
      for (ir::Node* r : readers) all = all && !r->dead && reader_kind(*r, head.output(0)) != Reader::kNone;
      if (!all) continue;
      ir::Node fused = fused_head(head);
      if (!advisor_(fused)) continue;
      rewrite(graph, head, readers);
      changed = true;
    }
    return changed;
  }

 private:
  static ir::Node fused_head(const ir::Node& head) {
    ir::Node fused = head;
    fused.op_type = "TwoClassReluGrad";
    fused.attrs = {};
    fused.attrs.set("transB", head.attrs.get_int("transB", 0));
    return fused;
  }

  static ir::Value* new_value(ir::Graph& graph, const std::string& name, ir::Type type) {
    ir::Value* v = graph.add_value(graph.unique_name(name));
    v->type = std::move(type);
    return v;
  }

  static void rewrite(ir::Graph& graph, ir::Node& head, const std::vector<ir::Node*>& readers) {
    ir::Value* dz2 = head.output(0);
    const ir::Dim n = dz2->type.has_shape() ? dz2->type.dims()[0] : ir::Dim::unknown();
    const ir::Dim width = dz2->type.has_shape() ? dz2->type.dims()[1] : ir::Dim::unknown();
    const std::string base = head.name.empty() ? "two_class" : head.name;
    ir::Value* u = new_value(graph, base + "_u", ir::Type::tensor(DType::kFloat32, ir::SymShape{n}));
    ir::Value* w = new_value(graph, base + "_w", ir::Type::tensor(DType::kFloat32, ir::SymShape{width}));
    ir::Value* by_rows =
        new_value(graph, base + "_gate_rows", ir::Type::tensor(DType::kUInt8, ir::SymShape{n, bytes_for_bits(width)}));
    ir::Value* by_cols =
        new_value(graph, base + "_gate_cols", ir::Type::tensor(DType::kUInt8, ir::SymShape{width, bytes_for_bits(n)}));
    bool cols_read = false;
    for (ir::Node* r : readers) {
      const int64_t trans_b = r->attrs.get_int("transB", 0);
      const bool input_grad = reader_kind(*r, dz2) == Reader::kInputGrad;
      ir::Value* t = r->input(1);
      if (input_grad) {
        r->inputs = {by_rows, t, u, w, r->input(2)};  // gated by the layer's ReLU, as before
      } else {
        r->inputs = {by_cols, t, w, u};
        cols_read = true;
      }
      r->op_type = "BitGemm";
      r->domain = "anvil";
      r->attrs = {};
      r->attrs.set("transB", trans_b);
    }
    std::vector<ir::Value*> outputs{u, w, by_rows, cols_read ? by_cols : nullptr, head.output(1), head.output(2)};
    while (!outputs.empty() && !outputs.back()) outputs.pop_back();
    head.output(0)->producer = nullptr;  // dZ2: read by no one now
    head = fused_head(head);
    head.outputs = outputs;
    for (ir::Value* v : head.outputs)
      if (v) v->producer = &head;
  }

  FusionAdvisor advisor_;
};

}  // namespace

std::unique_ptr<Pass> make_fuse_two_class_gate_grad(FusionAdvisor advisor) {
  return std::make_unique<FuseTwoClassGateGrad>(std::move(advisor));
}

}  // namespace anvil::passes
