// Folds a Transpose that swaps an operand's last two axes into the product
// that reads it: the matmul then reads the operand through swapped strides
// (oneDNN, Anvil's GEMM) instead of waiting for a transposed copy.
//   MatMul(Transpose(A), B)       -> anvil.FusedMatMul(A, B), transA = 1
//   FusedMatMul(A, Transpose(B))  -> the same node, transB = 1
//   Gemm(Transpose(A), B), transA -> Gemm(A, B), transA flipped (also FusedGemm)
// Float32 only (the fused kernels' type). Runs with the late passes, after
// the attention fusion has matched its K transpose as the exporter wrote it.
#include "passes/match.h"
#include "passes/pipeline.h"

namespace anvil::passes {

namespace {

// The input of a Transpose producing `v` that swaps exactly its last two axes.
ir::Value* last_two_axes_swapped(const ir::Value* v) {
  const ir::Node* t = producer_op(v, "Transpose");
  if (!t || !t->input(0) || !t->input(0)->type.has_shape()) return nullptr;
  const size_t rank = t->input(0)->type.rank();
  const std::vector<int64_t> perm = transpose_permutation(*t, rank);
  if (rank < 2 || perm.empty()) return nullptr;
  for (size_t i = 0; i + 2 < rank; ++i)
    if (perm[i] != static_cast<int64_t>(i)) return nullptr;
  const auto last = static_cast<int64_t>(rank - 1);
  return perm[rank - 2] == last && perm[rank - 1] == last - 1 ? t->input(0) : nullptr;
}

bool is_float32(const ir::Node& n) {
  return n.input(0) && n.input(1) && n.input(0)->dtype() == DType::kFloat32 &&
         n.input(1)->dtype() == DType::kFloat32;
}

class FoldMatMulTranspose : public Pass {
 public:
  std::string name() const override { return "fold_matmul_transpose"; }

  bool run(ir::Graph& graph) override {
    bool changed = false;
    for (const auto& node : graph.nodes()) {
      ir::Node& n = *node;
      if (n.dead || !is_float32(n)) continue;
      const bool matmul = is_op(&n, "MatMul") || is_anvil_op(&n, "FusedMatMul");
      const bool gemm = is_op(&n, "Gemm") || is_anvil_op(&n, "FusedGemm");
      if (!matmul && !gemm) continue;
      for (size_t i = 0; i < 2; ++i) changed |= fold(n, i, matmul);
    }
    return changed;
  }

 private:
  // Folds input i's transpose into `n`: a matmul's flag is set (it had none),
  // a Gemm's flipped.
  static bool fold(ir::Node& n, size_t i, bool matmul) {
    const char* flag = i == 0 ? "transA" : "transB";
    if (matmul && n.attrs.get_int(flag, 0) != 0) return false;
    ir::Value* source = last_two_axes_swapped(n.input(i));
    if (!source) return false;
    if (n.domain.empty() && n.op_type == "MatMul") {
      n.op_type = "FusedMatMul";
      n.domain = "anvil";
      n.inputs.resize(4, nullptr);  // no bias, no residual
    }
    n.attrs.set(flag, int64_t{n.attrs.get_int(flag, 0) == 0 ? 1 : 0});
    n.inputs[i] = source;
    return true;
  }
};

}  // namespace

std::unique_ptr<Pass> make_fold_matmul_transpose() { return std::make_unique<FoldMatMulTranspose>(); }

}  // namespace anvil::passes
