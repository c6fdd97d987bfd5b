// Elementwise ops: numpy-broadcast binary (Add, Sub, Mul, Div, Pow, PRelu),
// variadic (Sum, Max, Min, Mean), unary math and activations, Clip.
#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>

#include "kernels/ref/common.h"
#include "kernels/registry.h"

namespace anvil::kernels {

namespace {

// Output-shaped iteration over two broadcast operands: rows of the last
// dimension, each row's start offsets computed from its coordinates.
struct BroadcastPlan {
  Shape out;
  std::vector<int64_t> sa, sb;  // element strides of a and b per output dim (0 = broadcast)

  BroadcastPlan() = default;
  BroadcastPlan(Shape out_shape, const Shape& a, const Shape& b)
      : out(std::move(out_shape)), sa(broadcast_strides(a, out)), sb(broadcast_strides(b, out)) {}

  template <typename TA, typename TB, typename TO, typename F>
  void apply(const TA* a, const TB* b, TO* o, F f) const {
    int64_t n = shape_numel(out);
    if (n == 0) return;
    if (out.empty()) {
      o[0] = f(a[0], b[0]);
      return;
    }
    int rank = static_cast<int>(out.size());
    int64_t inner = out.back(), rows = n / inner;
    int64_t ia = sa.back(), ib = sb.back();
#pragma omp parallel for if (n > 32768)
    for (int64_t r = 0; r < rows; ++r) {
      int64_t rem = r, oa = 0, ob = 0;
      for (int d = rank - 2; d >= 0; --d) {
        int64_t c = rem % out[d];
        rem /= out[d];
        oa += c * sa[d];
        ob += c * sb[d];
      }
      const TA* pa = a + oa;
      const TB* pb = b + ob;
      TO* po = o + r * inner;
      if (ia == 1 && ib == 1) {
        for (int64_t j = 0; j < inner; ++j) po[j] = f(pa[j], pb[j]);
      } else if (ia == 1 && ib == 0) {
        TB vb = *pb;
        for (int64_t j = 0; j < inner; ++j) po[j] = f(pa[j], vb);
      } else {
        for (int64_t j = 0; j < inner; ++j) po[j] = f(pa[j * ia], pb[j * ib]);
      }
    }
  }
};

enum class BinOp { kAdd, kSub, kMul, kDiv, kPow, kPRelu, kMax, kMin };

template <typename T>
T div_safe(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    if (b == 0) return 0;  // ONNX leaves it undefined; never trap
    if constexpr (std::is_signed_v<T>)
      if (b == -1) return static_cast<T>(-a);
    return static_cast<T>(a / b);
  } else {
    return a / b;
  }
}

template <typename T>
void binary_same_type(BinOp op, const BroadcastPlan& p, const T* a, const T* b, T* o) {
  switch (op) {
    case BinOp::kAdd: p.apply(a, b, o, [](T x, T y) { return static_cast<T>(x + y); }); break;
    case BinOp::kSub: p.apply(a, b, o, [](T x, T y) { return static_cast<T>(x - y); }); break;
    case BinOp::kMul: p.apply(a, b, o, [](T x, T y) { return static_cast<T>(x * y); }); break;
    case BinOp::kDiv: p.apply(a, b, o, [](T x, T y) { return div_safe(x, y); }); break;
    case BinOp::kPRelu: p.apply(a, b, o, [](T x, T s) { return x < T(0) ? static_cast<T>(x * s) : x; }); break;
    case BinOp::kMax: p.apply(a, b, o, [](T x, T y) { return std::max(x, y); }); break;
    case BinOp::kMin: p.apply(a, b, o, [](T x, T y) { return std::min(x, y); }); break;
    case BinOp::kPow: break;
  }
}

class BinaryKernel : public Kernel {
 public:
  explicit BinaryKernel(BinOp op) : op_(op) {}

  std::vector<TensorType> prepare(const PrepareContext& ctx) override {
    DType a = ctx.input_dtype(0), b = ctx.input_dtype(1);
    if (op_ == BinOp::kPow) {
      ANVIL_PREPARE_CHECK(ctx, dtype_in(a, kNumeric) && dtype_in(b, kNumeric), ErrorKind::kUnsupported,
                          "Pow of {} by {} is not supported", dtype_name(a), dtype_name(b));
    } else {
      ANVIL_PREPARE_CHECK(ctx, a == b, ErrorKind::kInvalidModel, "operands have different types {} and {}",
                          dtype_name(a), dtype_name(b));
      ANVIL_PREPARE_CHECK(ctx, dtype_in(a, kNumeric), ErrorKind::kUnsupported, "dtype {} is not supported",
                          dtype_name(a));
    }
    const Shape& sa = ctx.input_shape(0);
    const Shape& sb = ctx.input_shape(1);
    Shape out = broadcast_shapes(ctx, sa, sb);
    if (op_ == BinOp::kPRelu)
      ANVIL_PREPARE_CHECK(ctx, out == sa, ErrorKind::kInvalidArgument, "slope {} does not broadcast to X {}",
                          shape_str(sb), shape_str(sa));
    plan_ = BroadcastPlan(out, sa, sb);
    return {{a, out}};
  }

  void run(const RunContext& ctx) const override {
    const Tensor &a = ctx.in(0), &b = ctx.in(1);
    Tensor& o = ctx.out(0);
    if (op_ == BinOp::kPow) return run_pow(a, b, o);
    dispatch_dtype(a.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      if constexpr (std::is_arithmetic_v<T> && !std::is_same_v<T, bool>)
        binary_same_type<T>(op_, plan_, a.data<T>(), b.data<T>(), o.data<T>());
    });
  }

 private:
  void run_pow(const Tensor& a, const Tensor& b, Tensor& o) const {
    dispatch_dtype(a.dtype(), [&](auto ta) {
      using TA = typename decltype(ta)::type;
      if constexpr (std::is_arithmetic_v<TA> && !std::is_same_v<TA, bool>) {
        dispatch_dtype(b.dtype(), [&](auto tb) {
          using TB = typename decltype(tb)::type;
          if constexpr (std::is_arithmetic_v<TB> && !std::is_same_v<TB, bool>)
            plan_.apply(a.data<TA>(), b.data<TB>(), o.data<TA>(), [](TA x, TB y) {
              if constexpr (std::is_same_v<TA, float> && std::is_same_v<TB, float>) return std::pow(x, y);
              else return static_cast<TA>(std::pow(static_cast<double>(x), static_cast<double>(y)));
            });
        });
      }
    });
  }

  BinOp op_;
  BroadcastPlan plan_;
};

// Sum, Max, Min, Mean over 1..N inputs with multidirectional broadcasting.
class VariadicKernel : public Kernel {
 public:
  explicit VariadicKernel(BinOp op, bool mean = false) : op_(op), mean_(mean) {}

  std::vector<TensorType> prepare(const PrepareContext& ctx) override {
    ANVIL_PREPARE_CHECK(ctx, ctx.num_inputs() >= 1, ErrorKind::kInvalidModel, "needs at least one input");
    DType d = ctx.input_dtype(0);
    ANVIL_PREPARE_CHECK(ctx, dtype_in(d, kNumeric), ErrorKind::kUnsupported, "dtype {} is not supported", dtype_name(d));
    Shape out = ctx.input_shape(0);
    for (size_t i = 1; i < ctx.num_inputs(); ++i) {
      ANVIL_PREPARE_CHECK(ctx, ctx.input_dtype(i) == d, ErrorKind::kInvalidModel, "inputs have different types");
      out = broadcast_shapes(ctx, out, ctx.input_shape(i));
    }
    plans_.clear();
    for (size_t i = 0; i < ctx.num_inputs(); ++i) plans_.emplace_back(out, out, ctx.input_shape(i));
    return {{d, out}};
  }

  void run(const RunContext& ctx) const override {
    Tensor& o = ctx.out(0);
    dispatch_dtype(o.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      if constexpr (std::is_arithmetic_v<T> && !std::is_same_v<T, bool>) {
        T* out = o.data<T>();
        // Start from input 0 broadcast to the output, then fold the others in place.
        plans_[0].apply(out, ctx.in(0).data<T>(), out, [](T, T y) { return y; });
        for (size_t i = 1; i < plans_.size(); ++i) binary_same_type<T>(op_, plans_[i], out, ctx.in(i).data<T>(), out);
        if (mean_) {
          T count = static_cast<T>(plans_.size());
          for (int64_t j = 0; j < o.numel(); ++j) out[j] = static_cast<T>(out[j] / count);
        }
      }
    });
  }

 private:
  BinOp op_;
  bool mean_;
  std::vector<BroadcastPlan> plans_;
};

// Unary ops: a function of one element; `ints` says whether integer types are allowed.
struct UnaryDef {
  std::function<double(double, float, float)> f;  // generic path (all types), through double
  bool ints;
};

template <typename T, typename F>
void map_unary(const T* in, T* out, int64_t n, F f) {
#pragma omp parallel for if (n > 32768)
  for (int64_t i = 0; i < n; ++i) out[i] = f(in[i]);
}

class UnaryKernel : public Kernel {
 public:
  UnaryKernel(const ir::Node& node, std::string op) : op_(std::move(op)) {
    alpha_ = node.attrs.get_float("alpha", op_ == "LeakyRelu" ? 0.01f : op_ == "HardSigmoid" ? 0.2f : 1.0f);
    beta_ = node.attrs.get_float("beta", 0.5f);
  }

  std::vector<TensorType> prepare(const PrepareContext& ctx) override {
    DType d = ctx.input_dtype(0);
    bool int_ok = op_ == "Neg" || op_ == "Abs" || op_ == "Relu";
    ANVIL_PREPARE_CHECK(ctx, dtype_in(d, kFloats) || (int_ok && dtype_in(d, kSignedInts | kUnsignedInts)),
                        ErrorKind::kUnsupported, "dtype {} is not supported", dtype_name(d));
    return {ctx.input_type(0)};
  }

  void run(const RunContext& ctx) const override {
    const Tensor& x = ctx.in(0);
    Tensor& y = ctx.out(0);
    int64_t n = x.numel();
    dispatch_dtype(x.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      if constexpr (std::is_arithmetic_v<T> && !std::is_same_v<T, bool>) {
        const T* in = x.data<T>();
        T* out = y.data<T>();
        if constexpr (std::is_floating_point_v<T>) {
          run_float<T>(in, out, n);
        } else {
          if (op_ == "Neg") map_unary(in, out, n, [](T v) { return static_cast<T>(-v); });
          else if (op_ == "Abs") map_unary(in, out, n, [](T v) { return v < 0 ? static_cast<T>(-v) : v; });
          else map_unary(in, out, n, [](T v) { return v < 0 ? T(0) : v; });
        }
      }
    });
  }

 private:
  template <typename T>
  void run_float(const T* in, T* out, int64_t n) const {
    const T a = static_cast<T>(alpha_), b = static_cast<T>(beta_);
    const std::string& op = op_;
    if (op == "Relu") map_unary(in, out, n, [](T v) { return v > 0 ? v : T(0); });
    else if (op == "LeakyRelu") map_unary(in, out, n, [a](T v) { return v >= 0 ? v : a * v; });
    else if (op == "Elu") map_unary(in, out, n, [a](T v) { return v >= 0 ? v : a * (std::exp(v) - T(1)); });
    else if (op == "Sigmoid") map_unary(in, out, n, [](T v) {
      return v >= 0 ? T(1) / (T(1) + std::exp(-v)) : std::exp(v) / (T(1) + std::exp(v));
    });
    else if (op == "Tanh") map_unary(in, out, n, [](T v) { return std::tanh(v); });
    else if (op == "HardSigmoid") map_unary(in, out, n, [a, b](T v) { return std::min(T(1), std::max(T(0), a * v + b)); });
    else if (op == "HardSwish") map_unary(in, out, n, [](T v) { return v * std::min(T(1), std::max(T(0), v / T(6) + T(0.5))); });
    else if (op == "Sqrt") map_unary(in, out, n, [](T v) { return std::sqrt(v); });
    else if (op == "Exp") map_unary(in, out, n, [](T v) { return std::exp(v); });
    else if (op == "Log") map_unary(in, out, n, [](T v) { return std::log(v); });
    else if (op == "Neg") map_unary(in, out, n, [](T v) { return -v; });
    else if (op == "Abs") map_unary(in, out, n, [](T v) { return std::fabs(v); });
    else if (op == "Erf") map_unary(in, out, n, [](T v) { return std::erf(v); });
    else if (op == "Floor") map_unary(in, out, n, [](T v) { return std::floor(v); });
    else if (op == "Ceil") map_unary(in, out, n, [](T v) { return std::ceil(v); });
    else if (op == "Reciprocal") map_unary(in, out, n, [](T v) { return T(1) / v; });
    else if (op == "Softplus") map_unary(in, out, n, [](T v) { return v > 0 ? v + std::log1p(std::exp(-v)) : std::log1p(std::exp(v)); });
    else if (op == "Softsign") map_unary(in, out, n, [](T v) { return v / (T(1) + std::fabs(v)); });
    else if (op == "Selu") {
      T gamma = static_cast<T>(gamma_);
      map_unary(in, out, n, [a, gamma](T v) { return v > 0 ? gamma * v : gamma * (a * std::exp(v) - a); });
    }
  }

 public:
  float gamma_ = 1.05070102214813232421875f;

 private:
  std::string op_;
  float alpha_, beta_;
};

// Clip: min/max attributes before opset 11, optional inputs from 11.
class ClipKernel : public Kernel {
 public:
  explicit ClipKernel(const ir::Node& node) : legacy_(node.opset < 11) {
    lo_ = node.attrs.get_float("min", std::numeric_limits<float>::lowest());
    hi_ = node.attrs.get_float("max", std::numeric_limits<float>::max());
  }

  std::vector<TensorType> prepare(const PrepareContext& ctx) override {
    DType d = ctx.input_dtype(0);
    ANVIL_PREPARE_CHECK(ctx, dtype_in(d, kNumeric), ErrorKind::kUnsupported, "dtype {} is not supported", dtype_name(d));
    for (size_t i = 1; i < 3 && !legacy_; ++i)
      if (ctx.has_input(i))
        ANVIL_PREPARE_CHECK(ctx, ctx.input_dtype(i) == d && shape_numel(ctx.input_shape(i)) == 1,
                            ErrorKind::kInvalidArgument, "min and max must be scalars of the input's type");
    return {ctx.input_type(0)};
  }

  void run(const RunContext& ctx) const override {
    const Tensor& x = ctx.in(0);
    dispatch_dtype(x.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      if constexpr (std::is_arithmetic_v<T> && !std::is_same_v<T, bool>) {
        T lo = std::numeric_limits<T>::lowest(), hi = std::numeric_limits<T>::max();
        if (legacy_) {
          lo = static_cast<T>(std::max<double>(lo_, static_cast<double>(lo)));
          hi = static_cast<T>(std::min<double>(hi_, static_cast<double>(hi)));
        } else {
          if (ctx.inputs.size() > 1 && ctx.inputs[1]) lo = *ctx.in(1).data<T>();
          if (ctx.inputs.size() > 2 && ctx.inputs[2]) hi = *ctx.in(2).data<T>();
        }
        map_unary(x.data<T>(), ctx.out(0).data<T>(), x.numel(), [lo, hi](T v) { return std::min(std::max(v, lo), hi); });
      }
    });
  }

 private:
  bool legacy_;
  float lo_, hi_;
};

std::unique_ptr<Kernel> binary(BinOp op) { return std::make_unique<BinaryKernel>(op); }

ANVIL_REGISTER_KERNEL("Add", kRef, [](const ir::Node&) { return binary(BinOp::kAdd); });
ANVIL_REGISTER_KERNEL("Sub", kRef, [](const ir::Node&) { return binary(BinOp::kSub); });
ANVIL_REGISTER_KERNEL("Mul", kRef, [](const ir::Node&) { return binary(BinOp::kMul); });
ANVIL_REGISTER_KERNEL("Div", kRef, [](const ir::Node&) { return binary(BinOp::kDiv); });
ANVIL_REGISTER_KERNEL("Pow", kRef, [](const ir::Node&) { return binary(BinOp::kPow); });
ANVIL_REGISTER_KERNEL("PRelu", kRef, [](const ir::Node&) { return binary(BinOp::kPRelu); });
ANVIL_REGISTER_KERNEL("Sum", kRef, [](const ir::Node&) -> std::unique_ptr<Kernel> { return std::make_unique<VariadicKernel>(BinOp::kAdd); });
ANVIL_REGISTER_KERNEL("Mean", kRef, [](const ir::Node&) -> std::unique_ptr<Kernel> { return std::make_unique<VariadicKernel>(BinOp::kAdd, true); });
ANVIL_REGISTER_KERNEL("Max", kRef, [](const ir::Node&) -> std::unique_ptr<Kernel> { return std::make_unique<VariadicKernel>(BinOp::kMax); });
ANVIL_REGISTER_KERNEL("Min", kRef, [](const ir::Node&) -> std::unique_ptr<Kernel> { return std::make_unique<VariadicKernel>(BinOp::kMin); });
ANVIL_REGISTER_KERNEL_CLASS("Clip", kRef, ClipKernel);

#define ANVIL_UNARY(op) \
  ANVIL_REGISTER_KERNEL(op, kRef, [](const ir::Node& n) -> std::unique_ptr<Kernel> { return std::make_unique<UnaryKernel>(n, op); })
ANVIL_UNARY("Relu");
ANVIL_UNARY("LeakyRelu");
ANVIL_UNARY("Elu");
ANVIL_UNARY("Sigmoid");
ANVIL_UNARY("Tanh");
ANVIL_UNARY("HardSigmoid");
ANVIL_UNARY("HardSwish");
ANVIL_UNARY("Sqrt");
ANVIL_UNARY("Exp");
ANVIL_UNARY("Log");
ANVIL_UNARY("Neg");
ANVIL_UNARY("Abs");
ANVIL_UNARY("Erf");
ANVIL_UNARY("Floor");
ANVIL_UNARY("Ceil");
ANVIL_UNARY("Reciprocal");
ANVIL_UNARY("Softplus");
ANVIL_UNARY("Softsign");
#undef ANVIL_UNARY

ANVIL_REGISTER_KERNEL("Selu", kRef, [](const ir::Node& n) -> std::unique_ptr<Kernel> {
  auto k = std::make_unique<UnaryKernel>(n, "Selu");
  k->gamma_ = n.attrs.get_float("gamma", 1.05070102214813232421875f);
  return k;
});

}  // namespace

}  // namespace anvil::kernels
