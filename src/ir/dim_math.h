// Arithmetic on symbolic dims, so that products of the batch and sequence
// sizes survive a Reshape: a symbolic dim is a monomial, a known factor times
// named symbols, written canonically ("batch*seq", "64*seq").
//
//   dim_mul(Dim::named("batch"), Dim::named("seq"))           // batch*seq
//   dim_div(Dim::named("batch*seq"), Dim::named("seq"))       // batch
//   dim_div(Dim::named("batch"), Dim::known(2))               // nullopt: not exact
#pragma once

#include <optional>

#include "ir/type.h"

namespace anvil::ir {

// a * b; unknown when either is unknown.
Dim dim_mul(const Dim& a, const Dim& b);
// a / b when the quotient is a monomial (exact); nullopt otherwise.
std::optional<Dim> dim_div(const Dim& a, const Dim& b);
// a + b and a - b: known when both are (a - a is 0 for a symbol too), unknown otherwise.
Dim dim_add(const Dim& a, const Dim& b);
Dim dim_sub(const Dim& a, const Dim& b);
// The product of dims (1 for none).
Dim dims_product(const SymShape& dims);
// min(s, n): the extent of x[:s] (start 0, step 1) along a dim of known size
// n, for a single-name symbol s: an opaque symbol "min(seq,512)" (what
// Hugging Face's position_ids[:, :seq] gives); known when s is; unknown
// for other symbols.
Dim dim_min(const Dim& s, int64_t n);
// Whether `m` is dim_min(s, n) for some n. Broadcasting s against it gives s:
// they are equal while s <= n, and past n only n = 1 broadcasts (to s).
bool is_min_of(const Dim& m, const Dim& s);

// ONNX Slice on one axis of size `dim`: the first index taken and how many,
// after ONNX's clamping (starts to [0, dim] or [0, dim-1] by the step's sign);
// safe for INT64_MIN/INT64_MAX starts, ends and steps. step != 0.
struct SliceRange {
  int64_t first = 0, length = 0;
};
SliceRange slice_range(int64_t dim, int64_t start, int64_t end, int64_t step);

}  // namespace anvil::ir
