// Concat on oneDNN (the dtypes oneDNN has: float32, bfloat16, int8, uint8, int32).
#include "kernels/dnnl/common.h"
#include "kernels/ref/common.h"
#include "kernels/registry.h"

namespace anvil::kernels {

namespace {

using dnnl::memory;
namespace du = dnnl_util;

class DnnlConcat : public du::PrimitiveKernel {
 public:
  explicit DnnlConcat(const ir::Node&) {}

  std::vector<TensorType> prepare(const PrepareContext& ctx) override {
    DType d = ctx.input_dtype(0);
    // The schema checked ranks, dtypes and the dims off the axis.
    const Shape& out = ctx.output_shape(0);
    const int64_t axis = normalize_axis(ctx, ctx.attrs().get_int("axis", 0), static_cast<int64_t>(out.size()));
    srcs_.clear();
    for (size_t i = 0; i < ctx.num_inputs(); ++i) {
      const Shape& s = ctx.input_shape(i);
      ANVIL_PREPARE_CHECK(ctx, shape_numel(s) > 0, ErrorKind::kUnsupported, "empty input");
      srcs_.push_back(du::plain_desc(s, d));
    }
    dst_ = du::plain_desc(out, d);
    if (keeps_incoming_layout(ctx)) {
      // Every input arrives in one blocked format: concatenate in it, without reorders.
      for (size_t i = 0; i < srcs_.size(); ++i) {
        in_layouts_.push_back(ctx.incoming_layout(i));
        srcs_[i] = du::desc_of({d, ctx.input_shape(i), in_layouts_[i]});
      }
      if (ctx.blocked_outputs_allowed()) dst_ = memory::desc(du::dims(out), du::data_type(d), memory::format_tag::any);
    }
    dnnl::concat::primitive_desc pd = [&] {
      try {
        return dnnl::concat::primitive_desc(dst_, static_cast<int>(axis), srcs_, du::engine(), du::user_scratchpad_attr());
      } catch (const dnnl::error& e) {
        ctx.fail(ErrorKind::kUnsupported, "oneDNN cannot run this case ({})", e.what());
      }
    }();
    create<dnnl::concat, dnnl::concat::primitive_desc>(ctx, [&] { return pd; });
    dst_ = pd.dst_desc();
    std::vector<TensorType> types = ctx.output_types();
    types[0].layout = du::layout_of(dst_, out, d);
    return types;
  }

  Layout input_layout(size_t i) const override { return i < in_layouts_.size() ? in_layouts_[i] : nullptr; }
  std::string layout_name() const override {
    return in_layouts_.empty() ? "plain" : kernels::layout_name(in_layouts_[0]);
  }

  void run(const RunContext& ctx) const override {
    std::unordered_map<int, memory> args{{DNNL_ARG_DST, du::wrap(dst_, ctx.out(0).raw())}};
    for (size_t i = 0; i < srcs_.size(); ++i) args[DNNL_ARG_MULTIPLE_SRC + static_cast<int>(i)] = du::wrap(srcs_[i], ctx.in(i).raw());
    execute(args, ctx.scratch);
  }

 private:
  static bool keeps_incoming_layout(const PrepareContext& ctx) {
    if (!ctx.blocked_inputs_allowed() || !ctx.incoming_layout(0)) return false;
    for (size_t i = 1; i < ctx.num_inputs(); ++i)
      if (!same_layout(ctx.incoming_layout(i), ctx.incoming_layout(0))) return false;
    return true;
  }

  std::vector<memory::desc> srcs_;
  memory::desc dst_;
  std::vector<Layout> in_layouts_;  // empty: plain
};

}  // namespace

// oneDNN's concat copies float32, bfloat16, int8, uint8 and int32 (float16 only on some ISAs).
constexpr unsigned kConcatTypes = kFloat32Only | dtype_bit(DType::kBFloat16) | dtype_bit(DType::kInt8) |
                                  dtype_bit(DType::kUInt8) | dtype_bit(DType::kInt32);
ANVIL_REGISTER_KERNEL_CLASS_TYPED("Concat", kDnnl, DnnlConcat, {kConcatTypes});

}  // namespace anvil::kernels
