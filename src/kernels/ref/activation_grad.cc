// Fused gradients of activations (anvil domain, emitted by the autodiff in
// src/train/gradients/): one pass over the data instead of the compare,
// select and multiply nodes the composed form would run.
//
//   anvil.ReluGrad(dy, y) = dy where y > 0, else 0   (y: Relu's output, or its input)
#include "kernels/ref/common.h"
#include "kernels/registry.h"

namespace anvil::kernels {

namespace {

class ReluGradKernel : public Kernel {
 public:
  std::vector<TensorType> prepare(const PrepareContext& ctx) override {
    ANVIL_PREPARE_CHECK(ctx, ctx.input_shape(0) == ctx.input_shape(1), ErrorKind::kInvalidModel,
                        "the gradient {} and the activation {} differ in shape", shape_str(ctx.input_shape(0)),
                        shape_str(ctx.input_shape(1)));
    return ctx.output_types();
  }

  void run(const RunContext& ctx) const override {
    const float* dy = ctx.in(0).data<float>();
    const float* y = ctx.in(1).data<float>();
    float* dx = ctx.out(0).data<float>();
    const int64_t n = ctx.out(0).numel();
#pragma omp parallel for simd if (n > 65536) schedule(static)
    for (int64_t i = 0; i < n; ++i) dx[i] = y[i] > 0.f ? dy[i] : 0.f;
  }
};

static Registrar relu_grad("ReluGrad", Backend::kRef, [](const ir::Node&) { return std::make_unique<ReluGradKernel>(); },
                           "anvil", {{kFloat32Only}});

}  // namespace

}  // namespace anvil::kernels
