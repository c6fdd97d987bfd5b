// Helpers shared by the schema files (src/ir/schemas/*.cc).
#pragma once

#include "ir/dim_math.h"
#include "ir/schema.h"

namespace anvil::ir::schemas {

// Output `o` is input `i`'s type (its dtype alone when the rank is unknown).
inline void copy_type(InferContext& ctx, size_t i, size_t o = 0) {
  const Type& t = ctx.input(i);
  if (!t.is_tensor()) ctx.set_output(o, t);  // a sequence or optional passed on (Identity)
  else ctx.set_output(o, t.has_shape() ? Type::tensor(t.dtype(), t.dims()) : Type::tensor(t.dtype()));
}

inline InferFn same_as_input(size_t i) {
  return [i](InferContext& ctx) { copy_type(ctx, i); };
}

inline SymShape known_dims(const std::vector<int64_t>& v) {
  SymShape d;
  for (int64_t x : v) d.push_back(x >= 0 ? Dim::known(x) : Dim::unknown());
  return d;
}

// A rank-1 (or scalar) input's values as dims, when tracked.
inline std::optional<SymShape> values_as_dims(const InferContext& ctx, size_t i) {
  const auto& v = ctx.values(i);
  if (!v) return std::nullopt;
  SymShape d;
  for (const SymInt& x : *v) d.push_back(x.as_dim());
  return d;
}

// The axes of a reduction-like op: the attribute before `input_from`, the
// optional input at `input_index` from then on. nullopt: not known.
std::optional<std::vector<int64_t>> axes_of(const InferContext& ctx, int input_from, size_t input_index);

// numpy matmul's output dims (1-D operands gain, then lose, a dimension); checks the inner dims.
SymShape matmul_dims(const InferContext& ctx, SymShape a, SymShape b);

}  // namespace anvil::ir::schemas
