// Schemas of the ai.onnx.ml ops Anvil runs: LabelEncoder, ArrayFeatureExtractor, Binarizer.
#include "ir/schemas/common.h"

namespace anvil::ir::schemas {

namespace {

constexpr const char* kMl = "ai.onnx.ml";

// LabelEncoder's output type: its values' (values_strings, _int64s, _floats or _tensor).
DType label_encoder_output(const InferContext& ctx) {
  if (ctx.has_attr("values_strings")) return DType::kString;
  if (ctx.has_attr("values_int64s")) return DType::kInt64;
  if (ctx.has_attr("values_floats")) return DType::kFloat32;
  if (const Tensor* t = ctx.node().attrs.get_tensor("values_tensor")) return t->dtype();
  ctx.fail("has no values_strings, values_int64s, values_floats or values_tensor");
}

struct Registrations {
  Registrations() {
    auto& r = SchemaRegistry::global();
    r.add(OpSchema("LabelEncoder", kMl).infer([](InferContext& ctx) {
      const Type& x = ctx.input(0);
      const DType out = label_encoder_output(ctx);
      ctx.set_output(0, x.has_shape() ? Type::tensor(out, x.dims()) : Type::tensor(out));
    }));
    r.add(OpSchema("ArrayFeatureExtractor", kMl).infer([](InferContext& ctx) {
      ctx.set_output(0, Type::tensor(ctx.dtype(0)));
    }));
    r.add(OpSchema("Binarizer", kMl).infer(same_as_input(0)));
    // TreeEnsemble: [N, n_targets] in X's type.
    r.add(OpSchema("TreeEnsemble", kMl).infer([](InferContext& ctx) {
      const SymShape& x = ctx.dims(0);
      if (x.size() != 2) ctx.fail_input("X {} must be [N, features]", dims_str(x));
      ctx.set_output(0, Type::tensor(ctx.dtype(0), SymShape{x[0], Dim::known(ctx.attr_int("n_targets"))}));
    }));
  }
};
const Registrations registrations;

}  // namespace

}  // namespace anvil::ir::schemas
