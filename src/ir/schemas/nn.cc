// Schemas of the neural-network ops: MatMul, Gemm, convolutions, pooling,
// reductions, TopK/ArgMax, the recurrent ops, and control flow (whose output
// types come from their bodies).
#include <algorithm>
#include <climits>
#include <cmath>
#include <optional>

#include "ir/schemas/common.h"

namespace anvil::ir::schemas {

namespace {

constexpr unsigned kFloatLike = kFloats | kHalfs;

void infer_matmul(InferContext& ctx) {
  ctx.set_output(0, Type::tensor(ctx.dtype(0)));
  ctx.set_output(0, Type::tensor(ctx.dtype(0), matmul_dims(ctx, ctx.dims(0), ctx.dims(1))));
}

// An operand of anvil.FusedMatMul with its last two axes swapped when `trans`
// is set (passes/fold_matmul_transpose.cc).
SymShape maybe_transposed(const InferContext& ctx, const char* trans, size_t input) {
  SymShape s = ctx.dims(input);
  if (ctx.attr_int(trans) == 0) return s;
  if (s.size() < 2) ctx.fail_input("{} is set on input {} of rank {}; it needs rank 2 or more", trans, input, s.size());
  std::swap(s[s.size() - 2], s.back());
  return s;
}

// anvil.FusedMatMul (passes/fuse_matmul.cc): MatMul's output, of its operands
// as transA / transB give them; the bias runs along its last dimension and
// the residual has its shape.
void infer_fused_matmul(InferContext& ctx) {
  const SymShape y = matmul_dims(ctx, maybe_transposed(ctx, "transA", 0), maybe_transposed(ctx, "transB", 1));
  ctx.set_output(0, Type::tensor(ctx.dtype(0), y));
  if (y.empty()) return;
  const Dim& n = y.back();
  if (ctx.has_input(2)) {
    const SymShape& bias = ctx.dims(2);
    bool ok = !bias.empty() && bias.size() <= y.size() && (!n.is_known() || !bias.back().is_known() || bias.back() == n);
    for (size_t i = 0; ok && i + 1 < bias.size(); ++i) ok = !bias[i].is_known() || bias[i].value == 1;
    if (!ok) ctx.fail_input("bias {} does not run along the last dimension of {}", dims_str(bias), dims_str(y));
  }
  if (ctx.has_input(3)) {
    const SymShape& sum = ctx.dims(3);
    bool ok = sum.size() == y.size();
    for (size_t i = 0; ok && i < y.size(); ++i) ok = !sum[i].is_known() || !y[i].is_known() || sum[i] == y[i];
    if (!ok) ctx.fail_input("residual {} does not have the output's shape {}", dims_str(sum), dims_str(y));
  }
}

void infer_gemm(InferContext& ctx) {
  ctx.set_output(0, Type::tensor(ctx.dtype(0)));
  const SymShape &a = ctx.dims(0), &b = ctx.dims(1);
  if (a.size() != 2 || b.size() != 2) ctx.fail_input("A and B must be matrices");
  const bool ta = ctx.attr_int("transA") != 0, tb = ctx.attr_int("transB") != 0;
  const Dim m = ta ? a[1] : a[0], n = tb ? b[0] : b[1];
  const Dim &k1 = ta ? a[0] : a[1], &k2 = tb ? b[1] : b[0];
  if (k1.is_known() && k2.is_known() && k1 != k2)
    ctx.fail_input("A {} (transA={}) and B {} (transB={}) have inner dimensions {} and {}", dims_str(a), int(ta),
                   dims_str(b), int(tb), k1.value, k2.value);
  if (!ctx.has_input(2) && ctx.opset() < 11) ctx.fail("input C is required before opset 11");
  if (ctx.has_input(2)) {  // C broadcasts to [M, N] (unidirectional)
    const SymShape& c = ctx.dims(2);
    const SymShape y{m, n};
    bool ok = c.size() <= 2;
    for (size_t i = 0; ok && i < c.size(); ++i) {
      const Dim& target = y[2 - c.size() + i];
      ok = !c[i].is_known() || c[i].value == 1 || !target.is_known() || c[i] == target;
    }
    if (!ok) ctx.fail_input("C {} cannot be broadcast to the output {}", dims_str(c), dims_str(y));
  }
  ctx.set_output(0, Type::tensor(ctx.dtype(0), SymShape{m, n}));
}

std::vector<int64_t> attr_or(const InferContext& ctx, const char* name, size_t n, int64_t fill) {
  std::vector<int64_t> v = ctx.attr_ints(name);
  if (v.empty()) v.assign(n, fill);
  if (v.size() != n) ctx.fail("{} has {} entries for {} spatial dimensions", name, v.size(), n);
  return v;
}

// Output spatial dims of a convolution or pooling window.
SymShape window_out(const InferContext& ctx, const SymShape& x, const std::vector<int64_t>& kernel, bool ceil_mode) {
  const size_t n = kernel.size();
  if (x.size() < 2 || n != x.size() - 2)
    ctx.fail("kernel_shape has {} entries for an input of rank {}", n, x.size());
  const auto strides = attr_or(ctx, "strides", n, 1), dilations = attr_or(ctx, "dilations", n, 1);
  const auto pads = attr_or(ctx, "pads", 2 * n, 0);
  const std::string auto_pad = ctx.attr_string("auto_pad");
  SymShape out;
  for (size_t i = 0; i < n; ++i) {
    const Dim& in = x[2 + i];
    if (kernel[i] < 1 || strides[i] < 1 || dilations[i] < 1 || pads[i] < 0 || pads[i + n] < 0)
      ctx.fail("kernel, strides and dilations must be >= 1 and pads >= 0");
    __int128 keff128 = static_cast<__int128>(kernel[i] - 1) * dilations[i] + 1;
    if (keff128 > INT32_MAX || pads[i] > INT32_MAX || pads[i + n] > INT32_MAX)
      ctx.fail("window or padding of {} elements is out of range", static_cast<int64_t>(keff128 > INT64_MAX ? -1 : keff128));
    const int64_t keff = static_cast<int64_t>(keff128), s = strides[i];
    if (!in.is_known()) {
      bool same = auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER";
      out.push_back(same && s == 1 ? in : Dim::unknown());
      continue;
    }
    __int128 o;  // the operands come from the file
    if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
      o = (static_cast<__int128>(in.value) + s - 1) / s;
    } else {
      __int128 span = static_cast<__int128>(in.value) - keff;
      if (auto_pad != "VALID") span += pads[i] + pads[i + n];
      // ceil_mode lets the one window run past the end (span > -s).
      if (span < 0 && !(ceil_mode && span > -s))
        ctx.fail_input("input {} is too small for the window: spatial dimension {} is {} with padding, the window spans {}",
                       dims_str(x), i, static_cast<int64_t>(span + keff), keff);
      o = (ceil_mode ? (span + s - 1) / s : span / s) + 1;
      // ceil_mode never starts a window in the end padding.
      if (ceil_mode && (o - 1) * s >= static_cast<__int128>(in.value) + (auto_pad == "VALID" ? 0 : pads[i])) --o;
      if (o < 1) ctx.fail_input("input {} is too small for the window", dims_str(x));
    }
    out.push_back(Dim::known(static_cast<int64_t>(o)));
  }
  return out;
}

// X's channels against W's and the group; a bias B holds one value per output channel.
// Conv's W is [M, C / group, k...], ConvTranspose's [C, M / group, k...].
// `bias` is the bias input's index (-1: none).
void check_channels(const InferContext& ctx, const SymShape& x, const SymShape& w, bool transposed, int bias = 2) {
  const int64_t group = ctx.attr_int("group");
  if (group < 1) ctx.fail("group {} must be positive", group);
  auto known = [](const Dim& d) { return d.is_known(); };
  if (transposed) {
    if (known(x[1]) && known(w[0]) && x[1] != w[0])
      ctx.fail_input("X has {} channels but weights W {} expect {} (W is [C, M/group, k...])", x[1].value, dims_str(w),
                     w[0].value);
  } else if (known(x[1]) && known(w[1]) && x[1].value != w[1].value * group) {
    ctx.fail_input("X has {} channels but weights W {} with group {} expect {}", x[1].value, dims_str(w), group,
                   w[1].value * group);
  }
  if (known(w[0]) && w[0].value % group != 0)
    ctx.fail_input("W {} has {} {} channels, which is not a multiple of group {}", dims_str(w), w[0].value,
                   transposed ? "input" : "output", group);
  if (bias < 0 || !ctx.has_input(static_cast<size_t>(bias))) return;
  const SymShape& b = ctx.dims(static_cast<size_t>(bias));
  const Dim m = transposed ? dim_mul(w[1], Dim::known(group)) : w[0];
  if (b.size() != 1 || (known(b[0]) && known(m) && b[0] != m))
    ctx.fail_input("bias B has shape {}; expected [{}]", dims_str(b), m.str());
}

// A convolution's output dims for X and W (W at input `w_at`, the bias at `bias`).
SymShape conv_dims(const InferContext& ctx, size_t w_at, int bias) {
  const SymShape &x = ctx.dims(0), &w = ctx.dims(w_at);
  if (x.size() < 3 || w.size() != x.size())
    ctx.fail_input("X {} and W {} must have the same rank >= 3", dims_str(x), dims_str(w));
  check_channels(ctx, x, w, false, bias);
  std::vector<int64_t> kernel = ctx.attr_ints("kernel_shape");
  if (kernel.empty())
    for (size_t i = 2; i < w.size(); ++i) {
      if (!w[i].is_known()) throw ShapeUnknown{};
      kernel.push_back(w[i].value);
    }
  SymShape out{x[0], w[0]};
  SymShape spatial = window_out(ctx, x, kernel, false);
  out.insert(out.end(), spatial.begin(), spatial.end());
  return out;
}

void infer_conv(InferContext& ctx) {
  ctx.set_output(0, Type::tensor(ctx.dtype(0)));
  ctx.set_output(0, Type::tensor(ctx.dtype(0), conv_dims(ctx, 1, 2)));
}

// anvil.FusedConvDepthwise (passes/fuse_conv_depthwise.cc): X [N, C_in, H,
// W], W [C, C_in, 1, 1], B [C], W_dw [C, 1, 3, 3], B_dw [C], all float32 ->
// Y [N, C, (H - 1) / stride + 1, (W - 1) / stride + 1] (the depthwise 3x3's
// pads are 1). `group` (the 1x1's) may only be 1.
void infer_fused_conv_depthwise(InferContext& ctx) {
  ctx.set_output(0, Type::tensor(ctx.dtype(0)));
  const int64_t stride = ctx.attr_int("stride");
  if (stride != 1 && stride != 2) ctx.fail("stride {} must be 1 or 2", stride);
  if (ctx.attr_int("group") != 1) ctx.fail("the 1x1 convolution has one group, not {}", ctx.attr_int("group"));
  const SymShape &x = ctx.dims(0), &w = ctx.dims(1), &w_dw = ctx.dims(3);
  auto is = [](const Dim& d, int64_t v) { return d.is_known() && d.value == v; };
  if (x.size() != 4 || w.size() != 4 || !is(w[2], 1) || !is(w[3], 1))
    ctx.fail_input("X {} and W {} must be 4-D, W a 1x1 window", dims_str(x), dims_str(w));
  if (w_dw.size() != 4 || !is(w_dw[1], 1) || !is(w_dw[2], 3) || !is(w_dw[3], 3) ||
      (w[0].is_known() && w_dw[0].is_known() && w[0] != w_dw[0]))
    ctx.fail_input("W_dw {} must be a depthwise 3x3 over W {}'s {} channels", dims_str(w_dw), dims_str(w), w[0].str());
  if (is(w[0], 0)) ctx.fail_input("W {} has no output channels", dims_str(w));
  check_channels(ctx, x, w, false);
  for (size_t bias : {size_t{2}, size_t{4}})
    if (ctx.has_input(bias) && (ctx.dims(bias).size() != 1 || (ctx.dims(bias)[0].is_known() && w[0].is_known() &&
                                                               ctx.dims(bias)[0] != w[0])))
      ctx.fail_input("bias {} must be [{}]", dims_str(ctx.dims(bias)), w[0].str());
  SymShape out{x[0], w[0]};
  for (size_t i = 2; i < 4; ++i)
    out.push_back(x[i].is_known() ? Dim::known(x[i].value < 1 ? 0 : (x[i].value - 1) / stride + 1) : Dim::unknown());
  if ((out[2].is_known() && out[2].value < 1) || (out[3].is_known() && out[3].value < 1))
    ctx.fail_input("X {} has an empty plane", dims_str(x));
  ctx.set_output(0, Type::tensor(ctx.dtype(0), out));
}

// anvil.SqueezeExcite (passes/fuse_squeeze_excite.cc): a squeeze-and-excitation
// block's channel gates, S [N, C, 1, 1] = gate(W2 act(W1 mean(X) + B1) + B2)
// from X [N, C, H, W], W1 [R, C, 1, 1] and W2 [C, R, 1, 1] (B1 [R] and B2 [C]
// optional), the mean over each channel's plane.
void infer_squeeze_excite(InferContext& ctx) {
  for (size_t i = 0; i < ctx.num_inputs(); ++i)
    if (ctx.has_input(i) && !ctx.input(i).is_tensor())
      ctx.fail_input("input {} is {}, not a tensor", i, ctx.input(i).str());
  ctx.set_output(0, Type::tensor(ctx.dtype(0)));
  const SymShape &x = ctx.dims(0), &w1 = ctx.dims(1), &w2 = ctx.dims(3);
  auto is = [](const Dim& d, int64_t v) { return d.is_known() && d.value == v; };
  auto agree = [](const Dim& a, const Dim& b) { return !a.is_known() || !b.is_known() || a == b; };
  if (x.size() != 4 || w1.size() != 4 || w2.size() != 4 || !is(w1[2], 1) || !is(w1[3], 1) || !is(w2[2], 1) ||
      !is(w2[3], 1))
    ctx.fail_input("X {}, W1 {} and W2 {} must be 4-D, the weights 1x1 windows", dims_str(x), dims_str(w1),
                   dims_str(w2));
  if (!agree(w1[1], x[1]) || !agree(w2[0], x[1]) || !agree(w2[1], w1[0]))
    ctx.fail_input("W1 {} must be [R, {}, 1, 1] and W2 {} [{}, R, 1, 1]", dims_str(w1), x[1].str(), dims_str(w2),
                   x[1].str());
  for (const auto& [bias, size] : {std::pair<size_t, Dim>{2, w1[0]}, std::pair<size_t, Dim>{4, x[1]}})
    if (ctx.has_input(bias) && (ctx.dims(bias).size() != 1 || !agree(ctx.dims(bias)[0], size)))
      ctx.fail_input("bias {} must be [{}]", dims_str(ctx.dims(bias)), size.str());
  const bool planes = !is(x[0], 0) && !is(x[1], 0);
  if (planes && (is(x[2], 0) || is(x[3], 0))) ctx.fail_input("X {} has an empty plane to average", dims_str(x));
  ctx.set_output(0, Type::tensor(ctx.dtype(0), SymShape{x[0], x[1], Dim::known(1), Dim::known(1)}));
}

// ConvInteger(x, w, x_zero_point, w_zero_point) -> int32; QLinearConv(x, x_scale,
// x_zero_point, w, w_scale, w_zero_point, y_scale, y_zero_point, B) -> y_zero_point's type.
void infer_integer_conv(InferContext& ctx) {
  const bool q = ctx.node().op_type == "QLinearConv";
  if (q)  // the scales are required (the kernel reads them); the zero points may be omitted
    for (size_t i : {size_t{1}, size_t{4}, size_t{6}}) ctx.input(i);
  const DType out = q ? ctx.dtype(7) : DType::kInt32;
  ctx.set_output(0, Type::tensor(out));
  ctx.set_output(0, Type::tensor(out, conv_dims(ctx, q ? 3 : 1, q ? 8 : -1)));
}

void infer_conv_transpose(InferContext& ctx) {
  ctx.set_output(0, Type::tensor(ctx.dtype(0)));
  const SymShape &x = ctx.dims(0), &w = ctx.dims(1);
  if (x.size() < 3 || w.size() != x.size())
    ctx.fail_input("X {} and W {} must have the same rank >= 3", dims_str(x), dims_str(w));
  check_channels(ctx, x, w, true);
  const size_t n = x.size() - 2;
  SymShape out{x[0], dim_mul(w[1], Dim::known(ctx.attr_int("group")))};
  std::vector<int64_t> output_shape = ctx.attr_ints("output_shape");
  if (!output_shape.empty()) {
    // The spatial sizes alone or the full [N, C, D1, ...].
    if (output_shape.size() != n && output_shape.size() != n + 2)
      ctx.fail("output_shape has {} entries for {} spatial dimensions", output_shape.size(), n);
    for (size_t i = output_shape.size() - n; i < output_shape.size(); ++i) {
      if (output_shape[i] < 1) ctx.fail("output_shape {} must be positive", dims_str(known_dims(output_shape)));
      out.push_back(Dim::known(output_shape[i]));
    }
    ctx.set_output(0, Type::tensor(ctx.dtype(0), out));
    return;
  }
  const auto strides = attr_or(ctx, "strides", n, 1), dilations = attr_or(ctx, "dilations", n, 1);
  const std::string auto_pad = ctx.attr_string("auto_pad");
  const auto pads = auto_pad == "VALID" ? std::vector<int64_t>(2 * n, 0) : attr_or(ctx, "pads", 2 * n, 0);
  const auto output_padding = attr_or(ctx, "output_padding", n, 0);
  for (size_t i = 0; i < n; ++i) {
    if (!x[2 + i].is_known() || !w[2 + i].is_known()) {
      out.push_back(Dim::unknown());
      continue;
    }
    // In 128 bits: every operand comes from the file.
    __int128 in = x[2 + i].value, keff = static_cast<__int128>(w[2 + i].value - 1) * dilations[i] + 1;
    __int128 o = auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER"
                     ? in * strides[i]
                     : static_cast<__int128>(strides[i]) * (in - 1) + output_padding[i] + keff - pads[i] - pads[i + n];
    if (o < 1 || o > INT64_MAX)
      ctx.fail_input("input {} is too small or large for the window and pads: spatial output dimension {} would be {}",
                     dims_str(x), i, static_cast<int64_t>(o < INT64_MIN ? INT64_MIN : o > INT64_MAX ? INT64_MAX : o));
    out.push_back(Dim::known(static_cast<int64_t>(o)));
  }
  ctx.set_output(0, Type::tensor(ctx.dtype(0), out));
}

void infer_pool(InferContext& ctx) {
  ctx.set_output(0, Type::tensor(ctx.dtype(0)));
  const SymShape& x = ctx.dims(0);
  if (x.size() < 3) ctx.fail_input("input must have rank >= 3");
  std::vector<int64_t> kernel = ctx.attr_ints("kernel_shape");
  if (kernel.size() != x.size() - 2) ctx.fail("kernel_shape has {} entries for rank {}", kernel.size(), x.size());
  SymShape out{x[0], x[1]};
  SymShape spatial = window_out(ctx, x, kernel, ctx.attr_int("ceil_mode") != 0);
  out.insert(out.end(), spatial.begin(), spatial.end());
  ctx.set_output(0, Type::tensor(ctx.dtype(0), out));
  ctx.set_output(1, Type::tensor(DType::kInt64, out));  // MaxPool's Indices
}

// anvil.MaxPoolGrad(dY, X) -> dX, the autodiff's (train/gradients/conv_pool.cc):
// MaxPool's attributes, dY shaped as MaxPool's output on X, dX as X;
// relu_gate 1: only windows whose maximum is positive pass theirs on
// (passes/fuse_relu_grad.cc).
void infer_max_pool_grad(InferContext& ctx) {
  ctx.set_output(0, Type::tensor(ctx.dtype(1)));
  const SymShape &dy = ctx.dims(0), &x = ctx.dims(1);
  if (x.size() < 3) ctx.fail_input("X {} must have rank >= 3", dims_str(x));
  if (ctx.dtype(0) != ctx.dtype(1)) ctx.fail_input("dY and X have different dtypes");
  SymShape y{x[0], x[1]};
  const SymShape spatial = window_out(ctx, x, ctx.attr_ints("kernel_shape"), ctx.attr_int("ceil_mode") != 0);
  y.insert(y.end(), spatial.begin(), spatial.end());
  bool fits = dy.size() == y.size();
  for (size_t i = 0; fits && i < y.size(); ++i) fits = !dy[i].is_known() || !y[i].is_known() || dy[i] == y[i];
  if (!fits) ctx.fail_input("dY {} is not the shape MaxPool gives X {}: {}", dims_str(dy), dims_str(x), dims_str(y));
  ctx.set_output(0, Type::tensor(ctx.dtype(1), x));
}

void infer_global_pool(InferContext& ctx) {
  ctx.set_output(0, Type::tensor(ctx.dtype(0)));
  SymShape out = ctx.dims(0);
  if (out.size() < 2) ctx.fail_input("input {} must have rank >= 2 ([N, C, D1, ...])", dims_str(out));
  const bool planes = !(out[0].is_known() && out[0].value == 0) && !(out[1].is_known() && out[1].value == 0);
  for (size_t i = 2; i < out.size(); ++i) {
    if (planes && out[i].is_known() && out[i].value == 0)
      ctx.fail_input("input {} has an empty spatial extent", dims_str(ctx.dims(0)));
    out[i] = Dim::known(1);
  }
  ctx.set_output(0, Type::tensor(ctx.dtype(0), out));
}

// Reduce*: axes from the attribute, or (ReduceSum 13+, the others 18+) the optional input.
void infer_reduce(InferContext& ctx, int axes_input_from, DType out_dtype) {
  ctx.set_output(0, Type::tensor(out_dtype));
  const SymShape& x = ctx.dims(0);
  auto axes = axes_of(ctx, axes_input_from, 1);
  if (!axes) return;
  const bool keep = ctx.attr_int("keepdims") != 0;
  if (axes->empty() && ctx.attr_int("noop_with_empty_axes") != 0) {
    ctx.set_output(0, Type::tensor(out_dtype, x));
    return;
  }
  std::vector<bool> reduced(x.size(), axes->empty());
  for (int64_t a : *axes) reduced[ctx.axis(a, static_cast<int64_t>(x.size()))] = true;
  SymShape out;
  for (size_t i = 0; i < x.size(); ++i) {
    if (!reduced[i]) out.push_back(x[i]);
    else if (keep) out.push_back(Dim::known(1));
  }
  ctx.set_output(0, Type::tensor(out_dtype, out));
}

void infer_arg_reduce(InferContext& ctx) {
  ctx.set_output(0, Type::tensor(DType::kInt64));
  SymShape x = ctx.dims(0);
  int64_t axis = ctx.axis(ctx.attr_int("axis"), static_cast<int64_t>(x.size()));
  if (ctx.attr_int("keepdims") != 0) x[axis] = Dim::known(1);
  else x.erase(x.begin() + axis);
  ctx.set_output(0, Type::tensor(DType::kInt64, x));
}

void infer_topk(InferContext& ctx) {
  const auto& outs = ctx.node().outputs;
  if (outs.size() != 2 || !outs[0] || !outs[1])
    ctx.fail("it writes two outputs, Values and Indices, both required; the node names {}",
             std::count_if(outs.begin(), outs.end(), [](const Value* v) { return v != nullptr; }));
  ctx.set_output(0, Type::tensor(ctx.dtype(0)));
  ctx.set_output(1, Type::tensor(DType::kInt64));
  SymShape x = ctx.dims(0);
  int64_t axis = ctx.axis(ctx.attr_int("axis"), static_cast<int64_t>(x.size()));
  // K: an input from opset 10, an attribute before; unknown until run time when
  // the input is not a constant.
  std::optional<SymInt> k;
  if (ctx.opset() < 10) {
    k = SymInt::of(ctx.attr_int("k"));
  } else {
    ctx.input(1);  // K is required: fails when omitted
    if (auto values = ctx.values(1); values && values->size() == 1) k = (*values)[0];
  }
  if (k && k->is_number()) {
    const int64_t n = *k->number;
    if (n < 0 || (x[axis].is_known() && n > x[axis].value))
      ctx.fail_input("k = {} is out of range for axis {} of {}", n, axis, dims_str(x));
  }
  x[axis] = k ? k->as_dim() : Dim::unknown();
  ctx.set_output(0, Type::tensor(ctx.dtype(0), x));
  ctx.set_output(1, Type::tensor(DType::kInt64, x));
}

// MaxUnpool: output_shape when given, else (in - 1) * stride + kernel - pads
// per spatial axis. X's rank is checked in both cases where it is known (the
// kernel relies on it).
void infer_max_unpool(InferContext& ctx) {
  ctx.set_output(0, Type::tensor(ctx.dtype(0)));
  size_t n = 0;  // spatial axes
  if (ctx.input(0).has_shape()) {
    const SymShape& x = ctx.dims(0);
    if (x.size() < 3) ctx.fail_input("input {} must be [N, C, D1, ...]", dims_str(x));
    n = x.size() - 2;
    const size_t kernel = ctx.attr_ints("kernel_shape").size();
    if (kernel != n) ctx.fail("kernel_shape has {} entries for {} spatial dimensions", kernel, n);
  }
  if (ctx.dtype(1) != DType::kInt64)  // also fails when I is omitted
    ctx.fail("its indices I must be int64, got {}", dtype_name(ctx.dtype(1)));
  if (ctx.has_input(2)) {
    if (auto shape = values_as_dims(ctx, 2)) ctx.set_output(0, Type::tensor(ctx.dtype(0), *shape));
    return;
  }
  const SymShape& x = ctx.dims(0);  // ShapeUnknown when X's is
  const std::vector<int64_t> kernel = ctx.attr_ints("kernel_shape");
  const auto strides = attr_or(ctx, "strides", n, 1), pads = attr_or(ctx, "pads", 2 * n, 0);
  SymShape out{x[0], x[1]};
  for (size_t i = 0; i < n; ++i) {
    if (!x[2 + i].is_known()) {
      out.push_back(Dim::unknown());
      continue;
    }
    const __int128 o = static_cast<__int128>(x[2 + i].value - 1) * strides[i] + kernel[i] - pads[i] - pads[i + n];
    if (o < 0 || o > INT64_MAX) ctx.fail_input("output dimension {} would be {}", i, static_cast<int64_t>(o < 0 ? -1 : o));
    out.push_back(Dim::known(static_cast<int64_t>(o)));
  }
  ctx.set_output(0, Type::tensor(ctx.dtype(0), out));
}

// Resize's output shape from constant float32 scales (from opset 11, no
// sizes): each axis's length is floor(x * scale), as the kernel computes it
// (kernels/resize_spec.cc); a scale of 1 keeps the dim, symbolic or not.
// Left to the kernel: tf_crop_and_resize (its roi scales the extent), the
// opset-18 axes, unknown dims under a scale, and scales that give no valid
// length. Without this, everything after an upsampler had no known rank.
std::optional<SymShape> resize_shape_from_scales(const InferContext& ctx, const SymShape& x) {
  const Node& n = ctx.node();
  if (n.op_type != "Resize" || ctx.opset() < 11 || ctx.has_input(3) || !ctx.has_input(2) || n.attrs.has("axes") ||
      n.attrs.get_string("coordinate_transformation_mode", "half_pixel") == "tf_crop_and_resize")
    return std::nullopt;
  const Value* scales = n.input(2);
  if (!scales || !scales->constant || scales->constant->dtype() != DType::kFloat32 ||
      scales->constant->numel() != static_cast<int64_t>(x.size()))
    return std::nullopt;
  const float* scale = scales->constant->data<float>();
  SymShape out = x;
  for (size_t d = 0; d < x.size(); ++d) {
    if (scale[d] == 1.f) continue;
    if (!x[d].is_known() || !(scale[d] > 0.f) || !std::isfinite(scale[d])) return std::nullopt;
    const double length = std::floor(static_cast<double>(x[d].value) * static_cast<double>(scale[d]));
    if (length < 1 || length > static_cast<double>(int64_t{1} << 50)) return std::nullopt;
    out[d] = Dim::known(static_cast<int64_t>(length));
  }
  return out;
}

// Resize: the `sizes` input gives the output shape, or constant scales do
// (resize_shape_from_scales); other scales (and Upsample's) are applied by
// the kernel, which reads them.
void infer_resize(InferContext& ctx) {
  ctx.set_output(0, Type::tensor(ctx.dtype(0)));
  const SymShape& x = ctx.dims(0);
  if (auto from_scales = resize_shape_from_scales(ctx, x)) return ctx.set_output(0, Type::tensor(ctx.dtype(0), *from_scales));
  if (ctx.node().op_type != "Resize" || ctx.opset() < 11 || !ctx.has_input(3)) return;
  auto sizes = ctx.known_values(3);
  if (!sizes) return;
  std::vector<int64_t> axes;  // opset 18: sizes name these axes only
  for (int64_t a : ctx.attr_ints("axes")) axes.push_back(ctx.axis(a, static_cast<int64_t>(x.size())));
  if (axes.empty())
    for (size_t d = 0; d < x.size(); ++d) axes.push_back(static_cast<int64_t>(d));
  if (sizes->size() != axes.size()) ctx.fail_input("sizes has {} values for {} axes", sizes->size(), axes.size());
  for (int64_t v : *sizes)
    if (v < 0) ctx.fail_input("sizes {} has a negative value", dims_str(known_dims(*sizes)));
  SymShape out = x;
  const std::string policy = ctx.attr_string("keep_aspect_ratio_policy");
  if (policy == "stretch") {
    for (size_t i = 0; i < axes.size(); ++i) out[axes[i]] = Dim::known((*sizes)[i]);
  } else {  // one scale for every axis: the smallest (not_larger) or largest sizes / input, rounded half up
    double scale = policy == "not_larger" ? INFINITY : 0.0;
    for (size_t i = 0; i < axes.size(); ++i) {
      if (!x[axes[i]].is_known() || x[axes[i]].value == 0) return;
      const double r = static_cast<double>((*sizes)[i]) / static_cast<double>(x[axes[i]].value);
      scale = policy == "not_larger" ? std::min(scale, r) : std::max(scale, r);
    }
    for (int64_t a : axes) out[a] = Dim::known(static_cast<int64_t>(scale * static_cast<double>(x[a].value) + 0.5));
  }
  ctx.set_output(0, Type::tensor(ctx.dtype(0), out));
}

// GridSample (4-D): [N, C, Ho, Wo] from X [N, C, H, W] and grid [N, Ho, Wo, 2].
void infer_grid_sample(InferContext& ctx) {
  ctx.set_output(0, Type::tensor(ctx.dtype(0)));
  // From opset 20, N-D: X [N, C, D1...Dr], grid [N, O1...Or, r].
  const SymShape &x = ctx.dims(0), &g = ctx.dims(1);
  const size_t r = x.size() >= 2 ? x.size() - 2 : 0;
  if (x.size() < 3 || (ctx.opset() < 20 && x.size() != 4) || g.size() != r + 2 ||
      (g.back().is_known() && g.back().value != static_cast<int64_t>(r)) ||
      (x[0].is_known() && g[0].is_known() && x[0] != g[0]))
    ctx.fail_input("X {} must be [N, C, D...] and grid {} [N, O..., {}]", dims_str(x), dims_str(g), r);
  SymShape out{x[0], x[1]};
  out.insert(out.end(), g.begin() + 1, g.end() - 1);
  ctx.set_output(0, Type::tensor(ctx.dtype(0), out));
}

// Col2Im: input [N, C * prod(block_shape), L] folds into [N, C, image_shape...].
void infer_col2im(InferContext& ctx) {
  ctx.set_output(0, Type::tensor(ctx.dtype(0)));
  const SymShape& x = ctx.dims(0);
  if (x.size() != 3) ctx.fail_input("input {} must be [N, C * prod(block_shape), L]", dims_str(x));
  const auto image = values_as_dims(ctx, 1), block = values_as_dims(ctx, 2);
  if (!image || !block) return;
  if (image->size() != block->size() || image->empty())
    ctx.fail_input("image_shape {} and block_shape {} must have one entry per spatial axis", dims_str(*image),
                   dims_str(*block));
  Dim channels = x[1];
  for (const Dim& b : *block) {
    if (b.is_known() && b.value < 1) ctx.fail_input("block_shape {} must be positive", dims_str(*block));
    if (channels.is_known() && b.is_known() && channels.value % b.value != 0)
      ctx.fail_input("input {} does not split into blocks {}", dims_str(x), dims_str(*block));
    channels = channels.is_known() && b.is_known() ? Dim::known(channels.value / b.value) : Dim::unknown();
  }
  SymShape out{x[0], channels};
  out.insert(out.end(), image->begin(), image->end());
  ctx.set_output(0, Type::tensor(ctx.dtype(0), out));
}

// AffineGrid: theta [N, 2, 3] (or [N, 3, 4]) and size [N, C, H, W] (or [N, C,
// D, H, W]) give the grid [N, H, W, 2] (or [N, D, H, W, 3]).
void infer_affine_grid(InferContext& ctx) {
  const SymShape& theta = ctx.dims(0);
  if (theta.size() != 3) ctx.fail_input("theta {} must be [N, 2, 3] or [N, 3, 4]", dims_str(theta));
  ctx.set_output(0, Type::tensor(ctx.dtype(0)));
  const auto size = values_as_dims(ctx, 1);
  if (!size) return;
  const size_t r = size->size() >= 2 ? size->size() - 2 : 0;
  if ((r != 2 && r != 3) || (theta[1].is_known() && theta[1].value != static_cast<int64_t>(r)) ||
      (theta[2].is_known() && theta[2].value != static_cast<int64_t>(r + 1)))
    ctx.fail_input("size {} must be [N, C, H, W] or [N, C, D, H, W] with theta {} [N, {}, {}]", dims_str(*size),
                   dims_str(theta), r, r + 1);
  SymShape out{(*size)[0]};
  out.insert(out.end(), size->begin() + 2, size->end());
  out.push_back(Dim::known(static_cast<int64_t>(r)));
  ctx.set_output(0, Type::tensor(ctx.dtype(0), out));
}

// NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss: input [N, C, d...],
// target [N, d...], weight [C]; the loss is [N, d...] or, reduced, a scalar.
void infer_loss(InferContext& ctx) {
  ctx.set_output(0, Type::tensor(ctx.dtype(0)));
  const std::string reduction = ctx.attr_string("reduction");
  if (reduction != "none" && reduction != "sum" && reduction != "mean")
    ctx.fail("reduction '{}' is not none, sum or mean", reduction);
  const SymShape& x = ctx.dims(0);
  if (x.size() < 2) ctx.fail_input("input {} must have rank >= 2 ([N, C, d1, ...])", dims_str(x));
  SymShape per_element = x;
  per_element.erase(per_element.begin() + 1);
  const SymShape& target = ctx.dims(1);
  bool fits = target.size() == per_element.size();
  for (size_t i = 0; fits && i < target.size(); ++i)
    fits = !target[i].is_known() || !per_element[i].is_known() || target[i] == per_element[i];
  if (!fits) ctx.fail_input("target {} does not match input {} ([N, d1, ...])", dims_str(target), dims_str(x));
  if (ctx.has_input(2)) {
    const SymShape& w = ctx.dims(2);
    if (w.size() != 1 || (w[0].is_known() && x[1].is_known() && w[0] != x[1]))
      ctx.fail_input("weight {} must be [C] for input {}", dims_str(w), dims_str(x));
  }
  ctx.set_output(0, Type::tensor(ctx.dtype(0), reduction == "none" ? per_element : SymShape{}));
  ctx.set_output(1, Type::tensor(ctx.dtype(0), x));  // SoftmaxCrossEntropyLoss's log_prob
}

// RNN, GRU, LSTM: Y [seq, dirs, batch, hidden] (layout 1: [batch, seq, dirs, hidden]), states [dirs, batch, hidden].
void infer_recurrent(InferContext& ctx) {
  for (size_t o = 0; o < ctx.num_outputs(); ++o) ctx.set_output(o, Type::tensor(ctx.dtype(0)));
  const SymShape& x = ctx.dims(0);
  if (x.size() != 3) ctx.fail_input("X must have rank 3");
  const bool batch_first = ctx.attr_int("layout") != 0;
  const Dim seq = batch_first ? x[1] : x[0], batch = batch_first ? x[0] : x[1];
  const Dim dirs = Dim::known(ctx.attr_string("direction") == "bidirectional" ? 2 : 1);
  const Dim hidden = ctx.has_attr("hidden_size") ? Dim::known(ctx.attr_int("hidden_size")) : Dim::unknown();
  ctx.set_output(0, Type::tensor(ctx.dtype(0), batch_first ? SymShape{batch, seq, dirs, hidden}
                                                           : SymShape{seq, dirs, batch, hidden}));
  const SymShape state = batch_first ? SymShape{batch, dirs, hidden} : SymShape{dirs, batch, hidden};
  for (size_t o = 1; o < ctx.num_outputs(); ++o) ctx.set_output(o, Type::tensor(ctx.dtype(0), state));
}

// The common type of two branch outputs: dims that differ become unknown.
Type join(const Type& a, const Type& b) {
  if (!a.is_tensor() || !b.is_tensor() || a.dtype() != b.dtype()) return a.is_tensor() ? Type::tensor(a.dtype()) : Type();
  if (!a.has_shape() || !b.has_shape() || a.rank() != b.rank()) return Type::tensor(a.dtype());
  SymShape d = a.dims();
  for (size_t i = 0; i < d.size(); ++i)
    if (d[i] != b.dims()[i]) d[i] = Dim::unknown();
  return Type::tensor(a.dtype(), d);
}

void infer_if(InferContext& ctx) {
  const Graph* then_g = ctx.node().attrs.get_graph("then_branch");
  const Graph* else_g = ctx.node().attrs.get_graph("else_branch");
  if (!then_g || !else_g) ctx.fail("If needs then_branch and else_branch");
  if (then_g->outputs().size() != else_g->outputs().size() || then_g->outputs().size() < ctx.num_outputs())
    ctx.fail("branches have {} and {} outputs for {} node outputs", then_g->outputs().size(),
             else_g->outputs().size(), ctx.num_outputs());
  for (size_t o = 0; o < ctx.num_outputs(); ++o) {
    const Type &a = then_g->outputs()[o]->type, &b = else_g->outputs()[o]->type;
    // ONNX gives both branches one type per output; joined, a mismatch left
    // the node's consumers typed for the then-branch's dtype at import
    if (a.is_tensor() && b.is_tensor() && a.dtype() != DType::kUndefined && b.dtype() != DType::kUndefined &&
        a.dtype() != b.dtype())
      ctx.fail("output {} is {} in then_branch but {} in else_branch", o, dtype_name(a.dtype()), dtype_name(b.dtype()));
    ctx.set_output(o, join(a, b));
  }
}

// Loop: carried values keep the body's types; scan outputs gain a leading iteration dim.
void infer_loop(InferContext& ctx) {
  const Graph* body = ctx.node().attrs.get_graph("body");
  if (!body) ctx.fail("Loop needs a body");
  const size_t carried = ctx.node().num_explicit_inputs() >= 2 ? ctx.node().num_explicit_inputs() - 2 : 0;
  for (size_t o = 0; o < ctx.num_outputs() && o + 1 < body->outputs().size(); ++o) {
    const Type& t = body->outputs()[o + 1]->type;
    if (o < carried) {
      // A carried value may change shape between iterations: keep what its start and the body agree on.
      const Value* initial = ctx.node().input(o + 2);
      ctx.set_output(o, initial ? join(initial->type, t) : Type::tensor(t.dtype()));
    } else if (t.is_tensor()) {
      SymShape d{Dim::unknown()};
      if (t.has_shape()) d.insert(d.end(), t.dims().begin(), t.dims().end());
      ctx.set_output(o, t.has_shape() ? Type::tensor(t.dtype(), d) : Type::tensor(t.dtype()));
    }
  }
}

// Scan (9+): state outputs keep what their start and the body agree on; scan
// outputs gain the iteration axis (at scan_output_axes, default 0), of a size
// known only at run time.
void infer_scan(InferContext& ctx) {
  const Graph* body = ctx.node().attrs.get_graph("body");
  if (!body) ctx.fail("Scan needs a body");
  const int64_t scans = ctx.attr_int("num_scan_inputs");
  const auto explicit_inputs = static_cast<int64_t>(ctx.node().num_explicit_inputs());
  if (scans < 1 || scans > explicit_inputs) ctx.fail("num_scan_inputs {} is out of range", scans);
  const auto states = static_cast<size_t>(explicit_inputs - scans);
  if (body->outputs().size() < states || ctx.num_outputs() > body->outputs().size())
    ctx.fail("the body has {} outputs for {} states and {} node outputs", body->outputs().size(), states,
             ctx.num_outputs());
  const std::vector<int64_t> axes = ctx.attr_ints("scan_output_axes");
  for (size_t o = 0; o < ctx.num_outputs(); ++o) {
    const Type& t = body->outputs()[o]->type;
    if (o < states) {
      const Value* initial = ctx.node().input(o);
      ctx.set_output(o, initial ? join(initial->type, t) : Type());
      continue;
    }
    if (!t.is_tensor()) continue;
    if (!t.has_shape()) {
      ctx.set_output(o, Type::tensor(t.dtype()));
      continue;
    }
    SymShape d = t.dims();
    const auto rank = static_cast<int64_t>(d.size()) + 1;
    const size_t k = o - states;
    const int64_t axis = ctx.axis(k < axes.size() ? axes[k] : 0, rank);
    d.insert(d.begin() + axis, Dim::unknown());
    ctx.set_output(o, Type::tensor(t.dtype(), d));
  }
}

struct Registrations {
  Registrations() {
    auto& r = SchemaRegistry::global();
    r.add(OpSchema("MatMul").inputs({kNumeric | kHalfs}).infer(infer_matmul));
    r.add(OpSchema("FusedMatMul", "anvil")
              .inputs({kFloatLike})
              .attr("transA", int64_t{0})
              .attr("transB", int64_t{0})
              .infer(infer_fused_matmul));
    // anvil.FusedGemm (passes/fuse_matmul.cc): Gemm, then an activation.
    r.add(OpSchema("FusedGemm", "anvil")
              .inputs({kFloatLike})
              .attr("alpha", 1.f)
              .attr("beta", 1.f)
              .attr("transA", int64_t{0})
              .attr("transB", int64_t{0})
              .infer(infer_gemm));
    r.add(OpSchema("Gemm")
              .inputs({kNumeric | kHalfs})
              .attr("alpha", 1.f)
              .attr("beta", 1.f)
              .attr("transA", int64_t{0})
              .attr("transB", int64_t{0})
              .infer(infer_gemm));
    for (const char* domain : {"", "anvil"})
      r.add(OpSchema(domain[0] ? "FusedConv" : "Conv", domain)
                .inputs({kFloatLike})
                .attr("auto_pad", std::string("NOTSET"))
                .attr("group", int64_t{1})
                .infer(infer_conv));
    r.add(OpSchema("FusedConvDepthwise", "anvil")
              .inputs({dtype_bit(DType::kFloat32)})  // what the pass makes, and all the kernels take
              .attr("group", int64_t{1})
              .required_attr("stride")
              .infer(infer_fused_conv_depthwise));
    r.add(OpSchema("SqueezeExcite", "anvil")
              .inputs({dtype_bit(DType::kFloat32)})  // what the pass makes, and both kernels take
              .infer(infer_squeeze_excite));
    for (const char* op : {"ConvInteger", "QLinearConv"})
      r.add(OpSchema(op).attr("auto_pad", std::string("NOTSET")).attr("group", int64_t{1}).infer(infer_integer_conv));
    r.add(OpSchema("ConvTranspose")
              .inputs({kFloatLike})
              .attr("auto_pad", std::string("NOTSET"))
              .attr("group", int64_t{1})
              .infer(infer_conv_transpose));
    for (const char* op : {"MaxPool", "AveragePool", "LpPool"})
      r.add(OpSchema(op)
                .required_attr("kernel_shape")
                .attr("auto_pad", std::string("NOTSET"))
                .attr("ceil_mode", int64_t{0})
                .infer(infer_pool));
    r.add(OpSchema("MaxPoolGrad", "anvil")
              .inputs({kFloats})
              .required_attr("kernel_shape")
              .attr("auto_pad", std::string("NOTSET"))
              .attr("ceil_mode", int64_t{0})
              .attr("relu_gate", int64_t{0})
              .infer(infer_max_pool_grad));
    for (const char* op : {"GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool"}) r.add(OpSchema(op).infer(infer_global_pool));
    for (const char* op : {"ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
                           "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare"})
      r.add(OpSchema(op).attr("keepdims", int64_t{1}).attr("noop_with_empty_axes", int64_t{0}).infer([](InferContext& ctx) {
        infer_reduce(ctx, 18, ctx.dtype(0));
      }));
    r.add(OpSchema("ReduceSum").attr("keepdims", int64_t{1}).attr("noop_with_empty_axes", int64_t{0}).infer([](InferContext& ctx) {
      infer_reduce(ctx, 13, ctx.dtype(0));
    }));
    for (const char* op : {"ArgMax", "ArgMin"})
      r.add(OpSchema(op).attr("axis", int64_t{0}).attr("keepdims", int64_t{1}).infer(infer_arg_reduce));
    r.add(OpSchema("TopK").attr("axis", int64_t{-1}).infer(infer_topk));
    for (const char* op : {"RNN", "GRU", "LSTM"})
      r.add(OpSchema(op)
                .inputs({kFloatLike, kFloatLike, kFloatLike, kFloatLike, dtype_bit(DType::kInt32), kFloatLike})
                .attr("direction", std::string("forward"))
                .attr("layout", int64_t{0})
                .infer(infer_recurrent));
    r.add(OpSchema("MaxUnpool").required_attr("kernel_shape").infer(infer_max_unpool));
    r.add(OpSchema("GridSample").inputs({kAll, kFloatLike}).infer(infer_grid_sample));  // X: any type (T1)
    // DeformConv: Y [N, M, offset's spatial dims] like X; the kernel checks the geometry.
    r.add(OpSchema("DeformConv").inputs({kFloatLike}).same_types({0, 1, 2, 3, 4}, {"X", "W", "offset", "B", "mask"}).infer([](InferContext& ctx) {
      const SymShape &x = ctx.dims(0), &w = ctx.dims(1), &off = ctx.dims(2);
      if (x.size() < 3 || w.size() != x.size() || off.size() != x.size())
        ctx.fail_input("X {}, W {} and offset {} must share a rank >= 3", dims_str(x), dims_str(w), dims_str(off));
      SymShape out{x[0], w[0]};
      out.insert(out.end(), off.begin() + 2, off.end());
      ctx.set_output(0, Type::tensor(ctx.dtype(0), out));
    }));
    // ImageDecoder: 1-D encoded bytes to [H, W, 3] (RGB, BGR) or [H, W, 1] (Grayscale); H and W are in the bytes.
    r.add(OpSchema("ImageDecoder").inputs({dtype_bit(DType::kUInt8)}).attr("pixel_format", std::string("RGB")).infer([](InferContext& ctx) {
      const std::string format = ctx.attr_string("pixel_format");
      if (format != "RGB" && format != "BGR" && format != "Grayscale")
        ctx.fail("pixel_format '{}' is not RGB, BGR or Grayscale", format);
      ctx.set_output(0, Type::tensor(DType::kUInt8, SymShape{Dim::unknown(), Dim::unknown(),
                                                             Dim::known(format == "Grayscale" ? 1 : 3)}));
    }));
    r.add(OpSchema("Col2Im").inputs({kAll, dtype_bit(DType::kInt64), dtype_bit(DType::kInt64)}).infer(infer_col2im));
    r.add(OpSchema("AffineGrid").inputs({kFloatLike, dtype_bit(DType::kInt64)}).attr("align_corners", int64_t{0}).infer(infer_affine_grid));
    r.add(OpSchema("Resize").attr("mode", std::string("nearest")).attr("keep_aspect_ratio_policy", std::string("stretch")).infer(infer_resize));
    r.add(OpSchema("Upsample").attr("mode", std::string("nearest")).infer(infer_resize));
    for (const bool nll : {true, false})
      r.add(OpSchema(nll ? "NegativeLogLikelihoodLoss" : "SoftmaxCrossEntropyLoss")
                .inputs({kFloatLike, kInt32And64, kFloatLike})
                .same_types({0, 2}, nll ? std::vector<std::string>{"input", "weight"}
                                        : std::vector<std::string>{"scores", "weights"})
                .attr("reduction", std::string("mean"))
                .infer(infer_loss));
    r.add(OpSchema("If").inputs({kBoolType}).infer(infer_if));
    r.add(OpSchema("Loop").infer(infer_loop));
    r.add(OpSchema("Scan").versions(9, 1 << 30).required_attr("num_scan_inputs").infer(infer_scan));
    // Scan-8: a batch axis first on every input and output; the types are the body's.
    r.add(OpSchema("Scan").versions(8, 8).required_attr("num_scan_inputs").infer([](InferContext& ctx) {
      const Graph* body = ctx.node().attrs.get_graph("body");
      if (!body) ctx.fail("Scan needs a body");
      if (ctx.num_outputs() > body->outputs().size())
        ctx.fail("the node has {} outputs, the body {}", ctx.num_outputs(), body->outputs().size());
      for (size_t o = 0; o < ctx.num_outputs(); ++o)
        if (body->outputs()[o]->type.is_tensor()) ctx.set_output(o, Type::tensor(body->outputs()[o]->type.dtype()));
    }));
  }
};
const Registrations registrations;

}  // namespace

SymShape matmul_dims(const InferContext& ctx, SymShape a, SymShape b) {
  if (a.empty() || b.empty())
    ctx.fail_input("MatMul operands {} and {} must have rank >= 1", dims_str(a), dims_str(b));
  const SymShape a0 = a, b0 = b;
  const bool vec_a = a.size() == 1, vec_b = b.size() == 1;
  if (vec_a) a.insert(a.begin(), Dim::known(1));
  if (vec_b) b.push_back(Dim::known(1));
  const Dim &k1 = a.back(), &k2 = b[b.size() - 2];
  if (k1.is_known() && k2.is_known() && k1 != k2)
    ctx.fail_input("MatMul operands {} and {} have inner dimensions {} and {}", dims_str(a0), dims_str(b0), k1.value,
                   k2.value);
  SymShape out = broadcast(ctx, SymShape(a.begin(), a.end() - 2), SymShape(b.begin(), b.end() - 2));
  if (!vec_a) out.push_back(a[a.size() - 2]);
  if (!vec_b) out.push_back(b.back());
  return out;
}

}  // namespace anvil::ir::schemas
