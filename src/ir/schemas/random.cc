// Schemas of the random generators: RandomNormal/RandomUniform (shape and
// dtype attributes), their *Like forms and Bernoulli (the input's shape).
#include "ir/schemas/common.h"

namespace anvil::ir::schemas {

namespace {

void infer_random(InferContext& ctx) {
  const DType dtype = dtype_from_onnx_code(ctx.attr_int("dtype"));
  const std::vector<int64_t> shape = ctx.attr_ints("shape");
  for (int64_t d : shape)
    if (d < 0) ctx.fail("shape {} has a negative dimension", dims_str(known_dims(shape)));
  ctx.set_output(0, Type::tensor(dtype, known_dims(shape)));
}

// The input's shape, in `dtype` when given (its own otherwise).
void infer_random_like(InferContext& ctx) {
  const Type& x = ctx.input(0);
  const DType dtype = ctx.has_attr("dtype") ? dtype_from_onnx_code(ctx.attr_int("dtype")) : x.dtype();
  ctx.set_output(0, x.has_shape() ? Type::tensor(dtype, x.dims()) : Type::tensor(dtype));
}

struct Registrations {
  Registrations() {
    auto& r = SchemaRegistry::global();
    for (const char* op : {"RandomNormal", "RandomUniform"})
      r.add(OpSchema(op).attr("dtype", int64_t{1}).required_attr("shape").infer(infer_random));
    for (const char* op : {"RandomNormalLike", "RandomUniformLike", "Bernoulli"}) r.add(OpSchema(op).infer(infer_random_like));
    // Multinomial: [batch, sample_size] class indices in int32 (the default) or int64.
    r.add(OpSchema("Multinomial").attr("dtype", int64_t{6}).attr("sample_size", int64_t{1}).infer([](InferContext& ctx) {
      const DType dtype = dtype_from_onnx_code(ctx.attr_int("dtype"));
      if (dtype != DType::kInt32 && dtype != DType::kInt64) ctx.fail("dtype must be int32 or int64");
      const int64_t samples = ctx.attr_int("sample_size");
      if (samples < 1 || samples > (int64_t{1} << 30)) ctx.fail("sample_size {} must be positive", samples);
      const Type& x = ctx.input(0);
      ctx.set_output(0, x.has_shape() && x.rank() == 2 ? Type::tensor(dtype, SymShape{x.dims()[0], Dim::known(samples)})
                                                       : Type::tensor(dtype));
    }));
  }
};
const Registrations registrations;

}  // namespace

}  // namespace anvil::ir::schemas
