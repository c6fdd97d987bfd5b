// Schemas of the training ops: anvil's gradient kernels, and the
// ai.onnx.preview.training optimizers (Adagrad, Momentum,
// Adam): after R and T come n tensors, their gradients and their states; the
// outputs are the n updated tensors, then the updated states, in the types of
// the inputs they replace.
#include "ir/schemas/common.h"

namespace anvil::ir::schemas {

namespace {

constexpr const char* kTraining = "ai.onnx.preview.training";

InferFn optimizer_outputs(size_t states) {
  return [states](InferContext& ctx) {
    const size_t per = 2 + states, inputs = ctx.node().inputs.size();
    if (inputs < 2 + per || (inputs - 2) % per != 0)
      ctx.fail("expects R, T and {} inputs per optimized tensor, got {} inputs", per, inputs);
    const size_t n = (inputs - 2) / per;
    for (size_t o = 0; o < ctx.num_outputs(); ++o) {
      const size_t group = o / n, i = o % n;  // 0: the tensors, then each state
      copy_type(ctx, 2 + (group == 0 ? i : (group + 1) * n + i), o);
    }
  };
}

// (y, mask): y like x, the mask bool of x's shape.
void infer_training_dropout(InferContext& ctx) {
  copy_type(ctx, 0, 0);
  if (ctx.num_outputs() < 2) return;
  const Type& x = ctx.input(0);
  ctx.set_output(1, x.has_shape() ? Type::tensor(DType::kBool, x.dims()) : Type::tensor(DType::kBool));
}

void infer_conv_grad_weight(InferContext& ctx) {
  copy_type(ctx, 2, 0);
  if (ctx.num_outputs() < 2) return;
  const Type& w = ctx.input(2);
  ctx.set_output(1, w.has_shape() && w.rank() >= 1 ? Type::tensor(w.dtype(), SymShape{w.dims()[0]})
                                                   : Type::tensor(w.dtype()));
}

// ReluGrad(A x B, Y): Y's type; with a second output (passes/fuse_bias_grad.cc),
// the column sums of the first, [1, N]; with a third (passes/fuse_head_grad.cc),
// A^T x Y, [K, N].
void infer_gemm_relu_grad(InferContext& ctx) {
  copy_type(ctx, 2, 0);
  if (ctx.num_outputs() < 2) return;
  const Type& y = ctx.input(2);
  const bool matrix = y.has_shape() && y.rank() == 2;
  ctx.set_output(1, matrix ? Type::tensor(y.dtype(), SymShape{Dim::known(1), y.dims()[1]}) : Type::tensor(y.dtype()));
  if (ctx.num_outputs() < 3) return;
  const Type& a = ctx.input(0);
  const bool a_matrix = a.has_shape() && a.rank() == 2;
  const Dim k = a_matrix ? a.dims()[ctx.attr_int("transA") != 0 ? 0 : 1] : Dim::unknown();
  ctx.set_output(2, matrix ? Type::tensor(y.dtype(), SymShape{k, y.dims()[1]}) : Type::tensor(y.dtype()));
}

// Two dims that cannot both hold: both known and different.
bool conflict(const Dim& a, const Dim& b) { return a.is_known() && b.is_known() && a.value != b.value; }

Dim bytes_for_bits(const Dim& bits) { return bits.is_known() ? Dim::known((bits.value + 7) / 8) : Dim::unknown(); }

// anvil.TwoClassReluGrad(dZ [N, 2], W, H [N, J]), W [2, J] (transB 0) or
// [J, 2]: u [N], w [J], the gate [H > 0] packed by rows [N, ceil(J / 8)]
// and by columns [J, ceil(N / 8)] (uint8), then optionally the gated
// gradient's column sums [1, J] and dZ^T H [2, J] (passes/fuse_two_class_gate_grad.cc).
void infer_two_class_relu_grad(InferContext& ctx) {
  if (ctx.rank(0) != 2 || ctx.rank(1) != 2 || ctx.rank(2) != 2) ctx.fail("expects dZ, W and H of rank 2");
  const SymShape &dz = ctx.dims(0), &h = ctx.dims(2);
  const bool trans_b = ctx.attr_int("transB") != 0;
  const Dim w_classes = ctx.dims(1)[trans_b ? 1 : 0], w_width = ctx.dims(1)[trans_b ? 0 : 1];
  if (conflict(dz[1], Dim::known(2)) || conflict(w_classes, Dim::known(2)))
    ctx.fail("takes two classes: dZ {} and W {}", dims_str(dz), dims_str(ctx.dims(1)));
  if (conflict(dz[0], h[0]) || conflict(w_width, h[1]))
    ctx.fail("dZ {}, W {} and H {} do not match", dims_str(dz), dims_str(ctx.dims(1)), dims_str(h));
  const Dim n = dz[0].is_known() ? dz[0] : h[0], width = h[1];
  const DType f = DType::kFloat32;
  ctx.set_output(0, Type::tensor(f, SymShape{n}));
  if (ctx.num_outputs() > 1) ctx.set_output(1, Type::tensor(f, SymShape{width}));
  if (ctx.num_outputs() > 2) ctx.set_output(2, Type::tensor(DType::kUInt8, SymShape{n, bytes_for_bits(width)}));
  if (ctx.num_outputs() > 3) ctx.set_output(3, Type::tensor(DType::kUInt8, SymShape{width, bytes_for_bits(n)}));
  if (ctx.num_outputs() > 4) ctx.set_output(4, Type::tensor(f, SymShape{Dim::known(1), width}));
  if (ctx.num_outputs() > 5) ctx.set_output(5, Type::tensor(f, SymShape{Dim::known(2), width}));
}

// anvil.BitGemm(B, T, row_scale [M], k_scale [K], gate): B uint8 [M,
// ceil(K / 8)] (bits), T [K, C] (transB 0) or [C, K], gate [M, C]
// (optional): Y [M, C], optionally its column sums [1, C].
void infer_bit_gemm(InferContext& ctx) {
  if (ctx.rank(0) != 2 || ctx.rank(1) != 2 || ctx.rank(2) != 1 || ctx.rank(3) != 1)
    ctx.fail("expects B and T of rank 2, row_scale and k_scale of rank 1");
  const SymShape &b = ctx.dims(0), &t = ctx.dims(1);
  const Dim m = ctx.dims(2)[0], k = ctx.dims(3)[0];
  const bool trans_b = ctx.attr_int("transB") != 0;
  const Dim t_k = t[trans_b ? 1 : 0], cols = t[trans_b ? 0 : 1];
  if (conflict(b[0], m) || conflict(b[1], bytes_for_bits(k)) || conflict(t_k, k))
    ctx.fail("B {}, T {}, row_scale [{}] and k_scale [{}] do not match", dims_str(b), dims_str(t), m.str(), k.str());
  if (ctx.has_input(4)) {
    if (ctx.rank(4) != 2 || conflict(ctx.dims(4)[0], m) || conflict(ctx.dims(4)[1], cols))
      ctx.fail("gate {} does not match the product [{},{}]", dims_str(ctx.dims(4)), m.str(), cols.str());
  }
  ctx.set_output(0, Type::tensor(DType::kFloat32, SymShape{m, cols}));
  if (ctx.num_outputs() > 1) ctx.set_output(1, Type::tensor(DType::kFloat32, SymShape{Dim::known(1), cols}));
}

struct Registrations {
  Registrations() {
    auto& r = SchemaRegistry::global();
    r.add(OpSchema("Adagrad", kTraining).infer(optimizer_outputs(1)));
    r.add(OpSchema("Momentum", kTraining).required_attr("alpha").required_attr("beta").required_attr("mode")
              .required_attr("norm_coefficient").infer(optimizer_outputs(1)));
    r.add(OpSchema("Adam", kTraining).infer(optimizer_outputs(2)));
    // Gradient kernels the autodiff emits (src/train/gradients/): each output
    // is shaped like the incoming gradient, input 0.
    r.add(OpSchema("ReluGrad", "anvil").inputs({kFloats | kHalfs}).infer(same_as_input(0)));
    // ReluGrad(Gemm(A, B), Y) in one node (passes/fuse_relu_grad.cc): Y's
    // type; the kernels check the product's shape against it. An optional
    // second output sums its columns (passes/fuse_bias_grad.cc).
    r.add(OpSchema("GemmReluGrad", "anvil")
              .inputs({kFloats})
              .attr("transA", int64_t{0})
              .attr("transB", int64_t{0})
              .infer(infer_gemm_relu_grad));
    // A two-class head's gradient into the ReLU layer below it, kept as
    // its factors, and the products by its 0/1 gate (passes/fuse_two_class_gate_grad.cc).
    r.add(OpSchema("TwoClassReluGrad", "anvil")
              .inputs({dtype_bit(DType::kFloat32)})
              .attr("transB", int64_t{0})
              .infer(infer_two_class_relu_grad));
    r.add(OpSchema("BitGemm", "anvil")
              .inputs({dtype_bit(DType::kUInt8), dtype_bit(DType::kFloat32)})
              .attr("transB", int64_t{0})
              .infer(infer_bit_gemm));
    // The convolution gradients take the forward Conv's attributes; X and W
    // give the output shapes (dX like X, dW like W, dB like W's first axis).
    r.add(OpSchema("TrainingDropout", "anvil").inputs({kFloats, dtype_bit(DType::kInt64)}).infer(infer_training_dropout));
    r.add(OpSchema("ConvGradInput", "anvil").inputs({kFloats}).infer(same_as_input(2)));
    r.add(OpSchema("ConvGradWeight", "anvil").inputs({kFloats}).infer(infer_conv_grad_weight));
  }
};
const Registrations registrations;

}  // namespace

}  // namespace anvil::ir::schemas
