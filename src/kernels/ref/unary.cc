// Unary elementwise ops: activations, float math (exponential, trigonometric,
// hyperbolic, rounding), the integer-capable ones (Relu, Neg, Abs, Sign,
// Shrink), IsNaN / IsInf, and Clip.
#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/ref/arith.h"
#include "kernels/ref/common.h"
#include "kernels/registry.h"

namespace anvil::kernels {

namespace {

// --- unary ops ---------------------------------------------------------------

enum class UnOp {
  kRelu, kLeakyRelu, kElu, kSelu, kSigmoid, kTanh, kHardSigmoid, kHardSwish, kSoftplus, kSoftsign,
  kSqrt, kExp, kLog, kNeg, kAbs, kErf, kFloor, kCeil, kReciprocal,
  kSin, kCos, kTan, kAsin, kAcos, kAtan, kSinh, kCosh, kAsinh, kAcosh, kAtanh,
  kRound, kSign, kCelu, kThresholdedRelu, kShrink, kMish, kGelu, kGeluTanh, kSwish, kBitNot,
};

template <typename T, typename F>
void map(const T* in, T* out, int64_t n, F f) {
#pragma omp parallel for if (n > 32768)
  for (int64_t i = 0; i < n; ++i) out[i] = f(in[i]);
}

// Float math; alpha/beta/gamma are the op's attributes (defaults filled in).
template <typename T>
void unary_float(UnOp op, const T* x, T* y, int64_t n, T alpha, T beta, T gamma) {
  switch (op) {
    case UnOp::kRelu: return map(x, y, n, [](T v) { return v > T(0) ? v : T(0); });
    case UnOp::kLeakyRelu: return map(x, y, n, [=](T v) { return v >= T(0) ? v : alpha * v; });
    case UnOp::kElu: return map(x, y, n, [=](T v) { return v >= T(0) ? v : alpha * std::expm1(v); });
    case UnOp::kSelu: return map(x, y, n, [=](T v) { return v > T(0) ? gamma * v : gamma * alpha * std::expm1(v); });
    case UnOp::kSigmoid:  // exp of a non-positive argument only, so large |v| neither overflows nor loses precision
      return map(x, y, n, [](T v) {
        if (v >= T(0)) return T(1) / (T(1) + std::exp(-v));
        T e = std::exp(v);
        return e / (T(1) + e);
      });
    case UnOp::kTanh: return map(x, y, n, [](T v) { return std::tanh(v); });
    case UnOp::kHardSigmoid:
      return map(x, y, n, [=](T v) { return std::max(T(0), std::min(T(1), alpha * v + beta)); });
    case UnOp::kHardSwish:
      return map(x, y, n, [](T v) { return v * std::max(T(0), std::min(T(1), v / T(6) + T(0.5))); });
    case UnOp::kSoftplus:
      return map(x, y, n, [](T v) { return v > T(0) ? v + std::log1p(std::exp(-v)) : std::log1p(std::exp(v)); });
    case UnOp::kSoftsign: return map(x, y, n, [](T v) { return v / (T(1) + std::fabs(v)); });
    case UnOp::kSqrt: return map(x, y, n, [](T v) { return std::sqrt(v); });
    case UnOp::kExp: return map(x, y, n, [](T v) { return std::exp(v); });
    case UnOp::kLog: return map(x, y, n, [](T v) { return std::log(v); });
    case UnOp::kNeg: return map(x, y, n, [](T v) { return -v; });
    case UnOp::kAbs: return map(x, y, n, [](T v) { return std::fabs(v); });
    case UnOp::kErf: return map(x, y, n, [](T v) { return std::erf(v); });
    case UnOp::kFloor: return map(x, y, n, [](T v) { return std::floor(v); });
    case UnOp::kCeil: return map(x, y, n, [](T v) { return std::ceil(v); });
    case UnOp::kReciprocal: return map(x, y, n, [](T v) { return T(1) / v; });
    case UnOp::kSin: return map(x, y, n, [](T v) { return std::sin(v); });
    case UnOp::kCos: return map(x, y, n, [](T v) { return std::cos(v); });
    case UnOp::kTan: return map(x, y, n, [](T v) { return std::tan(v); });
    case UnOp::kAsin: return map(x, y, n, [](T v) { return std::asin(v); });
    case UnOp::kAcos: return map(x, y, n, [](T v) { return std::acos(v); });
    case UnOp::kAtan: return map(x, y, n, [](T v) { return std::atan(v); });
    case UnOp::kSinh: return map(x, y, n, [](T v) { return std::sinh(v); });
    case UnOp::kCosh: return map(x, y, n, [](T v) { return std::cosh(v); });
    case UnOp::kAsinh: return map(x, y, n, [](T v) { return std::asinh(v); });
    case UnOp::kAcosh: return map(x, y, n, [](T v) { return std::acosh(v); });
    case UnOp::kAtanh: return map(x, y, n, [](T v) { return std::atanh(v); });
    // Halves round to the even neighbour (ONNX Round); nearbyint does so in the default rounding mode.
    case UnOp::kRound: return map(x, y, n, [](T v) { return std::nearbyint(v); });
    case UnOp::kSign: return map(x, y, n, [](T v) { return v > T(0) ? T(1) : v < T(0) ? T(-1) : v; });  // NaN stays
    case UnOp::kCelu:
      return map(x, y, n, [=](T v) { return std::max(T(0), v) + std::min(T(0), alpha * std::expm1(v / alpha)); });
    case UnOp::kThresholdedRelu: return map(x, y, n, [=](T v) { return v > alpha ? v : T(0); });
    case UnOp::kShrink: return map(x, y, n, [=](T v) { return v < -gamma ? v + beta : v > gamma ? v - beta : T(0); });
    case UnOp::kMish:
      return map(x, y, n, [](T v) {
        T softplus = v > T(0) ? v + std::log1p(std::exp(-v)) : std::log1p(std::exp(v));
        return v * std::tanh(softplus);
      });
    case UnOp::kGelu: return map(x, y, n, [](T v) { return T(0.5) * v * (T(1) + std::erf(v / std::sqrt(T(2)))); });
    case UnOp::kSwish: return map(x, y, n, [=](T v) { return v / (T(1) + std::exp(-alpha * v)); });
    case UnOp::kBitNot: return;  // integers only
    case UnOp::kGeluTanh:
      return map(x, y, n, [](T v) {
        const T c = std::sqrt(T(2) / T(M_PI));
        return T(0.5) * v * (T(1) + std::tanh(c * (v + T(0.044715) * v * v * v)));
      });
  }
}

// The integer ops (Relu, Neg, Abs, Sign, Shrink); negation wraps, so
// Abs(INT_MIN) == INT_MIN as in numpy. Shrink's lambd and bias are cast to T.
template <typename T>
void unary_int(UnOp op, const T* x, T* y, int64_t n, double lambd, double bias) {
  auto neg = [](T v) { return wrapping(T(0), v, [](auto p, auto q) { return p - q; }); };
  switch (op) {
    case UnOp::kRelu: return map(x, y, n, [](T v) { return v > T(0) ? v : T(0); });
    case UnOp::kNeg: return map(x, y, n, neg);
    case UnOp::kAbs: return map(x, y, n, [=](T v) { return v < T(0) ? neg(v) : v; });
    case UnOp::kSign: return map(x, y, n, [](T v) { return static_cast<T>(v > T(0) ? 1 : v < T(0) ? -1 : 0); });
    case UnOp::kBitNot: return map(x, y, n, [](T v) { return static_cast<T>(~v); });
    case UnOp::kShrink:
      return map(x, y, n, [=](T v) {
        const double d = static_cast<double>(v);
        return d < -lambd ? static_cast<T>(d + bias) : d > lambd ? static_cast<T>(d - bias) : T(0);
      });
    default: return;  // prepare() admits integers for these only
  }
}

struct UnaryDef {
  const char* name;
  UnOp op;
  unsigned dtypes;
  float alpha, beta, gamma;  // attribute defaults
};

constexpr UnaryDef kUnaryOps[] = {
    {"Relu", UnOp::kRelu, kFloats | kHalfs | kSignedInts, 0, 0, 0},
    {"LeakyRelu", UnOp::kLeakyRelu, kFloats | kHalfs, 0.01f, 0, 0},
    {"Elu", UnOp::kElu, kFloats | kHalfs, 1.0f, 0, 0},
    {"Selu", UnOp::kSelu, kFloats | kHalfs, 1.67326319217681884765625f, 0, 1.05070102214813232421875f},
    {"Sigmoid", UnOp::kSigmoid, kFloats | kHalfs, 0, 0, 0},
    {"Tanh", UnOp::kTanh, kFloats | kHalfs, 0, 0, 0},
    {"HardSigmoid", UnOp::kHardSigmoid, kFloats | kHalfs, 0.2f, 0.5f, 0},
    {"HardSwish", UnOp::kHardSwish, kFloats | kHalfs, 0, 0, 0},
    {"Softplus", UnOp::kSoftplus, kFloats | kHalfs, 0, 0, 0},
    {"Softsign", UnOp::kSoftsign, kFloats | kHalfs, 0, 0, 0},
    {"Sqrt", UnOp::kSqrt, kFloats | kHalfs, 0, 0, 0},
    {"Exp", UnOp::kExp, kFloats | kHalfs, 0, 0, 0},
    {"Log", UnOp::kLog, kFloats | kHalfs, 0, 0, 0},
    {"Neg", UnOp::kNeg, kFloats | kHalfs | kSignedInts, 0, 0, 0},
    {"Abs", UnOp::kAbs, kNumeric, 0, 0, 0},
    {"Erf", UnOp::kErf, kFloats | kHalfs, 0, 0, 0},
    {"Floor", UnOp::kFloor, kFloats | kHalfs, 0, 0, 0},
    {"Ceil", UnOp::kCeil, kFloats | kHalfs, 0, 0, 0},
    {"Reciprocal", UnOp::kReciprocal, kFloats | kHalfs, 0, 0, 0},
    {"Sin", UnOp::kSin, kFloats | kHalfs, 0, 0, 0},
    {"Cos", UnOp::kCos, kFloats | kHalfs, 0, 0, 0},
    {"Tan", UnOp::kTan, kFloats | kHalfs, 0, 0, 0},
    {"Asin", UnOp::kAsin, kFloats | kHalfs, 0, 0, 0},
    {"Acos", UnOp::kAcos, kFloats | kHalfs, 0, 0, 0},
    {"Atan", UnOp::kAtan, kFloats | kHalfs, 0, 0, 0},
    {"Sinh", UnOp::kSinh, kFloats | kHalfs, 0, 0, 0},
    {"Cosh", UnOp::kCosh, kFloats | kHalfs, 0, 0, 0},
    {"Asinh", UnOp::kAsinh, kFloats | kHalfs, 0, 0, 0},
    {"Acosh", UnOp::kAcosh, kFloats | kHalfs, 0, 0, 0},
    {"Atanh", UnOp::kAtanh, kFloats | kHalfs, 0, 0, 0},
    {"Round", UnOp::kRound, kFloats | kHalfs, 0, 0, 0},
    {"Sign", UnOp::kSign, kNumeric, 0, 0, 0},
    {"Celu", UnOp::kCelu, kFloats | kHalfs, 1.0f, 0, 0},
    {"ThresholdedRelu", UnOp::kThresholdedRelu, kFloats | kHalfs, 1.0f, 0, 0},
    // Shrink's attributes: bias is read as beta, lambd as gamma (see UnaryKernel).
    {"Shrink", UnOp::kShrink, kNumeric, 0, 0, 0.5f},
    {"Mish", UnOp::kMish, kFloats | kHalfs, 0, 0, 0},
    {"Gelu", UnOp::kGelu, kFloats | kHalfs, 0, 0, 0},
    {"Swish", UnOp::kSwish, kFloats | kHalfs, 1.0f, 0, 0},
    {"BitwiseNot", UnOp::kBitNot, kSignedInts | kUnsignedInts, 0, 0, 0},
};

class UnaryKernel : public Kernel {
 public:
  UnaryKernel(const ir::Node& node, const UnaryDef& def)
      : op_(def.op == UnOp::kGelu && node.attrs.get_string("approximate", "none") == "tanh" ? UnOp::kGeluTanh : def.op),
        alpha_(node.attrs.get_float("alpha", def.alpha)),
        beta_(node.attrs.get_float(def.op == UnOp::kShrink ? "bias" : "beta", def.beta)),
        gamma_(node.attrs.get_float(def.op == UnOp::kShrink ? "lambd" : "gamma", def.gamma)) {}

  std::vector<TensorType> prepare(const PrepareContext& ctx) override {
    ANVIL_PREPARE_CHECK(ctx, ctx.num_inputs() == 1 && ctx.has_input(0), ErrorKind::kInvalidModel,
                        "expects 1 input, got {}", ctx.num_inputs());
    return ctx.output_types();
  }

  void run(const RunContext& ctx) const override {
    const Tensor& x = ctx.in(0);
    dispatch_dtype(x.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      if constexpr (std::is_floating_point_v<T>) {
        unary_float<T>(op_, x.data<T>(), ctx.out(0).data<T>(), x.numel(), static_cast<T>(alpha_),
                       static_cast<T>(beta_), static_cast<T>(gamma_));
      } else if constexpr (kIs16BitFloat<T>) {  // computed in float, rounded once
        const int64_t n = x.numel();
        std::vector<float> buf(static_cast<size_t>(n));
        for (int64_t i = 0; i < n; ++i) buf[static_cast<size_t>(i)] = static_cast<float>(x.data<T>()[i]);
        unary_float<float>(op_, buf.data(), buf.data(), n, alpha_, beta_, gamma_);
        for (int64_t i = 0; i < n; ++i) ctx.out(0).data<T>()[i] = T(buf[static_cast<size_t>(i)]);
      } else if constexpr (kPlainNumber<T>) {
        unary_int<T>(op_, x.data<T>(), ctx.out(0).data<T>(), x.numel(), gamma_, beta_);
      }
    });
  }

  int inplace_input() const override { return 0; }

 private:
  UnOp op_;
  float alpha_, beta_, gamma_;
};

// IsNaN, and IsInf with detect_positive / detect_negative: bool outputs.
class FloatClassKernel : public Kernel {
 public:
  FloatClassKernel(const ir::Node& node, bool nan)
      : nan_(nan),
        positive_(node.attrs.get_int("detect_positive", 1) != 0),
        negative_(node.attrs.get_int("detect_negative", 1) != 0) {}

  std::vector<TensorType> prepare(const PrepareContext& ctx) override { return ctx.output_types(); }

  void run(const RunContext& ctx) const override {
    const Tensor& x = ctx.in(0);
    bool* y = ctx.out(0).data<bool>();
    for (int64_t i = 0; i < x.numel(); ++i) {  // every float type, decoded
      const double v = element_as_double(x, i);
      y[i] = nan_ ? std::isnan(v) : std::isinf(v) && (v > 0 ? positive_ : negative_);
    }
  }

 private:
  bool nan_, positive_, negative_;
};

// Clip: min/max attributes before opset 11, optional scalar inputs from 11
// (an omitted bound is unbounded). With min > max every value becomes max.
class ClipKernel : public Kernel {
 public:
  explicit ClipKernel(const ir::Node& node)
      : legacy_(node.opset < 11),
        has_lo_(node.attrs.has("min")),
        has_hi_(node.attrs.has("max")),
        lo_(node.attrs.get_float("min", 0.f)),
        hi_(node.attrs.get_float("max", 0.f)) {}

  std::vector<TensorType> prepare(const PrepareContext& ctx) override {
    ANVIL_PREPARE_CHECK(ctx, ctx.has_input(0), ErrorKind::kInvalidModel, "input 0 is missing");
    DType d = ctx.input_dtype(0);
    ANVIL_PREPARE_CHECK(ctx, dtype_in(d, legacy_ ? unsigned(kFloats) : unsigned(kNumeric)), ErrorKind::kUnsupported,
                        "dtype {} is not supported", dtype_name(d));
    ANVIL_PREPARE_CHECK(ctx, ctx.num_inputs() <= (legacy_ ? 1u : 3u), ErrorKind::kInvalidModel, "too many inputs ({})",
                        ctx.num_inputs());
    for (size_t i = 1; i < ctx.num_inputs(); ++i) {
      if (!ctx.has_input(i)) continue;
      ANVIL_PREPARE_CHECK(ctx, ctx.input_dtype(i) == d, ErrorKind::kInvalidModel,
                          "{} has type {}, the input {}", i == 1 ? "min" : "max", dtype_name(ctx.input_dtype(i)),
                          dtype_name(d));
      ANVIL_PREPARE_CHECK(ctx, shape_numel(ctx.input_shape(i)) == 1, ErrorKind::kInvalidArgument,
                          "{} must be a scalar, got shape {}", i == 1 ? "min" : "max", shape_str(ctx.input_shape(i)));
    }
    return ctx.output_types();
  }

  void run(const RunContext& ctx) const override {
    const Tensor& x = ctx.in(0);
    dispatch_dtype(x.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      if constexpr (kPlainNumber<T>) {
        T lo = std::numeric_limits<T>::lowest(), hi = std::numeric_limits<T>::max();
        if constexpr (std::is_floating_point_v<T>) {
          lo = -std::numeric_limits<T>::infinity();
          hi = std::numeric_limits<T>::infinity();
        }
        if (legacy_) {
          if (has_lo_) lo = static_cast<T>(lo_);
          if (has_hi_) hi = static_cast<T>(hi_);
        } else {
          if (ctx.inputs.size() > 1 && ctx.inputs[1]) lo = *ctx.in(1).data<T>();
          if (ctx.inputs.size() > 2 && ctx.inputs[2]) hi = *ctx.in(2).data<T>();
        }
        // max then min: NaN stays NaN, and min > max yields max.
        map(x.data<T>(), ctx.out(0).data<T>(), x.numel(), [lo, hi](T v) { return std::min(std::max(v, lo), hi); });
      }
    });
  }

  int inplace_input() const override { return 0; }

 private:
  bool legacy_, has_lo_, has_hi_;
  float lo_, hi_;
};

// SwiGLU (opset 28): Y = Swish_alpha(A) * B = A * sigmoid(alpha * A) * B, A and B of one shape.
class SwiGluKernel : public Kernel {
 public:
  explicit SwiGluKernel(const ir::Node& node) : alpha_(node.attrs.get_float("alpha", 1.f)) {}
  std::vector<TensorType> prepare(const PrepareContext& ctx) override {
    ANVIL_PREPARE_CHECK(ctx, ctx.input_shape(0) == ctx.input_shape(1) && ctx.input_dtype(0) == ctx.input_dtype(1),
                        ErrorKind::kInvalidArgument, "A {} and B {} must have one shape and type",
                        shape_str(ctx.input_shape(0)), shape_str(ctx.input_shape(1)));
    return ctx.output_types();
  }
  void run(const RunContext& ctx) const override {
    if (dtype_in(ctx.in(0).dtype(), kHalfs))  // 16-bit floats: in float32, rounded once
      return via_float32({&ctx.in(0), &ctx.in(1)}, ctx.out(0), [&](const auto& w, float* y) {
        for (size_t i = 0; i < w[0].size(); ++i) y[i] = gate(w[0][i]) * w[1][i];
      });
    dispatch_float(ctx.in(0).dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T *a = ctx.in(0).data<T>(), *b = ctx.in(1).data<T>();
      T* y = ctx.out(0).data<T>();
      for (int64_t i = 0; i < ctx.in(0).numel(); ++i) y[i] = gate(a[i]) * b[i];
    });
  }

 private:
  template <typename T>
  T gate(T a) const {
    return a / (T(1) + std::exp(-static_cast<T>(alpha_) * a));
  }
  float alpha_;
};

// --- registration --------------------------------------------------------------

ANVIL_REGISTER_KERNEL_CLASS("Clip", kRef, ClipKernel);
ANVIL_REGISTER_OP_VERSIONS("SwiGLU", 28, 28);
ANVIL_REGISTER_KERNEL_CLASS_TYPED("SwiGLU", kRef, SwiGluKernel, {kFloats | kHalfs, kFloats | kHalfs});
ANVIL_REGISTER_KERNEL_TYPED("IsNaN", kRef, [](const ir::Node& n) -> std::unique_ptr<Kernel> {
  return std::make_unique<FloatClassKernel>(n, true);
}, {kFloats | kHalfs | kMinifloats});
ANVIL_REGISTER_KERNEL_TYPED("IsInf", kRef, [](const ir::Node& n) -> std::unique_ptr<Kernel> {
  return std::make_unique<FloatClassKernel>(n, false);
}, {kFloats | kHalfs | kMinifloats});
// Later versions only add element types (float8, bfloat16) or are new ops.
ANVIL_REGISTER_OP_VERSIONS("IsNaN", 9, 20);
ANVIL_REGISTER_OP_VERSIONS("IsInf", 10, 20);
ANVIL_REGISTER_OP_VERSIONS("Mish", 18, 21);
ANVIL_REGISTER_OP_VERSIONS("Gelu", 20, 21);
ANVIL_REGISTER_OP_VERSIONS("Swish", 24, 28);
ANVIL_REGISTER_OP_VERSIONS("BitwiseNot", 18, 28);

// One registration per entry of kUnaryOps.
struct UnaryRegistrar {
  UnaryRegistrar() {
    for (const UnaryDef& def : kUnaryOps)
      Registry::global().add({def.name, "", Backend::kRef,
                              [&def](const ir::Node& n) -> std::unique_ptr<Kernel> {
                                return std::make_unique<UnaryKernel>(n, def);
                              },
                              InputTypes{{def.dtypes}}});
  }
};
const UnaryRegistrar unary_registrar;

}  // namespace

}  // namespace anvil::kernels
