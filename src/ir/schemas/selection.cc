// Schemas of ops whose output sizes depend on the data: NonMaxSuppression
// and Unique (their kernels size the outputs at run time).
#include "ir/schemas/common.h"

namespace anvil::ir::schemas {

namespace {

struct Registrations {
  Registrations() {
    auto& r = SchemaRegistry::global();
    r.add(OpSchema("NonMaxSuppression").attr("center_point_box", int64_t{0}).infer([](InferContext& ctx) {
      ctx.set_output(0, Type::tensor(DType::kInt64, SymShape{Dim::unknown(), Dim::known(3)}));
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
