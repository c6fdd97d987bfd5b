// Spatial geometry of Conv, ConvTranspose and the pooling ops, and Gemm's
// product dimensions (see nn_geometry.h).
//
// Everything a kernel needs about windows is settled here once, so the
// reference and oneDNN kernels see the same numbers. The output sizes are the
// op schema's (src/ir/schemas/nn.cc, PrepareContext::output_shape()); the pads
// are derived from them where auto_pad or ceil_mode leave them implicit:
//   effective kernel  e = (k - 1) * d + 1
//   Conv / pooling    out = floor((in + pb + pe - e) / s) + 1   (ceil for ceil_mode)
//   ConvTranspose     out = s * (in - 1) + output_padding + e - pb - pe
// auto_pad SAME_* replaces the pads by the ones that give out = ceil(in / s)
// (ConvTranspose: out = in * s), the odd unit going at the end for SAME_UPPER
// and at the beginning for SAME_LOWER.
#include "kernels/nn_geometry.h"

#include <algorithm>
#include <string>

#include "core/check.h"

namespace anvil::kernels {
namespace {

enum class AutoPad { kNotSet, kSameUpper, kSameLower, kValid };

AutoPad read_auto_pad(const PrepareContext& ctx) {
  std::string v = ctx.attrs().get_string("auto_pad", "NOTSET");
  // Some exporters write an empty string for the default.
  if (v == "NOTSET" || v.empty()) return AutoPad::kNotSet;
  if (v == "SAME_UPPER") return AutoPad::kSameUpper;
  if (v == "SAME_LOWER") return AutoPad::kSameLower;
  if (v == "VALID") return AutoPad::kValid;
  ctx.fail(ErrorKind::kInvalidModel, "auto_pad '{}' is not one of NOTSET, SAME_UPPER, SAME_LOWER, VALID", v);
}

// An ints attribute with `count` entries (or `fallback` repeated when absent).
std::vector<int64_t> ints_attr(const PrepareContext& ctx, const char* name, size_t count, int64_t fallback) {
  if (!ctx.attrs().has(name)) return std::vector<int64_t>(count, fallback);
  std::vector<int64_t> v = ctx.attrs().get_ints(name);
  ANVIL_PREPARE_CHECK(ctx, v.size() == count, ErrorKind::kInvalidModel, "{} {} has {} entries, expected {}", name,
                      shape_str(v), v.size(), count);
  return v;
}

void check_positive(const PrepareContext& ctx, const char* name, const std::vector<int64_t>& v) {
  for (int64_t x : v)
    ANVIL_PREPARE_CHECK(ctx, x > 0, ErrorKind::kInvalidModel, "{} {} must be positive", name, shape_str(v));
}

void check_non_negative(const PrepareContext& ctx, const char* name, const std::vector<int64_t>& v) {
  for (int64_t x : v)
    ANVIL_PREPARE_CHECK(ctx, x >= 0, ErrorKind::kInvalidModel, "{} {} must not be negative", name, shape_str(v));
}

size_t spatial_rank(const PrepareContext& ctx, const Shape& x) {
  ANVIL_PREPARE_CHECK(ctx, x.size() >= 3, ErrorKind::kInvalidArgument,
                      "input has shape {}; expected [N, C, D1, ...] with at least one spatial dimension", shape_str(x));
  for (int64_t d : x)
    ANVIL_PREPARE_CHECK(ctx, d >= 0, ErrorKind::kInvalidArgument, "input shape {} is not fully known", shape_str(x));
  return x.size() - 2;
}

int64_t effective(const SpatialGeometry& g, size_t i) { return (g.kernel[i] - 1) * g.dilations[i] + 1; }

// Strides, dilations, (for NOTSET) pads and the output sizes: the part all three ops share.
SpatialGeometry common_geometry(const PrepareContext& ctx, size_t k, const std::vector<int64_t>& kernel,
                                const Shape* out = nullptr) {
  SpatialGeometry g;
  g.kernel = kernel;
  check_positive(ctx, "kernel_shape", g.kernel);
  g.strides = ints_attr(ctx, "strides", k, 1);
  check_positive(ctx, "strides", g.strides);
  g.dilations = ints_attr(ctx, "dilations", k, 1);
  check_positive(ctx, "dilations", g.dilations);
  std::vector<int64_t> pads = ints_attr(ctx, "pads", 2 * k, 0);
  check_non_negative(ctx, "pads", pads);
  g.pads_begin.assign(pads.begin(), pads.begin() + static_cast<std::ptrdiff_t>(k));
  g.pads_end.assign(pads.begin() + static_cast<std::ptrdiff_t>(k), pads.end());
  g.ceil_extra.assign(k, 0);
  g.output_padding.assign(k, 0);
  const Shape& y = out ? *out : ctx.output_shape(0);
  ANVIL_CHECK(y.size() == k + 2, ErrorKind::kInternal, "{}: the output has rank {} for {} spatial dimensions",
              ctx.node().describe(), y.size(), k);
  g.out.assign(y.begin() + 2, y.end());
  return g;
}

// SAME_* padding of a windowed op (Conv, pooling), for out = ceil(in / s).
void same_pads(SpatialGeometry& g, size_t i, int64_t in, AutoPad mode) {
  int64_t total = std::max<int64_t>(0, (g.out[i] - 1) * g.strides[i] + effective(g, i) - in);
  int64_t small = total / 2, large = total - small;
  g.pads_begin[i] = mode == AutoPad::kSameUpper ? small : large;
  g.pads_end[i] = mode == AutoPad::kSameUpper ? large : small;
}

}  // namespace

SpatialGeometry conv_geometry(const PrepareContext& ctx, const Shape& x, const std::vector<int64_t>& kernel,
                              const Shape* y) {
  const size_t k = spatial_rank(ctx, x);
  ANVIL_PREPARE_CHECK(ctx, kernel.size() == k, ErrorKind::kInvalidArgument,
                      "weights have {} spatial dimensions but the input {} has {}", kernel.size(), shape_str(x), k);
  if (ctx.attrs().has("kernel_shape")) {
    std::vector<int64_t> attr = ctx.attrs().get_ints("kernel_shape");
    ANVIL_PREPARE_CHECK(ctx, attr == kernel, ErrorKind::kInvalidModel,
                        "kernel_shape {} does not match the weights' spatial shape {}", shape_str(attr),
                        shape_str(kernel));
  }
  SpatialGeometry g = common_geometry(ctx, k, kernel, y);
  AutoPad mode = read_auto_pad(ctx);
  for (size_t i = 0; i < k; ++i) {
    const int64_t in = x[i + 2];
    if (mode == AutoPad::kSameUpper || mode == AutoPad::kSameLower) {
      same_pads(g, i, in, mode);
      continue;
    }
    if (mode == AutoPad::kValid) g.pads_begin[i] = g.pads_end[i] = 0;
  }
  return g;
}

SpatialGeometry conv_transpose_geometry(const PrepareContext& ctx, const Shape& x, const std::vector<int64_t>& kernel) {
  const size_t k = spatial_rank(ctx, x);
  ANVIL_PREPARE_CHECK(ctx, kernel.size() == k, ErrorKind::kInvalidArgument,
                      "weights have {} spatial dimensions but the input {} has {}", kernel.size(), shape_str(x), k);
  if (ctx.attrs().has("kernel_shape")) {
    std::vector<int64_t> attr = ctx.attrs().get_ints("kernel_shape");
    ANVIL_PREPARE_CHECK(ctx, attr == kernel, ErrorKind::kInvalidModel,
                        "kernel_shape {} does not match the weights' spatial shape {}", shape_str(attr),
                        shape_str(kernel));
  }
  SpatialGeometry g = common_geometry(ctx, k, kernel);
  g.output_padding = ints_attr(ctx, "output_padding", k, 0);
  check_non_negative(ctx, "output_padding", g.output_padding);
  AutoPad mode = read_auto_pad(ctx);

  // output_shape may list the spatial sizes only or the full [N, C, D1, ...].
  std::vector<int64_t> target;
  if (ctx.attrs().has("output_shape")) {
    std::vector<int64_t> os = ctx.attrs().get_ints("output_shape");
    ANVIL_PREPARE_CHECK(ctx, os.size() == k || os.size() == k + 2, ErrorKind::kInvalidModel,
                        "output_shape {} has {} entries for {} spatial dimensions", shape_str(os), os.size(), k);
    target.assign(os.end() - static_cast<std::ptrdiff_t>(k), os.end());
    check_positive(ctx, "output_shape", target);
  } else if (mode == AutoPad::kSameUpper || mode == AutoPad::kSameLower) {
    for (size_t i = 0; i < k; ++i) target.push_back(x[i + 2] * g.strides[i]);
  }

  for (size_t i = 0; i < k; ++i) {
    const int64_t in = x[i + 2];
    const int64_t natural = g.strides[i] * (in - 1) + g.output_padding[i] + effective(g, i);
    if (!target.empty()) {
      // ONNX: total = natural - output_shape, split with the odd unit at the end
      // for SAME_UPPER and at the beginning otherwise. A target larger than the
      // natural size has no contributions past its end: that is more output
      // padding, not negative padding.
      int64_t total = natural - target[i];
      if (total < 0) {
        g.output_padding[i] -= total;
        total = 0;
      }
      int64_t small = total / 2, large = total - small;
      g.pads_begin[i] = mode == AutoPad::kSameUpper ? small : large;
      g.pads_end[i] = mode == AutoPad::kSameUpper ? large : small;
      continue;
    }
    if (mode == AutoPad::kValid) g.pads_begin[i] = g.pads_end[i] = 0;
  }
  return g;
}

SpatialGeometry pool_geometry(const PrepareContext& ctx, const Shape& x, const Shape* y) {
  const size_t k = spatial_rank(ctx, x);
  ANVIL_PREPARE_CHECK(ctx, ctx.attrs().has("kernel_shape"), ErrorKind::kInvalidModel,
                      "the kernel_shape attribute is required");
  std::vector<int64_t> kernel = ctx.attrs().get_ints("kernel_shape");
  ANVIL_PREPARE_CHECK(ctx, kernel.size() == k, ErrorKind::kInvalidModel,
                      "kernel_shape {} has {} entries but the input {} has {} spatial dimensions", shape_str(kernel),
                      kernel.size(), shape_str(x), k);
  SpatialGeometry g = common_geometry(ctx, k, kernel, y);
  AutoPad mode = read_auto_pad(ctx);
  const bool ceil_mode = ctx.attrs().get_int("ceil_mode", 0) != 0;
  if (mode == AutoPad::kNotSet) {
    // A window made only of padding has no value to pool (ONNX Runtime rejects it too).
    for (size_t i = 0; i < k; ++i)
      ANVIL_PREPARE_CHECK(ctx, g.pads_begin[i] < g.kernel[i] && g.pads_end[i] < g.kernel[i], ErrorKind::kInvalidModel,
                          "pads {}+{} must be smaller than kernel_shape {}", shape_str(g.pads_begin),
                          shape_str(g.pads_end), shape_str(g.kernel));
  }
  for (size_t i = 0; i < k; ++i) {
    const int64_t in = x[i + 2];
    if (mode == AutoPad::kSameUpper || mode == AutoPad::kSameLower) {
      same_pads(g, i, in, mode);
      continue;
    }
    if (mode == AutoPad::kValid) g.pads_begin[i] = g.pads_end[i] = 0;
    // In ceil mode the last window may run past the end padding: that extra
    // is padding the window never counts.
    const int64_t padded = in + g.pads_begin[i] + g.pads_end[i];
    if (ceil_mode) g.ceil_extra[i] = std::max<int64_t>(0, (g.out[i] - 1) * g.strides[i] + effective(g, i) - padded);
    g.pads_end[i] += g.ceil_extra[i];
  }
  return g;
}

GemmDims gemm_dims(const PrepareContext& ctx) {
  const Shape &a = ctx.input_shape(0), &b = ctx.input_shape(1);
  const bool ta = ctx.attrs().get_int("transA", 0) != 0, tb = ctx.attrs().get_int("transB", 0) != 0;
  ANVIL_PREPARE_CHECK(ctx, a.size() == 2 && b.size() == 2 && (ta ? a[0] : a[1]) == (tb ? b[1] : b[0]),
                      ErrorKind::kInvalidModel, "A {} (transA={}) and B {} (transB={}) do not multiply", shape_str(a),
                      int(ta), shape_str(b), int(tb));
  return {ta ? a[1] : a[0], ta ? a[0] : a[1], tb ? b[0] : b[1], ta, tb};
}

}  // namespace anvil::kernels
