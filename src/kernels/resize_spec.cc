// The reading of Resize and Upsample nodes shared by their kernels
// (resize_spec.h).
#include "kernels/resize_spec.h"

#include <algorithm>
#include <array>
#include <cmath>

#include "core/checked.h"
#include "kernels/ref/common.h"

namespace anvil::kernels {

namespace {

using Options = ResizeOptions;
using Sample = ResizeSample;
using Tap = ResizeTap;

// The input coordinate of output index x_out. `out` is the unrounded output
// length in * scale (ONNX's reference, and ONNX Runtime, use it when scales are given).
double source_coordinate(const Options& o, double x_out, double scale, int64_t in, double out, int64_t out_int,
                         double roi_start, double roi_end) {
  const std::string& t = o.transform;
  if (t == "half_pixel") return (x_out + 0.5) / scale - 0.5;
  if (t == "half_pixel_symmetric") {  // opset 19: the rounding of the output size split evenly at both ends
    const double offset = static_cast<double>(in) / 2 * (1 - static_cast<double>(out_int) / out);
    return offset + (x_out + 0.5) / scale - 0.5;
  }
  if (t == "pytorch_half_pixel") return out > 1 ? (x_out + 0.5) / scale - 0.5 : 0.0;
  if (t == "align_corners") return out == 1 ? 0.0 : x_out * static_cast<double>(in - 1) / (out - 1);
  if (t == "asymmetric") return x_out / scale;
  if (t == "tf_half_pixel_for_nn") return (x_out + 0.5) / scale;
  // tf_crop_and_resize
  const double span = (roi_end - roi_start) * static_cast<double>(in - 1);
  return out > 1 ? roi_start * static_cast<double>(in - 1) + x_out * span / (out - 1)
                 : 0.5 * (roi_start + roi_end) * static_cast<double>(in - 1);
}

int64_t nearest_index(const Options& o, double x) {
  const double f = std::floor(x);
  if (o.nearest == "floor") return static_cast<int64_t>(f);
  if (o.nearest == "ceil") return static_cast<int64_t>(std::ceil(x));
  const double frac = x - f;
  if (frac == 0.5) return static_cast<int64_t>(o.nearest == "round_prefer_ceil" ? f + 1 : f);
  return static_cast<int64_t>(std::round(x));
}

// Keys' cubic convolution weights for the 4 taps around x (offsets -1..2).
std::array<double, 4> cubic_weights(double r, double a) {
  auto far = [a](double d) { return ((a * d - 5 * a) * d + 8 * a) * d - 4 * a; };  // 1 < d < 2
  auto near = [a](double d) { return ((a + 2) * d - (a + 3)) * d * d + 1; };      // d <= 1
  return {far(r + 1), near(r), near(1 - r), far(2 - r)};
}

// Antialiased linear and cubic (opset 18): the filter stretched by 1 / scale
// when downsampling, its taps the n integers nearest x (the lower on ties,
// edge-padded), weights normalized; exclude_outside drops taps off the input.
// The filter's scale s, and the taps each antialiased sample takes (2 - 2 start).
double antialias_filter_scale(double scale) { return std::max(std::min(scale, 1.0), 1e-9); }
int64_t antialias_first_tap(const Options& o, double s) {
  return static_cast<int64_t>(std::floor((o.mode == "linear" ? -1.0 : -2.0) / s)) + 1;
}

Sample antialiased_sample(const Options& o, double x, int64_t in, double scale) {
  const double s = antialias_filter_scale(scale);  // the filter spans at most 2e9 input samples
  const double ratio = x == std::floor(x) ? 1.0 : x - std::floor(x);  // in (0, 1]
  const auto left = static_cast<int64_t>(std::ceil(x)) - 1;           // the largest integer below x
  const bool linear = o.mode == "linear";
  const int64_t start = antialias_first_tap(o, s);
  const int64_t n = 2 - 2 * start;  // taps left + start ... left + start + n - 1
  auto weight = [&](double d) {
    d = std::fabs(d);
    if (linear) return std::clamp(1 - d, 0.0, 1.0);
    const double a = o.cubic_a;
    if (d <= 1) return ((a + 2) * d - (a + 3)) * d * d + 1;
    if (d < 2) return ((a * d - 5 * a) * d + 8 * a) * d - 4 * a;
    return 0.0;
  };
  Sample out;
  double total = 0;
  for (int64_t j = 0; j < n; ++j) {
    const int64_t i = left + start + j;
    if (o.exclude_outside && (i < 0 || i >= in)) continue;
    const double w = weight(s * (static_cast<double>(start + j) - ratio));  // x = left + ratio
    out.taps.push_back({std::clamp<int64_t>(i, 0, in - 1), w});
    total += w;
  }
  if (total != 0)
    for (Tap& t : out.taps) t.weight /= total;
  return out;
}

Sample make_sample(const Options& o, double x, int64_t in, bool crop, double scale) {
  Sample s;
  if (crop && !(x >= 0 && x <= static_cast<double>(in - 1))) {  // NaN (from the roi) too
    s.outside = true;
    return s;
  }
  // Far beyond the input every tap reads the edge: bound x so no integer conversion overflows.
  x = std::clamp(x, -1e12, 1e12);
  if (o.antialias && o.mode != "nearest") return antialiased_sample(o, x, in, scale);
  auto clamp = [in](int64_t i) { return std::clamp<int64_t>(i, 0, in - 1); };
  if (o.mode == "nearest") {
    s.taps.push_back({clamp(nearest_index(o, x)), 1.0});
  } else if (o.mode == "linear") {
    const double f = std::floor(x), r = x - f;
    const auto i0 = static_cast<int64_t>(f);
    s.taps.push_back({clamp(i0), 1 - r});
    s.taps.push_back({clamp(i0 + 1), r});
  } else {
    const double f = std::floor(x);
    const auto i0 = static_cast<int64_t>(f);
    const std::array<double, 4> w = cubic_weights(x - f, o.cubic_a);
    double total = 0;
    for (int k = 0; k < 4; ++k) {
      const int64_t i = i0 - 1 + k;
      if (o.exclude_outside && (i < 0 || i >= in)) continue;
      s.taps.push_back({clamp(i), w[static_cast<size_t>(k)]});
      total += w[static_cast<size_t>(k)];
    }
    if (o.exclude_outside && total != 0)
      for (Tap& t : s.taps) t.weight /= total;
  }
  return s;
}

// The most taps an axis's samples may hold in all (16 bytes each): a
// hostile scale must not make prepare build billions of them.
constexpr int64_t kMaxResizeTaps = int64_t{1} << 26;

void check_options(const PrepareContext& ctx, const Options& o, bool upsample) {
  ANVIL_PREPARE_CHECK(ctx, o.mode == "nearest" || o.mode == "linear" || o.mode == "cubic", ErrorKind::kInvalidModel,
                      "mode '{}' is not nearest, linear or cubic", o.mode);
  ANVIL_PREPARE_CHECK(ctx, !upsample || o.mode != "cubic", ErrorKind::kInvalidModel, "Upsample has no cubic mode");
  const std::string& t = o.transform;
  ANVIL_PREPARE_CHECK(ctx, t == "half_pixel" || t == "half_pixel_symmetric" || t == "pytorch_half_pixel" || t == "align_corners" ||
                               t == "asymmetric" || t == "tf_half_pixel_for_nn" || t == "tf_crop_and_resize",
                      ErrorKind::kInvalidModel, "coordinate_transformation_mode '{}' is not known", t);
  const std::string& n = o.nearest;
  ANVIL_PREPARE_CHECK(ctx, n == "round_prefer_floor" || n == "round_prefer_ceil" || n == "floor" || n == "ceil",
                      ErrorKind::kInvalidModel, "nearest_mode '{}' is not known", n);
  const std::string policy = ctx.attrs().get_string("keep_aspect_ratio_policy", "stretch");
  ANVIL_PREPARE_CHECK(ctx, policy == "stretch" || policy == "not_larger" || policy == "not_smaller",
                      ErrorKind::kInvalidModel, "keep_aspect_ratio_policy '{}' is not known", policy);
}

// Scales from the attribute (Upsample-7), input 1 (Upsample-9, Resize-10) or input 2.
std::vector<double> read_scales(const PrepareContext& ctx, const std::vector<size_t>& axes, size_t rank, bool upsample) {
  std::vector<float> v;
  if (upsample && ctx.opset() < 9) {
    v = ctx.attrs().get_floats("scales");
  } else {
    const size_t at = upsample || ctx.opset() < 11 ? 1 : 2;
    ANVIL_PREPARE_CHECK(ctx, ctx.has_input(at), ErrorKind::kInvalidModel, "one of scales and sizes is required");
    const Tensor& t = ctx.require_constant(at, "scales");
    ANVIL_PREPARE_CHECK(ctx, t.dtype() == DType::kFloat32, ErrorKind::kInvalidModel, "scales must be float32");
    v.assign(t.data<float>(), t.data<float>() + t.numel());
  }
  ANVIL_PREPARE_CHECK(ctx, v.size() == axes.size(), ErrorKind::kInvalidArgument, "{} scales for {} axes", v.size(),
                      axes.size());
  std::vector<double> out(rank, 1.0);
  for (size_t i = 0; i < v.size(); ++i) {
    ANVIL_PREPARE_CHECK(ctx, v[i] > 0 && std::isfinite(v[i]), ErrorKind::kInvalidArgument, "scale {} must be positive",
                        v[i]);
    out[axes[i]] = v[i];
  }
  return out;
}

// The roi's starts and ends for `axes` (the other axes keep 0 and 1).
void read_roi(const PrepareContext& ctx, const std::vector<size_t>& axes, std::vector<double>& start,
              std::vector<double>& end) {
  ANVIL_PREPARE_CHECK(ctx, ctx.has_input(1), ErrorKind::kInvalidModel, "tf_crop_and_resize needs roi");
  const Tensor& roi = ctx.require_constant(1, "roi");
  const size_t n = axes.size();
  ANVIL_PREPARE_CHECK(ctx, roi.numel() == static_cast<int64_t>(2 * n), ErrorKind::kInvalidArgument,
                      "roi has {} values for {} axes", roi.numel(), n);
  ANVIL_PREPARE_CHECK(ctx, dtype_in(roi.dtype(), kFloats | kHalfs), ErrorKind::kInvalidModel,
                      "roi is {}, not a float type", dtype_name(roi.dtype()));
  // (ONNX's T2 takes float16 too, which was read as float32, past the roi's end)
  for (size_t i = 0; i < n; ++i) {
    start[axes[i]] = element_as_double(roi, static_cast<int64_t>(i));
    end[axes[i]] = element_as_double(roi, static_cast<int64_t>(i + n));
  }
}

}  // namespace

ResizeOptions resize_options(const ir::Node& node, bool upsample) {
  const ir::Attributes& a = node.attrs;
  ResizeOptions o;
  o.mode = a.get_string("mode", "nearest");
  if (upsample || node.opset < 11) {  // Upsample and Resize-10: asymmetric coordinates, floor for nearest
    o.transform = "asymmetric";
    o.nearest = "floor";
  } else {
    o.transform = a.get_string("coordinate_transformation_mode", "half_pixel");
    o.nearest = a.get_string("nearest_mode", "round_prefer_floor");
    o.cubic_a = a.get_float("cubic_coeff_a", -0.75f);
    o.exclude_outside = a.get_int("exclude_outside", 0) != 0;
    o.extrapolation = a.get_float("extrapolation_value", 0.f);
    o.antialias = a.get_int("antialias", 0) != 0;
  }
  return o;
}

ResizeSpec resize_spec(const PrepareContext& ctx, const ResizeOptions& opt, bool upsample) {
  check_options(ctx, opt, upsample);
  const Shape& x = ctx.input_shape(0);
  const size_t rank = x.size();
  // Opset 18's `axes`: scales, sizes and roi name those axes only.
  std::vector<size_t> axes;
  for (int64_t a : ctx.attrs().get_ints("axes"))
    axes.push_back(static_cast<size_t>(normalize_axis(ctx, a, static_cast<int64_t>(rank))));
  if (axes.empty())
    for (size_t d = 0; d < rank; ++d) axes.push_back(d);
  std::vector<double> scales(rank, 1.0), roi_start(rank, 0.0), roi_end(rank, 1.0);
  const bool crop = opt.transform == "tf_crop_and_resize";
  if (crop) read_roi(ctx, axes, roi_start, roi_end);
  // The output length before rounding; tf_crop_and_resize scales the roi's extent.
  std::vector<double> length(rank);
  Shape out;
  if (!upsample && ctx.opset() >= 11 && ctx.has_input(3)) {  // sizes: the schema's output shape
    out = ctx.output_shape(0);
    for (size_t d = 0; d < rank; ++d) {
      scales[d] = x[d] ? static_cast<double>(out[d]) / static_cast<double>(x[d]) : 1;
      length[d] = static_cast<double>(out[d]);
    }
    // keep_aspect_ratio_policy: one scale for every axis, the smallest or largest sizes / input.
    const std::string policy = ctx.attrs().get_string("keep_aspect_ratio_policy", "stretch");
    if (policy != "stretch") {
      const std::vector<int64_t> sizes = tensor_to_ints(ctx.require_constant(3, "sizes"));
      double scale = policy == "not_larger" ? INFINITY : 0.0;
      for (size_t i = 0; i < axes.size() && i < sizes.size(); ++i) {
        const double r = static_cast<double>(sizes[i]) / static_cast<double>(x[axes[i]]);
        scale = policy == "not_larger" ? std::min(scale, r) : std::max(scale, r);
      }
      for (size_t a : axes) {
        scales[a] = scale;
        length[a] = scale * static_cast<double>(x[a]);
      }
    }
  } else {  // scales are floats: read here
    scales = read_scales(ctx, axes, rank, upsample);
    for (size_t d = 0; d < rank; ++d) {
      length[d] = static_cast<double>(x[d]) * scales[d] * (crop ? roi_end[d] - roi_start[d] : 1.0);
      const double size = std::floor(length[d]);
      ANVIL_PREPARE_CHECK(ctx, size >= 0 && size < 9.0e18, ErrorKind::kInvalidArgument,
                          "scale {} of axis {} gives no valid size", scales[d], d);
      out.push_back(static_cast<int64_t>(size));
    }
  }
  check_allocation(shape_nbytes(out, ctx.input_dtype(0)), ctx.node().describe() + ": the resized output");
  for (size_t d = 0; d < rank; ++d)
    ANVIL_PREPARE_CHECK(ctx, x[d] > 0 || out[d] == 0, ErrorKind::kInvalidArgument,
                        "axis {} is empty in the input but {} long in the output: nothing to sample", d, out[d]);
  ResizeSpec spec;
  spec.out = out;
  if (shape_numel(out) == 0) return spec;  // nothing to sample (and an axis may be long beside an empty one)
  for (size_t d = 0; d < rank; ++d) {
    if (opt.antialias && opt.mode != "nearest") {  // a tiny scale widens the filter to many taps per sample
      const int64_t taps = 2 - 2 * antialias_first_tap(opt, antialias_filter_scale(scales[d]));
      ANVIL_PREPARE_CHECK(ctx, taps <= kMaxResizeTaps / std::max<int64_t>(out[d], 1), ErrorKind::kInvalidArgument,
                          "antialiased resampling of axis {} by scale {} takes {} taps for each of {} outputs: more than "
                          "{} in all",
                          d, scales[d], taps, out[d], kMaxResizeTaps);
    }
    ResizeAxis p{d, x[d], out[d], {}};
    bool identity = x[d] == out[d];
    for (int64_t i = 0; i < out[d]; ++i) {
      const double c =
          source_coordinate(opt, static_cast<double>(i), scales[d], x[d], length[d], out[d], roi_start[d], roi_end[d]);
      p.samples.push_back(make_sample(opt, c, x[d], crop, scales[d]));
      const Sample& s = p.samples.back();
      identity = identity && !s.outside && s.taps.size() >= 1 &&
                 std::all_of(s.taps.begin(), s.taps.end(), [&](const Tap& t) { return t.index == i || t.weight == 0; });
    }
    if (!identity) spec.axes.push_back(std::move(p));
  }
  return spec;
}

}  // namespace anvil::kernels
