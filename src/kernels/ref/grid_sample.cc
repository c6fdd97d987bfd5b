// GridSample (opset 16, 4-D; 5-D from opset 20): samples X [N, C, H, W] at the
// normalized (x, y) positions of grid [N, Ho, Wo, 2] (or X [N, C, D, H, W] at
// (x, y, z) of [N, Do, Ho, Wo, 3]), by nearest, (bi/tri)linear or (4-D only)
// bicubic interpolation, with zeros, border or reflection padding, following
// ONNX's definition (and ONNX Runtime's arithmetic, in the input's precision).
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
    const size_t rank = ctx.input_shape(0).size();
    ANVIL_PREPARE_CHECK(ctx, rank == 4 || rank == 5, ErrorKind::kUnsupported,
                        "only 4-D and 5-D inputs are supported, got {}", shape_str(ctx.input_shape(0)));
    // (the border and reflection modes clamped to index -1 of an empty axis: found by make fuzz; ONNX Runtime
    // refuses such inputs too)
    const Shape& x = ctx.input_shape(0);
    ANVIL_PREPARE_CHECK(ctx, std::all_of(x.begin() + 2, x.end(), [](int64_t d) { return d > 0; }),
                        ErrorKind::kInvalidArgument, "X {} has an empty spatial axis: nothing to sample",
                        shape_str(x));
    ANVIL_PREPARE_CHECK(ctx, rank == 4 || mode_ != Mode::kBicubic, ErrorKind::kInvalidModel,
                        "cubic interpolation takes 4-D inputs only, got {}", shape_str(ctx.input_shape(0)));
    ANVIL_PREPARE_CHECK(ctx, p == "zeros" || p == "border" || p == "reflection", ErrorKind::kInvalidModel,
                        "padding_mode '{}' is not zeros, border or reflection", p);
    // ONNX lets the grid's float type differ from X's; this kernel reads both as one
    ANVIL_PREPARE_CHECK(ctx, ctx.input_dtype(1) == ctx.input_dtype(0), ErrorKind::kUnsupported,
                        "a {} grid beside {} X", dtype_name(ctx.input_dtype(1)), dtype_name(ctx.input_dtype(0)));
    return ctx.output_types();  // the schema checked X [N, C, H, W] and grid [N, Ho, Wo, 2]
  }

  void run(const RunContext& ctx) const override {
    dispatch_float(ctx.in(0).dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      if (ctx.in(0).rank() == 5) compute_volume<T>(ctx);
      else compute<T>(ctx);
    });
  }

 private:
  // A position mapped into the volume as the padding mode says; false: it samples zeros.
  template <typename T>
  bool place(T& p, int64_t len) const {
    const T lo = align_ ? T(0) : T(-0.5), hi = align_ ? T(len - 1) : T(len) - T(0.5);
    if (!std::isfinite(p)) return false;
    p = std::clamp(p, T(-1e9), T(1e9));
    if (mode_ == Mode::kNearest) p = std::nearbyint(p);
    if (p >= lo && p <= hi) return true;
    if (padding_ == Padding::kBorder) p = std::clamp(p, T(0), T(len - 1));
    else if (padding_ == Padding::kReflection) p = reflect(p, lo, hi);
    return true;
  }

  template <typename T>
  T voxel(const T* v, int64_t z, int64_t y, int64_t x, const int64_t dims[3]) const {
    if (padding_ == Padding::kZeros) {
      if (z < 0 || z >= dims[0] || y < 0 || y >= dims[1] || x < 0 || x >= dims[2]) return T(0);
    } else {
      if (padding_ == Padding::kReflection) {  // corners outside reflect back, as in 2-D
        auto back = [&](int64_t i, int64_t len) {
          const T lo = align_ ? T(0) : T(-0.5), hi = align_ ? T(len - 1) : T(len) - T(0.5);
          return static_cast<int64_t>(reflect(static_cast<T>(i), lo, hi));
        };
        z = back(z, dims[0]);
        y = back(y, dims[1]);
        x = back(x, dims[2]);
      }
      z = std::clamp<int64_t>(z, 0, dims[0] - 1);
      y = std::clamp<int64_t>(y, 0, dims[1] - 1);
      x = std::clamp<int64_t>(x, 0, dims[2] - 1);
    }
    return v[(z * dims[1] + y) * dims[2] + x];
  }

  template <typename T>
  void compute_volume(const RunContext& ctx) const {
    const Tensor& x = ctx.in(0);
    const Tensor& grid = ctx.in(1);
    const int64_t n = x.shape()[0], c = x.shape()[1];
    const int64_t dims[3] = {x.shape()[2], x.shape()[3], x.shape()[4]};
    const int64_t outputs = grid.shape()[1] * grid.shape()[2] * grid.shape()[3], volume = dims[0] * dims[1] * dims[2];
    const T* g = grid.data<T>();
    T* y = ctx.out(0).data<T>();
    for (int64_t b = 0; b < n; ++b)
      for (int64_t ch = 0; ch < c; ++ch) {
        const T* v = x.data<T>() + (b * c + ch) * volume;
        for (int64_t i = 0; i < outputs; ++i) {
          const T* p = g + (b * outputs + i) * 3;
          T px = denormalize(p[0], dims[2]), py = denormalize(p[1], dims[1]), pz = denormalize(p[2], dims[0]);
          T out = 0;
          if (place(px, dims[2]) && place(py, dims[1]) && place(pz, dims[0])) {
            if (mode_ == Mode::kNearest) {
              out = voxel(v, static_cast<int64_t>(pz), static_cast<int64_t>(py), static_cast<int64_t>(px), dims);
            } else {
              const auto x0 = static_cast<int64_t>(std::floor(px)), y0 = static_cast<int64_t>(std::floor(py)),
                         z0 = static_cast<int64_t>(std::floor(pz));
              const T fx = px - static_cast<T>(x0), fy = py - static_cast<T>(y0), fz = pz - static_cast<T>(z0);
              for (int corner = 0; corner < 8; ++corner) {
                const int dz = corner >> 2, dy = (corner >> 1) & 1, dx = corner & 1;
                const T w = (dz ? fz : 1 - fz) * (dy ? fy : 1 - fy) * (dx ? fx : 1 - fx);
                out += w * voxel(v, z0 + dz, y0 + dy, x0 + dx, dims);
              }
            }
          }
          y[(b * c + ch) * outputs + i] = out;
        }
      }
  }

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

// AffineGrid (opset 20): the grid GridSample reads for an affine transform,
// theta [N, r, r + 1] applied to the normalized coordinates (x along W first)
// of every output position; align_corners puts -1 and 1 on the corner pixels'
// centres rather than their outer edges.
class AffineGridKernel : public Kernel {
 public:
  explicit AffineGridKernel(const ir::Node& node) : align_(node.attrs.get_int("align_corners", 0) != 0) {}

  std::vector<TensorType> prepare(const PrepareContext& ctx) override {
    const std::vector<int64_t> size = tensor_to_ints(ctx.require_constant(1, "size"));
    ANVIL_PREPARE_CHECK(ctx, size.size() == 4 || size.size() == 5, ErrorKind::kInvalidArgument,
                        "size {} must be [N, C, H, W] or [N, C, D, H, W]", shape_str(size));
    spatial_.assign(size.begin() + 2, size.end());
    for (int64_t d : spatial_)
      ANVIL_PREPARE_CHECK(ctx, d >= 0, ErrorKind::kInvalidArgument, "size {} has a negative dimension", shape_str(size));
    ANVIL_PREPARE_CHECK(ctx, ctx.input_shape(0)[0] == size[0], ErrorKind::kInvalidArgument,
                        "theta {} and size {} disagree on the batch", shape_str(ctx.input_shape(0)), shape_str(size));
    return ctx.output_types();
  }

  void run(const RunContext& ctx) const override {
    dispatch_float(ctx.in(0).dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T* theta = ctx.in(0).data<T>();
      T* grid = ctx.out(0).data<T>();
      const auto r = static_cast<int64_t>(spatial_.size());
      const int64_t points = shape_numel(spatial_), batch = ctx.in(0).shape()[0];
      std::vector<T> base(static_cast<size_t>(r));
      for (int64_t n = 0; n < batch; ++n) {
        const T* t = theta + n * r * (r + 1);
        for (int64_t i = 0; i < points; ++i) {
          int64_t rem = i;
          for (int64_t d = r; d-- > 0;) {  // spatial axis d (D, H, W); its coordinate is component r - 1 - d
            const int64_t len = spatial_[static_cast<size_t>(d)], at = rem % len;
            rem /= len;
            base[static_cast<size_t>(r - 1 - d)] = coordinate<T>(at, len);
          }
          for (int64_t c = 0; c < r; ++c) {
            T v = t[c * (r + 1) + r];
            for (int64_t k = 0; k < r; ++k) v += t[c * (r + 1) + k] * base[static_cast<size_t>(k)];
            grid[(n * points + i) * r + c] = v;
          }
        }
      }
    });
  }

 private:
  template <typename T>
  T coordinate(int64_t i, int64_t len) const {
    if (align_) return len > 1 ? T(-1) + T(2) * static_cast<T>(i) / static_cast<T>(len - 1) : T(-1);
    return T(-1) + (T(2) * static_cast<T>(i) + T(1)) / static_cast<T>(len);
  }

  bool align_;
  std::vector<int64_t> spatial_;
};

}  // namespace

ANVIL_REGISTER_OP_VERSIONS("AffineGrid", 20, 20);
ANVIL_REGISTER_KERNEL_CLASS_TYPED("AffineGrid", kRef, AffineGridKernel, {kFloats, dtype_bit(DType::kInt64)});
// 20 renames the modes linear and cubic and allows N-D (4-D and 5-D here); 22 adds types.
ANVIL_REGISTER_OP_VERSIONS("GridSample", 16, 22);
ANVIL_REGISTER_KERNEL_CLASS_TYPED("GridSample", kRef, GridSampleKernel, {kFloats, kFloats});

}  // namespace anvil::kernels
