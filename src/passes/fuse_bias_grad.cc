// A bias's gradient behind a ReLU layer: ReduceSum over the rows of an
// anvil.GemmReluGrad's output (axes [0] of a matrix, keepdims) becomes that
// node's second output, the column sums, which its kernel adds up as each
// finished tile of the product leaves the registers, instead of a second pass
// over the gradient (at batch 25,000 and width 1,024, 100 MB read in about
// 6 ms, twice a step in bench/train_compare's MLP).
//
// GemmReluGrad's output 1: [1, N], float32, the sums over the rows of output
// 0 (schemas/training.cc). The node must not have one already; output 0
// keeps its other consumers.
#include "passes/match.h"
#include "passes/pipeline.h"

namespace anvil::passes {

namespace {

// Whether `axes` (ReduceSum's input 1, or its attribute before opset 13)
// names the rows of a matrix alone: [0] or [-2].
bool sums_rows(const ir::Node& reduce) {
  std::vector<int64_t> axes;
  if (const ir::Value* a = reduce.input(1)) {
    if (!a->is_constant() || a->constant->dtype() != DType::kInt64) return false;
    const Tensor& t = *a->constant;
    axes.assign(t.data<int64_t>(), t.data<int64_t>() + t.numel());
  } else {
    axes = reduce.attrs.get_ints("axes", {});
  }
  return axes.size() == 1 && (axes[0] == 0 || axes[0] == -2);
}

class FuseBiasGrad : public Pass {
 public:
  std::string name() const override { return "fuse_bias_grad"; }
  bool run(ir::Graph& graph) override {
    bool changed = false;
    for (const auto& node : graph.nodes()) {
      ir::Node& reduce = *node;
      if (reduce.dead || !is_op(&reduce, "ReduceSum") || reduce.attrs.get_int("keepdims", 1) != 1) continue;
      ir::Value* g = reduce.input(0);
      ir::Node* product = g ? g->producer : nullptr;
      if (!product || product->dead || !is_anvil_op(product, "GemmReluGrad") || product->output(1) ||
          product->output(0) != g || !sums_rows(reduce))
        continue;
      if (!g->type.has_shape() || g->type.rank() != 2 || g->dtype() != DType::kFloat32) continue;
      absorb(*product, reduce, 1);  // keeps a third output (fuse_head_grad)
      changed = true;
    }
    return changed;
  }
};

}  // namespace

std::unique_ptr<Pass> make_fuse_bias_grad() { return std::make_unique<FuseBiasGrad>(); }

}  // namespace anvil::passes
