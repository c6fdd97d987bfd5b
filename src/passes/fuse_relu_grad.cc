// Training's ReLU gradient after a matrix product, anvil.ReluGrad(A x B, Y)
// (the input gradient of the next layer, masked by this layer's ReLU output),
// becomes one anvil.GemmReluGrad(A, B, Y) node: the product's epilogue zeroes
// C where Y <= 0 while the tile is in cache, instead of a second pass over an
// activation-sized gradient (100 MB at batch 25,000 and width 1,024).
//
// GemmReluGrad: inputs A, B, Y; attributes transA, transB (Gemm's); output
// ReluGrad(Gemm(A, B), Y), Y's shape (and, set by passes/fuse_bias_grad.cc,
// its column sums). Taken from a Gemm without C and with
// alpha 1, or a MatMul of two matrices; the product must feed only the
// ReluGrad.
//
// Likewise after a max-pool: ReluGrad(MaxPoolGrad(dY, Y), Y), the ReLU's
// output pooled, becomes MaxPoolGrad(dY, Y) with relu_gate = 1, which adds
// a window's gradient only where its maximum is positive: the one element
// it reaches holds that maximum, the ReLU's output there, so the mask
// changes nothing else. The MaxPoolGrad must feed only the ReluGrad.
#include "passes/match.h"
#include "passes/pipeline.h"

namespace anvil::passes {

namespace {

// The product feeding `relu_grad` when it can take the mask as its epilogue.
ir::Node* fusable_product(const ir::Graph& graph, const ir::Node& relu_grad) {
  const ir::Value* dy = relu_grad.input(0);
  ir::Node* product = dy ? dy->producer : nullptr;
  if (!product || product->dead || single_consumer(graph, dy) != &relu_grad) return nullptr;
  const bool gemm = is_op(product, "Gemm") && !product->input(2) && product->attrs.get_float("alpha", 1.f) == 1.f;
  if (!gemm && !is_op(product, "MatMul")) return nullptr;
  if (!is_float32_matrix(product->input(0)) || !is_float32_matrix(product->input(1))) return nullptr;
  return product;
}

// The MaxPoolGrad feeding `relu_grad` when both read the same Y.
ir::Node* fusable_max_pool_grad(const ir::Graph& graph, const ir::Node& relu_grad) {
  const ir::Value* dx = relu_grad.input(0);
  ir::Node* pool = dx ? dx->producer : nullptr;
  if (!pool || pool->dead || pool->domain != "anvil" || pool->op_type != "MaxPoolGrad") return nullptr;
  if (single_consumer(graph, dx) != &relu_grad || pool->input(1) != relu_grad.input(1)) return nullptr;
  return pool->attrs.get_int("relu_gate", 0) == 0 ? pool : nullptr;
}

class FuseReluGrad : public Pass {
 public:
  std::string name() const override { return "fuse_relu_grad"; }
  bool run(ir::Graph& graph) override {
    bool changed = false;
    for (const auto& node : graph.nodes()) {
      ir::Node& relu_grad = *node;
      if (relu_grad.dead || relu_grad.domain != "anvil" || relu_grad.op_type != "ReluGrad") continue;
      if (ir::Node* pool = fusable_max_pool_grad(graph, relu_grad)) {
        pool->attrs.set("relu_gate", int64_t{1});
        absorb(*pool, relu_grad);
        changed = true;
        continue;
      }
      ir::Node* product = fusable_product(graph, relu_grad);
      ir::Value* y = relu_grad.input(1);
      if (!product || !y || !surely_same_shape(y->type, relu_grad.input(0)->type)) continue;
      const int64_t trans_a = product->attrs.get_int("transA", 0), trans_b = product->attrs.get_int("transB", 0);
      product->op_type = "GemmReluGrad";
      product->domain = "anvil";
      product->inputs = {product->inputs[0], product->inputs[1], y};
      product->attrs = {};
      product->attrs.set("transA", trans_a);
      product->attrs.set("transB", trans_b);
      absorb(*product, relu_grad);
      changed = true;
    }
    return changed;
  }
};

}  // namespace

std::unique_ptr<Pass> make_fuse_relu_grad() { return std::make_unique<FuseReluGrad>(); }

}  // namespace anvil::passes
