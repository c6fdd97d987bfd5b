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

// A dtype attribute (0: absent); codes Anvil lacks are unsupported.
DType attr_dtype(InferContext& ctx, const char* name) {
  const int64_t code = ctx.attr_int(name);
  if (code == 0) return DType::kUndefined;
  const DType d = dtype_from_onnx_code(code);
  if (d == DType::kUndefined) ctx.fail_unsupported(fmt::format("{} {} is not a type Anvil supports", name, code));
  return d;
}

struct Registrations {
  Registrations() {
    auto& r = SchemaRegistry::global();
    // QuantizeLinear: the zero point's type, else output_dtype's (opset 21), else uint8.
    r.add(OpSchema("QuantizeLinear").attr("axis", int64_t{1}).attr("output_dtype", int64_t{0}).infer([](InferContext& ctx) {
      const DType attr = attr_dtype(ctx, "output_dtype");
      if (ctx.has_input(2) && attr != DType::kUndefined && attr != ctx.dtype(2))
        ctx.fail("output_dtype {} differs from the zero point's type {}", dtype_name(attr), dtype_name(ctx.dtype(2)));
      like_x(ctx, ctx.has_input(2) ? ctx.dtype(2) : attr != DType::kUndefined ? attr : DType::kUInt8);
    }));
    // DequantizeLinear: output_dtype's type (opset 23), else the scale's.
    r.add(OpSchema("DequantizeLinear").attr("axis", int64_t{1}).attr("output_dtype", int64_t{0}).infer([](InferContext& ctx) {
      const DType attr = attr_dtype(ctx, "output_dtype");
      like_x(ctx, attr != DType::kUndefined ? attr : ctx.dtype(1));
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
