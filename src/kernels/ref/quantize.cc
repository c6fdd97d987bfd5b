// Linear quantization (ONNX's int8/uint8 scheme, x = (q - zero_point) * scale):
// QuantizeLinear, DequantizeLinear (per tensor or per `axis`),
// DynamicQuantizeLinear (uint8 with the scale and zero point of the data's
// range), MatMulInteger (int32 products of zero-point-shifted operands) and
// QLinearMatMul (the same, requantized), ConvInteger and QLinearConv (a direct
// convolution of the shifted operands in int32, requantized for QLinearConv).
//
// Rounding is half to even (std::nearbyint in the default mode), then the
// result saturates to the output type, as the spec says.
#include <algorithm>
#include <cmath>
#include <limits>

#include "core/half.h"
#include "core/low_precision.h"
#include "kernels/nn_geometry.h"
#include "kernels/ref/common.h"
#include "kernels/registry.h"

namespace anvil::kernels {

namespace {

// NaN becomes 0 (a cast of NaN to an integer is undefined).
template <typename Q>
Q saturate(double v) {
  if (std::isnan(v)) return 0;
  const double lo = std::numeric_limits<Q>::lowest(), hi = std::numeric_limits<Q>::max();
  return static_cast<Q>(std::clamp(v, lo, hi));
}


// A quantized tensor's elements as int32.
std::vector<int32_t> widen(const Tensor& t) {
  std::vector<int32_t> v(static_cast<size_t>(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i) v[static_cast<size_t>(i)] = static_cast<int32_t>(element_as_double(t, i));
  return v;
}

// Which element of the scale (and zero point) applies to element i of x: one
// for all, one per index along `axis`, or (blocked, opset 21) one per
// `block_size` consecutive indices along `axis`, the scale having x's rank.
struct ScaleIndex {
  int64_t inner = 1, len = 1, block = 0, blocks = 1;
  bool per_axis = false;
  int64_t operator()(int64_t i) const {
    if (!per_axis) return 0;
    const int64_t a = (i / inner) % len;
    if (!block) return a;
    const int64_t outer = i / (inner * len), r = i % inner;
    return (outer * blocks + a / block) * inner + r;
  }
};

ScaleIndex scale_index(const PrepareContext& ctx, const Shape& x, const Shape& scale) {
  ScaleIndex s;
  const int64_t block = ctx.attrs().get_int("block_size", 0);
  ANVIL_PREPARE_CHECK(ctx, block >= 0, ErrorKind::kInvalidModel, "block_size must not be negative, got {}", block);
  if (block == 0 && shape_numel(scale) <= 1 && scale.size() <= 1) return s;
  const auto axis = static_cast<size_t>(normalize_axis(ctx, ctx.attrs().get_int("axis", 1), static_cast<int64_t>(x.size())));
  s.per_axis = true;
  s.len = x[axis];
  s.inner = shape_numel(Shape(x.begin() + static_cast<std::ptrdiff_t>(axis) + 1, x.end()));
  if (block == 0) {
    ANVIL_PREPARE_CHECK(ctx, scale.size() == 1 && scale[0] == x[axis], ErrorKind::kInvalidArgument,
                        "a per-axis scale {} must have axis {}'s size {}", shape_str(scale), axis, x[axis]);
    return s;
  }
  Shape want = x;
  want[axis] = x[axis] / block + (x[axis] % block != 0);
  ANVIL_PREPARE_CHECK(ctx, scale == want, ErrorKind::kInvalidArgument,
                      "a blocked scale for {} with block_size {} along axis {} must be {}, got {}", shape_str(x),
                      block, axis, shape_str(want), shape_str(scale));
  s.block = block;
  s.blocks = want[axis];
  return s;
}

// `v` rounded to a 16-bit float type, as numpy computes in that type.
double round_to(DType d, double v) {
  if (d == DType::kFloat16) return static_cast<float>(Half(static_cast<float>(v)));
  if (d == DType::kBFloat16) return static_cast<float>(BFloat16(static_cast<float>(v)));
  if (d == DType::kFloat32) return static_cast<float>(v);
  return v;
}

// Writes a real value into a float output (DequantizeLinear).
void store_float(Tensor& y, int64_t i, double v) {
  switch (y.dtype()) {
    case DType::kFloat32: y.data<float>()[i] = static_cast<float>(v); break;
    case DType::kFloat16: y.data<Half>()[i] = Half(static_cast<float>(v)); break;
    case DType::kBFloat16: y.data<BFloat16>()[i] = BFloat16(static_cast<float>(v)); break;
    default: fail(ErrorKind::kInternal, "DequantizeLinear into {}", dtype_name(y.dtype()));
  }
}

// Writes a quantized value: integers round half to even and saturate; the
// 8-bit floats convert (saturating as the attribute says); E2M1 adds the zero
// point first, as the reference does.
void store_quantized(Tensor& y, int64_t i, double q, double zero, bool saturate_f8) {
  const DType d = y.dtype();
  auto* bytes = static_cast<uint8_t*>(y.raw());
  if (dtype_is_narrow_int(d)) {
    const double v = std::isnan(q) ? 0 : std::nearbyint(q) + zero;
    bytes[i] = static_cast<uint8_t>(static_cast<int8_t>(
        std::clamp(v, static_cast<double>(narrow_int_min(d)), static_cast<double>(narrow_int_max(d)))));
    return;
  }
  if (d == DType::kFloat4E2M1) {
    bytes[i] = double_to_minifloat(d, q + zero);
    return;
  }
  if (dtype_is_float8_or_4(d)) {
    bytes[i] = double_to_minifloat(d, q, saturate_f8);
    return;
  }
  dispatch_dtype(d, [&](auto tag) {
    using Y = typename decltype(tag)::type;
    if constexpr (std::is_integral_v<Y> && !std::is_same_v<Y, bool>)
      y.data<Y>()[i] = saturate<Y>(std::isnan(q) ? q : std::nearbyint(q) + zero);
    else
      fail(ErrorKind::kInternal, "QuantizeLinear into {}", dtype_name(d));
  });
}

// QuantizeLinear: y = saturate(round(x / scale) + zero_point), the division in
// the inputs' type (or `precision`'s, opset 23); DequantizeLinear: y = (x -
// zero_point) * scale in float32, stored in the scale's type or `output_dtype`.
class QuantizeKernel : public Kernel {
 public:
  explicit QuantizeKernel(bool dequantize) : dequantize_(dequantize) {}

  std::vector<TensorType> prepare(const PrepareContext& ctx) override {
    const Shape& scale = ctx.input_shape(1);
    ANVIL_PREPARE_CHECK(ctx, shape_numel(scale) >= 1, ErrorKind::kInvalidArgument, "the scale is empty");
    if (ctx.has_input(2)) {
      const Shape& zero = ctx.input_shape(2);
      ANVIL_PREPARE_CHECK(ctx, zero == scale || (shape_numel(zero) == 1 && shape_numel(scale) == 1),
                          ErrorKind::kInvalidArgument, "the zero point {} must have the scale's shape {}",
                          shape_str(zero), shape_str(scale));
    }
    index_ = scale_index(ctx, ctx.input_shape(0), scale);
    saturate_ = ctx.attrs().get_int("saturate", 1) != 0;
    const DType x = ctx.input_dtype(0), s = ctx.input_dtype(1);
    division_type_ = x == s ? x : DType::kFloat32;  // numpy's promotion of x / scale
    if (const int64_t p = ctx.attrs().get_int("precision", 0)) {
      division_type_ = dtype_from_onnx_code(p);
      ANVIL_PREPARE_CHECK(ctx, division_type_ == DType::kFloat32 || division_type_ == DType::kFloat16 ||
                                   division_type_ == DType::kBFloat16 || division_type_ == DType::kFloat64,
                          ErrorKind::kInvalidModel, "precision must be a floating-point type, got code {}", p);
    }
    // The reference ignores the zero point of float8 inputs (it must be 0).
    ignore_zero_ = dequantize_ && dtype_is_float8_or_4(x);
    return ctx.output_types();
  }

  void run(const RunContext& ctx) const override {
    const Tensor& x = ctx.in(0);
    const Tensor& scale = ctx.in(1);
    const Tensor* zp = ctx.inputs.size() > 2 && !ignore_zero_ ? ctx.inputs[2] : nullptr;
    Tensor& y = ctx.out(0);
    const bool float8_out = dtype_is_float8_or_4(y.dtype()) && y.dtype() != DType::kFloat4E2M1;
    for (int64_t i = 0; i < x.numel(); ++i) {
      const int64_t k = index_(i);
      const double z = zp && !float8_out ? element_as_double(*zp, k) : 0.0;
      if (dequantize_) {
        const double dx = static_cast<double>(static_cast<float>(element_as_double(x, i) - z));
        store_float(y, i, static_cast<double>(static_cast<float>(dx * element_as_double(scale, k))));
      } else {
        const DType t = division_type_;
        const double q = round_to(t, round_to(t, element_as_double(x, i)) / round_to(t, element_as_double(scale, k)));
        store_quantized(y, i, q, z, saturate_);
      }
    }
  }

 private:
  bool dequantize_;
  ScaleIndex index_;
  bool saturate_ = true, ignore_zero_ = false;
  DType division_type_ = DType::kFloat32;
};

// y = saturate(round(x / scale) + zero_point) into uint8, where the scale and
// zero point map [min(x, 0), max(x, 0)] onto [0, 255].
class DynamicQuantizeKernel : public Kernel {
 public:
  explicit DynamicQuantizeKernel(const ir::Node&) {}
  std::vector<TensorType> prepare(const PrepareContext& ctx) override { return ctx.output_types(); }

  void run(const RunContext& ctx) const override {
    const Tensor& x = ctx.in(0);
    const float* v = x.data<float>();
    float lo = 0, hi = 0;
    for (int64_t i = 0; i < x.numel(); ++i) {
      lo = std::min(lo, v[i]);
      hi = std::max(hi, v[i]);
    }
    const float scale = (hi - lo) / 255.f;
    const double z = scale == 0 ? 0 : std::nearbyint(static_cast<double>(-lo / scale));
    const double zp = std::isnan(z) ? 0 : std::clamp(z, 0.0, 255.0);
    uint8_t* y = ctx.out(0).data<uint8_t>();
    for (int64_t i = 0; i < x.numel(); ++i)
      y[i] = scale == 0 ? static_cast<uint8_t>(zp) : saturate<uint8_t>(std::nearbyint(static_cast<double>(v[i] / scale)) + zp);
    *ctx.out(1).data<float>() = scale;
    *ctx.out(2).data<uint8_t>() = static_cast<uint8_t>(zp);
  }
};

// MatMulInteger and QLinearMatMul: numpy matmul of 8-bit operands shifted by
// their zero points (a per-row for A, per-column for B, or scalars), in int32.
class IntegerMatMulKernel : public Kernel {
 public:
  explicit IntegerMatMulKernel(bool requantize) : requantize_(requantize) {}

  std::vector<TensorType> prepare(const PrepareContext& ctx) override {
    Shape a = ctx.input_shape(0), b = ctx.input_shape(b_at());
    if (a.size() == 1) a.insert(a.begin(), 1);
    if (b.size() == 1) b.push_back(1);
    m_ = a[a.size() - 2];
    k_ = a.back();
    n_ = b.back();
    if (requantize_)  // a_scale, b_scale, y_scale and y_zero_point are read as single values
      for (size_t i : {1u, 4u, 6u, 7u})
        ANVIL_PREPARE_CHECK(ctx, shape_numel(ctx.input_shape(i)) == 1, ErrorKind::kInvalidArgument,
                            "input {} must hold one value, got {}", i, shape_str(ctx.input_shape(i)));
    const Shape& out = ctx.output_shape(0);
    const size_t batch_rank = std::max(a.size(), b.size()) - 2;
    batch_ = Shape(out.begin(), out.begin() + static_cast<std::ptrdiff_t>(batch_rank));
    a_batch_ = Shape(a.begin(), a.end() - 2);
    b_batch_ = Shape(b.begin(), b.end() - 2);
    return ctx.output_types();
  }

  void run(const RunContext& ctx) const override {
    const std::vector<int32_t> a = widen(ctx.in(0)), b = widen(ctx.in(b_at()));
    const Tensor* azp = input(ctx, 2);
    const Tensor* bzp = input(ctx, requantize_ ? 5 : 3);
    const std::vector<int32_t> za = zero_points(azp, m_), zb = zero_points(bzp, n_);
    const std::vector<int64_t> as = broadcast_strides(a_batch_, batch_), bs = broadcast_strides(b_batch_, batch_);
    const int64_t batches = shape_numel(batch_);
    std::vector<int32_t> acc(static_cast<size_t>(m_ * n_));
    for (int64_t bi = 0; bi < batches; ++bi) {
      int64_t ao = 0, bo = 0, rem = bi;
      for (size_t d = batch_.size(); d-- > 0;) {
        const int64_t c = rem % batch_[d];
        rem /= batch_[d];
        ao += c * as[d];
        bo += c * bs[d];
      }
      const int32_t* pa = a.data() + ao * m_ * k_;
      const int32_t* pb = b.data() + bo * k_ * n_;
      for (int64_t i = 0; i < m_; ++i)
        for (int64_t j = 0; j < n_; ++j) {
          int64_t sum = 0;  // int32 results wrap (as ONNX Runtime's); the sum itself must not overflow
          for (int64_t p = 0; p < k_; ++p)
            sum += static_cast<int64_t>(pa[i * k_ + p] - za[static_cast<size_t>(i)]) *
                   (pb[p * n_ + j] - zb[static_cast<size_t>(j)]);
          acc[static_cast<size_t>(i * n_ + j)] = static_cast<int32_t>(static_cast<uint32_t>(sum));
        }
      write(ctx, bi, acc);
    }
  }

 private:
  size_t b_at() const { return requantize_ ? 3 : 1; }

  static const Tensor* input(const RunContext& ctx, size_t i) { return i < ctx.inputs.size() ? ctx.inputs[i] : nullptr; }

  // A zero point per row of A (or column of B), or one for all; 0 when absent.
  static std::vector<int32_t> zero_points(const Tensor* t, int64_t n) {
    std::vector<int32_t> v(static_cast<size_t>(n), 0);
    if (!t) return v;
    ANVIL_CHECK(t->numel() == 1 || t->numel() == n, ErrorKind::kInvalidArgument,
                "a zero point has {} values for {} rows or columns", t->numel(), n);
    for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = static_cast<int32_t>(element_as_double(*t, t->numel() == 1 ? 0 : i));
    return v;
  }

  void write(const RunContext& ctx, int64_t batch, const std::vector<int32_t>& acc) const {
    Tensor& y = ctx.out(0);
    const int64_t base = batch * m_ * n_;
    if (!requantize_) {
      std::copy(acc.begin(), acc.end(), y.data<int32_t>() + base);
      return;
    }
    // real = acc * a_scale * b_scale; y = saturate(round(real / y_scale) + y_zero_point).
    const float multiplier = static_cast<float>(element_as_double(ctx.in(1), 0)) * static_cast<float>(element_as_double(ctx.in(4), 0)) /
                             static_cast<float>(element_as_double(ctx.in(6), 0));
    const double yzp = element_as_double(ctx.in(7), 0);
    dispatch_dtype(y.dtype(), [&](auto tag) {
      using Y = typename decltype(tag)::type;
      if constexpr (std::is_same_v<Y, uint8_t> || std::is_same_v<Y, int8_t>)
        for (size_t i = 0; i < acc.size(); ++i)
          y.data<Y>()[base + static_cast<int64_t>(i)] =
              saturate<Y>(std::nearbyint(static_cast<double>(acc[i]) * static_cast<double>(multiplier)) + yzp);
    });
  }

  bool requantize_;
  int64_t m_ = 0, k_ = 0, n_ = 0;
  Shape batch_, a_batch_, b_batch_;
};

constexpr unsigned kQuant8 = dtype_bit(DType::kUInt8) | dtype_bit(DType::kInt8);

// ConvInteger and QLinearConv, 1-D to 3-D, groups, every padding mode (nn_geometry.h).
class IntegerConvKernel : public Kernel {
 public:
  explicit IntegerConvKernel(bool requantize) : requantize_(requantize) {}

  std::vector<TensorType> prepare(const PrepareContext& ctx) override {
    const Shape& x = ctx.input_shape(0);
    const Shape& w = ctx.input_shape(w_at());  // the schema checked ranks, channels and the bias
    ANVIL_PREPARE_CHECK(ctx, x.size() <= 5, ErrorKind::kUnsupported, "at most 3 spatial dimensions are supported");
    check_parameters(ctx, w[0]);
    group_ = ctx.attrs().get_int("group", 1);
    geo_ = Geometry3(x, conv_geometry(ctx, x, std::vector<int64_t>(w.begin() + 2, w.end())));
    n_ = x[0];
    c_ = x[1];
    m_ = w[0];
    return ctx.output_types();
  }

  void run(const RunContext& ctx) const override {
    const std::vector<int32_t> x = widen(ctx.in(0)), w = widen(ctx.in(w_at()));
    const Tensor* xzp = input(ctx, 2);
    const Tensor* wzp = input(ctx, requantize_ ? 5 : 3);
    const int32_t zx = xzp ? static_cast<int32_t>(element_as_double(*xzp, 0)) : 0;
    const Geometry3& g = geo_;
    const int64_t cg = c_ / group_, mg = m_ / group_, taps = g.taps(), in_plane = g.in_plane(), out_plane = g.out_plane();
    const Tensor* bias = requantize_ ? input(ctx, 8) : nullptr;
    double multiplier = 1;
    if (requantize_)
      multiplier = static_cast<double>(static_cast<float>(element_as_double(ctx.in(1), 0)) / static_cast<float>(element_as_double(ctx.in(6), 0)));
    for (int64_t b = 0; b < n_; ++b)
      for (int64_t m = 0; m < m_; ++m) {
        const int32_t zw = wzp ? static_cast<int32_t>(element_as_double(*wzp, wzp->numel() > 1 ? m : 0)) : 0;
        const int64_t first_c = (m / mg) * cg;
        for (int64_t o = 0; o < out_plane; ++o) {
          const int64_t od = o / (g.out[1] * g.out[2]), oh = (o / g.out[2]) % g.out[1], ow = o % g.out[2];
          int64_t acc = bias ? bias->data<int32_t>()[m] : 0;
          for (int64_t c = 0; c < cg; ++c)
            for (int64_t t = 0; t < taps; ++t) {
              const int64_t kd = t / (g.k[1] * g.k[2]), kh = (t / g.k[2]) % g.k[1], kw = t % g.k[2];
              const int64_t id = od * g.s[0] + kd * g.d[0] - g.p[0], ih = oh * g.s[1] + kh * g.d[1] - g.p[1],
                            iw = ow * g.s[2] + kw * g.d[2] - g.p[2];
              if (id < 0 || id >= g.in[0] || ih < 0 || ih >= g.in[1] || iw < 0 || iw >= g.in[2]) continue;  // padding: zx - zx
              const int32_t xv = x[static_cast<size_t>((b * c_ + first_c + c) * in_plane + (id * g.in[1] + ih) * g.in[2] + iw)];
              const int32_t wv = w[static_cast<size_t>((m * cg + c) * taps + t)];
              acc += static_cast<int64_t>(xv - zx) * (wv - zw);
            }
          const int64_t at = (b * m_ + m) * out_plane + o;
          if (!requantize_) {
            ctx.out(0).data<int32_t>()[at] = static_cast<int32_t>(static_cast<uint32_t>(acc));
            continue;
          }
          const double scale = multiplier * static_cast<double>(static_cast<float>(element_as_double(ctx.in(4), ctx.in(4).numel() > 1 ? m : 0)));
          const double y = std::nearbyint(static_cast<double>(acc) * scale) + element_as_double(ctx.in(7), 0);
          if (ctx.out(0).dtype() == DType::kUInt8) ctx.out(0).data<uint8_t>()[at] = saturate<uint8_t>(y);
          else ctx.out(0).data<int8_t>()[at] = saturate<int8_t>(y);
        }
      }
  }

 private:
  size_t w_at() const { return requantize_ ? 3 : 1; }
  static const Tensor* input(const RunContext& ctx, size_t i) { return i < ctx.inputs.size() ? ctx.inputs[i] : nullptr; }

  // Scales and zero points: one value, or (W's) one per output channel.
  void check_parameters(const PrepareContext& ctx, int64_t channels) const {
    const std::vector<size_t> scalars = requantize_ ? std::vector<size_t>{1, 2, 6, 7} : std::vector<size_t>{2};
    for (size_t i : scalars)
      if (ctx.has_input(i))
        ANVIL_PREPARE_CHECK(ctx, shape_numel(ctx.input_shape(i)) == 1, ErrorKind::kInvalidArgument,
                            "input {} must hold one value, got {}", i, shape_str(ctx.input_shape(i)));
    for (size_t i : requantize_ ? std::vector<size_t>{4, 5} : std::vector<size_t>{3})
      if (ctx.has_input(i)) {
        const int64_t n = shape_numel(ctx.input_shape(i));
        ANVIL_PREPARE_CHECK(ctx, n == 1 || n == channels, ErrorKind::kInvalidArgument,
                            "input {} must hold one value or one per output channel ({}), got {}", i, channels,
                            shape_str(ctx.input_shape(i)));
      }
    if (requantize_ && ctx.has_input(8))
      ANVIL_PREPARE_CHECK(ctx, ctx.input_shape(8) == Shape{channels}, ErrorKind::kInvalidArgument,
                          "the bias {} must be [{}]", shape_str(ctx.input_shape(8)), channels);
  }

  bool requantize_;
  int64_t group_ = 1, n_ = 0, c_ = 0, m_ = 0;
  Geometry3 geo_;
};

}  // namespace

// 19: float8 and saturate; 21: int4/uint4, blocks, output_dtype; 23:
// precision, float4; 24, 25 and 28 add element types (int2, float8e8m0).
ANVIL_REGISTER_OP_VERSIONS("QuantizeLinear", 10, 23);
ANVIL_REGISTER_OP_VERSIONS("DequantizeLinear", 10, 23);
constexpr unsigned kQuantized = kQuant8 | dtype_bit(DType::kInt16) | dtype_bit(DType::kUInt16) | kLowPrecision;
constexpr unsigned kRealTypes = kFloat32Only | kHalfs;
ANVIL_REGISTER_KERNEL_TYPED("QuantizeLinear", kRef, [](const ir::Node&) -> std::unique_ptr<Kernel> {
  return std::make_unique<QuantizeKernel>(false);
}, {kRealTypes | dtype_bit(DType::kInt32), kRealTypes | dtype_bit(DType::kInt32), kQuantized});
ANVIL_REGISTER_KERNEL_TYPED("DequantizeLinear", kRef, [](const ir::Node&) -> std::unique_ptr<Kernel> {
  return std::make_unique<QuantizeKernel>(true);
}, {kQuantized | dtype_bit(DType::kInt32), kRealTypes, kQuantized | dtype_bit(DType::kInt32)});
ANVIL_REGISTER_KERNEL_CLASS_TYPED("DynamicQuantizeLinear", kRef, DynamicQuantizeKernel, {kFloat32Only});
ANVIL_REGISTER_KERNEL_TYPED("MatMulInteger", kRef, [](const ir::Node&) -> std::unique_ptr<Kernel> {
  return std::make_unique<IntegerMatMulKernel>(false);
}, {kQuant8});
ANVIL_REGISTER_OP_VERSIONS("ConvInteger", 10, 10);
ANVIL_REGISTER_OP_VERSIONS("QLinearConv", 10, 10);
ANVIL_REGISTER_KERNEL_TYPED("ConvInteger", kRef, [](const ir::Node&) -> std::unique_ptr<Kernel> {
  return std::make_unique<IntegerConvKernel>(false);
}, {kQuant8});
ANVIL_REGISTER_KERNEL_TYPED("QLinearConv", kRef, [](const ir::Node&) -> std::unique_ptr<Kernel> {
  return std::make_unique<IntegerConvKernel>(true);
}, {kQuant8, kFloat32Only, kQuant8, kQuant8, kFloat32Only, kQuant8, kFloat32Only, kQuant8, dtype_bit(DType::kInt32)});
// 21: 16-bit float scales (and float8 operands, which Anvil refuses).
ANVIL_REGISTER_OP_VERSIONS("QLinearMatMul", 10, 21);
ANVIL_REGISTER_KERNEL_TYPED("QLinearMatMul", kRef, [](const ir::Node&) -> std::unique_ptr<Kernel> {
  return std::make_unique<IntegerMatMulKernel>(true);
}, {kQuant8, kRealTypes, kQuant8, kQuant8, kRealTypes, kQuant8, kRealTypes, kQuant8});

}  // namespace anvil::kernels
