// LayerNormalization on oneDNN's layer_normalization (float32, inference):
// the elements from `axis` on are one normalized row, so the input is viewed
// as [rows, cols]. Scale and B must have cols elements. The optional Mean and
// InvStdDev outputs, and broadcast scalars, stay on the reference kernel.
#include "kernels/dnnl/common.h"
#include "kernels/ref/common.h"
#include "kernels/registry.h"

namespace anvil::kernels {

namespace {

using dnnl::memory;
namespace du = dnnl_util;

class DnnlLayerNorm : public du::PrimitiveKernel {
 public:
  explicit DnnlLayerNorm(const ir::Node&) {}

  std::vector<TensorType> prepare(const PrepareContext& ctx) override {
    const Shape& x = ctx.input_shape(0);
    const int64_t rank = static_cast<int64_t>(x.size());
    ANVIL_PREPARE_CHECK(ctx, rank >= 1 && shape_numel(x) > 0, ErrorKind::kUnsupported, "empty or scalar input");
    for (size_t o = 1; o < ctx.node().outputs.size(); ++o)
      ANVIL_PREPARE_CHECK(ctx, !ctx.node().output(o), ErrorKind::kUnsupported, "Mean/InvStdDev outputs");
    const auto axis = static_cast<size_t>(normalize_axis(ctx, ctx.attrs().get_int("axis", -1), rank));
    const int64_t cols = shape_numel(Shape(x.begin() + static_cast<std::ptrdiff_t>(axis), x.end()));
    const int64_t rows = shape_numel(x) / cols;
    has_shift_ = ctx.has_input(2);
    for (size_t i = 1; i < (has_shift_ ? 3u : 2u); ++i)
      ANVIL_PREPARE_CHECK(ctx, ctx.input_dtype(i) == DType::kFloat32 && shape_numel(ctx.input_shape(i)) == cols,
                          ErrorKind::kUnsupported, "input {} {} is not one float per normalized element", i,
                          shape_str(ctx.input_shape(i)));
    data_md_ = du::plain_desc({rows, cols}, DType::kFloat32);
    param_md_ = du::plain_desc({cols}, DType::kFloat32);
    auto flags = dnnl::normalization_flags::use_scale;
    if (has_shift_) flags |= dnnl::normalization_flags::use_shift;
    const float eps = ctx.attrs().get_float("epsilon", 1e-5f);
    create<dnnl::layer_normalization_forward, dnnl::layer_normalization_forward::primitive_desc>(ctx, [&] {
      dnnl::layer_normalization_forward::desc d(dnnl::prop_kind::forward_inference, data_md_, eps, flags);
      return dnnl::layer_normalization_forward::primitive_desc(d, du::user_scratchpad_attr(), du::engine());
    });
    return ctx.output_types();
  }

  int inplace_input() const override { return 0; }

  void run(const RunContext& ctx) const override {
    std::unordered_map<int, memory> args{{DNNL_ARG_SRC, du::wrap(data_md_, ctx.in(0).raw())},
                                         {DNNL_ARG_DST, du::wrap(data_md_, ctx.out(0).raw())},
                                         {DNNL_ARG_SCALE, du::wrap(param_md_, ctx.in(1).raw())}};
    if (has_shift_) args[DNNL_ARG_SHIFT] = du::wrap(param_md_, ctx.in(2).raw());
    execute(args, ctx.scratch);
  }

 private:
  bool has_shift_ = false;
  memory::desc data_md_, param_md_;
};

}  // namespace

ANVIL_REGISTER_KERNEL_CLASS_TYPED("LayerNormalization", kDnnl, DnnlLayerNorm, {kFloat32Only});

}  // namespace anvil::kernels
