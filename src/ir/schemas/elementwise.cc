// Schemas of the elementwise ops: unary math and activations, broadcasting
// binary ops (which also compute on small shape values), comparisons and
// logic, variadic ops, Where, Cast, and the normalizations that keep X's shape.
#include "core/low_precision.h"
#include "ir/schemas/common.h"

namespace anvil::ir::schemas {

namespace {

constexpr unsigned kFloatLike = kFloats | kHalfs;

// Equal on shape values, as 0 or 1 (a bool tensor's values): a symbolic dim
// is a size, never a negative number, and one symbol is one size everywhere.
// PyTorch's expand(n, -1, -1) exports a Where over Equal(shape, -1).
std::optional<SymInt> values_equal(const SymInt& a, const SymInt& b) {
  if (a.is_number() && b.is_number()) return SymInt::of(*a.number == *b.number ? 1 : 0);
  if ((a.is_number() && *a.number < 0) || (b.is_number() && *b.number < 0)) return SymInt::of(0);
  if (!a.is_number() && !b.is_number() && a.dim.is_symbol() && a.dim == b.dim) return SymInt::of(1);
  return std::nullopt;
}

// Integer arithmetic on shape values (sizes are never negative here).
std::optional<SymInt> value_op(const std::string& op, const SymInt& a, const SymInt& b) {
  if (op == "Equal") return values_equal(a, b);
  if (a.is_number() && b.is_number()) {
    int64_t x = *a.number, y = *b.number, r;
    if (op == "Add" && !__builtin_add_overflow(x, y, &r)) return SymInt::of(r);
    if (op == "Sub" && !__builtin_sub_overflow(x, y, &r)) return SymInt::of(r);
    if (op == "Mul" && !__builtin_mul_overflow(x, y, &r)) return SymInt::of(r);
    if (op == "Div" && x >= 0 && y > 0) return SymInt::of(x / y);
    return std::nullopt;
  }
  if ((a.is_number() && *a.number < 0) || (b.is_number() && *b.number < 0)) return std::nullopt;
  Dim r;
  if (op == "Mul") r = dim_mul(a.as_dim(), b.as_dim());
  else if (op == "Div") r = dim_div(a.as_dim(), b.as_dim()).value_or(Dim::unknown());
  else if (op == "Add") r = dim_add(a.as_dim(), b.as_dim());
  else if (op == "Sub") r = dim_sub(a.as_dim(), b.as_dim());
  if (!r.is_known() && !r.is_symbol()) return std::nullopt;
  return SymInt::of(r);
}

void infer_binary(InferContext& ctx, DType out_dtype) {
  ctx.set_output(0, Type::tensor(out_dtype));
  SymShape out = broadcast(ctx, ctx.dims(0), ctx.dims(1));
  ctx.set_output(0, Type::tensor(out_dtype, out));
  const auto &a = ctx.forwarded_values(0), &b = ctx.forwarded_values(1);
  if (!a || !b || a->empty() || b->empty() || out.size() > 1 ||
      (a->size() != b->size() && a->size() != 1 && b->size() != 1))
    return;
  SymValues r;
  for (size_t i = 0; i < std::max(a->size(), b->size()); ++i) {
    auto x = value_op(ctx.node().op_type, (*a)[a->size() == 1 ? 0 : i], (*b)[b->size() == 1 ? 0 : i]);
    if (!x) return;
    r.push_back(*x);
  }
  ctx.set_output_values(0, std::move(r));
}

// Opsets 1-6: B broadcasts only with broadcast=1, aligned from `axis` (or the
// end), and the output is A's shape; PRelu's slope [C] applies per channel.
void infer_legacy_arith(InferContext& ctx) {
  const SymShape &a = ctx.dims(0), &b = ctx.dims(1);
  auto fits = [&](const SymShape& x, size_t offset) {
    for (size_t i = 0; i < x.size(); ++i)
      if (x[i].is_known() && a[offset + i].is_known() && x[i].value != 1 && x[i] != a[offset + i]) return false;
    return true;
  };
  bool ok;
  if (ctx.node().op_type == "PRelu") {
    ok = b.size() <= a.size() && (fits(b, a.size() - b.size()) || (b.size() == 1 && a.size() >= 2 && fits(b, 1)));
  } else if (ctx.attr_int("broadcast") == 0) {
    ok = a == b;
  } else {
    const int64_t axis = ctx.has_attr("axis") ? ctx.attr_int("axis") : static_cast<int64_t>(a.size() - b.size());
    ok = b.size() <= a.size() && axis >= 0 && axis + static_cast<int64_t>(b.size()) <= static_cast<int64_t>(a.size()) &&
         fits(b, static_cast<size_t>(axis));
  }
  if (!ok) ctx.fail_input("B {} does not broadcast to A {} (opset {} rules)", dims_str(b), dims_str(a), ctx.opset());
  ctx.set_output(0, Type::tensor(ctx.dtype(0), a));
}

void infer_arith(InferContext& ctx) {
  ctx.set_output(0, Type::tensor(ctx.dtype(0)));
  const DType a = ctx.dtype(0), b = ctx.dtype(1);
  if (a != b && a != DType::kUndefined && b != DType::kUndefined && ctx.node().op_type != "Pow" &&
      ctx.node().op_type != "PRelu")
    ctx.fail("inputs have different types ({} and {})", dtype_name(ctx.dtype(0)), dtype_name(ctx.dtype(1)));
  if (ctx.opset() < 7 && ctx.node().op_type != "Mod") return infer_legacy_arith(ctx);
  infer_binary(ctx, ctx.dtype(0));
  // PRelu broadcasts the slope to X only (unidirectional).
  if (ctx.node().op_type != "PRelu") return;
  const SymShape &x = ctx.dims(0), out = broadcast(ctx, x, ctx.dims(1));
  bool fits = out.size() == x.size();
  for (size_t i = 0; fits && i < x.size(); ++i) fits = !x[i].is_known() || !out[i].is_known() || x[i] == out[i];
  if (!fits) ctx.fail_input("slope of shape {} does not broadcast to X of shape {}", dims_str(ctx.dims(1)), dims_str(x));
}

void infer_compare(InferContext& ctx) {
  ctx.set_output(0, Type::tensor(DType::kBool));
  infer_binary(ctx, DType::kBool);
}

void infer_variadic(InferContext& ctx) {
  ctx.set_output(0, Type::tensor(ctx.dtype(0)));
  SymShape out = ctx.dims(0);
  for (size_t i = 1; i < ctx.num_inputs(); ++i) out = broadcast(ctx, out, ctx.dims(i));
  ctx.set_output(0, Type::tensor(ctx.dtype(0), out));
}

void infer_where(InferContext& ctx) {
  ctx.set_output(0, Type::tensor(ctx.dtype(1)));
  SymShape out = broadcast(ctx, broadcast(ctx, ctx.dims(0), ctx.dims(1)), ctx.dims(2));
  ctx.set_output(0, Type::tensor(ctx.dtype(1), out));
  // Shape values pick element by element where the condition's are known.
  const auto &c = ctx.forwarded_values(0), &x = ctx.forwarded_values(1), &y = ctx.forwarded_values(2);
  if (!c || !x || !y || out.size() > 1 || (!out.empty() && !out[0].is_known())) return;
  if (!out.empty() && out[0].value > static_cast<int64_t>(kMaxTrackedValues)) return;
  const size_t n = out.empty() ? 1 : static_cast<size_t>(out[0].value);
  auto at = [n](const SymValues& v, size_t i) -> const SymInt* {
    return v.size() == n ? &v[i] : v.size() == 1 ? &v[0] : nullptr;
  };
  SymValues r;
  for (size_t i = 0; i < n; ++i) {
    const SymInt *ci = at(*c, i), *xi = at(*x, i), *yi = at(*y, i);
    if (!ci || !xi || !yi || !ci->is_number()) return;
    r.push_back(*ci->number != 0 ? *xi : *yi);
  }
  ctx.set_output_values(0, std::move(r));
}

DType cast_target(const InferContext& ctx) { return dtype_from_onnx_code(ctx.attr_int("to")); }

void infer_cast(InferContext& ctx) {
  const DType to = cast_target(ctx);
  const Type& x = ctx.input(0);
  ctx.set_output(0, x.has_shape() ? Type::tensor(to, x.dims()) : Type::tensor(to));
  if (ctx.forwarded_values(0) && (to == DType::kInt64 || to == DType::kInt32)) ctx.set_output_values(0, *ctx.forwarded_values(0));
}

// LayerNormalization: Y like X; Mean and InvStdDev keep the dims before `axis` and 1 after.
void infer_layer_norm(InferContext& ctx) {
  copy_type(ctx, 0);
  const SymShape& x = ctx.dims(0);
  int64_t axis = ctx.axis(ctx.attr_int("axis"), static_cast<int64_t>(x.size()));
  SymShape stats(x.begin(), x.begin() + axis);
  stats.resize(x.size(), Dim::known(1));
  DType stash = ctx.attr_int("stash_type") == 1 ? DType::kFloat32 : ctx.dtype(0);
  ctx.set_output(1, Type::tensor(stash, stats));
  ctx.set_output(2, Type::tensor(stash, stats));
}

// BatchNormalization in inference: Y like X (training outputs are per channel).
void infer_batch_norm(InferContext& ctx) {
  copy_type(ctx, 0);
  if (ctx.opset() >= 14) {  // training mode: running_mean and running_var, like the inputs mean and var
    for (size_t o = 1; o < ctx.num_outputs() && o < 3; ++o) copy_type(ctx, o + 2, o);
    return;
  }
  for (size_t o = 1; o < ctx.num_outputs(); ++o) copy_type(ctx, 1, o);
}

// anvil.FusedBatchNorm: X [N, C, ...] and four [C] parameters (inference), Y like X.
void infer_fused_batch_norm(InferContext& ctx) {
  copy_type(ctx, 0);
  if (ctx.num_inputs() != 5) ctx.fail("expected 5 inputs (X, scale, B, mean, var), got {}", ctx.num_inputs());
  const SymShape& x = ctx.dims(0);
  if (x.size() < 2) ctx.fail_input("X {} must be [N, C, ...]", dims_str(x));
  for (size_t i = 1; i < 5; ++i) {
    const SymShape& p = ctx.dims(i);
    if (p.size() != 1 || (p[0].is_known() && x[1].is_known() && p[0] != x[1]))
      ctx.fail_input("input {} {} must be [C] for X {}", i, dims_str(p), dims_str(x));
  }
}

// InstanceNormalization: Y like X [N, C, ...]; scale and B are [C].
void infer_instance_norm(InferContext& ctx) {
  copy_type(ctx, 0);
  const SymShape& x = ctx.dims(0);
  if (x.size() < 3) ctx.fail_input("input {} must be [N, C, D1, ...]", dims_str(x));
  for (size_t i : {1u, 2u}) {
    const SymShape& p = ctx.dims(i);
    if (p.size() != 1 || (p[0].is_known() && x[1].is_known() && p[0] != x[1]))
      ctx.fail_input("{} {} must be [C] for input {}", i == 1 ? "scale" : "B", dims_str(p), dims_str(x));
  }
}

// GroupNormalization: Y like X [N, C, D...]; scale and bias are [num_groups]
// before opset 21, [C] from then on.
void infer_group_norm(InferContext& ctx) {
  copy_type(ctx, 0);
  const SymShape& x = ctx.dims(0);
  const int64_t groups = ctx.attr_int("num_groups");
  if (groups < 1) ctx.fail("num_groups must be positive, got {}", groups);
  if (x.size() < 3) ctx.fail_input("input {} must be [N, C, D1, ...]", dims_str(x));
  if (x[1].is_known() && x[1].value % groups != 0)
    ctx.fail_input("{} channels do not split into {} groups", x[1].value, groups);
  const Dim per = ctx.opset() >= 21 ? x[1] : Dim::known(groups);
  for (size_t i : {1u, 2u}) {
    const SymShape& p = ctx.dims(i);
    if (p.size() != 1 || (p[0].is_known() && per.is_known() && p[0] != per))
      ctx.fail_input("{} {} must be [{}]", i == 1 ? "scale" : "bias", dims_str(p), per.str());
  }
}

void infer_dropout(InferContext& ctx) {
  copy_type(ctx, 0);
  const Type& x = ctx.input(0);
  // Opsets 7-9 typed the mask like the data; from opset 10 it is bool.
  const DType mask = ctx.opset() >= 10 ? DType::kBool : x.dtype();
  ctx.set_output(1, x.has_shape() ? Type::tensor(mask, x.dims()) : Type::tensor(mask));
}

void infer_bool_like_input(InferContext& ctx) {
  const Type& x = ctx.input(0);
  ctx.set_output(0, x.has_shape() ? Type::tensor(DType::kBool, x.dims()) : Type::tensor(DType::kBool));
}

struct Registrations {
  Registrations() {
    auto& r = SchemaRegistry::global();
    for (const char* op : {"Relu", "Neg", "Abs", "Sign", "Erf"})
      r.add(OpSchema(op).inputs({kNumeric | kHalfs}).infer(same_as_input(0)));
    for (const char* op : {"Sqrt", "Exp", "Log", "Reciprocal", "Floor", "Ceil", "Round", "Tanh", "Sigmoid",
                           "Sin", "Cos", "Tan", "Asin", "Acos", "Atan", "Sinh", "Cosh", "Asinh", "Acosh", "Atanh",
                           "Softplus", "Softsign", "HardSwish", "Mish", "LpNormalization",
                           "MeanVarianceNormalization", "LRN"})
      r.add(OpSchema(op).inputs({kFloatLike}).infer(same_as_input(0)));
    r.add(OpSchema("LeakyRelu").inputs({kFloatLike}).attr("alpha", 0.01f).infer(same_as_input(0)));
    r.add(OpSchema("Elu").inputs({kFloatLike}).attr("alpha", 1.f).infer(same_as_input(0)));
    r.add(OpSchema("Celu").inputs({kFloatLike}).attr("alpha", 1.f).infer(same_as_input(0)));
    r.add(OpSchema("Selu").inputs({kFloatLike}).attr("alpha", 1.67326319f).attr("gamma", 1.05070102f).infer(same_as_input(0)));
    r.add(OpSchema("HardSigmoid").inputs({kFloatLike}).attr("alpha", 0.2f).attr("beta", 0.5f).infer(same_as_input(0)));
    r.add(OpSchema("ThresholdedRelu").inputs({kFloatLike}).attr("alpha", 1.f).infer(same_as_input(0)));
    r.add(OpSchema("Gelu").inputs({kFloatLike}).attr("approximate", std::string("none")).infer(same_as_input(0)));
    r.add(OpSchema("Shrink").attr("bias", 0.f).attr("lambd", 0.5f).infer(same_as_input(0)));
    r.add(OpSchema("Clip").infer(same_as_input(0)));
    r.add(OpSchema("Not").inputs({kBoolType}).infer(same_as_input(0)));
    r.add(OpSchema("IsNaN").inputs({kFloatLike | kMinifloats}).infer(infer_bool_like_input));
    r.add(OpSchema("IsInf").inputs({kFloatLike | kMinifloats}).infer(infer_bool_like_input));
    for (const char* op : {"Softmax", "LogSoftmax", "Hardmax"})
      r.add(OpSchema(op).inputs({kFloatLike}).attr("axis", int64_t{-1}).infer(same_as_input(0)));
    // anvil.ElementwiseChain(X, operands...): element-wise steps on X (fuse_elementwise_chain.cc).
    r.add(OpSchema("ElementwiseChain", "anvil").inputs({kFloat32Only}).infer(same_as_input(0)));
    // anvil.MaskedSoftmax(X, Mask) = Softmax(X + Mask) over the last axis (fuse_masked_softmax.cc).
    r.add(OpSchema("MaskedSoftmax", "anvil").inputs({kFloat32Only, kFloat32Only}).infer([](InferContext& ctx) {
      ctx.set_output(0, Type::tensor(DType::kFloat32, broadcast(ctx, ctx.dims(0), ctx.dims(1))));
    }));
    for (const char* op : {"CumSum", "CumProd"})
      r.add(OpSchema(op).attr("exclusive", int64_t{0}).attr("reverse", int64_t{0}).infer(same_as_input(0)));
    r.add(OpSchema("Swish").inputs({kFloatLike}).attr("alpha", 1.f).infer(same_as_input(0)));
    // SwiGLU: A and B of one type and one shape (no broadcasting); Y like A.
    r.add(OpSchema("SwiGLU").inputs({kFloatLike, kFloatLike}).attr("alpha", 1.f).infer([](InferContext& ctx) {
      copy_type(ctx, 0);
      if (ctx.dtype(0) != ctx.dtype(1))
        ctx.fail("A is {} but B is {}", dtype_name(ctx.dtype(0)), dtype_name(ctx.dtype(1)));
      const Type &a = ctx.input(0), &b = ctx.input(1);
      if (!a.has_shape() || !b.has_shape()) return;
      bool same = a.rank() == b.rank();
      for (size_t i = 0; same && i < a.dims().size(); ++i)
        same = !a.dims()[i].is_known() || !b.dims()[i].is_known() || a.dims()[i] == b.dims()[i];
      if (!same) ctx.fail_input("A {} and B {} must have one shape", dims_str(a.dims()), dims_str(b.dims()));
    }));
    r.add(OpSchema("BitwiseNot").inputs({kSignedInts | kUnsignedInts}).infer(same_as_input(0)));
    for (const char* op : {"BitwiseAnd", "BitwiseOr", "BitwiseXor"})
      r.add(OpSchema(op).inputs({kSignedInts | kUnsignedInts}).infer(infer_arith));
    r.add(OpSchema("RMSNormalization").inputs({kFloatLike}).attr("axis", int64_t{-1}).attr("epsilon", 1e-5f).infer(same_as_input(0)));
    r.add(OpSchema("Trilu").attr("upper", int64_t{1}).infer([](InferContext& ctx) {
      if (ctx.rank(0) < 2) ctx.fail_input("input must have rank >= 2, got {}", dims_str(ctx.dims(0)));
      copy_type(ctx, 0);
    }));
    r.add(OpSchema("Identity").infer([](InferContext& ctx) {
      copy_type(ctx, 0);
      if (ctx.forwarded_values(0)) ctx.set_output_values(0, *ctx.forwarded_values(0));
    }));
    for (const char* op : {"Add", "Sub", "Mul", "Div", "Pow", "Mod", "PRelu"})
      r.add(OpSchema(op).attr("broadcast", int64_t{0}).infer(infer_arith));
    r.add(OpSchema("BitShift").inputs({kUnsignedInts | kSignedInts}).required_attr("direction").infer([](InferContext& ctx) {
      const std::string d = ctx.attr_string("direction");
      if (d != "LEFT" && d != "RIGHT") ctx.fail("direction '{}' is not LEFT or RIGHT", d);
      infer_arith(ctx);
    }));
    for (const char* op : {"Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual"}) r.add(OpSchema(op).infer(infer_compare));
    for (const char* op : {"And", "Or", "Xor"}) r.add(OpSchema(op).inputs({kBoolType}).infer(infer_compare));
    for (const char* op : {"Sum", "Mean", "Max", "Min"}) r.add(OpSchema(op).infer(infer_variadic));
    r.add(OpSchema("Where").inputs({kBoolType, kAll}).infer(infer_where));
    r.add(OpSchema("Cast").required_attr("to").infer(infer_cast));
    // BitCast: the same bits as `to`, which must be as wide (the 4- and 2-bit types are not bit-cast here).
    r.add(OpSchema("BitCast").required_attr("to").infer([](InferContext& ctx) {
      const int64_t code = ctx.attr_int("to");
      const DType to = dtype_from_onnx_code(code), from = ctx.dtype(0);
      if (to == DType::kUndefined || dtype_file_bits(to) < 8 || dtype_file_bits(from) < 8)
        ctx.fail_unsupported(fmt::format("bit-casting {} to ONNX type {} is not supported", dtype_name(from), code));
      if (dtype_size(to) != dtype_size(from))
        ctx.fail("cannot bit-cast {} ({} bits) to {} ({} bits)", dtype_name(from), 8 * dtype_size(from),
                 dtype_name(to), 8 * dtype_size(to));
      const Type& x = ctx.input(0);
      ctx.set_output(0, x.has_shape() ? Type::tensor(to, x.dims()) : Type::tensor(to));
    }));
    r.add(OpSchema("CastLike").infer([](InferContext& ctx) {
      const Type& x = ctx.input(0);
      DType to = ctx.dtype(1);
      ctx.set_output(0, x.has_shape() ? Type::tensor(to, x.dims()) : Type::tensor(to));
    }));
    r.add(OpSchema("LayerNormalization")
              .inputs({kFloatLike})
              .attr("axis", int64_t{-1})
              .attr("epsilon", 1e-5f)
              .attr("stash_type", int64_t{1})
              .infer(infer_layer_norm));
    r.add(OpSchema("BatchNormalization").attr("epsilon", 1e-5f).attr("momentum", 0.9f).infer(infer_batch_norm));
    // anvil.FusedBatchNorm (passes/fuse_batchnorm_activation.cc): an inference
    // BatchNormalization (X, scale, B, mean, var), then an activation.
    r.add(OpSchema("FusedBatchNorm", "anvil").inputs({kFloat32Only}).attr("epsilon", 1e-5f).infer(infer_fused_batch_norm));
    r.add(OpSchema("Dropout").infer(infer_dropout));
    r.add(OpSchema("InstanceNormalization")
              .inputs({kFloatLike})
              .same_types({0, 1, 2}, {"input", "scale", "B"})
              .attr("epsilon", 1e-5f)
              .infer(infer_instance_norm));
    r.add(OpSchema("GroupNormalization")
              .inputs({kFloatLike})
              .same_types({0, 1, 2}, {"X", "scale", "bias"})
              .required_attr("num_groups")
              .attr("epsilon", 1e-5f)
              .attr("stash_type", int64_t{1})
              .infer(infer_group_norm));
  }
};
const Registrations registrations;

}  // namespace

}  // namespace anvil::ir::schemas
