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
  }
};
const Registrations registrations;

}  // namespace

}  // namespace anvil::ir::schemas
