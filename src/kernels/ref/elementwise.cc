// Elementwise ops: numpy-broadcast binary ops (Add, Sub, Mul, Div, Pow, PRelu)
// and variadic ops (Sum, Mean, Max, Min). Unary ops are in unary.cc.
//
// Broadcasting is planned once in prepare(): the output shape is collapsed to
// as few dimensions as the operands' strides allow, so equal shapes become one
// flat loop and "scalar" or "per-channel" operands become an inner loop with a
// stride of 0 — the fast paths fall out of the general one.
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <type_traits>

#include "kernels/ref/arith.h"
#include "kernels/ref/broadcast.h"
#include "kernels/ref/common.h"
#include "kernels/registry.h"

namespace anvil::kernels {

namespace {

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

enum class BinOp { kAdd, kSub, kMul, kDiv, kPRelu, kMax, kMin, kMod, kFmod, kShiftLeft, kShiftRight, kBitAnd, kBitOr, kBitXor };

// Mod with fmod=0: the remainder takes the divisor's sign (Python); x mod 0 is 0.
template <typename T>
T python_mod(T x, T y) {
  if constexpr (std::is_integral_v<T>) {
    if (y == 0) return 0;
    if constexpr (std::is_signed_v<T>)
      if (y == -1) return 0;  // MIN % -1 overflows
    T r = static_cast<T>(x % y);
    if constexpr (std::is_signed_v<T>)
      if (r != 0 && (r < 0) != (y < 0)) r = static_cast<T>(r + y);
    return r;
  } else {
    // Mod-28: x - floor(x / y) * y, with the remainder's sign that of y; NaN for
    // an infinite x or a zero y; y itself for an infinite y of the other sign.
    if (std::isnan(x) || std::isnan(y) || std::isinf(x) || y == 0) return std::numeric_limits<T>::quiet_NaN();
    T r = std::fmod(x, y);
    if (r != 0 && (r < 0) != (y < 0)) r += y;
    return r == 0 ? std::copysign(T(0), y) : r;
  }
}

// Mod with fmod=1: the remainder takes the dividend's sign (C fmod).
template <typename T>
T c_fmod(T x, T y) {
  if constexpr (std::is_integral_v<T>) {
    if (y == 0) return 0;
    if constexpr (std::is_signed_v<T>)
      if (y == -1) return 0;
    return static_cast<T>(x % y);
  } else {
    return std::fmod(x, y);
  }
}

// Shifts of integers. Signed right shifts are arithmetic (opset 28); a left
// shift works on the two's complement bits. A negative amount, or one of the
// width or more, leaves what the sign fill alone gives: -1 for a right shift
// of a negative value, else 0.
template <typename T>
T shift(T x, T y, bool left) {
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
    using U = std::make_unsigned_t<T>;
    constexpr int kBits = static_cast<int>(sizeof(T) * 8);
    const bool negative = x < T(0);
    if (y < T(0) || static_cast<U>(y) >= static_cast<U>(kBits)) return !left && negative ? T(-1) : T(0);
    const int n = static_cast<int>(y);
    if (left) return static_cast<T>(static_cast<WrapType<U>>(static_cast<U>(x)) << n);
    if (!negative) return static_cast<T>(static_cast<U>(x) >> n);
    const U flipped = static_cast<U>(~static_cast<U>(x));  // sign-extending without >> of a negative
    return static_cast<T>(static_cast<U>(~static_cast<U>(flipped >> n)));
  } else {
    return x;  // prepare() admits integers only
  }
}

// Bitwise And, Or, Xor of integers (prepare() admits no other types).
template <typename T>
T bitwise(T x, T y, char op) {
  if constexpr (std::is_integral_v<T>) return static_cast<T>(op == '&' ? (x & y) : op == '|' ? (x | y) : (x ^ y));
  else return x;
}

// f over T, computed in float for the 16-bit floats (rounded once at the end).
template <typename T, typename F>
auto in_compute_type(F f) {
  if constexpr (kIs16BitFloat<T>) return [f](T x, T y) { return T(f(static_cast<float>(x), static_cast<float>(y))); };
  else return [f](T x, T y) { return static_cast<T>(f(x, y)); };
}

constexpr auto kPlus = [](auto u, auto v) { return u + v; };
constexpr auto kMinus = [](auto u, auto v) { return u - v; };
constexpr auto kTimes = [](auto u, auto v) { return u * v; };

template <typename T>
void apply_binary(BinOp op, const BroadcastPlan& p, const T* a, const T* b, T* o) {
  auto f = [](auto g) { return in_compute_type<T>(g); };
  switch (op) {
    case BinOp::kAdd: p.apply(a, b, o, f([](auto x, auto y) { return wrapping(x, y, kPlus); })); break;
    case BinOp::kSub: p.apply(a, b, o, f([](auto x, auto y) { return wrapping(x, y, kMinus); })); break;
    case BinOp::kMul: p.apply(a, b, o, f([](auto x, auto y) { return wrapping(x, y, kTimes); })); break;
    case BinOp::kDiv: p.apply(a, b, o, f([](auto x, auto y) { return divide(x, y); })); break;
    case BinOp::kPRelu:
      p.apply(a, b, o, f([](auto x, auto s) { return x < decltype(x)(0) ? wrapping(x, s, kTimes) : x; }));
      break;
    case BinOp::kMax: p.apply(a, b, o, f([](auto x, auto y) { return maximum(x, y); })); break;
    case BinOp::kMin: p.apply(a, b, o, f([](auto x, auto y) { return minimum(x, y); })); break;
    case BinOp::kMod: p.apply(a, b, o, f([](auto x, auto y) { return python_mod(x, y); })); break;
    case BinOp::kFmod: p.apply(a, b, o, f([](auto x, auto y) { return c_fmod(x, y); })); break;
    case BinOp::kShiftLeft: p.apply(a, b, o, f([](auto x, auto y) { return shift(x, y, true); })); break;
    case BinOp::kShiftRight: p.apply(a, b, o, f([](auto x, auto y) { return shift(x, y, false); })); break;
    case BinOp::kBitAnd: p.apply(a, b, o, f([](auto x, auto y) { return bitwise(x, y, '&'); })); break;
    case BinOp::kBitOr: p.apply(a, b, o, f([](auto x, auto y) { return bitwise(x, y, '|'); })); break;
    case BinOp::kBitXor: p.apply(a, b, o, f([](auto x, auto y) { return bitwise(x, y, '^'); })); break;
  }
}

// Before opset 7 the second operand broadcast only with broadcast=1, its dims
// aligned from `axis` of the first (suffix-aligned without one), and PRelu's
// slope [C] applied per channel (axis 1). The shape numpy broadcasting then
// reads it as; the schema has checked that it fits.
Shape legacy_operand_shape(const PrepareContext& ctx, bool prelu, const Shape& a, const Shape& b) {
  if (ctx.opset() >= 7) return b;
  if (prelu) {
    if (b.size() != 1 || a.size() < 2 || b[0] != a[1]) return b;
    Shape s(a.size() - 1, 1);
    s[0] = b[0];
    return s;
  }
  if (!ctx.attrs().has("axis") || ctx.attrs().get_int("broadcast", 0) == 0) return b;
  const int64_t axis = ctx.attrs().get_int("axis", 0);
  const int64_t trailing = static_cast<int64_t>(a.size()) - axis - static_cast<int64_t>(b.size());
  if (axis < 0 || trailing < 0) return b;  // the schema refused it already
  Shape s = b;
  s.insert(s.end(), static_cast<size_t>(trailing), 1);
  return s;
}

// Add, Sub, Mul, Div, PRelu, Mod, BitShift: both operands of one type.
class BinaryKernel : public Kernel {
 public:
  explicit BinaryKernel(BinOp op, unsigned dtypes = kNumeric) : op_(op), dtypes_(dtypes) {}

  std::vector<TensorType> prepare(const PrepareContext& ctx) override {
    ANVIL_PREPARE_CHECK(ctx, ctx.num_inputs() == 2 && ctx.has_input(0) && ctx.has_input(1), ErrorKind::kInvalidModel,
                        "expects 2 inputs, got {}", ctx.num_inputs());
    DType d = ctx.input_dtype(0);
    ANVIL_PREPARE_CHECK(ctx, ctx.input_dtype(1) == d, ErrorKind::kInvalidModel,
                        "operands have different types {} and {}", dtype_name(d), dtype_name(ctx.input_dtype(1)));
    ANVIL_PREPARE_CHECK(ctx, dtype_in(d, dtypes_), ErrorKind::kUnsupported, "dtype {} is not supported",
                        dtype_name(d));
    ANVIL_PREPARE_CHECK(ctx, op_ != BinOp::kMod || !dtype_in(d, kFloats | kHalfs) || ctx.opset() >= 28,
                        ErrorKind::kInvalidModel, "fmod must be 1 for {} inputs before opset 28", dtype_name(d));
    const Shape& sa = ctx.input_shape(0);
    const Shape sb = legacy_operand_shape(ctx, op_ == BinOp::kPRelu, sa, ctx.input_shape(1));
    const Shape& out = ctx.output_shape(0);
    plan_ = BroadcastPlan(out, sa, sb);
    inplace_ = out == sa ? 0 : out == ctx.input_shape(1) ? 1 : -1;
    return ctx.output_types();
  }

  void run(const RunContext& ctx) const override {
    dispatch_dtype(ctx.in(0).dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      if constexpr (kPlainNumber<T> || kIs16BitFloat<T>)
        apply_binary<T>(op_, plan_, ctx.in(0).data<T>(), ctx.in(1).data<T>(), ctx.out(0).data<T>());
    });
  }

  int inplace_input() const override { return inplace_; }

 private:
  BinOp op_;
  unsigned dtypes_;
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
    plan_ = BroadcastPlan(out, ctx.input_shape(0), legacy_operand_shape(ctx, false, ctx.input_shape(0), ctx.input_shape(1)));
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

// --- registration --------------------------------------------------------------

template <typename K, typename... Args>
KernelFactory make_factory(Args... args) {
  return [=](const ir::Node&) -> std::unique_ptr<Kernel> { return std::make_unique<K>(args...); };
}

// Opsets 1-6 (broadcast/axis attributes, PRelu per channel) included.
ANVIL_REGISTER_OP_VERSIONS("Add", 1, 14);
ANVIL_REGISTER_OP_VERSIONS("Sub", 1, 14);
ANVIL_REGISTER_OP_VERSIONS("Mul", 1, 14);
ANVIL_REGISTER_OP_VERSIONS("Div", 1, 14);
ANVIL_REGISTER_OP_VERSIONS("Pow", 1, 15);
ANVIL_REGISTER_OP_VERSIONS("PRelu", 1, 16);
constexpr unsigned kArithmetic = kNumeric | kHalfs;
ANVIL_REGISTER_KERNEL("Add", kRef, make_factory<BinaryKernel>(BinOp::kAdd, kArithmetic));
ANVIL_REGISTER_KERNEL("Sub", kRef, make_factory<BinaryKernel>(BinOp::kSub, kArithmetic));
ANVIL_REGISTER_KERNEL("Mul", kRef, make_factory<BinaryKernel>(BinOp::kMul, kArithmetic));
ANVIL_REGISTER_KERNEL("Div", kRef, make_factory<BinaryKernel>(BinOp::kDiv, kArithmetic));
ANVIL_REGISTER_KERNEL("Mod", kRef, [](const ir::Node& n) -> std::unique_ptr<Kernel> {
  return std::make_unique<BinaryKernel>(n.attrs.get_int("fmod", 0) != 0 ? BinOp::kFmod : BinOp::kMod, kArithmetic);
});
ANVIL_REGISTER_OP_VERSIONS("Mod", 10, 28);  // 28: fmod=0 on floats (floored)
ANVIL_REGISTER_OP_VERSIONS("BitwiseAnd", 18, 28);
ANVIL_REGISTER_OP_VERSIONS("BitwiseOr", 18, 28);
ANVIL_REGISTER_OP_VERSIONS("BitwiseXor", 18, 28);
ANVIL_REGISTER_KERNEL("BitwiseAnd", kRef, make_factory<BinaryKernel>(BinOp::kBitAnd, unsigned(kSignedInts | kUnsignedInts)));
ANVIL_REGISTER_KERNEL("BitwiseOr", kRef, make_factory<BinaryKernel>(BinOp::kBitOr, unsigned(kSignedInts | kUnsignedInts)));
ANVIL_REGISTER_KERNEL("BitwiseXor", kRef, make_factory<BinaryKernel>(BinOp::kBitXor, unsigned(kSignedInts | kUnsignedInts)));
ANVIL_REGISTER_KERNEL("BitShift", kRef, [](const ir::Node& n) -> std::unique_ptr<Kernel> {
  const std::string direction = n.attrs.get_string("direction", "");
  if (direction != "LEFT" && direction != "RIGHT") return nullptr;  // the schema reports it
  return std::make_unique<BinaryKernel>(direction == "LEFT" ? BinOp::kShiftLeft : BinOp::kShiftRight,
                                        unsigned(kUnsignedInts | kSignedInts));
});
ANVIL_REGISTER_OP_VERSIONS("BitShift", 11, 28);  // 28: signed integers
ANVIL_REGISTER_KERNEL("PRelu", kRef, make_factory<BinaryKernel>(BinOp::kPRelu));
ANVIL_REGISTER_KERNEL("Pow", kRef, make_factory<PowKernel>());
ANVIL_REGISTER_KERNEL("Sum", kRef, make_factory<VariadicKernel>(BinOp::kAdd, false, unsigned(kFloats)));
ANVIL_REGISTER_KERNEL("Mean", kRef, make_factory<VariadicKernel>(BinOp::kAdd, true, unsigned(kFloats)));
ANVIL_REGISTER_KERNEL("Max", kRef, make_factory<VariadicKernel>(BinOp::kMax, false, unsigned(kNumeric | kHalfs)));
ANVIL_REGISTER_KERNEL("Min", kRef, make_factory<VariadicKernel>(BinOp::kMin, false, unsigned(kNumeric | kHalfs)));


}  // namespace

}  // namespace anvil::kernels
