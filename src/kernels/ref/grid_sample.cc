// GridSample (opset 16, 4-D): samples X [N, C, H, W] at the normalized
// (x, y) positions of grid [N, Ho, Wo, 2], by nearest, bilinear or bicubic
// interpolation, with zeros, border or reflection padding, following ONNX's
// definition (and ONNX Runtime's arithmetic, in the input's precision).
#include <cmath>
#include <string>

#include "kernels/ref/common.h"
#include "kernels/registry.h"

namespace anvil::kernels {

namespace {

enum class Mode { kNearest, kBilinear, kBicubic };
enum class Padding { kZeros, kBorder, kReflection };

// x reflected into [lo, hi] by the borders, as often as it takes (fmod: no
// integer count that a huge x could overflow).
template <typename T>
T reflect(T x, T lo, T hi) {
  const T range = hi - lo;
  if (range <= 0) return lo;
  if (x < lo) {
    const T m = std::fmod(lo - x, 2 * range);
    return m < range ? lo + m : hi - (m - range);
  }
  if (x > hi) {
    const T m = std::fmod(x - hi, 2 * range);
    return m < range ? hi - m : lo + (m - range);
  }
  return x;
}

template <typename T>
void cubic_coeffs(T t, T c[4]) {
  constexpr T a = T(-0.75);
  t = std::fabs(t);
  c[0] = ((a * (t + 1) - 5 * a) * (t + 1) + 8 * a) * (t + 1) - 4 * a;
  c[1] = ((a + 2) * t - (a + 3)) * t * t + 1;
  c[2] = ((a + 2) * (1 - t) - (a + 3)) * (1 - t) * (1 - t) + 1;
  c[3] = ((a * (2 - t) - 5 * a) * (2 - t) + 8 * a) * (2 - t) - 4 * a;
}

class GridSampleKernel : public Kernel {
 public:
  explicit GridSampleKernel(const ir::Node& node) : align_(node.attrs.get_int("align_corners", 0) != 0) {
    const std::string m = node.attrs.get_string("mode", "bilinear");
    mode_ = m == "nearest" ? Mode::kNearest : (m == "bicubic" || m == "cubic") ? Mode::kBicubic : Mode::kBilinear;
    const std::string p = node.attrs.get_string("padding_mode", "zeros");
    padding_ = p == "border" ? Padding::kBorder : p == "reflection" ? Padding::kReflection : Padding::kZeros;
  }

  std::vector<TensorType> prepare(const PrepareContext& ctx) override {
    const std::string m = ctx.attrs().get_string("mode", "bilinear"), p = ctx.attrs().get_string("padding_mode", "zeros");
    ANVIL_PREPARE_CHECK(ctx, m == "nearest" || m == "bilinear" || m == "bicubic" || m == "linear" || m == "cubic",
                        ErrorKind::kInvalidModel, "mode '{}' is not nearest, linear (bilinear) or cubic (bicubic)", m);
    ANVIL_PREPARE_CHECK(ctx, ctx.input_shape(0).size() == 4, ErrorKind::kUnsupported,
                        "only 4-D inputs [N, C, H, W] are supported, got {}", shape_str(ctx.input_shape(0)));
    ANVIL_PREPARE_CHECK(ctx, p == "zeros" || p == "border" || p == "reflection", ErrorKind::kInvalidModel,
                        "padding_mode '{}' is not zeros, border or reflection", p);
    return ctx.output_types();  // the schema checked X [N, C, H, W] and grid [N, Ho, Wo, 2]
  }

  void run(const RunContext& ctx) const override {
    dispatch_float(ctx.in(0).dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      compute<T>(ctx);
    });
  }

 private:
  template <typename T>
  T pixel(const T* image, int64_t r, int64_t c, int64_t h, int64_t w, const T border[4]) const {
    switch (padding_) {
      case Padding::kZeros: return c >= 0 && c < w && r >= 0 && r < h ? image[r * w + c] : T(0);
      case Padding::kBorder: return image[std::clamp<int64_t>(r, 0, h - 1) * w + std::clamp<int64_t>(c, 0, w - 1)];
      case Padding::kReflection: {
        c = static_cast<int64_t>(reflect(static_cast<T>(c), border[0], border[2]));
        r = static_cast<int64_t>(reflect(static_cast<T>(r), border[1], border[3]));
        return image[std::clamp<int64_t>(r, 0, h - 1) * w + std::clamp<int64_t>(c, 0, w - 1)];
      }
    }
    return T(0);
  }

  template <typename T>
  T denormalize(T n, int64_t length) const {
    return align_ ? (n + 1) / 2 * static_cast<T>(length - 1) : ((n + 1) * static_cast<T>(length) - 1) / 2;
  }

  template <typename T>
  void compute(const RunContext& ctx) const {
    const Tensor& x = ctx.in(0);
    const Tensor& grid = ctx.in(1);
    const int64_t n = x.shape()[0], c = x.shape()[1], h = x.shape()[2], w = x.shape()[3];
    const int64_t ho = grid.shape()[1], wo = grid.shape()[2];
    const T border[4] = {align_ ? T(0) : T(-0.5), align_ ? T(0) : T(-0.5), align_ ? T(w - 1) : T(w) - T(0.5),
                         align_ ? T(h - 1) : T(h) - T(0.5)};
    const T* g = grid.data<T>();
    T* y = ctx.out(0).data<T>();
#pragma omp parallel for collapse(2) if (n * c * ho * wo > 4096)
    for (int64_t b = 0; b < n; ++b)
      for (int64_t ch = 0; ch < c; ++ch) {
        const T* image = x.data<T>() + (b * c + ch) * h * w;
        for (int64_t i = 0; i < ho * wo; ++i) {
          const T* p = g + (b * ho * wo + i) * 2;
          T px = denormalize(p[0], w), py = denormalize(p[1], h);
          // Non-finite or absurdly far positions sample nothing (and never reach an integer cast).
          if (!std::isfinite(px) || !std::isfinite(py) || std::fabs(px) > T(1e9) || std::fabs(py) > T(1e9)) {
            if (padding_ == Padding::kZeros || !std::isfinite(px) || !std::isfinite(py)) {
              y[(b * c + ch) * ho * wo + i] = T(0);
              continue;
            }
            px = std::clamp(px, T(-1e9), T(1e9));
            py = std::clamp(py, T(-1e9), T(1e9));
          }
          if (mode_ == Mode::kNearest) {
            px = std::nearbyint(px);
            py = std::nearbyint(py);
          }
          if (px < border[0] || px > border[2] || py < border[1] || py > border[3]) {
            if (padding_ == Padding::kBorder) {
              px = std::clamp(px, T(0), T(w - 1));
              py = std::clamp(py, T(0), T(h - 1));
            } else if (padding_ == Padding::kReflection) {
              px = reflect(px, border[0], border[2]);
              py = reflect(py, border[1], border[3]);
            }
          }
          T v;
          if (mode_ == Mode::kNearest) {
            v = pixel(image, static_cast<int64_t>(py), static_cast<int64_t>(px), h, w, border);
          } else if (mode_ == Mode::kBilinear) {
            const auto x1 = static_cast<int64_t>(std::floor(px)), y1 = static_cast<int64_t>(std::floor(py));
            const T dx1 = px - static_cast<T>(x1), dx2 = static_cast<T>(x1 + 1) - px;
            const T dy1 = py - static_cast<T>(y1), dy2 = static_cast<T>(y1 + 1) - py;
            v = dy2 * (dx2 * pixel(image, y1, x1, h, w, border) + dx1 * pixel(image, y1, x1 + 1, h, w, border)) +
                dy1 * (dx2 * pixel(image, y1 + 1, x1, h, w, border) + dx1 * pixel(image, y1 + 1, x1 + 1, h, w, border));
          } else {
            const int64_t x0 = static_cast<int64_t>(std::floor(px)) - 1, y0 = static_cast<int64_t>(std::floor(py)) - 1;
            T cx[4], cy[4];
            cubic_coeffs(px - static_cast<T>(x0) - 1, cx);
            cubic_coeffs(py - static_cast<T>(y0) - 1, cy);
            v = 0;
            for (int64_t r = 0; r < 4; ++r) {
              T row = 0;
              for (int64_t k = 0; k < 4; ++k) row += cx[k] * pixel(image, y0 + r, x0 + k, h, w, border);
              v += cy[r] * row;
            }
          }
          y[(b * c + ch) * ho * wo + i] = v;
        }
      }
  }

  bool align_;
  Mode mode_ = Mode::kBilinear;
  Padding padding_ = Padding::kZeros;
};

}  // namespace

// 20 renames the modes linear and cubic and allows N-D (4-D only here); 22 adds types.
ANVIL_REGISTER_OP_VERSIONS("GridSample", 16, 22);
ANVIL_REGISTER_KERNEL_CLASS_TYPED("GridSample", kRef, GridSampleKernel, {kFloats, kFloats});

}  // namespace anvil::kernels
