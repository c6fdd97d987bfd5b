// Schemas of the linear quantization ops: QuantizeLinear, DequantizeLinear,
// DynamicQuantizeLinear, MatMulInteger and QLinearMatMul.
#include "ir/schemas/common.h"

namespace anvil::ir::schemas {

namespace {

constexpr unsigned kQuant8 = dtype_bit(DType::kUInt8) | dtype_bit(DType::kInt8);

// Output like X, in `dtype`.
void like_x(InferContext& ctx, DType dtype, size_t o = 0) {
  const Type& x = ctx.input(0);
  ctx.set_output(o, x.has_shape() ? Type::tensor(dtype, x.dims()) : Type::tensor(dtype));
}

struct Registrations {
  Registrations() {
    auto& r = SchemaRegistry::global();
    // QuantizeLinear: the zero point's type (uint8 without one).
    r.add(OpSchema("QuantizeLinear").attr("axis", int64_t{1}).infer([](InferContext& ctx) {
      like_x(ctx, ctx.has_input(2) ? ctx.dtype(2) : DType::kUInt8);
    }));
    r.add(OpSchema("DequantizeLinear").attr("axis", int64_t{1}).infer([](InferContext& ctx) {
      like_x(ctx, ctx.dtype(1));
    }));
    r.add(OpSchema("DynamicQuantizeLinear").inputs({dtype_bit(DType::kFloat32)}).infer([](InferContext& ctx) {
      like_x(ctx, DType::kUInt8);
      ctx.set_output(1, Type::tensor(DType::kFloat32, SymShape{}));
      ctx.set_output(2, Type::tensor(DType::kUInt8, SymShape{}));
    }));
    r.add(OpSchema("MatMulInteger").inputs({kQuant8}).infer([](InferContext& ctx) {
      ctx.set_output(0, Type::tensor(DType::kInt32));
      ctx.set_output(0, Type::tensor(DType::kInt32, matmul_dims(ctx, ctx.dims(0), ctx.dims(1))));
    }));
    // QLinearMatMul(a, a_scale, a_zero_point, b, b_scale, b_zero_point, y_scale, y_zero_point).
    r.add(OpSchema("QLinearMatMul").infer([](InferContext& ctx) {
      ctx.set_output(0, Type::tensor(ctx.dtype(7)));
      ctx.set_output(0, Type::tensor(ctx.dtype(7), matmul_dims(ctx, ctx.dims(0), ctx.dims(3))));
    }));
  }
};
const Registrations registrations;

}  // namespace

}  // namespace anvil::ir::schemas
