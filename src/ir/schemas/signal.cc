// Schemas of the signal ops: the window functions (a [size] tensor in
// output_datatype), MelWeightMatrix ([dft_length / 2 + 1, num_mel_bins]), and
// DFT and STFT (the kernels size their outputs from the lengths given).
#include "ir/schemas/common.h"

namespace anvil::ir::schemas {

namespace {

void infer_window(InferContext& ctx) {
  const DType dtype = dtype_from_onnx_code(ctx.attr_int("output_datatype"));
  ctx.set_output(0, Type::tensor(dtype, SymShape{Dim::unknown()}));
  if (dtype == DType::kUndefined || dtype == DType::kBool)
    ctx.fail("output_datatype {} is not a numeric type", ctx.attr_int("output_datatype"));
  ctx.input(0);  // size is required: fails when omitted
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
    for (const char* op : {"DFT", "STFT"})
      r.add(OpSchema(op)
                .inputs(std::string(op) == "DFT"
                            ? std::vector<unsigned>{kFloats | kHalfs, kInt32And64, kInt32And64}
                            : std::vector<unsigned>{kFloats | kHalfs, kInt32And64, kFloats | kHalfs, kInt32And64})
                .attr("inverse", int64_t{0})
                .infer([](InferContext& ctx) {
        const Type& x = ctx.input(0);
        if (x.has_shape() && x.rank() < 2) ctx.fail_input("the signal {} needs a last axis of 1 or 2", dims_str(x.dims()));
        const bool stft = ctx.node().op_type == "STFT";
        ctx.set_output(0, x.has_shape() && !stft ? Type::tensor(x.dtype(), SymShape(x.dims().size(), Dim::unknown()))
                          : stft ? Type::tensor(x.dtype(), SymShape(4, Dim::unknown())) : Type::tensor(x.dtype()));
      }));
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
