// anvil.ReluGrad(dY, Y) (training's ReLU gradient: dY where Y > 0) in a
// plan's layout: where dY arrives in one of oneDNN's formats without padding
// (du::elementwise_layout: the NHWC or channel blocks a convolution's
// gradient writes), Y is read and dX written in it too, so the chain of
// gradients between convolutions stays in their format instead of being
// reordered to plain and back around each ReLU. The values do not depend on
// the layout: the kernel is element by element over the same number of
// elements. Plain tensors are left to the reference kernel.
#include "kernels/activation.h"
#include "kernels/dnnl/common.h"
#include "kernels/registry.h"

namespace anvil::kernels {

namespace {

namespace du = dnnl_util;

class PlannedReluGrad : public Kernel {
 public:
  explicit PlannedReluGrad(const ir::Node&) {}

  std::vector<TensorType> prepare(const PrepareContext& ctx) override {
    const Shape& shape = ctx.input_shape(0);
    ANVIL_PREPARE_CHECK(ctx, shape == ctx.input_shape(1), ErrorKind::kInvalidModel,
                        "the gradient {} and the activation {} differ in shape", shape_str(shape),
                        shape_str(ctx.input_shape(1)));
    layout_ = du::elementwise_layout(ctx, 0, shape);
    ANVIL_PREPARE_CHECK(ctx, layout_ != nullptr, ErrorKind::kUnsupported, "dY arrives plain: the reference kernel");
    std::vector<TensorType> out = ctx.output_types();
    out[0].layout = layout_;
    return out;
  }

  int inplace_input() const override { return 0; }
  Layout input_layout(size_t) const override { return layout_; }
  std::string layout_name() const override { return kernels::layout_name(layout_); }
  std::string impl_name() const override { return "planned"; }

  void run(const RunContext& ctx) const override {
    relu_grad(ctx.in(0).data<float>(), ctx.in(1).data<float>(), ctx.out(0).data<float>(), ctx.out(0).numel());
  }

 private:
  Layout layout_;  // dY's, kept for Y and dX
};

static Registrar relu_grad_planned("ReluGrad", Backend::kDnnl, factory_of<PlannedReluGrad>(), "anvil",
                                   {{kFloat32Only}});

}  // namespace

}  // namespace anvil::kernels
