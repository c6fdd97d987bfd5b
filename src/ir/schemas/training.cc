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
