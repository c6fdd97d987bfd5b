// Elementwise ops: numpy-broadcast binary ops (Add, Sub, Mul, Div, Pow, PRelu),
// variadic ops (Sum, Mean, Max, Min), unary math and activations, and Clip.
//
// Broadcasting is planned once in prepare(): the output shape is collapsed to
// as few dimensions as the operands' strides allow, so equal shapes become one
// flat loop and "scalar" or "per-channel" operands become an inner loop with a
// stride of 0 — the fast paths fall out of the general one.
#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>

#include "kernels/ref/broadcast.h"
#include "kernels/ref/common.h"
#include "kernels/registry.h"

namespace anvil::kernels {

namespace {

// The C++ types the kernels here instantiate for (no bool, no 16-bit floats).
template <typename T>
constexpr bool kPlainNumber = std::is_arithmetic_v<T> && !std::is_same_v<T, bool>;

// --- scalar arithmetic with defined results for every input -----------------

// Integer overflow wraps (as the hardware does) instead of being undefined:
// the operation runs on unsigned operands no narrower than int, which never
// promote back to signed int.
template <typename T>
using WrapType = std::make_unsigned_t<decltype(T() + 0)>;

template <typename T, typename F>
T wrapping(T x, T y, F f) {
  if constexpr (std::is_integral_v<T>) {
    using U = WrapType<T>;
    return static_cast<T>(f(static_cast<U>(x), static_cast<U>(y)));
  } else {
    return static_cast<T>(f(x, y));
  }
}

// Integer division truncates toward zero (C++ and onnxruntime); x/0 is defined
// as 0 so that a bad input cannot trap the process.
template <typename T>
T divide(T x, T y) {
  if constexpr (std::is_integral_v<T>) {
    if (y == 0) return 0;
    if constexpr (std::is_signed_v<T>)
      if (y == -1) return wrapping(T(0), x, [](auto p, auto q) { return p - q; });  // MIN / -1 overflows
    return static_cast<T>(x / y);
  } else {
    return x / y;
  }
}

// Max/Min that propagate NaN like numpy's maximum/minimum.
template <typename T>
T maximum(T x, T y) {
  if constexpr (std::is_floating_point_v<T>) return (x > y || x != x) ? x : y;
  else return x > y ? x : y;
}
template <typename T>
T minimum(T x, T y) {
  if constexpr (std::is_floating_point_v<T>) return (x < y || x != x) ? x : y;
  else return x < y ? x : y;
}

// The same for 16-bit floats, compared through float; an operand is returned unchanged.
template <typename T>
T pick_max(T x, T y) {
  const float fx = x, fy = y;
  return (fx > fy || fx != fx) ? x : y;
}
template <typename T>
T pick_min(T x, T y) {
  const float fx = x, fy = y;
  return (fx < fy || fx != fx) ? x : y;
}

// Double -> integer conversion that saturates instead of being undefined.
template <typename T>
T saturate_cast(double v) {
  if constexpr (std::is_floating_point_v<T>) {
    return static_cast<T>(v);
  } else {
    if (std::isnan(v)) return 0;
    if (v <= static_cast<double>(std::numeric_limits<T>::lowest())) return std::numeric_limits<T>::lowest();
    if (v >= static_cast<double>(std::numeric_limits<T>::max())) return std::numeric_limits<T>::max();
    return static_cast<T>(v);
  }
}

// Integer power by squaring; exact where pow() through double is not (int64).
template <typename B, typename E>
B int_pow(B base, E exp) {
  if constexpr (std::is_signed_v<E>) {
    if (exp < 0) {  // 1 / base^-exp, truncated; 1/0 is defined as 0 like Div
      if (base == 1) return 1;
      if constexpr (std::is_signed_v<B>)
        if (base == -1) return (exp % 2 == 0) ? 1 : -1;
      return 0;
    }
  }
  using W = WrapType<B>;  // wraps on overflow
  W result = 1, b = static_cast<W>(base);
  for (auto e = exp; e > 0; e /= 2) {
    if (e % 2) result = static_cast<W>(result * b);
    b = static_cast<W>(b * b);
  }
  return static_cast<B>(result);
}

template <typename B, typename E>
B power(B base, E exp) {
  if constexpr (std::is_same_v<B, E> && std::is_floating_point_v<B>) {
    return std::pow(base, exp);
  } else if constexpr (std::is_integral_v<B> && std::is_integral_v<E>) {
    return int_pow(base, exp);
  } else {
    // Mixed types: numpy computes in the wider (double) type, then the result is cast to the base's type.
    return saturate_cast<B>(std::pow(static_cast<double>(base), static_cast<double>(exp)));
  }
}

// --- binary ops --------------------------------------------------------------

enum class BinOp { kAdd, kSub, kMul, kDiv, kPRelu, kMax, kMin };

constexpr auto kPlus = [](auto u, auto v) { return u + v; };
constexpr auto kMinus = [](auto u, auto v) { return u - v; };
constexpr auto kTimes = [](auto u, auto v) { return u * v; };

template <typename T>
void apply_binary(BinOp op, const BroadcastPlan& p, const T* a, const T* b, T* o) {
  switch (op) {
    case BinOp::kAdd: p.apply(a, b, o, [](T x, T y) { return wrapping(x, y, kPlus); }); break;
    case BinOp::kSub: p.apply(a, b, o, [](T x, T y) { return wrapping(x, y, kMinus); }); break;
    case BinOp::kMul: p.apply(a, b, o, [](T x, T y) { return wrapping(x, y, kTimes); }); break;
    case BinOp::kDiv: p.apply(a, b, o, [](T x, T y) { return divide(x, y); }); break;
    case BinOp::kPRelu: p.apply(a, b, o, [](T x, T s) { return x < T(0) ? wrapping(x, s, kTimes) : x; }); break;
    case BinOp::kMax: p.apply(a, b, o, [](T x, T y) { return maximum(x, y); }); break;
    case BinOp::kMin: p.apply(a, b, o, [](T x, T y) { return minimum(x, y); }); break;
  }
}

// Add, Sub, Mul, Div, PRelu: both operands of one type.
class BinaryKernel : public Kernel {
 public:
  explicit BinaryKernel(BinOp op) : op_(op) {}

  std::vector<TensorType> prepare(const PrepareContext& ctx) override {
    ANVIL_PREPARE_CHECK(ctx, ctx.num_inputs() == 2 && ctx.has_input(0) && ctx.has_input(1), ErrorKind::kInvalidModel,
                        "expects 2 inputs, got {}", ctx.num_inputs());
    DType d = ctx.input_dtype(0);
    ANVIL_PREPARE_CHECK(ctx, ctx.input_dtype(1) == d, ErrorKind::kInvalidModel,
                        "operands have different types {} and {}", dtype_name(d), dtype_name(ctx.input_dtype(1)));
    ANVIL_PREPARE_CHECK(ctx, dtype_in(d, kNumeric), ErrorKind::kUnsupported, "dtype {} is not supported",
                        dtype_name(d));
    const Shape& sa = ctx.input_shape(0);
    const Shape& sb = ctx.input_shape(1);
    const Shape& out = ctx.output_shape(0);
    plan_ = BroadcastPlan(out, sa, sb);
    inplace_ = out == sa ? 0 : out == sb ? 1 : -1;
    return ctx.output_types();
  }

  void run(const RunContext& ctx) const override {
    dispatch_dtype(ctx.in(0).dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      if constexpr (kPlainNumber<T>)
        apply_binary<T>(op_, plan_, ctx.in(0).data<T>(), ctx.in(1).data<T>(), ctx.out(0).data<T>());
    });
  }

  int inplace_input() const override { return inplace_; }

 private:
  BinOp op_;
  BroadcastPlan plan_;
  int inplace_ = -1;
};

// Pow: the exponent may have another type than the base; the result has the base's.
class PowKernel : public Kernel {
 public:
  std::vector<TensorType> prepare(const PrepareContext& ctx) override {
    ANVIL_PREPARE_CHECK(ctx, ctx.num_inputs() == 2 && ctx.has_input(0) && ctx.has_input(1), ErrorKind::kInvalidModel,
                        "expects 2 inputs, got {}", ctx.num_inputs());
    DType a = ctx.input_dtype(0), b = ctx.input_dtype(1);
    ANVIL_PREPARE_CHECK(ctx, dtype_in(a, kNumeric) && dtype_in(b, kNumeric), ErrorKind::kUnsupported,
                        "Pow of {} by {} is not supported", dtype_name(a), dtype_name(b));
    const Shape& out = ctx.output_shape(0);
    plan_ = BroadcastPlan(out, ctx.input_shape(0), ctx.input_shape(1));
    inplace_ = out == ctx.input_shape(0) ? 0 : -1;
    return ctx.output_types();
  }

  void run(const RunContext& ctx) const override {
    const Tensor &a = ctx.in(0), &b = ctx.in(1);
    dispatch_dtype(a.dtype(), [&](auto ta) {
      using TA = typename decltype(ta)::type;
      if constexpr (kPlainNumber<TA>) {
        dispatch_dtype(b.dtype(), [&](auto tb) {
          using TB = typename decltype(tb)::type;
          if constexpr (kPlainNumber<TB>)
            plan_.apply(a.data<TA>(), b.data<TB>(), ctx.out(0).data<TA>(), [](TA x, TB y) { return power(x, y); });
        });
      }
    });
  }

  int inplace_input() const override { return inplace_; }

 private:
  BroadcastPlan plan_;
  int inplace_ = -1;
};

// Sum, Mean, Max, Min over 1..N inputs with multidirectional broadcasting.
class VariadicKernel : public Kernel {
 public:
  VariadicKernel(BinOp op, bool mean, unsigned dtypes) : op_(op), mean_(mean), dtypes_(dtypes) {}

  std::vector<TensorType> prepare(const PrepareContext& ctx) override {
    size_t n = ctx.num_inputs();
    ANVIL_PREPARE_CHECK(ctx, n >= 1, ErrorKind::kInvalidModel, "needs at least one input");
    DType d = ctx.input_dtype(0);
    ANVIL_PREPARE_CHECK(ctx, dtype_in(d, dtypes_), ErrorKind::kUnsupported, "dtype {} is not supported", dtype_name(d));
    for (size_t i = 1; i < n; ++i)
      ANVIL_PREPARE_CHECK(ctx, ctx.has_input(i) && ctx.input_dtype(i) == d, ErrorKind::kInvalidModel,
                          "input {} is missing or has another type than input 0", i);
    const Shape& out = ctx.output_shape(0);
    // Plan 0 copies input 0 (broadcast) into the output; plan i folds input i into it.
    plans_.clear();
    plans_.emplace_back(out, ctx.input_shape(0), ctx.input_shape(0));
    for (size_t i = 1; i < n; ++i) plans_.emplace_back(out, out, ctx.input_shape(i));
    inplace_ = ctx.input_shape(0) == out ? 0 : -1;
    return ctx.output_types();
  }

  void run(const RunContext& ctx) const override {
    Tensor& o = ctx.out(0);
    dispatch_dtype(o.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      if constexpr (kPlainNumber<T>) {
        T* out = o.data<T>();
        const T* in0 = ctx.in(0).data<T>();
        plans_[0].apply(in0, in0, out, [](T x, T) { return x; });
        for (size_t i = 1; i < plans_.size(); ++i) apply_binary<T>(op_, plans_[i], out, ctx.in(i).data<T>(), out);
        if (mean_) {
          const T count = static_cast<T>(plans_.size());
          const int64_t n = o.numel();
#pragma omp parallel for if (n > 32768)
          for (int64_t j = 0; j < n; ++j) out[j] = static_cast<T>(out[j] / count);
        }
      } else if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
        fold_16bit<T>(ctx);  // only Max and Min admit 16-bit floats
      }
    });
  }

  int inplace_input() const override { return inplace_; }

 private:
  // Max/Min of 16-bit floats compare through float and select an operand, so no rounding happens.
  template <typename T>
  void fold_16bit(const RunContext& ctx) const {
    T* out = ctx.out(0).data<T>();
    const T* in0 = ctx.in(0).data<T>();
    plans_[0].apply(in0, in0, out, [](T x, T) { return x; });
    for (size_t i = 1; i < plans_.size(); ++i) {
      if (op_ == BinOp::kMax)
        plans_[i].apply(out, ctx.in(i).data<T>(), out, [](T x, T y) { return pick_max(x, y); });
      else
        plans_[i].apply(out, ctx.in(i).data<T>(), out, [](T x, T y) { return pick_min(x, y); });
    }
  }

  BinOp op_;
  bool mean_;
  unsigned dtypes_;
  std::vector<BroadcastPlan> plans_;
  int inplace_ = -1;
};

// --- unary ops ---------------------------------------------------------------

enum class UnOp {
  kRelu, kLeakyRelu, kElu, kSelu, kSigmoid, kTanh, kHardSigmoid, kHardSwish, kSoftplus, kSoftsign,
  kSqrt, kExp, kLog, kNeg, kAbs, kErf, kFloor, kCeil, kReciprocal,
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
  }
}

// The integer ops (Relu, Neg, Abs); negation wraps, so Abs(INT_MIN) == INT_MIN as in numpy.
template <typename T>
void unary_int(UnOp op, const T* x, T* y, int64_t n) {
  auto neg = [](T v) { return wrapping(T(0), v, [](auto p, auto q) { return p - q; }); };
  switch (op) {
    case UnOp::kRelu: return map(x, y, n, [](T v) { return v > T(0) ? v : T(0); });
    case UnOp::kNeg: return map(x, y, n, neg);
    case UnOp::kAbs: return map(x, y, n, [=](T v) { return v < T(0) ? neg(v) : v; });
    default: return;  // prepare() admits integers for these three only
  }
}

struct UnaryDef {
  const char* name;
  UnOp op;
  unsigned dtypes;
  float alpha, beta, gamma;  // attribute defaults
};

constexpr UnaryDef kUnaryOps[] = {
    {"Relu", UnOp::kRelu, kFloats | kSignedInts, 0, 0, 0},
    {"LeakyRelu", UnOp::kLeakyRelu, kFloats, 0.01f, 0, 0},
    {"Elu", UnOp::kElu, kFloats, 1.0f, 0, 0},
    {"Selu", UnOp::kSelu, kFloats, 1.67326319217681884765625f, 0, 1.05070102214813232421875f},
    {"Sigmoid", UnOp::kSigmoid, kFloats, 0, 0, 0},
    {"Tanh", UnOp::kTanh, kFloats, 0, 0, 0},
    {"HardSigmoid", UnOp::kHardSigmoid, kFloats, 0.2f, 0.5f, 0},
    {"HardSwish", UnOp::kHardSwish, kFloats, 0, 0, 0},
    {"Softplus", UnOp::kSoftplus, kFloats, 0, 0, 0},
    {"Softsign", UnOp::kSoftsign, kFloats, 0, 0, 0},
    {"Sqrt", UnOp::kSqrt, kFloats, 0, 0, 0},
    {"Exp", UnOp::kExp, kFloats, 0, 0, 0},
    {"Log", UnOp::kLog, kFloats, 0, 0, 0},
    {"Neg", UnOp::kNeg, kFloats | kSignedInts, 0, 0, 0},
    {"Abs", UnOp::kAbs, kNumeric, 0, 0, 0},
    {"Erf", UnOp::kErf, kFloats, 0, 0, 0},
    {"Floor", UnOp::kFloor, kFloats, 0, 0, 0},
    {"Ceil", UnOp::kCeil, kFloats, 0, 0, 0},
    {"Reciprocal", UnOp::kReciprocal, kFloats, 0, 0, 0},
};

class UnaryKernel : public Kernel {
 public:
  UnaryKernel(const ir::Node& node, const UnaryDef& def)
      : def_(def),
        alpha_(node.attrs.get_float("alpha", def.alpha)),
        beta_(node.attrs.get_float("beta", def.beta)),
        gamma_(node.attrs.get_float("gamma", def.gamma)) {}

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
        unary_float<T>(def_.op, x.data<T>(), ctx.out(0).data<T>(), x.numel(), static_cast<T>(alpha_),
                       static_cast<T>(beta_), static_cast<T>(gamma_));
      } else if constexpr (kPlainNumber<T>) {
        unary_int<T>(def_.op, x.data<T>(), ctx.out(0).data<T>(), x.numel());
      }
    });
  }

  int inplace_input() const override { return 0; }

 private:
  const UnaryDef& def_;
  float alpha_, beta_, gamma_;
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

// --- registration --------------------------------------------------------------

template <typename K, typename... Args>
KernelFactory make_factory(Args... args) {
  return [=](const ir::Node&) -> std::unique_ptr<Kernel> { return std::make_unique<K>(args...); };
}

ANVIL_REGISTER_KERNEL("Add", kRef, make_factory<BinaryKernel>(BinOp::kAdd));
ANVIL_REGISTER_KERNEL("Sub", kRef, make_factory<BinaryKernel>(BinOp::kSub));
ANVIL_REGISTER_KERNEL("Mul", kRef, make_factory<BinaryKernel>(BinOp::kMul));
ANVIL_REGISTER_KERNEL("Div", kRef, make_factory<BinaryKernel>(BinOp::kDiv));
ANVIL_REGISTER_KERNEL("PRelu", kRef, make_factory<BinaryKernel>(BinOp::kPRelu));
ANVIL_REGISTER_KERNEL("Pow", kRef, make_factory<PowKernel>());
ANVIL_REGISTER_KERNEL("Sum", kRef, make_factory<VariadicKernel>(BinOp::kAdd, false, unsigned(kFloats)));
ANVIL_REGISTER_KERNEL("Mean", kRef, make_factory<VariadicKernel>(BinOp::kAdd, true, unsigned(kFloats)));
ANVIL_REGISTER_KERNEL("Max", kRef, make_factory<VariadicKernel>(BinOp::kMax, false, unsigned(kNumeric | kHalfs)));
ANVIL_REGISTER_KERNEL("Min", kRef, make_factory<VariadicKernel>(BinOp::kMin, false, unsigned(kNumeric | kHalfs)));
ANVIL_REGISTER_KERNEL_CLASS("Clip", kRef, ClipKernel);

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
