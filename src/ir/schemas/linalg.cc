// Schemas of the linear-algebra ops: Det and Einsum.
#include "ir/einsum.h"
#include "ir/schemas/common.h"

namespace anvil::ir::schemas {

namespace {

// Det: [*, M, M] -> [*].
void infer_det(InferContext& ctx) {
  ctx.set_output(0, Type::tensor(ctx.dtype(0)));
  const SymShape& x = ctx.dims(0);
  if (x.size() < 2 || (x[x.size() - 1].is_known() && x[x.size() - 2].is_known() && x[x.size() - 1] != x[x.size() - 2]))
    ctx.fail_input("input {} must be square matrices [*, M, M]", dims_str(x));
  ctx.set_output(0, Type::tensor(ctx.dtype(0), SymShape(x.begin(), x.end() - 2)));
}

// Einsum: each label's size from the inputs (ellipsis axes broadcast), the output's in its label order.
void infer_einsum(InferContext& ctx) {
  ctx.set_output(0, Type::tensor(ctx.dtype(0)));
  std::vector<size_t> ranks;
  for (size_t i = 0; i < ctx.num_inputs(); ++i) {
    if (i > 0 && ctx.dtype(i) != ctx.dtype(0))
      ctx.fail("input {} is {} but input 0 is {}", i, dtype_name(ctx.dtype(i)), dtype_name(ctx.dtype(0)));
    ranks.push_back(ctx.dims(i).size());
  }
  const EinsumSpec spec = parse_einsum(ctx.attr_string("equation"), ranks);
  std::vector<Dim> size(static_cast<size_t>(spec.num_labels), Dim::known(1));
  std::vector<bool> set(size.size(), false);
  for (size_t i = 0; i < ranks.size(); ++i)
    for (size_t a = 0; a < ranks[i]; ++a) {
      const auto l = static_cast<size_t>(spec.inputs[i][a]);
      const Dim& d = ctx.dims(i)[a];
      const bool broadcasts = spec.ellipsis_label[l];
      if (!set[l] || (broadcasts && size[l].is_known() && size[l].value == 1)) {
        size[l] = d;
        set[l] = true;
      } else if (d.is_known() && size[l].is_known() && d != size[l] && !(broadcasts && d.value == 1)) {
        ctx.fail_input("Einsum '{}': a label has sizes {} and {}", ctx.attr_string("equation"), size[l].value, d.value);
      } else if (!size[l].is_known() && d.is_known() && !(broadcasts && d.value == 1)) {
        size[l] = d;
      }
    }
  SymShape out;
  for (int l : spec.output) out.push_back(size[static_cast<size_t>(l)]);
  ctx.set_output(0, Type::tensor(ctx.dtype(0), out));
}

struct Registrations {
  Registrations() {
    auto& r = SchemaRegistry::global();
    r.add(OpSchema("Det").inputs({kFloats | kHalfs}).infer(infer_det));
    r.add(OpSchema("Einsum").required_attr("equation").infer(infer_einsum));
  }
};
const Registrations registrations;

}  // namespace

}  // namespace anvil::ir::schemas
