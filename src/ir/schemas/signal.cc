// Schemas of the signal ops: the window functions (a [size] tensor in
// output_datatype) and MelWeightMatrix ([dft_length / 2 + 1, num_mel_bins]).
#include "ir/schemas/common.h"

namespace anvil::ir::schemas {

namespace {

void infer_window(InferContext& ctx) {
  const DType dtype = dtype_from_onnx_code(ctx.attr_int("output_datatype"));
  ctx.set_output(0, Type::tensor(dtype, SymShape{Dim::unknown()}));
  if (dtype == DType::kUndefined || dtype == DType::kBool)
    ctx.fail("output_datatype {} is not a numeric type", ctx.attr_int("output_datatype"));
  const auto& size = ctx.values(0);
  if (!size || size->size() != 1) return;
  const SymInt& n = (*size)[0];
  if (n.is_number() && *n.number < 0) ctx.fail_input("size {} is negative", *n.number);
  ctx.set_output(0, Type::tensor(dtype, SymShape{n.as_dim()}));
}

void infer_mel_weight_matrix(InferContext& ctx) {
  const DType dtype = dtype_from_onnx_code(ctx.attr_int("output_datatype"));
  if (dtype == DType::kUndefined || dtype == DType::kBool || dtype == DType::kString)
    ctx.fail("output_datatype {} is not a numeric type", ctx.attr_int("output_datatype"));
  ctx.set_output(0, Type::tensor(dtype, SymShape{Dim::unknown(), Dim::unknown()}));
}

struct Registrations {
  Registrations() {
    auto& r = SchemaRegistry::global();
    r.add(OpSchema("MelWeightMatrix")
              .inputs({kInt32And64, kInt32And64, kInt32And64, kFloats | kHalfs, kFloats | kHalfs})
              .attr("output_datatype", int64_t{1})
              .infer(infer_mel_weight_matrix));
    for (const char* op : {"HannWindow", "HammingWindow", "BlackmanWindow"})
      r.add(OpSchema(op).inputs({kInt32And64}).attr("output_datatype", int64_t{1}).attr("periodic", int64_t{1}).infer(infer_window));
  }
};
const Registrations registrations;

}  // namespace

}  // namespace anvil::ir::schemas
