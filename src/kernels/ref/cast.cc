// BitCast (opset 26) reinterprets the bits of one type as another of the same
// width. Cast and CastLike convert among every element type Anvil has: the
// classic ones through C++ conversions with ONNX's rules spelled out (float to
// integer truncates, NaN gives 0, integers wrap); the 8-, 4- and 2-bit types
// through core/low_precision.h (round to nearest even, `saturate`, E8M0's
// `round_mode`); strings: numbers print as numpy prints them (shortest
// round-trip floats, True and False), and strings parse as decimal or
// scientific numbers, INF, -INF or NaN in any case (anything else is 0).
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>

#include <fmt/format.h>

#include "core/low_precision.h"
#include "kernels/ref/common.h"
#include "kernels/registry.h"

namespace anvil::kernels {
namespace {

constexpr int64_t kParallelThreshold = 32768;


// double -> float rounded to odd, so that a second rounding to half/bfloat16
// gives the correctly rounded result (no double-rounding error).
float to_float_round_odd(double x) {
  float f = static_cast<float>(x);
  if (!std::isfinite(f) || static_cast<double>(f) == x) return f;
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if (std::fabs(static_cast<double>(f)) > std::fabs(x)) --bits;  // truncate toward zero
  bits |= 1;
  std::memcpy(&f, &bits, 4);
  return f;
}

// Float to integer truncates toward zero; NaN gives 0 and out-of-range values
// saturate (ONNX leaves both undefined; this keeps them free of C++ UB).
template <typename D>
D float_to_int(double x) {
  if (std::isnan(x)) return 0;
  if (x <= static_cast<double>(std::numeric_limits<D>::min())) return std::numeric_limits<D>::min();
  if (x >= static_cast<double>(std::numeric_limits<D>::max())) return std::numeric_limits<D>::max();
  return static_cast<D>(x);
}

template <typename D, typename S>
D convert(S v) {
  if constexpr (std::is_same_v<S, D>) {
    return v;
  } else if constexpr (kIs16BitFloat<S>) {
    return convert<D>(static_cast<float>(v));
  } else if constexpr (std::is_same_v<D, bool>) {
    return v != S(0);
  } else if constexpr (kIs16BitFloat<D>) {
    if constexpr (std::is_same_v<S, float>) return D(v);
    else return D(to_float_round_odd(static_cast<double>(v)));
  } else if constexpr (std::is_floating_point_v<D> || !std::is_floating_point_v<S>) {
    return static_cast<D>(v);  // integer -> integer wraps (two's complement), bool -> 0/1
  } else {
    return float_to_int<D>(static_cast<double>(v));
  }
}

// One element on its way between types: a float (the minifloats and every
// floating type, exactly as a double), or an integer (bool as 0 and 1).
struct Scalar {
  enum Kind { kFloat, kSigned, kUnsigned } kind;
  double f = 0;
  int64_t i = 0;
  uint64_t u = 0;
};

Scalar read_scalar(const Tensor& t, int64_t at) {
  const DType d = t.dtype();
  if (dtype_is_low_precision(d)) {
    const uint8_t byte = static_cast<const uint8_t*>(t.raw())[at];
    if (dtype_is_float8_or_4(d)) return {Scalar::kFloat, minifloat_to_double(d, byte)};
    if (narrow_int_min(d) < 0) return {Scalar::kSigned, 0, static_cast<int8_t>(byte)};
    return {Scalar::kUnsigned, 0, 0, byte};
  }
  return dispatch_dtype(d, [&](auto tag) -> Scalar {
    using T = typename decltype(tag)::type;
    const T v = t.data<T>()[at];
    if constexpr (kIs16BitFloat<T> || std::is_floating_point_v<T>) return {Scalar::kFloat, static_cast<double>(static_cast<float>(v))};
    else if constexpr (std::is_same_v<T, bool>) return {Scalar::kUnsigned, 0, 0, v ? 1u : 0u};
    else if constexpr (std::is_signed_v<T>) return {Scalar::kSigned, 0, static_cast<int64_t>(v)};
    else return {Scalar::kUnsigned, 0, 0, static_cast<uint64_t>(v)};
  });
}

// A string as a number: an integer literal exactly, anything else through strtod.
Scalar parse_scalar(const std::string& s) {
  const char* p = s.c_str();
  char* end = nullptr;
  errno = 0;
  const long long i = std::strtoll(p, &end, 10);
  if (end != p && *end == '\0' && errno == 0) return {Scalar::kSigned, 0, static_cast<int64_t>(i)};
  const double d = std::strtod(p, &end);
  return {Scalar::kFloat, end != p ? d : 0.0};
}

std::string format_scalar(const Tensor& t, int64_t at) {
  const DType d = t.dtype();
  if (d == DType::kBool) return t.data<bool>()[at] ? "True" : "False";
  if (d == DType::kFloat32) return fmt::format("{}", t.data<float>()[at]);
  if (d == DType::kFloat16 || d == DType::kBFloat16 || dtype_is_float8_or_4(d))
    return fmt::format("{}", static_cast<float>(element_as_double(t, at)));
  const Scalar s = read_scalar(t, at);
  if (s.kind == Scalar::kFloat) return fmt::format("{}", s.f);
  return s.kind == Scalar::kSigned ? std::to_string(s.i) : std::to_string(s.u);
}

struct LowPrecisionOptions {
  bool saturate = true;
  RoundMode round = RoundMode::kUp;
};

void write_scalar(Tensor& t, int64_t at, const Scalar& s, const LowPrecisionOptions& opt) {
  const DType d = t.dtype();
  if (dtype_is_low_precision(d)) {
    auto* out = static_cast<uint8_t*>(t.raw()) + at;
    if (dtype_is_float8_or_4(d)) {
      const double v = s.kind == Scalar::kFloat ? s.f : s.kind == Scalar::kSigned ? static_cast<double>(s.i) : static_cast<double>(s.u);
      *out = double_to_minifloat(d, v, opt.saturate, opt.round);
    } else {
      *out = static_cast<uint8_t>(s.kind == Scalar::kFloat    ? narrow_int_from_double(d, s.f)
                                  : s.kind == Scalar::kSigned ? narrow_int_wrap(d, s.i)
                                                              : narrow_int_wrap(d, static_cast<int64_t>(s.u)));
    }
    return;
  }
  dispatch_dtype(d, [&](auto tag) {
    using D = typename decltype(tag)::type;
    D& out = t.data<D>()[at];
    if (s.kind == Scalar::kFloat) out = convert<D>(s.f);
    else if (s.kind == Scalar::kSigned) out = convert<D>(s.i);
    else out = convert<D>(s.u);
  });
}

RoundMode round_mode(const PrepareContext& ctx) {
  const std::string mode = ctx.attrs().get_string("round_mode", "up");
  if (mode == "up") return RoundMode::kUp;
  if (mode == "down") return RoundMode::kDown;
  ANVIL_PREPARE_CHECK(ctx, mode == "nearest", ErrorKind::kInvalidModel,
                      "round_mode must be 'up', 'down' or 'nearest', got '{}'", mode);
  return RoundMode::kNearestEven;
}

class CastKernel : public Kernel {
 public:
  CastKernel(const ir::Node&, bool like) : like_(like) {}
  std::vector<TensorType> prepare(const PrepareContext& ctx) override {
    from_ = ctx.input_dtype(0);
    if (like_) {
      to_ = ctx.input_dtype(1);
    } else {
      ANVIL_PREPARE_CHECK(ctx, ctx.attrs().has("to"), ErrorKind::kInvalidModel, "attribute 'to' is required");
      const int64_t code = ctx.attrs().get_int("to", 0);
      to_ = dtype_from_onnx_code(code);
      ANVIL_PREPARE_CHECK(ctx, to_ != DType::kUndefined, ErrorKind::kUnsupported,
                          "casting to ONNX data type {} is not supported", code);
    }
    options_.saturate = ctx.attrs().get_int("saturate", 1) != 0;
    options_.round = round_mode(ctx);
    return ctx.output_types();
  }

  void run(const RunContext& ctx) const override {
    const Tensor& in = ctx.in(0);
    Tensor& out = ctx.out(0);
    if (from_ == to_ && from_ == DType::kString) {  // objects, not bytes
      std::copy(in.data<std::string>(), in.data<std::string>() + in.numel(), out.data<std::string>());
      return;
    }
    if (from_ == to_) {
      if (in.raw() != out.raw() && in.nbytes()) std::memcpy(out.raw(), in.raw(), in.nbytes());
      return;
    }
    const int64_t n = in.numel();
    if (to_ == DType::kString) {
      for (int64_t i = 0; i < n; ++i) out.data<std::string>()[i] = format_scalar(in, i);
      return;
    }
    if (from_ == DType::kString) {
      for (int64_t i = 0; i < n; ++i) write_scalar(out, i, parse_scalar(in.data<std::string>()[i]), options_);
      return;
    }
    if (dtype_is_low_precision(from_) || dtype_is_low_precision(to_)) {
      for (int64_t i = 0; i < n; ++i) write_scalar(out, i, read_scalar(in, i), options_);
      return;
    }
    dispatch_dtype(from_, [&](auto stag) {
      using S = typename decltype(stag)::type;
      dispatch_dtype(to_, [&](auto dtag) {
        using D = typename decltype(dtag)::type;
        const S* s = in.data<S>();
        D* d = out.data<D>();
#pragma omp parallel for if (n > kParallelThreshold)
        for (int64_t i = 0; i < n; ++i) d[i] = convert<D>(s[i]);
      });
    });
  }

 private:
  bool like_;
  DType from_ = DType::kUndefined, to_ = DType::kUndefined;
  LowPrecisionOptions options_;
};

// The bytes as they are, in place where the planner lets the output share the
// input's memory; except into bool, where any nonzero byte is true and is
// written as 1 (a bool holding another byte is undefined behaviour in every
// kernel that reads it).
class BitCastKernel : public Kernel {
 public:
  explicit BitCastKernel(const ir::Node&) {}
  std::vector<TensorType> prepare(const PrepareContext& ctx) override {
    to_bool_ = ctx.output_dtype(0) == DType::kBool;
    return ctx.output_types();
  }
  void run(const RunContext& ctx) const override {
    const auto* in = static_cast<const uint8_t*>(ctx.in(0).raw());
    auto* out = static_cast<uint8_t*>(ctx.out(0).raw());
    if (to_bool_) return unpack_elements(DType::kBool, in, ctx.in(0).numel(), out);
    if (out != in && ctx.in(0).nbytes()) std::memcpy(out, in, ctx.in(0).nbytes());
  }
  int output_aliases_input() const override { return to_bool_ ? -1 : 0; }

 private:
  bool to_bool_ = false;
};

}  // namespace

ANVIL_REGISTER_OP_VERSIONS("BitCast", 26, 26);
ANVIL_REGISTER_KERNEL_CLASS_TYPED("BitCast", kRef, BitCastKernel, {kAll | kMinifloats});
// 19 adds saturate, 24 round_mode (E8M0); the other versions add element types.
ANVIL_REGISTER_OP_VERSIONS("Cast", 6, 28);
ANVIL_REGISTER_OP_VERSIONS("CastLike", 15, 25);
ANVIL_REGISTER_KERNEL_TYPED("Cast", kRef, [](const ir::Node& n) -> std::unique_ptr<Kernel> {
  return std::make_unique<CastKernel>(n, false);
}, {kAnyDType | kStringType});
ANVIL_REGISTER_KERNEL_TYPED("CastLike", kRef, [](const ir::Node& n) -> std::unique_ptr<Kernel> {
  return std::make_unique<CastKernel>(n, true);
}, {kAnyDType | kStringType, kAnyDType | kStringType});

}  // namespace anvil::kernels
