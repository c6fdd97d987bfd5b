// Reference Conv and ConvTranspose (1D, 2D and 3D; float32 and float64).
//
// Both work on one output plane per (batch, output channel), which is also the
// unit of parallelism, so no two threads ever write the same element. 1D and
// 2D are run as 3D with leading unit dimensions. For each input channel of the
// group and each kernel tap, the valid range of output (Conv) or input
// (ConvTranspose) positions is computed once, so the innermost loop runs over
// a contiguous row without bounds checks:
//   Conv           y[o] += w[k] * x[o * s + k * d - p]
//   ConvTranspose  y[i * s + k * d - p] += w[k] * x[i]
#include <algorithm>

#include "kernels/nn_geometry.h"
#include "kernels/ref/common.h"
#include "kernels/registry.h"

namespace anvil::kernels {
namespace {

constexpr int64_t kParallelThreshold = 32768;

// ceil(a / b) for b > 0 and any sign of a.
int64_t ceil_div(int64_t a, int64_t b) { return a >= 0 ? (a + b - 1) / b : -((-a) / b); }

// Half-open range [lo, hi) of j in [0, limit) with 0 <= j * s + offset < size.
struct Range {
  int64_t lo, hi;
};
Range valid_range(int64_t offset, int64_t s, int64_t size, int64_t limit) {
  int64_t lo = std::max<int64_t>(0, ceil_div(-offset, s));
  int64_t hi = std::min<int64_t>(limit, ceil_div(size - offset, s));
  return {lo, std::max(lo, hi)};
}

struct ConvDims {
  int64_t n = 0, c = 0, m = 0, group = 1;
};

void check_float_inputs(const PrepareContext& ctx, size_t count) {
  DType dt = ctx.input_dtype(0);
  ANVIL_PREPARE_CHECK(ctx, dtype_in(dt, kFloats | kHalfs), ErrorKind::kUnsupported,
                      "input X has dtype {}; the reference kernel supports float32, float64, float16 and bfloat16",
                      dtype_name(dt));
  for (size_t i = 1; i < count; ++i)
    if (ctx.has_input(i))
      ANVIL_PREPARE_CHECK(ctx, ctx.input_dtype(i) == dt, ErrorKind::kInvalidModel, "input {} has dtype {} but X has {}",
                          i, dtype_name(ctx.input_dtype(i)), dtype_name(dt));
}

// Common input checks; returns the kernel's spatial shape.
std::vector<int64_t> check_conv_inputs(const PrepareContext& ctx, int64_t* group) {
  check_float_inputs(ctx, 3);
  const Shape& x = ctx.input_shape(0);
  const Shape& w = ctx.input_shape(1);
  // The schema checked ranks, channels, group and bias.
  ANVIL_PREPARE_CHECK(ctx, x.size() <= 5, ErrorKind::kUnsupported,
                      "input X has {} spatial dimensions; at most 3 are supported", x.size() - 2);
  *group = ctx.attrs().get_int("group", 1);
  return std::vector<int64_t>(w.begin() + 2, w.end());
}

template <typename T>
void fill_plane(T* y, int64_t n, const T* bias, int64_t m) {
  const T v = bias ? bias[m] : T(0);
  std::fill(y, y + n, v);
}

class ConvKernel : public Kernel {
 public:
  explicit ConvKernel(const ir::Node&) {}

  std::vector<TensorType> prepare(const PrepareContext& ctx) override {
    std::vector<int64_t> kernel = check_conv_inputs(ctx, &dims_.group);
    const Shape& x = ctx.input_shape(0);
    const Shape& w = ctx.input_shape(1);
    dims_.n = x[0];
    dims_.c = x[1];
    dims_.m = w[0];
    geo_ = Geometry3(x, conv_geometry(ctx, x, kernel));
    return ctx.output_types();
  }

  void run(const RunContext& ctx) const override {
    const Tensor* bias = ctx.inputs.size() > 2 ? ctx.inputs[2] : nullptr;
    if (dtype_in(ctx.in(0).dtype(), kHalfs))  // 16-bit floats: computed in float32
      return via_float32({&ctx.in(0), &ctx.in(1), bias}, ctx.out(0), [&](const auto& w, float* y) {
        compute<float>(w[0].data(), w[1].data(), bias ? w[2].data() : nullptr, y);
      });
    dispatch_dtype(ctx.in(0).dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      if constexpr (std::is_floating_point_v<T>) {
        compute<T>(ctx.in(0).data<T>(), ctx.in(1).data<T>(), bias ? bias->data<T>() : nullptr, ctx.out(0).data<T>());
      }
    });
  }

 private:
  template <typename T>
  void compute(const T* x, const T* w, const T* bias, T* y) const {
    const Geometry3& g = geo_;
    const int64_t cg = dims_.c / dims_.group, mg = dims_.m / dims_.group;
    const int64_t in_plane = g.in_plane(), out_plane = g.out_plane(), taps = g.taps();
    const int64_t work = dims_.n * dims_.m * out_plane * cg * taps;
#pragma omp parallel for collapse(2) if (work > kParallelThreshold)
    for (int64_t n = 0; n < dims_.n; ++n) {
      for (int64_t m = 0; m < dims_.m; ++m) {
        T* yp = y + (n * dims_.m + m) * out_plane;
        fill_plane(yp, out_plane, bias, m);
        const int64_t first_c = (m / mg) * cg;
        for (int64_t c = 0; c < cg; ++c) {
          const T* xp = x + (n * dims_.c + first_c + c) * in_plane;
          const T* wp = w + (m * cg + c) * taps;
          accumulate_channel(xp, wp, yp);
        }
      }
    }
  }

  // yp += conv(xp, wp) for one input channel.
  template <typename T>
  void accumulate_channel(const T* xp, const T* wp, T* yp) const {
    const Geometry3& g = geo_;
    for (int64_t kd = 0; kd < g.k[0]; ++kd) {
      const int64_t od_off = kd * g.d[0] - g.p[0];
      const Range rd = valid_range(od_off, g.s[0], g.in[0], g.out[0]);
      for (int64_t kh = 0; kh < g.k[1]; ++kh) {
        const int64_t oh_off = kh * g.d[1] - g.p[1];
        const Range rh = valid_range(oh_off, g.s[1], g.in[1], g.out[1]);
        for (int64_t kw = 0; kw < g.k[2]; ++kw) {
          const int64_t ow_off = kw * g.d[2] - g.p[2];
          const Range rw = valid_range(ow_off, g.s[2], g.in[2], g.out[2]);
          const T wv = wp[(kd * g.k[1] + kh) * g.k[2] + kw];
          const int64_t sw = g.s[2];
          for (int64_t od = rd.lo; od < rd.hi; ++od) {
            const int64_t id = od * g.s[0] + od_off;
            for (int64_t oh = rh.lo; oh < rh.hi; ++oh) {
              const int64_t ih = oh * g.s[1] + oh_off;
              const T* xr = xp + (id * g.in[1] + ih) * g.in[2] + ow_off;
              T* yr = yp + (od * g.out[1] + oh) * g.out[2];
              if (sw == 1) {
                for (int64_t ow = rw.lo; ow < rw.hi; ++ow) yr[ow] += wv * xr[ow];
              } else {
                for (int64_t ow = rw.lo; ow < rw.hi; ++ow) yr[ow] += wv * xr[ow * sw];
              }
            }
          }
        }
      }
    }
  }

  ConvDims dims_;
  Geometry3 geo_;
};

class ConvTransposeKernel : public Kernel {
 public:
  explicit ConvTransposeKernel(const ir::Node&) {}

  std::vector<TensorType> prepare(const PrepareContext& ctx) override {
    std::vector<int64_t> kernel = check_conv_inputs(ctx, &dims_.group);
    const Shape& x = ctx.input_shape(0);
    const Shape& w = ctx.input_shape(1);
    dims_.n = x[0];
    dims_.c = x[1];
    dims_.m = w[1] * dims_.group;  // W is [C, M / group, k...]
    geo_ = Geometry3(x, conv_transpose_geometry(ctx, x, kernel));
    return ctx.output_types();
  }

  void run(const RunContext& ctx) const override {
    const Tensor* bias = ctx.inputs.size() > 2 ? ctx.inputs[2] : nullptr;
    if (dtype_in(ctx.in(0).dtype(), kHalfs))  // 16-bit floats: computed in float32
      return via_float32({&ctx.in(0), &ctx.in(1), bias}, ctx.out(0), [&](const auto& w, float* y) {
        compute<float>(w[0].data(), w[1].data(), bias ? w[2].data() : nullptr, y);
      });
    dispatch_dtype(ctx.in(0).dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      if constexpr (std::is_floating_point_v<T>) {
        compute<T>(ctx.in(0).data<T>(), ctx.in(1).data<T>(), bias ? bias->data<T>() : nullptr, ctx.out(0).data<T>());
      }
    });
  }

 private:
  template <typename T>
  void compute(const T* x, const T* w, const T* bias, T* y) const {
    const Geometry3& g = geo_;
    const int64_t cg = dims_.c / dims_.group, mg = dims_.m / dims_.group;
    const int64_t in_plane = g.in_plane(), out_plane = g.out_plane(), taps = g.taps();
    const int64_t work = dims_.n * dims_.m * std::max(in_plane * cg * taps, out_plane);
#pragma omp parallel for collapse(2) if (work > kParallelThreshold)
    for (int64_t n = 0; n < dims_.n; ++n) {
      for (int64_t m = 0; m < dims_.m; ++m) {
        T* yp = y + (n * dims_.m + m) * out_plane;
        fill_plane(yp, out_plane, bias, m);
        const int64_t grp = m / mg, mm = m % mg;
        for (int64_t c = 0; c < cg; ++c) {
          const int64_t ci = grp * cg + c;
          const T* xp = x + (n * dims_.c + ci) * in_plane;
          const T* wp = w + (ci * mg + mm) * taps;
          scatter_channel(xp, wp, yp);
        }
      }
    }
  }

  // yp += conv_transpose(xp, wp) for one input channel.
  template <typename T>
  void scatter_channel(const T* xp, const T* wp, T* yp) const {
    const Geometry3& g = geo_;
    for (int64_t kd = 0; kd < g.k[0]; ++kd) {
      const int64_t od_off = kd * g.d[0] - g.p[0];
      const Range rd = valid_range(od_off, g.s[0], g.out[0], g.in[0]);
      for (int64_t kh = 0; kh < g.k[1]; ++kh) {
        const int64_t oh_off = kh * g.d[1] - g.p[1];
        const Range rh = valid_range(oh_off, g.s[1], g.out[1], g.in[1]);
        for (int64_t kw = 0; kw < g.k[2]; ++kw) {
          const int64_t ow_off = kw * g.d[2] - g.p[2];
          const Range rw = valid_range(ow_off, g.s[2], g.out[2], g.in[2]);
          const T wv = wp[(kd * g.k[1] + kh) * g.k[2] + kw];
          const int64_t sw = g.s[2];
          for (int64_t id = rd.lo; id < rd.hi; ++id) {
            const int64_t od = id * g.s[0] + od_off;
            for (int64_t ih = rh.lo; ih < rh.hi; ++ih) {
              const int64_t oh = ih * g.s[1] + oh_off;
              const T* xr = xp + (id * g.in[1] + ih) * g.in[2];
              T* yr = yp + (od * g.out[1] + oh) * g.out[2] + ow_off;
              for (int64_t iw = rw.lo; iw < rw.hi; ++iw) yr[iw * sw] += wv * xr[iw];
            }
          }
        }
      }
    }
  }

  ConvDims dims_;
  Geometry3 geo_;
};

// Col2Im (opset 18): adds each column of [N, C * prod(block), L] back into the
// image positions its block covered (the inverse of im2col; overlaps sum).
class Col2ImKernel : public Kernel {
 public:
  explicit Col2ImKernel(const ir::Node&) {}

  std::vector<TensorType> prepare(const PrepareContext& ctx) override {
    image_ = tensor_to_ints(ctx.require_constant(1, "image_shape"));
    block_ = tensor_to_ints(ctx.require_constant(2, "block_shape"));
    const size_t r = image_.size();  // the schema checked the sizes against each other and the input
    dilations_ = ctx.attrs().get_ints("dilations", std::vector<int64_t>(r, 1));
    strides_ = ctx.attrs().get_ints("strides", std::vector<int64_t>(r, 1));
    pads_ = ctx.attrs().get_ints("pads", std::vector<int64_t>(2 * r, 0));
    ANVIL_PREPARE_CHECK(ctx, dilations_.size() == r && strides_.size() == r && pads_.size() == 2 * r,
                        ErrorKind::kInvalidModel, "dilations, strides and pads must have {}, {} and {} entries", r, r,
                        2 * r);
    blocks_.assign(r, 0);
    int64_t count = 1;
    for (size_t i = 0; i < r; ++i) {
      ANVIL_PREPARE_CHECK(ctx, image_[i] > 0 && dilations_[i] > 0 && strides_[i] > 0, ErrorKind::kInvalidArgument,
                          "image_shape, dilations and strides must be positive");
      blocks_[i] = (image_[i] + pads_[i] + pads_[i + r] - dilations_[i] * (block_[i] - 1) - 1) / strides_[i] + 1;
      ANVIL_PREPARE_CHECK(ctx, blocks_[i] >= 1, ErrorKind::kInvalidArgument, "no block fits along axis {}", i);
      count *= blocks_[i];
    }
    ANVIL_PREPARE_CHECK(ctx, ctx.input_shape(0)[2] == count, ErrorKind::kInvalidArgument,
                        "the input has {} columns; the blocks need {}", ctx.input_shape(0)[2], count);
    return ctx.output_types();
  }

  void run(const RunContext& ctx) const override {
    dispatch_float(ctx.in(0).dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      compute<T>(ctx.in(0), ctx.out(0));
    });
  }

 private:
  template <typename T>
  void compute(const Tensor& in, Tensor& out) const {
    const size_t r = image_.size();
    const int64_t taps = shape_numel(block_), columns = shape_numel(blocks_), pixels = shape_numel(image_);
    const int64_t planes = out.shape()[0] * out.shape()[1];
    const T* x = in.data<T>();
    T* y = out.data<T>();
    std::fill(y, y + planes * pixels, T(0));
    std::vector<int64_t> tap(r), col(r);
    for (int64_t p = 0; p < planes; ++p)
      for (int64_t t = 0; t < taps; ++t) {
        unravel(t, block_, tap);
        for (int64_t c = 0; c < columns; ++c) {
          unravel(c, blocks_, col);
          int64_t at = 0;
          bool inside = true;
          for (size_t i = 0; i < r && inside; ++i) {
            const int64_t pos = col[i] * strides_[i] - pads_[i] + tap[i] * dilations_[i];
            inside = pos >= 0 && pos < image_[i];
            at = at * image_[i] + pos;
          }
          if (inside) y[p * pixels + at] += x[(p * taps + t) * columns + c];
        }
      }
  }

  static void unravel(int64_t i, const std::vector<int64_t>& dims, std::vector<int64_t>& index) {
    for (size_t d = dims.size(); d-- > 0;) {
      index[d] = i % dims[d];
      i /= dims[d];
    }
  }

  std::vector<int64_t> image_, block_, dilations_, strides_, pads_, blocks_;
};

// DeformConv (opsets 19, 22; 2-D): a convolution whose every tap reads X at
// its position plus a learned offset (per offset group, tap and output
// pixel), by bilinear interpolation with zeros outside, scaled by an optional
// mask. Offsets are [N, offset_group * kH * kW * 2 (h then w), oH, oW].
class DeformConvKernel : public Kernel {
 public:
  explicit DeformConvKernel(const ir::Node& node)
      : group_(node.attrs.get_int("group", 1)), offset_group_(node.attrs.get_int("offset_group", 1)) {}

  std::vector<TensorType> prepare(const PrepareContext& ctx) override {
    const Shape &x = ctx.input_shape(0), &w = ctx.input_shape(1), &off = ctx.input_shape(2);
    ANVIL_PREPARE_CHECK(ctx, x.size() == 4 && w.size() == 4 && off.size() == 4, ErrorKind::kUnsupported,
                        "only 2-D deformable convolutions are supported (X {}, W {}, offset {})", shape_str(x),
                        shape_str(w), shape_str(off));
    ANVIL_PREPARE_CHECK(ctx, group_ > 0 && offset_group_ > 0 && x[1] == w[1] * group_ && w[0] % group_ == 0 &&
                                 x[1] % offset_group_ == 0,
                        ErrorKind::kInvalidArgument, "X {} and W {} do not fit group {} and offset_group {}",
                        shape_str(x), shape_str(w), group_, offset_group_);
    kernel_ = {w[2], w[3]};
    strides_ = ctx.attrs().get_ints("strides", {1, 1});
    dilations_ = ctx.attrs().get_ints("dilations", {1, 1});
    pads_ = ctx.attrs().get_ints("pads", {0, 0, 0, 0});
    ANVIL_PREPARE_CHECK(ctx, strides_.size() == 2 && dilations_.size() == 2 && pads_.size() == 4,
                        ErrorKind::kInvalidModel, "strides, dilations and pads must have 2, 2 and 4 entries");
    const int64_t taps = kernel_[0] * kernel_[1];
    Shape out{x[0], w[0], off[2], off[3]};
    for (int d = 0; d < 2; ++d) {
      const int64_t span = (kernel_[static_cast<size_t>(d)] - 1) * dilations_[static_cast<size_t>(d)] + 1;
      const int64_t size = (x[2 + d] + pads_[static_cast<size_t>(d)] + pads_[static_cast<size_t>(d) + 2] - span) /
                               strides_[static_cast<size_t>(d)] + 1;
      ANVIL_PREPARE_CHECK(ctx, out[2 + static_cast<size_t>(d)] == size, ErrorKind::kInvalidArgument,
                          "offset {} does not match the {} output of the convolution", shape_str(off), size);
    }
    ANVIL_PREPARE_CHECK(ctx, off[0] == x[0] && off[1] == offset_group_ * taps * 2, ErrorKind::kInvalidArgument,
                        "offset {} must be [{}, {}, oH, oW]", shape_str(off), x[0], offset_group_ * taps * 2);
    if (ctx.has_input(3))
      ANVIL_PREPARE_CHECK(ctx, ctx.input_shape(3) == Shape{w[0]}, ErrorKind::kInvalidArgument, "B {} must be [{}]",
                          shape_str(ctx.input_shape(3)), w[0]);
    if (ctx.has_input(4))
      ANVIL_PREPARE_CHECK(ctx, ctx.input_shape(4) == (Shape{x[0], offset_group_ * taps, off[2], off[3]}),
                          ErrorKind::kInvalidArgument, "mask {} must be [{}, {}, {}, {}]", shape_str(ctx.input_shape(4)),
                          x[0], offset_group_ * taps, off[2], off[3]);
    return {{ctx.input_dtype(0), out}};
  }

  void run(const RunContext& ctx) const override {
    dispatch_float(ctx.in(0).dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      compute<T>(ctx);
    });
  }

 private:
  template <typename T>
  static T sample(const T* plane, int64_t h, int64_t w, T y, T x) {
    const auto y0 = static_cast<int64_t>(std::floor(y)), x0 = static_cast<int64_t>(std::floor(x));
    const T fy = y - static_cast<T>(y0), fx = x - static_cast<T>(x0);
    auto at = [&](int64_t r, int64_t c) { return r >= 0 && r < h && c >= 0 && c < w ? plane[r * w + c] : T(0); };
    return (1 - fy) * ((1 - fx) * at(y0, x0) + fx * at(y0, x0 + 1)) + fy * ((1 - fx) * at(y0 + 1, x0) + fx * at(y0 + 1, x0 + 1));
  }

  template <typename T>
  void compute(const RunContext& ctx) const {
    const Tensor &x = ctx.in(0), &w = ctx.in(1), &off = ctx.in(2);
    const Tensor* bias = ctx.inputs.size() > 3 ? ctx.inputs[3] : nullptr;
    const Tensor* mask = ctx.inputs.size() > 4 ? ctx.inputs[4] : nullptr;
    Tensor& y = ctx.out(0);
    const int64_t n = x.shape()[0], c = x.shape()[1], h = x.shape()[2], wd = x.shape()[3];
    const int64_t m = w.shape()[0], cg = w.shape()[1], mg = m / group_, c_per_og = c / offset_group_;
    const int64_t oh = y.shape()[2], ow = y.shape()[3], kh = kernel_[0], kw = kernel_[1], taps = kh * kw;
    const T *px = x.data<T>(), *pw = w.data<T>(), *po = off.data<T>();
    T* py = y.data<T>();
    for (int64_t b = 0; b < n; ++b)
      for (int64_t oc = 0; oc < m; ++oc)
        for (int64_t i = 0; i < oh; ++i)
          for (int64_t j = 0; j < ow; ++j) {
            T acc = bias ? bias->data<T>()[oc] : T(0);
            for (int64_t ci = 0; ci < cg; ++ci) {
              const int64_t ic = (oc / mg) * cg + ci, og = ic / c_per_og;
              const T* plane = px + (b * c + ic) * h * wd;
              for (int64_t t = 0; t < taps; ++t) {
                const int64_t ki = t / kw, kj = t % kw;
                const int64_t ch = ((og * taps + t) * 2) * oh * ow + i * ow + j;
                const T dy = po[b * offset_group_ * taps * 2 * oh * ow + ch];
                const T dx = po[b * offset_group_ * taps * 2 * oh * ow + ch + oh * ow];
                const T sy = static_cast<T>(i * strides_[0] - pads_[0] + ki * dilations_[0]) + dy;
                const T sx = static_cast<T>(j * strides_[1] - pads_[1] + kj * dilations_[1]) + dx;
                T v = std::isfinite(sy) && std::isfinite(sx) && std::fabs(sy) < T(1e9) && std::fabs(sx) < T(1e9)
                          ? sample(plane, h, wd, sy, sx) : T(0);
                if (mask) v *= mask->data<T>()[((b * offset_group_ + og) * taps + t) * oh * ow + i * ow + j];
                acc += v * pw[(oc * cg + ci) * taps + t];
              }
            }
            py[((b * m + oc) * oh + i) * ow + j] = acc;
          }
  }

  int64_t group_, offset_group_;
  std::vector<int64_t> kernel_, strides_, dilations_, pads_;
};

ANVIL_REGISTER_KERNEL_CLASS("Conv", kRef, ConvKernel);
ANVIL_REGISTER_OP_VERSIONS("DeformConv", 19, 22);
ANVIL_REGISTER_KERNEL_CLASS_TYPED("DeformConv", kRef, DeformConvKernel, {kFloats});
ANVIL_REGISTER_OP_VERSIONS("Col2Im", 18, 18);
ANVIL_REGISTER_KERNEL_CLASS_TYPED("Col2Im", kRef, Col2ImKernel, {kFloats, dtype_bit(DType::kInt64), dtype_bit(DType::kInt64)});
ANVIL_REGISTER_KERNEL_CLASS("ConvTranspose", kRef, ConvTransposeKernel);

}  // namespace
}  // namespace anvil::kernels
