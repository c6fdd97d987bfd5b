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
    Shape out = ctx.input_shape(0);
    int64_t rank = static_cast<int64_t>(out.size());
    ANVIL_PREPARE_CHECK(ctx, rank >= 1, ErrorKind::kInvalidArgument, "inputs must not be scalars");
    int64_t axis = normalize_axis(ctx, ctx.attrs().get_int("axis", 0), rank);
    srcs_.clear();
    out[axis] = 0;
    for (size_t i = 0; i < ctx.num_inputs(); ++i) {
      const Shape& s = ctx.input_shape(i);
      ANVIL_PREPARE_CHECK(ctx, ctx.input_dtype(i) == d, ErrorKind::kInvalidModel, "inputs have different types");
      ANVIL_PREPARE_CHECK(ctx, static_cast<int64_t>(s.size()) == rank, ErrorKind::kInvalidArgument,
                          "input {} has rank {}, expected {}", i, s.size(), rank);
      for (int64_t k = 0; k < rank; ++k)
        ANVIL_PREPARE_CHECK(ctx, k == axis || s[k] == ctx.input_shape(0)[k], ErrorKind::kInvalidArgument,
                            "input {} has shape {}, which differs from {} off axis {}", i, shape_str(s),
                            shape_str(ctx.input_shape(0)), axis);
      ANVIL_PREPARE_CHECK(ctx, shape_numel(s) > 0, ErrorKind::kUnsupported, "empty input");
      out[axis] += s[axis];
      srcs_.push_back(du::plain_desc(s, d));
    }
    dst_ = du::plain_desc(out, d);
    create<dnnl::concat, dnnl::concat::primitive_desc>(ctx, [&] {
      return dnnl::concat::primitive_desc(dst_, static_cast<int>(axis), srcs_, du::engine(), du::user_scratchpad_attr());
    });
    return {{d, out}};
  }

  void run(const RunContext& ctx) const override {
    std::unordered_map<int, memory> args{{DNNL_ARG_DST, du::wrap(dst_, ctx.out(0).raw())}};
    for (size_t i = 0; i < srcs_.size(); ++i) args[DNNL_ARG_MULTIPLE_SRC + static_cast<int>(i)] = du::wrap(srcs_[i], ctx.in(i).raw());
    execute(args, ctx.scratch);
  }

 private:
  std::vector<memory::desc> srcs_;
  memory::desc dst_;
};

}  // namespace

// oneDNN's concat copies float32, bfloat16, int8, uint8 and int32 (float16 only on some ISAs).
constexpr unsigned kConcatTypes = kFloat32Only | dtype_bit(DType::kBFloat16) | dtype_bit(DType::kInt8) |
                                  dtype_bit(DType::kUInt8) | dtype_bit(DType::kInt32);
ANVIL_REGISTER_KERNEL_CLASS_TYPED("Concat", kDnnl, DnnlConcat, {kConcatTypes});

}  // namespace anvil::kernels
