// Schemas of the detection ops (NonMaxSuppression, RoiAlign) and Unique;
// NonMaxSuppression's and Unique's outputs are sized by the data at run time.
#include "ir/schemas/common.h"

namespace anvil::ir::schemas {

namespace {

struct Registrations {
  Registrations() {
    auto& r = SchemaRegistry::global();
    r.add(OpSchema("NonMaxSuppression").attr("center_point_box", int64_t{0}).infer([](InferContext& ctx) {
      ctx.set_output(0, Type::tensor(DType::kInt64, SymShape{Dim::unknown(), Dim::known(3)}));
    }));
    // RoiAlign: [num_rois, C, output_height, output_width].
    r.add(OpSchema("RoiAlign").attr("output_height", int64_t{1}).attr("output_width", int64_t{1}).infer([](InferContext& ctx) {
      ctx.set_output(0, Type::tensor(ctx.dtype(0)));
      const SymShape &x = ctx.dims(0), &rois = ctx.dims(1), &batch = ctx.dims(2);
      if (x.size() != 4 || rois.size() != 2 || (rois[1].is_known() && rois[1].value != 4) || batch.size() != 1 ||
          (batch[0].is_known() && rois[0].is_known() && batch[0] != rois[0]))
        ctx.fail_input("X {} must be [N, C, H, W], rois {} [R, 4] and batch_indices {} [R]", dims_str(x), dims_str(rois),
                       dims_str(batch));
      ctx.set_output(0, Type::tensor(ctx.dtype(0), SymShape{rois[0], x[1], Dim::known(ctx.attr_int("output_height")),
                                                            Dim::known(ctx.attr_int("output_width"))}));
    }));
    r.add(OpSchema("Unique").attr("sorted", int64_t{1}).infer([](InferContext& ctx) {
      const Type& x = ctx.input(0);
      SymShape y(x.has_shape() ? x.rank() : 1, Dim::unknown());
      if (x.has_shape() && ctx.has_attr("axis")) {
        y = x.dims();
        y[ctx.axis(ctx.attr_int("axis"), x.rank())] = Dim::unknown();
      }
      ctx.set_output(0, x.has_shape() || !ctx.has_attr("axis") ? Type::tensor(x.dtype(), ctx.has_attr("axis") ? y : SymShape{Dim::unknown()})
                                                              : Type::tensor(x.dtype()));
      for (size_t o = 1; o < 4; ++o) ctx.set_output(o, Type::tensor(DType::kInt64, SymShape{Dim::unknown()}));
    }));
  }
};
const Registrations registrations;

}  // namespace

}  // namespace anvil::ir::schemas
