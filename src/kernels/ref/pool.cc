// Reference pooling: MaxPool (with the optional Indices output), AveragePool,
// GlobalAveragePool and GlobalMaxPool; and MaxPool's gradient
// (anvil.MaxPoolGrad, the autodiff's).
//
// Windowed pooling runs 1D and 2D as 3D with leading unit dimensions, one
// (batch, channel) plane per parallel iteration. Per spatial dimension the
// window of output position o starts at o * s - pads_begin and visits
// start + j * d for j < k; positions outside [0, in) are padding.
//
// AveragePool divides by the number of real elements (count_include_pad = 0)
// or by the number of window positions inside [-pads_begin, in + pads_end)
// (count_include_pad = 1). The end padding added by ceil_mode is not part of
// the model's pads and never counts, as in ONNX Runtime and the ONNX tests.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <initializer_list>
#include <limits>

#include "kernels/nn_geometry.h"
#include "kernels/ref/common.h"
#include "kernels/registry.h"

namespace anvil::kernels {
namespace {

constexpr int64_t kParallelThreshold = 32768;

// Window taps of one dimension that land in [0, in): j in [lo, hi).
struct Taps {
  int64_t lo, hi;
};
Taps taps_inside(int64_t start, int64_t k, int64_t d, int64_t limit) {
  int64_t lo = start >= 0 ? 0 : (-start + d - 1) / d;
  int64_t hi = start >= limit ? 0 : std::min<int64_t>(k, (limit - start + d - 1) / d);
  return {lo, std::max(lo, hi)};
}

// Rejects dtypes other than `allowed`, whose names are listed in `names`.
void check_dtype(const PrepareContext& ctx, std::initializer_list<DType> allowed, const char* names) {
  DType dt = ctx.input_dtype(0);
  ANVIL_PREPARE_CHECK(ctx, std::find(allowed.begin(), allowed.end(), dt) != allowed.end(), ErrorKind::kUnsupported,
                      "input X has dtype {}; the reference kernel supports {}", dtype_name(dt), names);
}

// The schema checked rank >= 3.
void check_rank(const PrepareContext& ctx) {
  const Shape& x = ctx.input_shape(0);
  ANVIL_PREPARE_CHECK(ctx, x.size() <= 5, ErrorKind::kUnsupported,
                      "input X has {} spatial dimensions; at most 3 are supported", x.size() - 2);
}

// scan_window_maxima where every window lies inside a 2-D plane (no
// dilation, and no padding any window reaches): the window's rows read
// without bounds, so the compiler keeps the loop in registers.
template <typename T, typename F>
void scan_inner_windows_2d(const Geometry3& g, const T* xp, F f) {
  const int64_t kh = g.k[1], kw = g.k[2], w = g.in[2];
  int64_t o = 0;
  for (int64_t oh = 0; oh < g.out[1]; ++oh)
    for (int64_t ow = 0; ow < g.out[2]; ++ow, ++o) {
      const int64_t start = oh * g.s[1] * w + ow * g.s[2];
      T best = xp[start];
      int64_t at = start;
      for (int64_t jh = 0; jh < kh; ++jh)
        for (int64_t jw = 0; jw < kw; ++jw) {
          const int64_t i = start + jh * w + jw;
          const T v = xp[i];
          const bool larger = v > best;
          best = larger ? v : best;
          at = larger ? i : at;
        }
      f(o, best, at);
    }
}

// Whether every window of g lies inside a 2-D plane (scan_inner_windows_2d).
bool inner_windows_2d(const Geometry3& g) {
  if (g.in[0] != 1 || g.k[0] != 1 || g.out[0] != 1 || g.d[1] != 1 || g.d[2] != 1 || g.p[1] != 0 || g.p[2] != 0)
    return false;
  return (g.out[1] - 1) * g.s[1] + g.k[1] <= g.in[1] && (g.out[2] - 1) * g.s[2] + g.k[2] <= g.in[2];
}

// Calls f(o, best, at) for each output position o of one plane xp: the
// largest element of o's window and its index in the plane (the first of
// equals in the window's scan order; the first real element wins over NaN,
// so every window with an element has one; a window of padding alone,
// which dilations allow, gives the lowest value at -1). Branch-free within
// a window: on random data a branch per comparison mispredicted half the
// time.
template <typename T, typename F>
void scan_window_maxima(const Geometry3& g, const T* xp, F f) {
  if (inner_windows_2d(g)) return scan_inner_windows_2d(g, xp, f);
  const int64_t plane_rows = g.in[1] * g.in[2];
  int64_t o = 0;
  for (int64_t od = 0; od < g.out[0]; ++od) {
    const int64_t sd = od * g.s[0] - g.p[0];
    const Taps td = taps_inside(sd, g.k[0], g.d[0], g.in[0]);
    for (int64_t oh = 0; oh < g.out[1]; ++oh) {
      const int64_t sh = oh * g.s[1] - g.p[1];
      const Taps th = taps_inside(sh, g.k[1], g.d[1], g.in[1]);
      for (int64_t ow = 0; ow < g.out[2]; ++ow, ++o) {
        const int64_t sw = ow * g.s[2] - g.p[2];
        const Taps tw = taps_inside(sw, g.k[2], g.d[2], g.in[2]);
        T best = std::numeric_limits<T>::lowest();
        int64_t at = -1;
        if (td.lo < td.hi && th.lo < th.hi && tw.lo < tw.hi) {
          at = (sd + td.lo * g.d[0]) * plane_rows + (sh + th.lo * g.d[1]) * g.in[2] + sw + tw.lo * g.d[2];
          best = xp[at];
          for (int64_t jd = td.lo; jd < td.hi; ++jd)
            for (int64_t jh = th.lo; jh < th.hi; ++jh) {
              const int64_t row = (sd + jd * g.d[0]) * plane_rows + (sh + jh * g.d[1]) * g.in[2];
              for (int64_t jw = tw.lo; jw < tw.hi; ++jw) {
                const int64_t i = row + sw + jw * g.d[2];
                const T v = xp[i];
                const bool larger = v > best;
                best = larger ? v : best;
                at = larger ? i : at;
              }
            }
        }
        f(o, best, at);
      }
    }
  }
}

class MaxPoolKernel : public Kernel {
 public:
  explicit MaxPoolKernel(const ir::Node&) {}

  std::vector<TensorType> prepare(const PrepareContext& ctx) override {
    check_dtype(ctx, {DType::kFloat32, DType::kFloat64, DType::kInt8, DType::kUInt8},
                "float32, float64, int8 and uint8");
    check_rank(ctx);
    const Shape& x = ctx.input_shape(0);
    SpatialGeometry g = pool_geometry(ctx, x);
    geo_ = Geometry3(x, g);
    planes_ = x[0] * x[1];
    storage_order_ = ctx.attrs().get_int("storage_order", 0);
    ANVIL_PREPARE_CHECK(ctx, storage_order_ == 0 || storage_order_ == 1, ErrorKind::kInvalidModel,
                        "storage_order {} must be 0 (row major) or 1 (column major)", storage_order_);
    return ctx.output_types();
  }

  void run(const RunContext& ctx) const override {
    int64_t* indices = ctx.outputs.size() > 1 && ctx.outputs[1] ? ctx.out(1).data<int64_t>() : nullptr;
    dispatch_dtype(ctx.in(0).dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double> || std::is_same_v<T, int8_t> ||
                    std::is_same_v<T, uint8_t>) {
        if (indices)
          compute<T, true>(ctx.in(0).data<T>(), ctx.out(0).data<T>(), indices);
        else
          compute<T, false>(ctx.in(0).data<T>(), ctx.out(0).data<T>(), nullptr);
      }
    });
  }

 private:
  template <typename T, bool kIndices>
  void compute(const T* x, T* y, int64_t* indices) const {
    const Geometry3& g = geo_;
    const int64_t in_plane = g.in_plane(), out_plane = g.out_plane();
    // Column-major flattening of the spatial index (storage_order = 1): the
    // divisions only there, not per output of the usual row-major order.
    auto column_major = [&g](int64_t at) {
      const int64_t d = at / (g.in[1] * g.in[2]), h = at / g.in[2] % g.in[1], w = at % g.in[2];
      return d + h * g.in[0] + w * g.in[0] * g.in[1];
    };
#pragma omp parallel for if (planes_ * out_plane * g.taps() > kParallelThreshold)
    for (int64_t pl = 0; pl < planes_; ++pl) {
      T* yp = y + pl * out_plane;
      int64_t* ip = kIndices ? indices + pl * out_plane : nullptr;
      scan_window_maxima(g, x + pl * in_plane, [&](int64_t o, T best, int64_t at) {
        yp[o] = best;
        if constexpr (kIndices) {
          at = std::max<int64_t>(at, 0);  // a window of padding alone names the plane's first element
          ip[o] = pl * in_plane + (storage_order_ == 0 ? at : column_major(at));
        }
      });
    }
  }

  Geometry3 geo_;
  int64_t planes_ = 0;
  int64_t storage_order_ = 0;
};

// anvil.MaxPoolGrad(dY, X) -> dX (float32): each output position's gradient
// added at the element its window's maximum came from, as MaxPool's Indices
// name it; in one pass per plane, where MaxPool again and a ScatterElements
// over its indices took 15% of a CNN's training step (bench/train_compare's
// cnn-32 row). relu_gate: only windows whose maximum is positive add theirs
// (the ReLU gradient of the pooled ReLU output, passes/fuse_relu_grad.cc).
class MaxPoolGradKernel : public Kernel {
 public:
  explicit MaxPoolGradKernel(const ir::Node&) {}

  std::vector<TensorType> prepare(const PrepareContext& ctx) override {
    const Shape &dy = ctx.input_shape(0), &x = ctx.input_shape(1);
    ANVIL_PREPARE_CHECK(ctx, x.size() >= 3 && x.size() <= 5, ErrorKind::kUnsupported,
                        "X {} must have 1 to 3 spatial dimensions", shape_str(x));
    ANVIL_PREPARE_CHECK(ctx, dy.size() == x.size() && dy[0] == x[0] && dy[1] == x[1], ErrorKind::kInvalidModel,
                        "dY {} is not MaxPool's output shape for X {}", shape_str(dy), shape_str(x));
    geo_ = Geometry3(x, pool_geometry(ctx, x, &dy));
    planes_ = x[0] * x[1];
    relu_gate_ = ctx.attrs().get_int("relu_gate", 0) != 0;
    return ctx.output_types();
  }

  void run(const RunContext& ctx) const override {
    const Geometry3& g = geo_;
    const int64_t in_plane = g.in_plane(), out_plane = g.out_plane();
    const float* dy = ctx.in(0).data<float>();
    const float* x = ctx.in(1).data<float>();
    float* dx = ctx.out(0).data<float>();
#pragma omp parallel for if (planes_ * out_plane * g.taps() > kParallelThreshold)
    for (int64_t pl = 0; pl < planes_; ++pl) {
      float* dxp = dx + pl * in_plane;
      const float* dyp = dy + pl * out_plane;
      std::fill(dxp, dxp + in_plane, 0.f);
      scan_window_maxima(g, x + pl * in_plane, [&](int64_t o, float best, int64_t at) {
        if (at >= 0 && (!relu_gate_ || best > 0.f)) dxp[at] += dyp[o];  // padding alone takes nothing
      });
    }
  }

 private:
  Geometry3 geo_;
  int64_t planes_ = 0;
  bool relu_gate_ = false;
};

// The exponent of LpPool / GlobalLpPool: an int from opset 2, a float before.
double lp_exponent(const ir::Node& node) {
  const auto it = node.attrs.all().find("p");
  if (it != node.attrs.all().end() && std::holds_alternative<float>(it->second))
    return static_cast<double>(std::get<float>(it->second));
  return static_cast<double>(node.attrs.get_int("p", 2));
}

// AveragePool, and LpPool ((sum |x|^p)^(1/p) over the real elements of the window).
class AveragePoolKernel : public Kernel {
 public:
  explicit AveragePoolKernel(const ir::Node& node)
      : lp_(node.op_type == "LpPool"), p_(lp_ ? lp_exponent(node) : 1.0) {}

  std::vector<TensorType> prepare(const PrepareContext& ctx) override {
    check_dtype(ctx, {DType::kFloat32, DType::kFloat64}, "float32 and float64");
    check_rank(ctx);
    const Shape& x = ctx.input_shape(0);
    SpatialGeometry g = pool_geometry(ctx, x);
    geo_ = Geometry3(x, g);
    planes_ = x[0] * x[1];
    count_include_pad_ = ctx.attrs().get_int("count_include_pad", 0) != 0;
    ANVIL_PREPARE_CHECK(ctx, !lp_ || (std::isfinite(p_) && p_ > 0), ErrorKind::kInvalidModel,
                        "p must be positive, got {}", p_);
    return ctx.output_types();
  }

  void run(const RunContext& ctx) const override {
    dispatch_float(ctx.in(0).dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      compute<T>(ctx.in(0).data<T>(), ctx.out(0).data<T>());
    });
  }

 private:
  // Number of taps of one dimension counted in the divisor.
  int64_t divisor_taps(int dim, int64_t start, const Taps& inside) const {
    if (!count_include_pad_) return inside.hi - inside.lo;
    const Geometry3& g = geo_;
    // Taps in [-pads_begin, in + pads_end): the window never starts before -pads_begin.
    const Taps t = taps_inside(start + g.p[dim], g.k[dim], g.d[dim], g.real_end[dim] + g.p[dim]);
    return t.hi - t.lo;
  }

  template <typename T>
  void compute(const T* x, T* y) const {
    const Geometry3& g = geo_;
    const int64_t in_plane = g.in_plane(), out_plane = g.out_plane();
    const int64_t window = g.k[0] * g.k[1] * g.k[2];
#pragma omp parallel for if (planes_ * out_plane * window > kParallelThreshold)
    for (int64_t pl = 0; pl < planes_; ++pl) {
      const T* xp = x + pl * in_plane;
      T* yp = y + pl * out_plane;
      int64_t o = 0;
      for (int64_t od = 0; od < g.out[0]; ++od) {
        const int64_t sd = od * g.s[0] - g.p[0];
        const Taps td = taps_inside(sd, g.k[0], g.d[0], g.in[0]);
        const int64_t cd = divisor_taps(0, sd, td);
        for (int64_t oh = 0; oh < g.out[1]; ++oh) {
          const int64_t sh = oh * g.s[1] - g.p[1];
          const Taps th = taps_inside(sh, g.k[1], g.d[1], g.in[1]);
          const int64_t ch = divisor_taps(1, sh, th);
          for (int64_t ow = 0; ow < g.out[2]; ++ow, ++o) {
            const int64_t sw = ow * g.s[2] - g.p[2];
            const Taps tw = taps_inside(sw, g.k[2], g.d[2], g.in[2]);
            const int64_t count = cd * ch * divisor_taps(2, sw, tw);
            T sum = 0;
            for (int64_t jd = td.lo; jd < td.hi; ++jd) {
              const int64_t id = sd + jd * g.d[0];
              for (int64_t jh = th.lo; jh < th.hi; ++jh) {
                const T* row = xp + (id * g.in[1] + sh + jh * g.d[1]) * g.in[2] + sw;
                for (int64_t jw = tw.lo; jw < tw.hi; ++jw) sum += lp_ ? power(row[jw * g.d[2]]) : row[jw * g.d[2]];
              }
            }
            if (lp_) yp[o] = root(sum);
            else yp[o] = count > 0 ? sum / static_cast<T>(count) : T(0);
          }
        }
      }
    }
  }

  template <typename T>
  T power(T v) const {
    return p_ == 2 ? v * v : static_cast<T>(std::pow(std::fabs(static_cast<double>(v)), p_));
  }
  template <typename T>
  T root(T sum) const {
    return static_cast<T>(p_ == 2 ? std::sqrt(static_cast<double>(sum)) : std::pow(static_cast<double>(sum), 1.0 / p_));
  }

  bool lp_;
  double p_;
  Geometry3 geo_;
  int64_t planes_ = 0;
  bool count_include_pad_ = false;
};

enum class GlobalPool { kAverage, kMax, kLp };

// GlobalAveragePool / GlobalMaxPool / GlobalLpPool: one value per (batch, channel) plane.
template <GlobalPool kKind>
class GlobalPoolKernel : public Kernel {
 public:
  explicit GlobalPoolKernel(const ir::Node& node) : p_(kKind == GlobalPool::kLp ? lp_exponent(node) : 1.0) {}

  std::vector<TensorType> prepare(const PrepareContext& ctx) override {
    check_dtype(ctx, {DType::kFloat32, DType::kFloat64}, "float32 and float64");
    const Shape& x = ctx.input_shape(0);  // the schema checked [N, C, D1, ...] with D > 0
    planes_ = x[0] * x[1];
    plane_ = shape_numel(Shape(x.begin() + 2, x.end()));
    return ctx.output_types();
  }

  void run(const RunContext& ctx) const override {
    dispatch_float(ctx.in(0).dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      compute<T>(ctx.in(0).data<T>(), ctx.out(0).data<T>());
    });
  }

 private:
  template <typename T>
  void compute(const T* x, T* y) const {
#pragma omp parallel for if (planes_ * plane_ > kParallelThreshold)
    for (int64_t pl = 0; pl < planes_; ++pl) {
      const T* xp = x + pl * plane_;
      if constexpr (kKind == GlobalPool::kMax) {
        T best = xp[0];
        for (int64_t i = 1; i < plane_; ++i) best = xp[i] > best ? xp[i] : best;
        y[pl] = best;
      } else if constexpr (kKind == GlobalPool::kLp) {
        double sum = 0;
        for (int64_t i = 0; i < plane_; ++i) sum += std::pow(std::fabs(static_cast<double>(xp[i])), p_);
        y[pl] = static_cast<T>(std::pow(sum, 1.0 / p_));
      } else {
        T sum = 0;
        for (int64_t i = 0; i < plane_; ++i) sum += xp[i];
        y[pl] = sum / static_cast<T>(plane_);
      }
    }
  }

  double p_;
  int64_t planes_ = 0, plane_ = 1;
};

// MaxUnpool: zeros, with each X value put back where its MaxPool index points.
// Indices count over the whole default unpooled tensor [N, C, (in - 1) * s +
// k - pads ...]; with a larger output_shape the same coordinates are used.
class MaxUnpoolKernel : public Kernel {
 public:
  explicit MaxUnpoolKernel(const ir::Node&) {}

  std::vector<TensorType> prepare(const PrepareContext& ctx) override {
    ANVIL_PREPARE_CHECK(ctx, ctx.has_input(1) && ctx.input_dtype(1) == DType::kInt64, ErrorKind::kInvalidModel,
                        "its indices I must be given, as int64");
    const Shape& x = ctx.input_shape(0);
    // The schema checks these where X's shape is known when the model loads; here it always is.
    ANVIL_PREPARE_CHECK(ctx, x.size() >= 3, ErrorKind::kInvalidArgument, "X {} must be [N, C, D1, ...]",
                        shape_str(x));
    const size_t n = x.size() - 2;
    const std::vector<int64_t> k = ctx.attrs().get_ints("kernel_shape");
    const std::vector<int64_t> s = ctx.attrs().get_ints("strides", std::vector<int64_t>(n, 1));
    const std::vector<int64_t> p = ctx.attrs().get_ints("pads", std::vector<int64_t>(2 * n, 0));
    ANVIL_PREPARE_CHECK(ctx, k.size() == n && s.size() == n && p.size() == 2 * n, ErrorKind::kInvalidModel,
                        "kernel_shape, strides and pads must have one (two) entries per spatial dimension");
    default_ = {x[0], x[1]};
    for (size_t i = 0; i < n; ++i) {
      const __int128 d = static_cast<__int128>(x[2 + i] - 1) * s[i] + k[i] - p[i] - p[i + n];
      ANVIL_PREPARE_CHECK(ctx, d >= 0 && d <= INT64_MAX, ErrorKind::kInvalidArgument,
                          "unpooled dimension {} is out of range", i);
      default_.push_back(static_cast<int64_t>(d));
    }
    out_ = ctx.output_shape(0);
    ANVIL_PREPARE_CHECK(ctx, out_.size() == default_.size(), ErrorKind::kInvalidArgument,
                        "output_shape {} does not have the input's rank", shape_str(out_));
    return ctx.output_types();
  }

  void run(const RunContext& ctx) const override {
    const Tensor& x = ctx.in(0);
    const Tensor& idx = ctx.in(1);
    Tensor& y = ctx.out(0);
    ANVIL_CHECK(idx.numel() == x.numel(), ErrorKind::kInvalidArgument,
                "MaxUnpool: indices {} do not match X {}", shape_str(idx.shape()), shape_str(x.shape()));
    std::vector<int64_t> at(static_cast<size_t>(idx.numel()));
    const int64_t limit = shape_numel(default_);
    for (int64_t i = 0; i < idx.numel(); ++i) {
      int64_t v = idx.data<int64_t>()[i];
      ANVIL_CHECK(v >= 0 && v < limit, ErrorKind::kInvalidArgument,
                  "MaxUnpool: index {} is outside the unpooled shape {}", v, shape_str(default_));
      int64_t flat = 0, scale = 1;  // the same coordinates in the output's shape
      for (size_t d = default_.size(); d-- > 0;) {
        const int64_t c = v % default_[d];
        v /= default_[d];
        ANVIL_CHECK(c < out_[d], ErrorKind::kInvalidArgument, "MaxUnpool: output_shape {} is smaller than {}",
                    shape_str(out_), shape_str(default_));
        flat += c * scale;
        scale *= out_[d];
      }
      at[static_cast<size_t>(i)] = flat;
    }
    std::memset(y.raw(), 0, y.nbytes());
    const size_t elem = dtype_size(x.dtype());
    const auto* src = static_cast<const unsigned char*>(x.raw());
    auto* dst = static_cast<unsigned char*>(y.raw());
    for (size_t i = 0; i < at.size(); ++i)
      std::memcpy(dst + static_cast<size_t>(at[i]) * elem, src + i * elem, elem);
  }

 private:
  Shape default_, out_;
};

ANVIL_REGISTER_KERNEL_CLASS("MaxPool", kRef, MaxPoolKernel);
static Registrar max_pool_grad("MaxPoolGrad", Backend::kRef, factory_of<MaxPoolGradKernel>(), "anvil", {{kFloat32Only}});
ANVIL_REGISTER_KERNEL_CLASS_TYPED("MaxUnpool", kRef, MaxUnpoolKernel, {kFloats, dtype_bit(DType::kInt64), dtype_bit(DType::kInt64)});
// 1: no count_include_pad (it defaults to 0 since); 19: dilations; 22: types.
ANVIL_REGISTER_OP_VERSIONS("AveragePool", 1, 22);
ANVIL_REGISTER_KERNEL_CLASS("AveragePool", kRef, AveragePoolKernel);
ANVIL_REGISTER_KERNEL_CLASS("GlobalAveragePool", kRef, GlobalPoolKernel<GlobalPool::kAverage>);
ANVIL_REGISTER_KERNEL_CLASS("GlobalMaxPool", kRef, GlobalPoolKernel<GlobalPool::kMax>);
// LpPool 1: p a float; 2: an int; 11: auto_pad; 18: ceil_mode, dilations; 22: types.
ANVIL_REGISTER_OP_VERSIONS("LpPool", 1, 22);
ANVIL_REGISTER_OP_VERSIONS("GlobalLpPool", 1, 22);
ANVIL_REGISTER_KERNEL_CLASS("LpPool", kRef, AveragePoolKernel);
ANVIL_REGISTER_KERNEL_CLASS("GlobalLpPool", kRef, GlobalPoolKernel<GlobalPool::kLp>);

}  // namespace
}  // namespace anvil::kernels
