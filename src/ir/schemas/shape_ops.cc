// Schemas of the shape and indexing ops. These also carry small integer
// values (a tensor's shape and what is computed from it) so that the
// Shape -> Gather -> Concat -> Reshape chains exporters emit give symbolic dims.
#include <algorithm>
#include <climits>

#include <fmt/ranges.h>

#include "core/checked.h"
#include "ir/schemas/common.h"

namespace anvil::ir::schemas {

std::optional<std::vector<int64_t>> axes_of(const InferContext& ctx, int input_from, size_t input_index) {
  if (ctx.opset() < input_from) return ctx.attr_ints("axes");
  if (!ctx.has_input(input_index)) return std::vector<int64_t>{};
  return ctx.known_values(input_index);
}

namespace {

// Longer shape tensors than this are not turned into ranks (their values are run-time data anyway).
constexpr int64_t kMaxInferredRank = 64;

void infer_shape(InferContext& ctx) {
  ctx.set_output(0, Type::tensor(DType::kInt64));
  const SymShape& x = ctx.dims(0);
  const auto rank = static_cast<int64_t>(x.size());
  auto clamp = [&](int64_t i) { return std::clamp(i < 0 ? i + rank : i, int64_t{0}, rank); };
  // start and end exist from opset 15.
  int64_t start = 0, end = rank;
  if (ctx.opset() >= 15) {
    start = clamp(ctx.attr_int("start"));
    end = ctx.has_attr("end") ? clamp(ctx.attr_int("end")) : rank;
  }
  end = std::max(start, end);
  ctx.set_output(0, Type::tensor(DType::kInt64, SymShape{Dim::known(end - start)}));
  SymValues v;
  for (int64_t i = start; i < end; ++i) v.push_back(SymInt::of(x[i]));
  ctx.set_output_values(0, std::move(v));
}

void infer_size(InferContext& ctx) {
  ctx.set_output(0, Type::tensor(DType::kInt64, SymShape{}));
  ctx.set_output_values(0, {SymInt::of(dims_product(ctx.dims(0)))});
}

// With every dim known: the element counts must agree (and the -1 must divide evenly).
void check_reshape_count(const InferContext& ctx, const SymShape& in, const SymShape& out, int minus_one) {
  const Dim numel = dims_product(in);
  if (!numel.is_known()) return;
  int64_t known = 1;
  bool zero = false, overflow = false;
  for (size_t i = 0; i < out.size(); ++i) {
    if (static_cast<int>(i) == minus_one) continue;
    if (!out[i].is_known()) return;
    zero |= out[i].value == 0;
    overflow = overflow || __builtin_mul_overflow(known, out[i].value, &known);
  }
  if (zero) known = 0;
  // A count past int64 is no tensor's: a file's target that wrapped around
  // must not pass for the input's count.
  const bool fits = !(overflow && !zero) &&
                    (minus_one >= 0 ? known != 0 && numel.value % known == 0 : known == numel.value);
  if (!fits) ctx.fail_input("cannot reshape {} ({} elements) to {}", dims_str(in), numel.value, dims_str(out));
}

// Reshape's target: 0 copies the input dim (unless allowzero), one -1 takes the rest.
void infer_reshape(InferContext& ctx) {
  ctx.set_output(0, Type::tensor(ctx.dtype(0)));
  const auto& target = ctx.values(1);
  if (!target) {
    const Type& s = ctx.input(1);
    // The rank is the shape's length (a declared dim from the file: bounded before it sizes anything).
    if (s.has_shape() && s.rank() == 1 && s.dims()[0].is_known() && s.dims()[0].value <= kMaxInferredRank)
      ctx.set_output(0, Type::tensor(ctx.dtype(0), SymShape(s.dims()[0].value, Dim::unknown())));
    return;
  }
  const bool allowzero = ctx.opset() >= 14 && ctx.attr_int("allowzero") != 0;
  const Type& xt = ctx.input(0);
  SymShape out;
  int minus_one = -1;
  for (size_t i = 0; i < target->size(); ++i) {
    const SymInt& t = (*target)[i];
    if (t.is_number() && *t.number == -1) {
      if (minus_one >= 0) ctx.fail("shape has more than one -1");
      minus_one = static_cast<int>(i);
      out.push_back(Dim::unknown());
    } else if (t.is_number() && *t.number == 0 && !allowzero) {
      if (xt.has_shape() && i >= xt.dims().size())
        ctx.fail("shape copies dimension {} (0) but the input {} has rank {}", i, dims_str(xt.dims()), xt.rank());
      out.push_back(xt.has_shape() ? xt.dims()[i] : Dim::unknown());
    } else if (t.is_number() && *t.number < -1) {
      ctx.fail("shape has a negative dimension {}", *t.number);
    } else {
      out.push_back(t.as_dim());
    }
  }
  if (minus_one >= 0 && allowzero)
    for (const SymInt& t : *target)
      if (t.is_number() && *t.number == 0) ctx.fail("shape has both 0 and -1 with allowzero=1");
  if (minus_one >= 0 && xt.has_shape()) {
    SymShape rest = out;
    rest.erase(rest.begin() + minus_one);
    if (auto d = dim_div(dims_product(xt.dims()), dims_product(rest))) out[minus_one] = *d;
  }
  if (xt.has_shape()) check_reshape_count(ctx, xt.dims(), out, minus_one);
  ctx.set_output(0, Type::tensor(ctx.dtype(0), out));
  if (ctx.forwarded_values(0) && out.size() <= 1) ctx.set_output_values(0, *ctx.forwarded_values(0));
}

void infer_flatten(InferContext& ctx) {
  ctx.set_output(0, Type::tensor(ctx.dtype(0)));
  const SymShape& x = ctx.dims(0);
  const auto rank = static_cast<int64_t>(x.size());
  int64_t axis = ctx.attr_int("axis");
  if (axis < -rank || axis > rank) ctx.fail("axis {} is out of range for rank {}", axis, rank);
  if (axis < 0) axis += rank;
  ctx.set_output(0, Type::tensor(ctx.dtype(0), SymShape{dims_product(SymShape(x.begin(), x.begin() + axis)),
                                                         dims_product(SymShape(x.begin() + axis, x.end()))}));
}

void infer_transpose(InferContext& ctx) {
  ctx.set_output(0, Type::tensor(ctx.dtype(0)));
  const SymShape& x = ctx.dims(0);
  std::vector<int64_t> perm = ctx.attr_ints("perm");
  if (perm.empty())
    for (int64_t i = static_cast<int64_t>(x.size()) - 1; i >= 0; --i) perm.push_back(i);
  if (perm.size() != x.size()) ctx.fail("perm has {} entries for rank {}", perm.size(), x.size());
  std::vector<bool> seen(x.size(), false);
  SymShape out;
  for (int64_t p : perm) {
    if (p < 0 || p >= static_cast<int64_t>(x.size()) || seen[static_cast<size_t>(p)])
      ctx.fail("perm {} is not a permutation of 0..{}", dims_str(known_dims(perm)), static_cast<int64_t>(x.size()) - 1);
    seen[static_cast<size_t>(p)] = true;
    out.push_back(x[static_cast<size_t>(p)]);
  }
  ctx.set_output(0, Type::tensor(ctx.dtype(0), out));
}

void infer_unsqueeze(InferContext& ctx) {
  ctx.set_output(0, Type::tensor(ctx.dtype(0)));
  if (ctx.opset() < 13 ? !ctx.has_attr("axes") : !ctx.has_input(1)) ctx.fail("axes are required");
  auto axes = axes_of(ctx, 13, 1);
  if (!axes) return;
  const SymShape& x = ctx.dims(0);
  const auto rank = static_cast<int64_t>(x.size() + axes->size());
  std::vector<bool> inserted(static_cast<size_t>(rank), false);
  for (int64_t a : *axes) {
    int64_t n = ctx.axis(a, rank);
    if (inserted[n]) ctx.fail("axis {} is repeated", a);
    inserted[n] = true;
  }
  SymShape out;
  size_t k = 0;
  for (int64_t i = 0; i < rank; ++i) out.push_back(inserted[i] ? Dim::known(1) : x[k++]);
  ctx.set_output(0, Type::tensor(ctx.dtype(0), out));
  if (ctx.forwarded_values(0) && out.size() <= 1) ctx.set_output_values(0, *ctx.forwarded_values(0));
}

void infer_squeeze(InferContext& ctx) {
  ctx.set_output(0, Type::tensor(ctx.dtype(0)));
  auto axes = axes_of(ctx, 13, 1);
  if (!axes) return;
  const SymShape& x = ctx.dims(0);
  const auto rank = static_cast<int64_t>(x.size());
  std::vector<bool> drop(x.size(), false);
  for (int64_t a : *axes) {
    const int64_t n = ctx.axis(a, rank);
    if (drop[n]) ctx.fail("axis {} is repeated", a);
    drop[n] = true;
  }
  SymShape out;
  for (size_t i = 0; i < x.size(); ++i) {
    if (axes->empty() && x[i].is_known() && x[i].value == 1) continue;
    if (axes->empty() && !x[i].is_known()) return;  // which dims are 1 is known only at run time
    if (drop[i] && x[i].is_known() && x[i].value != 1) ctx.fail_input("cannot squeeze axis {} of size {}", i, x[i].value);
    if (!drop[i]) out.push_back(x[i]);
  }
  ctx.set_output(0, Type::tensor(ctx.dtype(0), out));
  if (ctx.forwarded_values(0) && out.size() <= 1) ctx.set_output_values(0, *ctx.forwarded_values(0));
}

void infer_concat(InferContext& ctx) {
  ctx.set_output(0, Type::tensor(ctx.dtype(0)));
  SymShape out = ctx.dims(0);
  const auto rank = static_cast<int64_t>(out.size());
  const int64_t axis = ctx.axis(ctx.attr_int("axis"), rank);
  for (size_t i = 1; i < ctx.num_inputs(); ++i) {
    if (ctx.dtype(i) != ctx.dtype(0))
      ctx.fail("input {} is {} but input 0 is {}", i, dtype_name(ctx.dtype(i)), dtype_name(ctx.dtype(0)));
    const SymShape& s = ctx.dims(i);
    if (static_cast<int64_t>(s.size()) != rank) ctx.fail_input("input {} has rank {}, expected {}", i, s.size(), rank);
    out[axis] = dim_add(out[axis], s[axis]);
    for (int64_t k = 0; k < rank; ++k) {
      if (k == axis) continue;
      if (out[k].is_known() && s[k].is_known() && out[k] != s[k])
        ctx.fail_input("input {} has shape {}, which differs from {} off axis {}", i, dims_str(s), dims_str(ctx.dims(0)),
                       axis);
      if (!out[k].is_known()) out[k] = s[k].is_known() ? s[k] : out[k];
    }
  }
  ctx.set_output(0, Type::tensor(ctx.dtype(0), out));
  SymValues values;
  for (size_t i = 0; i < ctx.num_inputs(); ++i) {
    const auto& part = ctx.forwarded_values(i);
    if (!part || values.size() + part->size() > kMaxTrackedValues) return;
    values.insert(values.end(), part->begin(), part->end());
  }
  if (rank == 1) ctx.set_output_values(0, std::move(values));
}

void infer_split(InferContext& ctx) {
  for (size_t o = 0; o < ctx.num_outputs(); ++o) ctx.set_output(o, Type::tensor(ctx.dtype(0)));
  const SymShape& x = ctx.dims(0);
  const int64_t axis = ctx.axis(ctx.attr_int("axis"), static_cast<int64_t>(x.size()));
  const size_t n = ctx.num_outputs();
  if (n == 0) ctx.fail("needs at least one output");
  std::optional<std::vector<int64_t>> sizes;
  bool given = false;  // sizes given, though perhaps not known here
  if (ctx.opset() >= 13 && ctx.has_input(1)) {
    given = true;
    sizes = ctx.known_values(1);
  } else if (ctx.opset() < 13 && ctx.has_attr("split")) {
    given = true;
    sizes = ctx.attr_ints("split");
  }
  const Dim& dim = x[axis];
  if (sizes) {
    if (sizes->size() != n) ctx.fail("split has {} entries for {} outputs", sizes->size(), n);
    int64_t total = 0;
    for (int64_t s : *sizes) {
      if (s < 0 || __builtin_add_overflow(total, s, &total)) ctx.fail("split {} has a negative size", dims_str(known_dims(*sizes)));
    }
    if (dim.is_known() && total != dim.value)
      ctx.fail_input("split sums to {} but axis {} of {} has size {}", total, axis, dims_str(x), dim.value);
  } else if (!given && dim.is_known()) {
    // Equal parts; from opset 18 (num_outputs) parts of ceil(dim / n) until the
    // axis runs out, so the last ones may be smaller or empty (ONNX's reference:
    // 5 into 4 gives 2, 2, 1, 0).
    const auto parts = static_cast<int64_t>(n);
    if (ctx.opset() < 18 && dim.value % parts != 0)
      ctx.fail_input("axis {} of size {} cannot be split into {} equal parts", axis, dim.value, n);
    const int64_t chunk = dim.value / parts + (dim.value % parts != 0);
    sizes = std::vector<int64_t>(n);
    for (int64_t i = 0; i < parts; ++i) (*sizes)[static_cast<size_t>(i)] = std::clamp<int64_t>(dim.value - i * chunk, 0, chunk);
  }
  for (size_t o = 0; o < n; ++o) {
    SymShape out = x;
    if (sizes) out[axis] = Dim::known((*sizes)[o]);
    else if (!given && ctx.opset() < 18) out[axis] = dim_div(dim, Dim::known(static_cast<int64_t>(n))).value_or(Dim::unknown());
    else out[axis] = Dim::unknown();
    ctx.set_output(o, Type::tensor(ctx.dtype(0), out));
  }
}

// Slice's output extent on one axis, when start/end/step and the dim allow it.
Dim slice_extent(const Dim& dim, int64_t start, int64_t end, int64_t step) {
  if (!dim.is_known()) {
    // x[0:] and x[:INT_MAX] with step 1 keep a symbolic dim whole.
    if (step == 1 && start == 0 && end >= INT32_MAX) return dim;
    return Dim::unknown();
  }
  return Dim::known(slice_range(dim.value, start, end, step).length);
}

// x[:s] along an axis, s a symbolic end (a sequence length read from
// another input), start 0 and step 1: s where the axis is s, min(s, n)
// where it has a known size n. Fills `out` when every sliced axis is either
// that or a known slice of a known dim.
bool symbolic_prefix(InferContext& ctx, const std::vector<int64_t>& starts, std::vector<int64_t> axes,
                     const std::vector<int64_t>& steps, SymShape& out) {
  const auto& ends = ctx.values(2);
  if (!ends || ends->size() != starts.size() || (!steps.empty() && steps.size() != starts.size())) return false;
  if (axes.empty())
    for (size_t i = 0; i < starts.size(); ++i) axes.push_back(static_cast<int64_t>(i));
  if (axes.size() != starts.size()) return false;
  const auto rank = static_cast<int64_t>(out.size());
  std::vector<bool> seen(out.size(), false);
  for (size_t i = 0; i < axes.size(); ++i) {
    const int64_t step = steps.empty() ? 1 : steps[i], a = ctx.axis(axes[i], rank);
    if (step == 0 || seen[a]) return false;
    seen[a] = true;
    const SymInt& end = (*ends)[i];
    if (end.is_number()) {
      out[a] = slice_extent(out[a], starts[i], *end.number, step);
    } else {
      if (starts[i] != 0 || step != 1) return false;
      out[a] = out[a] == end.dim ? end.dim : out[a].is_known() ? dim_min(end.dim, out[a].value) : Dim::unknown();
    }
  }
  return true;
}

void infer_slice(InferContext& ctx) {
  ctx.set_output(0, Type::tensor(ctx.dtype(0)));
  const SymShape& x = ctx.dims(0);
  const auto rank = static_cast<int64_t>(x.size());
  std::optional<std::vector<int64_t>> starts, ends, axes, steps;
  if (ctx.opset() < 10) {
    starts = ctx.attr_ints("starts");
    ends = ctx.attr_ints("ends");
    axes = ctx.attr_ints("axes");
  } else {
    if (!ctx.has_input(1) || !ctx.has_input(2)) ctx.fail("needs its inputs 'starts' and 'ends'");
    starts = ctx.known_values(1);
    ends = ctx.known_values(2);
    axes = ctx.has_input(3) ? ctx.known_values(3) : std::vector<int64_t>{};
    steps = ctx.has_input(4) ? ctx.known_values(4) : std::vector<int64_t>{};
  }
  SymShape out = x;
  if (ctx.opset() >= 10 && !ends && starts && axes && steps && symbolic_prefix(ctx, *starts, *axes, *steps, out)) {
    ctx.set_output(0, Type::tensor(ctx.dtype(0), out));
    return;
  }
  if (!starts || !ends || !axes || (ctx.opset() >= 10 && !steps)) {
    if (axes && !axes->empty()) {  // only the sliced axes are unknown
      for (int64_t a : *axes) out[ctx.axis(a, rank)] = Dim::unknown();
      ctx.set_output(0, Type::tensor(ctx.dtype(0), out));
    }
    return;
  }
  if (axes->empty())
    for (size_t i = 0; i < starts->size(); ++i) axes->push_back(static_cast<int64_t>(i));
  if (starts->size() != ends->size() || axes->size() != starts->size() || (steps && !steps->empty() && steps->size() != starts->size()))
    ctx.fail("starts, ends, axes and steps have {}, {}, {} and {} entries", starts->size(), ends->size(), axes->size(),
             steps && !steps->empty() ? steps->size() : starts->size());
  std::vector<bool> seen(x.size(), false);
  for (size_t i = 0; i < axes->size(); ++i) {
    int64_t step = steps && !steps->empty() ? (*steps)[i] : 1;
    if (step == 0) ctx.fail("step {} is 0", i);
    int64_t a = ctx.axis((*axes)[i], rank);
    if (seen[a]) ctx.fail("axis {} is repeated", (*axes)[i]);
    seen[a] = true;
    out[a] = slice_extent(x[a], (*starts)[i], (*ends)[i], step);
  }
  ctx.set_output(0, Type::tensor(ctx.dtype(0), out));
  // Slicing a shape value.
  const auto& v = ctx.forwarded_values(0);
  if (v && rank == 1 && (!steps || steps->empty() || (*steps)[0] == 1) && out[0].is_known()) {
    int64_t n = static_cast<int64_t>(v->size()), s = (*starts)[0];
    if (s < 0) s += n;
    s = std::clamp<int64_t>(s, 0, n);
    // The tracked values and the inferred extent agree unless the model lies about a type: check anyway.
    if (out[0].value <= n - s) ctx.set_output_values(0, SymValues(v->begin() + s, v->begin() + s + out[0].value));
  }
}

void infer_gather(InferContext& ctx) {
  ctx.set_output(0, Type::tensor(ctx.dtype(0)));
  const SymShape& data = ctx.dims(0);
  const SymShape& indices = ctx.dims(1);
  const auto rank = static_cast<int64_t>(data.size());
  if (rank == 0) ctx.fail_input("data must have rank >= 1");
  const int64_t axis = ctx.axis(ctx.attr_int("axis"), rank);
  SymShape out(data.begin(), data.begin() + axis);
  out.insert(out.end(), indices.begin(), indices.end());
  out.insert(out.end(), data.begin() + axis + 1, data.end());
  ctx.set_output(0, Type::tensor(ctx.dtype(0), out));
  const auto& v = ctx.forwarded_values(0);
  auto idx = numbers_of(ctx.forwarded_values(1));
  if (v && idx && rank == 1) {
    SymValues picked;
    for (int64_t i : *idx) {
      int64_t n = static_cast<int64_t>(v->size());
      if (i < -n || i >= n) ctx.fail_input("index {} is out of range for {} elements", i, n);
      picked.push_back((*v)[static_cast<size_t>(i < 0 ? i + n : i)]);
    }
    ctx.set_output_values(0, std::move(picked));
  }
}

// GatherElements: the output has the indices' shape, which fits in the data's off the axis.
void infer_gather_elements(InferContext& ctx) {
  ctx.set_output(0, Type::tensor(ctx.dtype(0)));
  const SymShape &data = ctx.dims(0), &idx = ctx.dims(1);
  if (data.empty() || idx.size() != data.size())
    ctx.fail_input("indices {} must have the rank of data {}", dims_str(idx), dims_str(data));
  const int64_t axis = ctx.axis(ctx.attr_int("axis"), static_cast<int64_t>(data.size()));
  for (size_t d = 0; d < data.size(); ++d)
    if (static_cast<int64_t>(d) != axis && idx[d].is_known() && data[d].is_known() && idx[d].value > data[d].value)
      ctx.fail_input("indices {} exceed data {} on axis {}", dims_str(idx), dims_str(data), d);
  ctx.set_output(0, Type::tensor(ctx.dtype(0), idx));
}

void check_scatter_reduction(const InferContext& ctx) {
  const std::string r = ctx.attr_string("reduction");
  if (r != "none" && r != "add" && r != "mul" && r != "max" && r != "min")
    ctx.fail("reduction '{}' is not none, add, mul, max or min", r);
}

// GatherND: indices [..., k] address slices data[b + k:] (b = batch_dims leading axes shared).
void infer_gather_nd(InferContext& ctx) {
  ctx.set_output(0, Type::tensor(ctx.dtype(0)));
  const SymShape &data = ctx.dims(0), &idx = ctx.dims(1);
  const int64_t b = ctx.attr_int("batch_dims");
  const auto r = static_cast<int64_t>(data.size()), q = static_cast<int64_t>(idx.size());
  if (b < 0 || q < 1 || b >= std::min(r, q))
    ctx.fail_input("batch_dims {} does not fit data {} and indices {}", b, dims_str(data), dims_str(idx));
  if (!idx.back().is_known()) return;
  const int64_t k = idx.back().value;
  if (k < 1 || k > r - b) ctx.fail_input("index tuples of {} entries do not fit data {}", k, dims_str(data));
  for (int64_t i = 0; i < b; ++i)
    if (data[i].is_known() && idx[i].is_known() && data[i] != idx[i])
      ctx.fail_input("batch dimension {} of data {} and indices {} differ", i, dims_str(data), dims_str(idx));
  SymShape out(idx.begin(), idx.end() - 1);
  out.insert(out.end(), data.begin() + b + k, data.end());
  ctx.set_output(0, Type::tensor(ctx.dtype(0), out));
}

// The updates of a scatter are of the data's type (ONNX's T for both): the
// kernels read them as that type.
void check_updates_type(InferContext& ctx) {
  if (ctx.dtype(2) != ctx.dtype(0))
    ctx.fail_input("updates are {} but the data {}", dtype_name(ctx.dtype(2)), dtype_name(ctx.dtype(0)));
}

// ScatterND: updates are indices[:-1] + data[k:]; the output is like the data.
void infer_scatter_nd(InferContext& ctx) {
  check_scatter_reduction(ctx);
  copy_type(ctx, 0);
  check_updates_type(ctx);
  const SymShape &data = ctx.dims(0), &idx = ctx.dims(1), &upd = ctx.dims(2);
  if (idx.empty()) ctx.fail_input("indices must have rank >= 1 (index tuples on the last axis), got a scalar");
  if (!idx.back().is_known()) return;
  const int64_t k = idx.back().value;
  if (k < 1 || k > static_cast<int64_t>(data.size()))
    ctx.fail_input("index tuples of {} entries do not fit data {}", k, dims_str(data));
  SymShape expect(idx.begin(), idx.end() - 1);
  expect.insert(expect.end(), data.begin() + k, data.end());
  bool fits = upd.size() == expect.size();
  for (size_t i = 0; fits && i < upd.size(); ++i) fits = !upd[i].is_known() || !expect[i].is_known() || upd[i] == expect[i];
  if (!fits) ctx.fail_input("updates {} must be {} for data {} and indices {}", dims_str(upd), dims_str(expect),
                            dims_str(data), dims_str(idx));
}

// ScatterElements (and Scatter): indices and updates of one shape, of the data's rank.
void infer_scatter_elements(InferContext& ctx) {
  check_scatter_reduction(ctx);
  copy_type(ctx, 0);
  check_updates_type(ctx);
  const SymShape &data = ctx.dims(0), &idx = ctx.dims(1), &upd = ctx.dims(2);
  ctx.axis(ctx.attr_int("axis"), static_cast<int64_t>(data.size()));
  bool fits = idx.size() == data.size() && upd.size() == idx.size();
  for (size_t i = 0; fits && i < idx.size(); ++i) fits = !idx[i].is_known() || !upd[i].is_known() || idx[i] == upd[i];
  if (!fits)
    ctx.fail_input("indices {} and updates {} must have one shape, of data {}'s rank", dims_str(idx), dims_str(upd),
                   dims_str(data));
}

// OneHot: the indices' shape with `depth` inserted at `axis`, typed like `values`.
void infer_one_hot(InferContext& ctx) {
  ctx.set_output(0, Type::tensor(ctx.dtype(2)));
  const SymShape& idx = ctx.dims(0);
  const int64_t axis = ctx.axis(ctx.attr_int("axis"), static_cast<int64_t>(idx.size()) + 1);
  const SymShape& values = ctx.dims(2);
  if (dims_product(values).is_known() && dims_product(values).value != 2)
    ctx.fail_input("values {} must hold two elements (off, on)", dims_str(values));
  auto depth = ctx.known_values(1);  // integer depths; a floating-point one is read by the kernel
  if (!depth || depth->size() != 1) return;
  if ((*depth)[0] < 1) ctx.fail_input("depth {} is not a positive size", (*depth)[0]);
  SymShape out = idx;
  out.insert(out.begin() + axis, Dim::known((*depth)[0]));
  ctx.set_output(0, Type::tensor(ctx.dtype(2), out));
}

// EyeLike: the input's 2-D shape, in `dtype` (default: the input's).
void infer_eye_like(InferContext& ctx) {
  const DType dtype = ctx.has_attr("dtype") ? dtype_from_onnx_code(ctx.attr_int("dtype")) : ctx.dtype(0);
  ctx.set_output(0, Type::tensor(dtype));
  const SymShape& x = ctx.dims(0);
  if (x.size() != 2) ctx.fail_input("input must be 2-D, got {}", dims_str(x));
  ctx.set_output(0, Type::tensor(dtype, x));
}

void infer_expand(InferContext& ctx) {
  ctx.set_output(0, Type::tensor(ctx.dtype(0)));
  if (auto v = ctx.values(1))
    for (const SymInt& d : *v)
      if (d.is_number() && *d.number < 0) ctx.fail_input("shape has a negative dimension {}", *d.number);
  auto shape = values_as_dims(ctx, 1);
  if (!shape) return;
  // Bidirectional: a 1 in `shape` keeps the input's size.
  ctx.set_output(0, Type::tensor(ctx.dtype(0), broadcast(ctx, ctx.dims(0), *shape)));
}

void infer_tile(InferContext& ctx) {
  ctx.set_output(0, Type::tensor(ctx.dtype(0)));
  const SymShape& x = ctx.dims(0);
  auto repeats = ctx.known_values(1);
  if (!repeats) return;
  if (repeats->size() != x.size())
    ctx.fail_input("repeats has {} values for an input of rank {}", repeats->size(), x.size());
  SymShape out;
  for (size_t i = 0; i < x.size(); ++i) {
    const int64_t r = (*repeats)[i];
    if (r < 0) ctx.fail_input("repeats {} has a negative value", dims_str(known_dims(*repeats)));
    int64_t size;
    if (x[i].is_known() && __builtin_mul_overflow(x[i].value, r, &size))
      ctx.fail_input("tiling axis {} of {} by {} overflows int64", i, dims_str(x), r);
    out.push_back(dim_mul(x[i], Dim::known(r)));
  }
  ctx.set_output(0, Type::tensor(ctx.dtype(0), out));
}

void infer_constant_of_shape(InferContext& ctx) {
  const Tensor* value = ctx.node().attrs.get_tensor("value");
  const DType dtype = value ? value->dtype() : DType::kFloat32;
  // (a fuzzed string value was copied into the kernel's 8 bytes)
  if (dtype == DType::kString) ctx.fail("value is a string tensor; ONNX's ConstantOfShape takes numbers and bools");
  ctx.set_output(0, Type::tensor(dtype));
  if (auto v = ctx.values(0))
    for (const SymInt& d : *v)
      if (d.is_number() && *d.number < 0) ctx.fail_input("shape {} has a negative dimension", *d.number);
  auto shape = values_as_dims(ctx, 0);
  if (!shape) return;
  ctx.set_output(0, Type::tensor(dtype, *shape));
  // A short integer vector of one value is a shape value (PyTorch's expand exports one).
  if (value && value->numel() == 1 && shape->size() == 1 && (*shape)[0].is_known() &&
      (*shape)[0].value <= static_cast<int64_t>(kMaxTrackedValues))
    if (auto one = values_of(*value)) ctx.set_output_values(0, SymValues(static_cast<size_t>((*shape)[0].value), (*one)[0]));
}

// Range(start, limit, delta): its length when known; `limit` itself for the common 0..n step 1.
void infer_range(InferContext& ctx) {
  ctx.set_output(0, Type::tensor(ctx.dtype(0), SymShape{Dim::unknown()}));
  const auto &start = ctx.values(0), &limit = ctx.values(1), &delta = ctx.values(2);
  if (!start || !limit || !delta || start->size() != 1 || limit->size() != 1 || delta->size() != 1) return;
  const SymInt &s = (*start)[0], &l = (*limit)[0], &d = (*delta)[0];
  Dim n = Dim::unknown();
  if (s.is_number() && l.is_number() && d.is_number() && *d.number != 0) {
    // ceil((limit - start) / delta), in 128 bits: the operands come from the file.
    __int128 span = static_cast<__int128>(*l.number) - *s.number, step = *d.number;
    __int128 len = span / step + (span % step != 0 && ((span > 0) == (step > 0)) ? 1 : 0);
    if (len > INT64_MAX) ctx.fail_input("Range has more than 2^63 elements");
    n = Dim::known(len > 0 ? static_cast<int64_t>(len) : 0);
  } else if (s.is_number() && *s.number == 0 && d.is_number() && *d.number == 1) {
    n = l.as_dim();
  }
  ctx.set_output(0, Type::tensor(ctx.dtype(0), SymShape{n}));
}

void infer_constant(InferContext& ctx) {
  if (const Tensor* t = ctx.node().attrs.get_tensor("value")) {
    ctx.set_output(0, Type::tensor(t->dtype(), t->shape()));
    if (auto v = values_of(*t)) ctx.set_output_values(0, std::move(*v));
    return;
  }
  if (ctx.has_attr("value_int")) ctx.set_output(0, Type::tensor(DType::kInt64, SymShape{}));
  else if (ctx.has_attr("value_ints")) ctx.set_output(0, Type::tensor(DType::kInt64, known_dims({static_cast<int64_t>(ctx.attr_ints("value_ints").size())})));
  else if (ctx.has_attr("value_float")) ctx.set_output(0, Type::tensor(DType::kFloat32, SymShape{}));
  else if (ctx.has_attr("value_floats")) ctx.set_output(0, Type::tensor(DType::kFloat32, known_dims({static_cast<int64_t>(ctx.node().attrs.get_floats("value_floats").size())})));
}

void infer_pad(InferContext& ctx) {
  ctx.set_output(0, Type::tensor(ctx.dtype(0)));
  const std::string mode = ctx.attr_string("mode");
  const SymShape& x = ctx.dims(0);
  auto pads = ctx.opset() < 11 ? std::optional<std::vector<int64_t>>(ctx.attr_ints("pads")) : ctx.known_values(1);
  if (!pads) return;
  std::vector<int64_t> axes;
  if (ctx.opset() >= 18 && ctx.has_input(3)) {
    auto a = ctx.known_values(3);
    if (!a) return;
    axes = *a;
  } else {
    for (size_t i = 0; i < x.size(); ++i) axes.push_back(static_cast<int64_t>(i));
  }
  if (pads->size() != 2 * axes.size()) ctx.fail("pads has {} entries for {} axes", pads->size(), axes.size());
  SymShape out = x;
  for (size_t k = 0; k < axes.size(); ++k) {
    int64_t a = ctx.axis(axes[k], static_cast<int64_t>(x.size()));
    int64_t total;
    if (__builtin_add_overflow((*pads)[k], (*pads)[k + axes.size()], &total)) ctx.fail("pads overflow int64");
    if (!x[a].is_known()) {
      out[a] = total >= 0 ? dim_add(out[a], Dim::known(total)) : dim_sub(out[a], Dim::known(-total));
      continue;
    }
    const __int128 size = static_cast<__int128>(x[a].value) + total;
    if (size < 0) ctx.fail_input("pads make axis {} of {} negative", a, dims_str(x));
    if (size > INT64_MAX) ctx.fail_input("pads make axis {} of {} larger than int64", a, dims_str(x));
    if (mode != "constant" && x[a].value == 0 && size != 0)
      ctx.fail_input("{} padding of an empty axis {} of {}", mode, a, dims_str(x));
    out[a] = Dim::known(static_cast<int64_t>(size));
  }
  ctx.set_output(0, Type::tensor(ctx.dtype(0), out));
}

void infer_channel_shuffle(InferContext& ctx) {
  copy_type(ctx, 0);
  const int64_t group = ctx.attr_int("group");
  if (group < 1) ctx.fail("group {} must be at least 1", group);
  const SymShape& x = ctx.dims(0);
  if (x.size() < 3) ctx.fail_input("X {} must be [N, C, D1, ...]", dims_str(x));
  if (x[1].is_known() && x[1].value % group != 0)
    ctx.fail_input("X {} has {} channels, not a multiple of the group {}", dims_str(x), x[1].value, group);
}

// anvil.TokensToImage: X [N, T..., C] -> [N, C, spatial...], the positions
// T... (flattened) laid out as the image's spatial dims.
void infer_tokens_to_image(InferContext& ctx) {
  if (ctx.num_inputs() != 1) ctx.fail("takes one input, got {}", ctx.num_inputs());
  const SymShape& x = ctx.dims(0);
  if (x.size() < 3) ctx.fail_input("X {} must be [N, positions..., C]", dims_str(x));
  const std::vector<int64_t> spatial = ctx.attr_ints("spatial");
  if (spatial.empty() || spatial.size() > 3) ctx.fail("spatial has {} dims; 1 to 3 are supported", spatial.size());
  int64_t image = 1, tokens = 1;
  bool tokens_known = true;
  for (int64_t d : spatial) {
    const std::optional<int64_t> p = d >= 1 ? mul_overflow_free(image, d) : std::nullopt;
    if (!p) ctx.fail("spatial dims {} must be positive, with a product that fits int64", fmt::join(spatial, "x"));
    image = *p;
  }
  for (size_t a = 1; a + 1 < x.size() && tokens_known; ++a) {
    tokens_known = x[a].is_known();
    const std::optional<int64_t> p = tokens_known ? mul_overflow_free(tokens, x[a].value) : std::optional<int64_t>(0);
    if (!p) ctx.fail_input("X {} has more positions than int64 counts", dims_str(x));
    tokens = *p;
  }
  if (tokens_known && tokens != image)
    ctx.fail_input("X {} has {} positions, the image {} holds {}", dims_str(x), tokens, fmt::join(spatial, "x"), image);
  SymShape out{x[0], x.back()};
  for (int64_t d : spatial) out.push_back(Dim::known(d));
  ctx.set_output(0, Type::tensor(ctx.dtype(0), out));
}

// anvil.ImageToTokens: X [N, C, S...] -> [N, S1 x S2 x ..., C].
void infer_image_to_tokens(InferContext& ctx) {
  if (ctx.num_inputs() != 1) ctx.fail("takes one input, got {}", ctx.num_inputs());
  const SymShape& x = ctx.dims(0);
  if (x.size() < 3 || x.size() > 5) ctx.fail_input("X {} must be [N, C, S...] with 1 to 3 spatial dims", dims_str(x));
  Dim positions = x[2];
  for (size_t a = 3; a < x.size(); ++a) positions = dim_mul(positions, x[a]);
  ctx.set_output(0, Type::tensor(ctx.dtype(0), SymShape{x[0], positions, x[1]}));
}

void infer_depth_space(InferContext& ctx) {
  ctx.set_output(0, Type::tensor(ctx.dtype(0)));
  const SymShape& x = ctx.dims(0);
  if (x.size() != 4) ctx.fail_input("input must be 4-D, got {}", dims_str(x));
  const int64_t block = ctx.attr_int("blocksize");
  if (block < 1 || block > INT32_MAX) ctx.fail("blocksize {} is out of range", block);
  const Dim b = Dim::known(block), b2 = Dim::known(block * block);
  const bool to_space = ctx.node().op_type == "DepthToSpace";
  if (to_space && x[1].is_known() && x[1].value % (block * block) != 0)
    ctx.fail_input("channels {} are not a multiple of blocksize^2 = {}", x[1].value, block * block);
  if (!to_space && ((x[2].is_known() && x[2].value % block != 0) || (x[3].is_known() && x[3].value % block != 0)))
    ctx.fail_input("spatial size {}x{} is not a multiple of blocksize {}", x[2].str(), x[3].str(), block);
  SymShape out = x;
  if (to_space) {
    out[1] = dim_div(x[1], b2).value_or(Dim::unknown());
    out[2] = dim_mul(x[2], b);
    out[3] = dim_mul(x[3], b);
  } else {
    out[1] = dim_mul(x[1], b2);
    out[2] = dim_div(x[2], b).value_or(Dim::unknown());
    out[3] = dim_div(x[3], b).value_or(Dim::unknown());
  }
  ctx.set_output(0, Type::tensor(ctx.dtype(0), out));
}

// CenterCropPad: the input with the `axes` (all without the attribute) cropped
// or zero-padded, centred, to the sizes in `shape`.
void infer_center_crop_pad(InferContext& ctx) {
  const Type& x = ctx.input(0);
  ctx.set_output(0, Type::tensor(x.dtype()));
  if (!x.has_shape()) return;
  const SymShape& dims = x.dims();
  const auto rank = static_cast<int64_t>(dims.size());
  std::vector<int64_t> axes = ctx.attr_ints("axes");
  if (!ctx.has_attr("axes"))
    for (int64_t a = 0; a < rank; ++a) axes.push_back(a);
  std::vector<bool> seen(dims.size(), false);
  for (int64_t& a : axes) {
    a = ctx.axis(a, rank);
    if (seen[static_cast<size_t>(a)]) ctx.fail("axes repeat axis {}", a);
    seen[static_cast<size_t>(a)] = true;
  }
  const auto shape = values_as_dims(ctx, 1);
  if (!shape) {
    ctx.set_output(0, Type::tensor(x.dtype(), SymShape(dims.size(), Dim::unknown())));
    return;
  }
  if (shape->size() != axes.size())
    ctx.fail_input("shape {} needs one size per axis ({})", dims_str(*shape), axes.size());
  SymShape out = dims;
  for (size_t i = 0; i < axes.size(); ++i) {
    if ((*shape)[i].is_known() && (*shape)[i].value < 0) ctx.fail_input("shape {} has a negative size", dims_str(*shape));
    out[static_cast<size_t>(axes[i])] = (*shape)[i];
  }
  ctx.set_output(0, Type::tensor(x.dtype(), out));
}

struct Registrations {
  Registrations() {
    auto& r = SchemaRegistry::global();
    r.add(OpSchema("Shape").attr("start", int64_t{0}).infer(infer_shape));
    r.add(OpSchema("Size").infer(infer_size));
    r.add(OpSchema("Reshape").inputs({kAll, dtype_bit(DType::kInt64)}).attr("allowzero", int64_t{0}).infer(infer_reshape));
    r.add(OpSchema("Flatten").attr("axis", int64_t{1}).infer(infer_flatten));
    r.add(OpSchema("Transpose").infer(infer_transpose));
    r.add(OpSchema("Unsqueeze").infer(infer_unsqueeze));
    r.add(OpSchema("Squeeze").infer(infer_squeeze));
    r.add(OpSchema("Concat").required_attr("axis").infer(infer_concat));
    r.add(OpSchema("Split").attr("axis", int64_t{0}).infer(infer_split));
    r.add(OpSchema("Slice").infer(infer_slice));
    r.add(OpSchema("Gather").inputs({kAll, kInt32And64}).attr("axis", int64_t{0}).infer(infer_gather));
    r.add(OpSchema("GatherElements").inputs({kAll, kInt32And64}).attr("axis", int64_t{0}).infer(infer_gather_elements));
    r.add(OpSchema("Expand").infer(infer_expand));
    r.add(OpSchema("OneHot").attr("axis", int64_t{-1}).infer(infer_one_hot));
    r.add(OpSchema("EyeLike").infer(infer_eye_like));
    r.add(OpSchema("ReverseSequence").inputs({kAll, dtype_bit(DType::kInt64)}).attr("batch_axis", int64_t{1}).attr("time_axis", int64_t{0}).infer([](InferContext& ctx) {
      copy_type(ctx, 0);
      const SymShape &x = ctx.dims(0), &lens = ctx.dims(1);
      const int64_t b = ctx.attr_int("batch_axis"), t = ctx.attr_int("time_axis");
      if (x.size() < 2 || (b != 0 && b != 1) || (t != 0 && t != 1) || b == t)
        ctx.fail("batch_axis {} and time_axis {} must be 0 and 1 (in some order) for input {}", b, t, dims_str(x));
      if (lens.size() != 1 || (lens[0].is_known() && x[b].is_known() && lens[0] != x[b]))
        ctx.fail_input("sequence_lens {} must be [batch] for input {}", dims_str(lens), dims_str(x));
    }));
    r.add(OpSchema("Compress").inputs({kAll, kBoolType}).infer([](InferContext& ctx) {
      ctx.set_output(0, Type::tensor(ctx.dtype(0)));
      const SymShape& x = ctx.dims(0);
      if (!ctx.has_attr("axis")) {
        ctx.set_output(0, Type::tensor(ctx.dtype(0), SymShape{Dim::unknown()}));
        return;
      }
      SymShape out = x;
      out[ctx.axis(ctx.attr_int("axis"), static_cast<int64_t>(x.size()))] = Dim::unknown();  // sized by the condition
      ctx.set_output(0, Type::tensor(ctx.dtype(0), out));
    }));
    r.add(OpSchema("GatherND").inputs({kAll, dtype_bit(DType::kInt64)}).attr("batch_dims", int64_t{0}).infer(infer_gather_nd));
    r.add(OpSchema("ScatterND").inputs({kAll, dtype_bit(DType::kInt64), kAll}).attr("reduction", std::string("none")).infer(infer_scatter_nd));
    for (const char* op : {"ScatterElements", "Scatter"})
      r.add(OpSchema(op).inputs({kAll, kInt32And64, kAll}).attr("axis", int64_t{0}).attr("reduction", std::string("none")).infer(infer_scatter_elements));
    r.add(OpSchema("Tile").infer(infer_tile));
    r.add(OpSchema("CenterCropPad").inputs({kAnyDType, kInt32And64}).infer(infer_center_crop_pad));
    r.add(OpSchema("ConstantOfShape").infer(infer_constant_of_shape));
    r.add(OpSchema("Range").infer(infer_range));
    r.add(OpSchema("Constant").infer(infer_constant));
    r.add(OpSchema("Pad").attr("mode", std::string("constant")).infer(infer_pad));
    r.add(OpSchema("DepthToSpace").required_attr("blocksize").infer(infer_depth_space));
    // anvil.ChannelShuffle (passes/fuse_channel_shuffle.cc): X [N, C, D...],
    // y[:, j * group + i] = x[:, i * C / group + j].
    r.add(OpSchema("ChannelShuffle", "anvil").required_attr("group").infer(infer_channel_shuffle));
    // anvil.TokensToImage and anvil.ImageToTokens (passes/tokens_as_image.cc):
    // a transformer's tokens [N, positions, C] as an image [N, C, S...] of 1-3
    // spatial dims and back, Y[n, c, p] = X[n, p, c]; the planner's
    // channels-last layout makes either a view (kernels/dnnl/tokens.cc).
    r.add(OpSchema("TokensToImage", "anvil").required_attr("spatial").infer(infer_tokens_to_image));
    r.add(OpSchema("ImageToTokens", "anvil").infer(infer_image_to_tokens));
    r.add(OpSchema("SpaceToDepth").required_attr("blocksize").infer(infer_depth_space));
    r.add(OpSchema("NonZero").infer([](InferContext& ctx) {
      ctx.set_output(0, Type::tensor(DType::kInt64, SymShape{Dim::known(ctx.rank(0)), Dim::unknown()}));
    }));
  }
};
const Registrations registrations;

}  // namespace

}  // namespace anvil::ir::schemas
