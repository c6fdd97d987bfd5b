// A classifier head's weight gradient beside its input gradient: for
// anvil.GemmReluGrad(dZ, W, H) (the gradient into the layer before a
// Linear head of few outputs, masked by that layer's ReLU output H), the
// head's weight gradient Gemm(dZ, H, transA = 1) = dZ^T H reads the same H,
// an activation of batch x width floats (100 MB at batch 25,000 and width
// 1,024), in a pass of its own. It becomes the GemmReluGrad's third output,
// which Anvil's GEMM adds up from the H each finished tile read for its mask
// (where the product runs elsewhere, a pass after it: kernels/dnnl/matmul.cc).
//
// GemmReluGrad's output 2: [K, N], float32, A^T x Y (schemas/training.cc).
// Taken where the GemmReluGrad reads A plain (transA 0) and K, A's columns
// (the head's outputs), is at most kMaxHeadOutputs: each tile then adds K
// weighted sums of its H, which beside a product of K = 2 costs less than
// reading H again, and beside a wide one would cost more than the GEMM.
#include <unordered_set>
#include <vector>

#include "passes/match.h"
#include "passes/pipeline.h"

namespace anvil::passes {

namespace {

constexpr int64_t kMaxHeadOutputs = 16;

// Whether `node` reads, through any chain of producers, an output of `of`
// (then `of` cannot become one of its outputs: a cycle).
bool depends_on(const ir::Node& node, const ir::Node& of) {
  std::vector<const ir::Node*> todo{&node};
  std::unordered_set<const ir::Node*> seen{&node};
  while (!todo.empty()) {
    const ir::Node* n = todo.back();
    todo.pop_back();
    for (const ir::Value* v : n->inputs) {
      const ir::Node* p = v ? v->producer : nullptr;
      if (p == &of) return true;
      if (p && seen.insert(p).second) todo.push_back(p);
    }
  }
  return false;
}

// The GemmReluGrad whose A and gate `gemm` (A^T x gate) reads, if it can take
// that product as its third output.
ir::Node* gated_product_of(const ir::Graph& graph, const ir::Node& gemm) {
  const ir::Value *a = gemm.input(0), *h = gemm.input(1);
  if (!a || !h || gemm.input(2) || gemm.attrs.get_float("alpha", 1.f) != 1.f) return nullptr;
  if (gemm.attrs.get_int("transA", 0) != 1 || gemm.attrs.get_int("transB", 0) != 0) return nullptr;
  if (!a->type.has_shape() || a->type.rank() != 2 || a->dtype() != DType::kFloat32) return nullptr;
  const ir::Dim k = a->type.dims()[1];
  if (!k.is_known() || k.value > kMaxHeadOutputs) return nullptr;
  for (const auto& node : graph.nodes()) {
    ir::Node* grad = node.get();
    if (grad->dead || !is_anvil_op(grad, "GemmReluGrad") || grad->input(0) != a || grad->input(2) != h) continue;
    if (grad->attrs.get_int("transA", 0) != 0 || grad->output(2) || depends_on(*grad, gemm)) continue;
    return grad;
  }
  return nullptr;
}

class FuseHeadGrad : public Pass {
 public:
  std::string name() const override { return "fuse_head_grad"; }
  bool run(ir::Graph& graph) override {
    bool changed = false;
    for (const auto& node : graph.nodes()) {
      ir::Node& gemm = *node;
      if (gemm.dead || !is_op(&gemm, "Gemm") || gemm.outputs.size() != 1) continue;
      ir::Node* grad = gated_product_of(graph, gemm);
      if (!grad) continue;
      absorb(*grad, gemm, 2);
      changed = true;
    }
    return changed;
  }
};

}  // namespace

std::unique_ptr<Pass> make_fuse_head_grad() { return std::make_unique<FuseHeadGrad>(); }

}  // namespace anvil::passes
