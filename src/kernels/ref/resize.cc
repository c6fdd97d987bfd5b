// Resize (opsets 10-19) and Upsample (7, 9): nearest, linear and cubic
// interpolation over any axes, with ONNX's coordinate transformations
// (half_pixel, pytorch_half_pixel, align_corners, asymmetric,
// tf_half_pixel_for_nn, tf_crop_and_resize) and nearest rounding modes.
//
// Interpolation is separable: for each axis whose size or mapping changes,
// one pass in double resamples along that axis with the per-output-index
// taps that resize_spec worked out in prepare(). A tap list marked `outside`
// (only tf_crop_and_resize) yields extrapolation_value. Weights of later
// passes sum to one, so extrapolated lines stay extrapolated.
#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>

#include "kernels/ref/common.h"
#include "kernels/registry.h"
#include "kernels/resize_spec.h"

namespace anvil::kernels {

namespace {

class ResizeKernel : public Kernel {
 public:
  ResizeKernel(const ir::Node& node, bool upsample) : upsample_(upsample), opt_(resize_options(node, upsample)) {}

  std::vector<TensorType> prepare(const PrepareContext& ctx) override {
    ResizeSpec spec = resize_spec(ctx, opt_, upsample_);
    plans_ = std::move(spec.axes);
    in_shape_ = ctx.input_shape(0);
    return {TensorType(ctx.input_dtype(0), spec.out)};
  }

  void run(const RunContext& ctx) const override {
    dispatch_dtype(ctx.in(0).dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      if constexpr (!std::is_same_v<T, bool>) compute<T>(ctx);
    });
  }

 private:
  template <typename T>
  void compute(const RunContext& ctx) const {
    if (ctx.out(0).numel() == 0) return;  // resize_spec made no samples
    std::vector<double> cur(ctx.in(0).data<T>(), ctx.in(0).data<T>() + ctx.in(0).numel());
    std::vector<double> next;
    Shape shape = in_shape_;
    for (const ResizeAxis& p : plans_) {
      const int64_t outer = shape_numel(Shape(shape.begin(), shape.begin() + static_cast<std::ptrdiff_t>(p.axis)));
      const int64_t inner = shape_numel(Shape(shape.begin() + static_cast<std::ptrdiff_t>(p.axis) + 1, shape.end()));
      next.assign(static_cast<size_t>(outer * p.out * inner), 0.0);
#pragma omp parallel for if (outer * p.out * inner > 32768)
      for (int64_t o = 0; o < outer; ++o)
        for (int64_t i = 0; i < p.out; ++i) {
          const ResizeSample& s = p.samples[static_cast<size_t>(i)];
          double* dst = next.data() + (o * p.out + i) * inner;
          if (s.outside) {
            std::fill(dst, dst + inner, static_cast<double>(opt_.extrapolation));
            continue;
          }
          for (const ResizeTap& t : s.taps) {
            const double* src = cur.data() + (o * p.in + t.index) * inner;
            for (int64_t j = 0; j < inner; ++j) dst[j] += t.weight * src[j];
          }
        }
      shape[p.axis] = p.out;
      cur.swap(next);
    }
    T* y = ctx.out(0).data<T>();
    for (size_t i = 0; i < cur.size(); ++i) y[i] = convert<T>(cur[i]);
  }

  // Integers round to nearest (and saturate): interpolated values are not whole.
  template <typename T>
  static T convert(double v) {
    if constexpr (std::is_integral_v<T>) {
      if (std::isnan(v)) return T(0);
      v = std::nearbyint(v);
      if (v <= static_cast<double>(std::numeric_limits<T>::lowest())) return std::numeric_limits<T>::lowest();
      if (v >= static_cast<double>(std::numeric_limits<T>::max())) return std::numeric_limits<T>::max();
      return static_cast<T>(v);
    } else if constexpr (std::is_class_v<T>) {
      return T(static_cast<float>(v));
    } else {
      return static_cast<T>(v);
    }
  }

  bool upsample_;
  ResizeOptions opt_;
  std::vector<ResizeAxis> plans_;
  Shape in_shape_;
};

}  // namespace

ANVIL_REGISTER_OP_VERSIONS("Resize", 10, 19);  // 18: antialias, axes, keep_aspect_ratio_policy; 19: half_pixel_symmetric
ANVIL_REGISTER_OP_VERSIONS("Upsample", 7, 9);
ANVIL_REGISTER_KERNEL("Resize", kRef, [](const ir::Node& n) -> std::unique_ptr<Kernel> {
  return std::make_unique<ResizeKernel>(n, false);
});
ANVIL_REGISTER_KERNEL("Upsample", kRef, [](const ir::Node& n) -> std::unique_ptr<Kernel> {
  return std::make_unique<ResizeKernel>(n, true);
});

}  // namespace anvil::kernels
