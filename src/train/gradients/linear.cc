// Gradients of MatMul and Gemm.
#include "core/check.h"
#include "train/gradient_rule.h"

namespace anvil::train {
namespace {

ir::Attributes gemm_attrs(int64_t trans_a, int64_t trans_b, float alpha) {
  ir::Attributes a;
  a.set("transA", trans_a);
  a.set("transB", trans_b);
  a.set("alpha", alpha);
  return a;
}

ir::Value* transposed_last_two(GradBuilder& b, ir::Value* v, int rank) {
  std::vector<int64_t> perm;
  for (int i = 0; i < rank; ++i) perm.push_back(i);
  std::swap(perm[static_cast<size_t>(rank - 2)], perm[static_cast<size_t>(rank - 1)]);
  ir::Attributes a;
  a.set("perm", perm);
  return b.op("Transpose", {v}, a);
}

// Y = A @ B. Rank-2 operands, or A [..., M, K] with a rank-2 weight B [K, N]
// (the batch folded into the rows for dB).
void matmul(GradBuilder& b) {
  const ir::Type& ta = b.x(0)->type;
  const ir::Type& tb = b.x(1)->type;
  ANVIL_CHECK(ta.has_shape() && tb.has_shape() && ta.rank() >= 2 && tb.rank() == 2, ErrorKind::kUnsupported,
              "{}: gradients of MatMul need A of rank >= 2 and B of rank 2", b.node().describe());
  if (b.wants(0)) b.grad(0, b.op("MatMul", {b.dy(), transposed_last_two(b, b.x(1), 2)}));
  if (!b.wants(1)) return;
  if (ta.rank() == 2) {
    b.grad(1, b.op("MatMul", {transposed_last_two(b, b.x(0), 2), b.dy()}));
    return;
  }
  const ir::Dim k = tb.dims()[0], n = tb.dims()[1];
  ANVIL_CHECK(k.is_known() && n.is_known(), ErrorKind::kUnsupported, "{}: gradients of MatMul need B's shape",
              b.node().describe());
  ir::Value* a2 = b.op("Reshape", {b.x(0), b.ints({-1, k.value})});
  ir::Value* dy2 = b.op("Reshape", {b.dy(), b.ints({-1, n.value})});
  b.grad(1, b.op("Gemm", {a2, dy2}, gemm_attrs(1, 0, 1.f)));
}

// Y = alpha op(A) op(B) + beta C.
void gemm(GradBuilder& b) {
  const auto& attrs = b.node().attrs;
  const int64_t ta = attrs.get_int("transA", 0), tb = attrs.get_int("transB", 0);
  const float alpha = attrs.get_float("alpha", 1.f), beta = attrs.get_float("beta", 1.f);
  if (b.wants(0))
    b.grad(0, ta ? b.op("Gemm", {b.x(1), b.dy()}, gemm_attrs(tb, 1, alpha))
                 : b.op("Gemm", {b.dy(), b.x(1)}, gemm_attrs(0, tb ? 0 : 1, alpha)));
  if (b.wants(1))
    b.grad(1, tb ? b.op("Gemm", {b.dy(), b.x(0)}, gemm_attrs(1, ta, alpha))
                 : b.op("Gemm", {b.x(0), b.dy()}, gemm_attrs(ta ? 0 : 1, 0, alpha)));
  if (b.x(2) && b.wants(2)) {
    ir::Value* scaled = beta == 1.f ? b.dy() : b.op("Mul", {b.dy(), b.scalar(beta, DType::kFloat32)});
    b.grad(2, b.unbroadcast(scaled, b.x(2)));
  }
}

const RegisterGradient kRules[] = {{"MatMul", matmul}, {"Gemm", gemm}};

}  // namespace
}  // namespace anvil::train
