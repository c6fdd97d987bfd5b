// BatchNormalization (inference: global statistics, scale and shift) on oneDNN
// (float32). Usually folded into the preceding Conv by fuse_conv_batchnorm.
#include "kernels/dnnl/common.h"
#include "kernels/registry.h"

namespace anvil::kernels {

namespace {

using dnnl::memory;
namespace du = dnnl_util;

class DnnlBatchNorm : public du::PrimitiveKernel {
 public:
  explicit DnnlBatchNorm(const ir::Node&) {}

  std::vector<TensorType> prepare(const PrepareContext& ctx) override {
    ANVIL_PREPARE_CHECK(ctx, ctx.attrs().get_int("training_mode", 0) == 0, ErrorKind::kUnsupported, "training mode");
    ANVIL_PREPARE_CHECK(ctx, ctx.opset() >= 7 || ctx.attrs().get_int("is_test", 0) != 0, ErrorKind::kUnsupported,
                        "is_test=0 (training)");
    ANVIL_PREPARE_CHECK(ctx, ctx.opset() >= 9 || ctx.attrs().get_int("spatial", 1) == 1, ErrorKind::kUnsupported,
                        "spatial=0");
    const Shape& x = ctx.input_shape(0);
    ANVIL_PREPARE_CHECK(ctx, x.size() >= 2 && x.size() <= 5, ErrorKind::kUnsupported, "rank {}", x.size());
    for (size_t i = 1; i < 5; ++i)
      ANVIL_PREPARE_CHECK(ctx, ctx.input_shape(i) == Shape{x[1]}, ErrorKind::kInvalidArgument,
                          "input {} has shape {}, expected [{}]", i, shape_str(ctx.input_shape(i)), x[1]);
    md_ = du::plain_desc(x, DType::kFloat32);
    channel_md_ = du::plain_desc({x[1]}, DType::kFloat32);
    float eps = ctx.attrs().get_float("epsilon", 1e-5f);
    auto flags = dnnl::normalization_flags::use_global_stats | dnnl::normalization_flags::use_scale |
                 dnnl::normalization_flags::use_shift;
    create<dnnl::batch_normalization_forward, dnnl::batch_normalization_forward::primitive_desc>(ctx, [&] {
      dnnl::batch_normalization_forward::desc d(dnnl::prop_kind::forward_inference, md_, eps, flags);
      return dnnl::batch_normalization_forward::primitive_desc(d, du::user_scratchpad_attr(), du::engine());
    });
    return {ctx.output_type(0)};
  }

  int inplace_input() const override { return 0; }

  void run(const RunContext& ctx) const override {
    std::unordered_map<int, memory> args{{DNNL_ARG_SRC, du::wrap(md_, ctx.in(0).raw())},
                                         {DNNL_ARG_SCALE, du::wrap(channel_md_, ctx.in(1).raw())},
                                         {DNNL_ARG_SHIFT, du::wrap(channel_md_, ctx.in(2).raw())},
                                         {DNNL_ARG_MEAN, du::wrap(channel_md_, ctx.in(3).raw())},
                                         {DNNL_ARG_VARIANCE, du::wrap(channel_md_, ctx.in(4).raw())},
                                         {DNNL_ARG_DST, du::wrap(md_, ctx.out(0).raw())}};
    execute(args, ctx.scratch);
  }

 private:
  memory::desc md_, channel_md_;
};

// Training outputs (mean, var...) are the reference kernel's to refuse.
std::unique_ptr<Kernel> make_batchnorm(const ir::Node& node) {
  for (size_t i = 1; i < node.outputs.size(); ++i)
    if (node.outputs[i]) return nullptr;
  return std::make_unique<DnnlBatchNorm>(node);
}

}  // namespace

ANVIL_REGISTER_KERNEL_TYPED("BatchNormalization", kDnnl, make_batchnorm, {kFloat32Only});

}  // namespace anvil::kernels
