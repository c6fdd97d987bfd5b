// MatMul -> Add(bias) [-> Add(residual)] [-> activation] becomes one
// anvil.FusedMatMul node, which oneDNN runs as one matmul with a bias and
// sum/eltwise post-ops: y = act(A x B + bias + residual). Gemm ->
// activation (a PyTorch Linear and its ReLU) becomes anvil.FusedGemm: Gemm's
// inputs and attributes, and the activation's.
//
// FusedMatMul: inputs A, B, Bias (may be omitted: a float constant running
// along the last dimension, [N] or [1, ..., N]), Sum (may be omitted: the
// output's shape); attributes activation, activation_alpha, activation_beta
// (passes/match.h). B must be a matrix (the weights of a linear layer), so
// the batch dimensions of the output are A's.
#include <algorithm>

#include "passes/match.h"
#include "passes/pipeline.h"

namespace anvil::passes {

namespace {


// A float constant of N elements laid along the last dimension of an output of rank `rank`.
bool is_bias(const ir::Value* v, int64_t n, int rank) {
  if (!is_float_constant(v)) return false;
  const Shape& s = v->constant->shape();
  if (s.empty() || static_cast<int>(s.size()) > rank || s.back() != n) return false;
  for (size_t i = 0; i + 1 < s.size(); ++i)
    if (s[i] != 1) return false;
  return true;
}

class FuseMatMul : public Pass {
 public:
  std::string name() const override { return "fuse_matmul"; }
  bool run(ir::Graph& graph) override {
    bool changed = false;
    for (const auto& ptr : graph.nodes()) {
      ir::Node& n = *ptr;
      if (is_op(&n, "MatMul")) changed |= fuse_bias(graph, n);
      else if (is_anvil_op(&n, "FusedMatMul")) changed |= fuse_next(graph, n);
      else if (is_op(&n, "Gemm")) changed |= fuse_gemm_activation(graph, n);
    }
    return changed;
  }

 private:
  // MatMul(A, B) + bias, B a float32 matrix of static N.
  static bool fuse_bias(const ir::Graph& graph, ir::Node& mm) {
    const ir::Value* a = mm.input(0);
    const ir::Value* b = mm.input(1);
    const ir::Value* y = mm.output(0);
    if (!a || !b || a->dtype() != DType::kFloat32 || b->dtype() != DType::kFloat32) return false;
    if (!b->type.has_shape() || b->type.rank() != 2 || !b->type.dims()[1].is_known()) return false;
    if (!a->type.has_shape() || a->type.rank() < 2) return false;
    ir::Node* add = single_consumer(graph, y);
    if (!is_op(add, "Add")) return false;
    ir::Value* bias = other_operand(*add, y);
    if (!is_bias(bias, b->type.dims()[1].value, a->type.rank())) return false;
    mm.op_type = "FusedMatMul";
    mm.domain = "anvil";
    mm.inputs = {mm.inputs[0], mm.inputs[1], bias, nullptr};
    absorb(mm, *add);
    return true;
  }

  // Gemm(A, B[, C]) -> activation, float32.
  static bool fuse_gemm_activation(const ir::Graph& graph, ir::Node& gemm) {
    ir::Value* y = gemm.output(0);
    if (!y || y->dtype() != DType::kFloat32) return false;
    ir::Node* next = single_consumer(graph, y);
    if (!next || next->dead || next->input(0) != y) return false;
    std::optional<FusedActivation> act = fusable_activation(*next);
    if (!act) return false;
    gemm.op_type = "FusedGemm";
    gemm.domain = "anvil";
    set_activation(gemm, *act);
    absorb(gemm, *next);
    return true;
  }

  // A residual Add of the output's shape, then an activation.
  static bool fuse_next(const ir::Graph& graph, ir::Node& fm) {
    if (fm.attrs.has("activation")) return false;
    ir::Value* y = fm.output(0);
    ir::Node* next = single_consumer(graph, y);
    if (!next || next->dead) return false;
    if (is_op(next, "Add") && !fm.input(3)) {
      ir::Value* other = other_operand(*next, y);
      if (!other || other == y || !surely_same_shape(other->type, y->type)) return false;
      fm.inputs.resize(std::max<size_t>(fm.inputs.size(), 4), nullptr);  // one read from a file may have fewer
      fm.inputs[3] = other;
      absorb(fm, *next);
      return true;
    }
    std::optional<FusedActivation> act = fusable_activation(*next);
    if (!act || next->input(0) != y) return false;
    set_activation(fm, *act);
    absorb(fm, *next);
    return true;
  }
};

}  // namespace

std::unique_ptr<Pass> make_fuse_matmul() { return std::make_unique<FuseMatMul>(); }

}  // namespace anvil::passes
