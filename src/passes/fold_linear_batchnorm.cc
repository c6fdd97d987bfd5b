// A linear layer followed by a BatchNormalization of its features
// (inference, constant float32 parameters), as PyTorch exports Linear +
// BatchNorm1d, folds into the layer's weights and a bias,
// s = gamma / sqrt(var + eps):
//   MatMul(x, W) [-> Reshape or Flatten to [P, N]] -> BatchNormalization
//     =>  Add(MatMul(x, W * s), beta - mean * s) [-> the Reshape]
//   Gemm(a, B[, C]) -> BatchNormalization
//     =>  Gemm(a, B * s, (C - mean) * s + beta)
// with W's and B's output columns scaled. BatchNormalization normalizes
// axis 1; on a rank-2 input that is the product's last axis, and a reshape
// that keeps the last dim keeps each element's column (element (i, n) stays
// at offset i * N + n). Where a reshape back to the product's shape follows
// (LeViT wraps each of its 58 such pairs in a Flatten and a Reshape), the
// Add gives that reshape's value and both reshapes go; fuse_matmul then
// takes the Add as the product's bias, and the residual Add after it.
#include <cmath>
#include <vector>

#include "passes/match.h"
#include "passes/pipeline.h"

namespace anvil::passes {

namespace {

// s and beta - mean * s per feature: the normalization as an affine map.
struct Affine {
  std::vector<float> scale, shift;
};

std::optional<Affine> inference_affine(const ir::Node& bn, int64_t features) {
  for (size_t i = 1; i < 5; ++i)
    if (!is_float_vector(bn.input(i), features)) return std::nullopt;
  const float eps = bn.attrs.get_float("epsilon", 1e-5f);
  const float *gamma = bn.input(1)->constant->data<float>(), *beta = bn.input(2)->constant->data<float>();
  const float *mean = bn.input(3)->constant->data<float>(), *var = bn.input(4)->constant->data<float>();
  Affine f{std::vector<float>(static_cast<size_t>(features)), std::vector<float>(static_cast<size_t>(features))};
  for (size_t c = 0; c < f.scale.size(); ++c) {
    f.scale[c] = gamma[c] / std::sqrt(var[c] + eps);
    f.shift[c] = beta[c] - mean[c] * f.scale[c];
  }
  return f;
}

// Opset 7 on: before it, is_test = 0 (the default) asked for training, and
// an Add broadcast only with broadcast = 1.
bool is_inference_batchnorm(const ir::Node& bn) {
  if (!is_op(&bn, "BatchNormalization") || bn.opset < 7 || bn.attrs.get_int("training_mode", 0) != 0) return false;
  for (size_t i = 1; i < bn.outputs.size(); ++i)
    if (bn.outputs[i]) return false;  // running statistics requested
  return true;
}

// `v` feeds `reader`, once, and otherwise only Shape nodes (the fold keeps
// every shape; exporters size the Reshape back from the product's), and is
// no graph output.
bool only_data_reader(const ir::Graph& g, const ir::Value* v, const ir::Node& reader) {
  if (v->is_graph_output) return false;
  size_t reads = 0;
  for (const auto& n : g.nodes())
    if (!n->dead)
      for (const ir::Value* in : n->inputs)
        if (in == v) {
          if (n.get() != &reader && !is_op(n.get(), "Shape")) return false;
          reads += n.get() == &reader;
        }
  return reads == 1;
}

bool is_reshape_like(const ir::Node& n) { return is_op(&n, "Reshape") || is_op(&n, "Flatten"); }

// W's column j scaled by scale[j], in place: a [K, N] matrix, or [N, K] when `transposed`.
void scale_columns(Tensor& w, const std::vector<float>& scale, bool transposed) {
  const int64_t rows = w.dim(0), cols = w.dim(1);
  float* p = w.data<float>();
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) p[i * cols + j] *= scale[static_cast<size_t>(transposed ? i : j)];
}

class FoldLinearBatchNorm : public Pass {
 public:
  std::string name() const override { return "fold_linear_batchnorm"; }
  bool run(ir::Graph& graph) override {
    return rewrite_each_node(graph, [&](ir::Node& bn) {
      if (!is_inference_batchnorm(bn)) return false;
      ir::Value* x = bn.input(0);
      if (!x || x->dtype() != DType::kFloat32 || !x->type.has_shape() || x->type.rank() != 2) return false;
      const ir::Dim& features = x->type.dims()[1];
      if (!features.is_known() || features.value < 1 || !only_data_reader(graph, x, bn) || !x->producer) return false;
      ir::Node& producer = *x->producer;
      // The Gemm's output value goes (the Gemm takes the BN's): no Shape may read it.
      if (is_op(&producer, "Gemm")) return used_once(graph, x) && fold_gemm(graph, producer, bn, features.value);
      if (is_op(&producer, "MatMul")) return fold_matmul(graph, producer, nullptr, bn, features.value);
      if (!is_reshape_like(producer)) return false;  // to [P, N] from [..., N]: each element keeps its column
      ir::Value* y = producer.input(0);
      if (!y || !y->producer || !is_op(y->producer, "MatMul") || !only_data_reader(graph, y, producer)) return false;
      return fold_matmul(graph, *y->producer, &producer, bn, features.value);
    });
  }

 private:
  // MatMul(x, W) [-> reshape] -> bn: W's columns scaled, the shift added
  // after the product, bn gone.
  static bool fold_matmul(ir::Graph& graph, ir::Node& mm, ir::Node* reshape, ir::Node& bn, int64_t features) {
    const ir::Value* w = mm.input(1);
    if (!is_float_constant(w) || w->constant->rank() != 2 || w->constant->dim(1) != features) return false;
    const std::optional<Affine> f = inference_affine(bn, features);
    if (!f) return false;
    scale_columns(writable_constant(graph, mm, 1), f->scale, /*transposed=*/false);
    ir::Value* shift = float_constant(graph, bn.name + "/shift", f->shift);
    if (!reshape) {  // the product is [P, N]: bn becomes the Add
      bn.op_type = "Add";
      bn.attrs = {};
      bn.inputs = {mm.output(0), shift};
      bn.outputs.resize(1);
      bn.opset = graph.default_opset();
      return true;
    }
    ir::Value* product = mm.output(0);
    ir::Node* add = graph.add_node("Add", {product, shift}, 1, graph.unique_name(bn.name + "/shift_add"));
    add->output(0)->type = product->type;
    ir::Node* back = single_consumer(graph, bn.output(0));
    if (back && is_reshape_like(*back) && surely_same_shape(back->output(0)->type, product->type)) {
      // Reshaped back to the product's shape (LeViT): the Add gives that
      // value, so that the product's next Add (a residual) meets it in this
      // round of passes, not only once simplify_reshapes has run. The first
      // reshape stays for Shapes that read it; dead_code removes it otherwise.
      absorb(*add, *back);
      bn.dead = true;
      return true;
    }
    reshape->inputs[0] = add->output(0);
    bn.op_type = "Identity";
    bn.attrs = {};
    bn.inputs.resize(1);
    bn.outputs.resize(1);
    bn.opset = graph.default_opset();
    return true;
  }

  // Gemm(a, B[, C]) -> bn, alpha and beta 1, C absent or one value per
  // feature (or one in all): B's output columns scaled, C' = (C - mean) * s + beta.
  static bool fold_gemm(ir::Graph& graph, ir::Node& gemm, ir::Node& bn, int64_t features) {
    if (gemm.attrs.get_float("alpha", 1.f) != 1.f || gemm.attrs.get_float("beta", 1.f) != 1.f) return false;
    const bool trans_b = gemm.attrs.get_int("transB", 0) != 0;
    const ir::Value* b = gemm.input(1);
    if (!is_float_constant(b) || b->constant->rank() != 2 || b->constant->dim(trans_b ? 0 : 1) != features) return false;
    const std::optional<Affine> f = inference_affine(bn, features);  // bounds `features` by the file's parameters
    if (!f) return false;
    const ir::Value* c = gemm.input(2);
    std::vector<float> bias(static_cast<size_t>(features), 0.f);
    if (c) {
      if (!is_float_constant(c) || c->constant->rank() > 2) return false;
      const Tensor& t = *c->constant;
      const bool one = t.numel() == 1, per_feature = t.numel() == features && (t.rank() == 1 || t.dim(0) == 1);
      if (!one && !per_feature) return false;
      for (int64_t j = 0; j < features; ++j) bias[static_cast<size_t>(j)] = t.data<float>()[one ? 0 : j];
    }
    for (size_t j = 0; j < bias.size(); ++j) bias[j] = bias[j] * f->scale[j] + f->shift[j];
    gemm.inputs.resize(3);
    scale_columns(writable_constant(graph, gemm, 1), f->scale, trans_b);
    gemm.inputs[2] = float_constant(graph, gemm.name + "/bias_bnfolded", bias);
    absorb(gemm, bn);
    return true;
  }
};

}  // namespace

std::unique_ptr<Pass> make_fold_linear_batchnorm() { return std::make_unique<FoldLinearBatchNorm>(); }

}  // namespace anvil::passes
