// Softmax and LogSoftmax on oneDNN's softmax_v2 (float32). Before opset 13 the
// input is viewed as 2-D at `axis`, as ONNX defines it.
#include "kernels/dnnl/common.h"
#include "kernels/ref/common.h"
#include "kernels/registry.h"

namespace anvil::kernels {

namespace {

using dnnl::memory;
namespace du = dnnl_util;

class DnnlSoftmax : public du::PrimitiveKernel {
 public:
  explicit DnnlSoftmax(const ir::Node& node) : log_(node.op_type == "LogSoftmax") {}

  std::vector<TensorType> prepare(const PrepareContext& ctx) override {
    const Shape& x = ctx.input_shape(0);
    int64_t rank = static_cast<int64_t>(x.size());
    ANVIL_PREPARE_CHECK(ctx, rank >= 1 && shape_numel(x) > 0, ErrorKind::kUnsupported, "empty or scalar input");
    bool legacy = ctx.opset() < 13;
    int64_t axis = normalize_axis(ctx, ctx.attrs().get_int("axis", legacy ? 1 : -1), rank);
    Shape view = x;
    if (legacy) {
      int64_t outer = 1;
      for (int64_t i = 0; i < axis; ++i) outer *= x[i];
      view = {outer, shape_numel(x) / outer};
      axis = 1;
    }
    md_ = du::plain_desc(view, DType::kFloat32);
    auto alg = log_ ? dnnl::algorithm::softmax_log : dnnl::algorithm::softmax_accurate;
    create<dnnl::softmax_v2_forward, dnnl::softmax_v2_forward::primitive_desc>(ctx, [&] {
      dnnl::softmax_v2_forward::desc d(dnnl::prop_kind::forward_inference, alg, md_, md_, static_cast<int>(axis));
      return dnnl::softmax_v2_forward::primitive_desc(d, du::user_scratchpad_attr(), du::engine());
    });
    return ctx.output_types();
  }

  int inplace_input() const override { return 0; }

  void run(const RunContext& ctx) const override {
    std::unordered_map<int, memory> args{{DNNL_ARG_SRC, du::wrap(md_, ctx.in(0).raw())},
                                         {DNNL_ARG_DST, du::wrap(md_, ctx.out(0).raw())}};
    execute(args, ctx.scratch);
  }

 private:
  bool log_;
  memory::desc md_;
};

}  // namespace

ANVIL_REGISTER_KERNEL_CLASS_TYPED("Softmax", kDnnl, DnnlSoftmax, {kFloat32Only});
ANVIL_REGISTER_KERNEL_CLASS_TYPED("LogSoftmax", kDnnl, DnnlSoftmax, {kFloat32Only});

}  // namespace anvil::kernels
