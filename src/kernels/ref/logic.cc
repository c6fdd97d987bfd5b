// Comparison and logic ops, with numpy broadcasting: Equal, Less, Greater,
// LessOrEqual, GreaterOrEqual (bool output), And, Or, Xor, Not (bool), and
// Where(condition, X, Y) — the ops transformer exports build masks with.
#include <cstring>

#include "kernels/ref/broadcast.h"
#include "kernels/ref/common.h"
#include "kernels/registry.h"

namespace anvil::kernels {
namespace {

enum class Compare { kEqual, kLess, kGreater, kLessOrEqual, kGreaterOrEqual };
enum class Logic { kAnd, kOr, kXor };

template <typename T>
bool compare(Compare c, T a, T b) {
  switch (c) {
    case Compare::kEqual: return a == b;
    case Compare::kLess: return a < b;
    case Compare::kGreater: return a > b;
    case Compare::kLessOrEqual: return a <= b;
    case Compare::kGreaterOrEqual: return a >= b;
  }
  return false;
}

// Both operands of one dtype, broadcast together (to the output's shape).
void prepare_pair(const PrepareContext& ctx, unsigned dtypes, BroadcastPlan& plan) {
  const TensorType& a = ctx.input_type(0);
  const TensorType& b = ctx.input_type(1);
  ANVIL_PREPARE_CHECK(ctx, a.dtype == b.dtype, ErrorKind::kInvalidModel, "operands are {} and {}; they must match",
                      dtype_name(a.dtype), dtype_name(b.dtype));
  ANVIL_PREPARE_CHECK(ctx, dtype_in(a.dtype, dtypes), ErrorKind::kUnsupported, "dtype {} is not supported",
                      dtype_name(a.dtype));
  plan = BroadcastPlan(ctx.output_shape(0), a.shape, b.shape);
}

class CompareKernel : public Kernel {
 public:
  CompareKernel(Compare c, unsigned dtypes) : c_(c), dtypes_(dtypes) {}
  std::vector<TensorType> prepare(const PrepareContext& ctx) override {
    dtype_ = ctx.input_dtype(0);
    prepare_pair(ctx, dtypes_, plan_);
    return ctx.output_types();
  }
  void run(const RunContext& ctx) const override {
    dispatch_dtype(dtype_, [&](auto tag) {
      using T = typename decltype(tag)::type;
      const Compare c = c_;
      plan_.apply(ctx.in(0).data<T>(), ctx.in(1).data<T>(), ctx.out(0).data<bool>(), [c](T a, T b) {
        if constexpr (std::is_class_v<T>) return compare(c, static_cast<float>(a), static_cast<float>(b));
        else return compare(c, a, b);
      });
    });
  }

 private:
  Compare c_;
  unsigned dtypes_;
  DType dtype_ = DType::kUndefined;
  BroadcastPlan plan_;
};

class LogicKernel : public Kernel {
 public:
  explicit LogicKernel(Logic l) : l_(l) {}
  std::vector<TensorType> prepare(const PrepareContext& ctx) override {
    prepare_pair(ctx, kBoolType, plan_);
    return ctx.output_types();
  }
  void run(const RunContext& ctx) const override {
    const Logic l = l_;
    plan_.apply(ctx.in(0).data<bool>(), ctx.in(1).data<bool>(), ctx.out(0).data<bool>(), [l](bool a, bool b) {
      return l == Logic::kAnd ? (a && b) : l == Logic::kOr ? (a || b) : (a != b);
    });
  }

 private:
  Logic l_;
  BroadcastPlan plan_;
};

class NotKernel : public Kernel {
 public:
  explicit NotKernel(const ir::Node&) {}
  std::vector<TensorType> prepare(const PrepareContext& ctx) override {
    ANVIL_PREPARE_CHECK(ctx, ctx.input_dtype(0) == DType::kBool, ErrorKind::kInvalidModel, "input must be bool, got {}",
                        dtype_name(ctx.input_dtype(0)));
    return ctx.output_types();
  }
  int inplace_input() const override { return 0; }
  void run(const RunContext& ctx) const override {
    const bool* x = ctx.in(0).data<bool>();
    bool* y = ctx.out(0).data<bool>();
    const int64_t n = ctx.in(0).numel();
    for (int64_t i = 0; i < n; ++i) y[i] = !x[i];
  }
};

// Where(condition, X, Y): three-way broadcast. Each operand's strides over the
// output are precomputed; the output is walked in order with a carry counter.
class WhereKernel : public Kernel {
 public:
  explicit WhereKernel(const ir::Node&) {}
  std::vector<TensorType> prepare(const PrepareContext& ctx) override {
    const TensorType& c = ctx.input_type(0);
    const TensorType& x = ctx.input_type(1);
    const TensorType& y = ctx.input_type(2);
    ANVIL_PREPARE_CHECK(ctx, c.dtype == DType::kBool, ErrorKind::kInvalidModel, "condition must be bool, got {}",
                        dtype_name(c.dtype));
    ANVIL_PREPARE_CHECK(ctx, x.dtype == y.dtype, ErrorKind::kInvalidModel, "X is {} but Y is {}", dtype_name(x.dtype),
                        dtype_name(y.dtype));
    out_ = ctx.output_shape(0);
    strides_ = {broadcast_strides(c.shape, out_), broadcast_strides(x.shape, out_), broadcast_strides(y.shape, out_)};
    elem_ = dtype_size(x.dtype);
    return ctx.output_types();
  }

  void run(const RunContext& ctx) const override {
    const int64_t n = shape_numel(out_);
    if (n == 0) return;
    const bool* cond = ctx.in(0).data<bool>();
    const auto* x = static_cast<const unsigned char*>(ctx.in(1).raw());
    const auto* y = static_cast<const unsigned char*>(ctx.in(2).raw());
    auto* out = static_cast<unsigned char*>(ctx.out(0).raw());
    const size_t rank = out_.size();
    const int64_t inner = rank ? out_.back() : 1, rows = n / inner;
#pragma omp parallel for if (n > 32768)
    for (int64_t r = 0; r < rows; ++r) {
      int64_t off[3] = {0, 0, 0}, rem = r;
      for (size_t d = rank >= 1 ? rank - 1 : 0; d-- > 0;) {
        int64_t i = rem % out_[d];
        rem /= out_[d];
        for (int k = 0; k < 3; ++k) off[k] += i * strides_[k][d];
      }
      const int64_t sc = rank ? strides_[0][rank - 1] : 0, sx = rank ? strides_[1][rank - 1] : 0,
                    sy = rank ? strides_[2][rank - 1] : 0;
      for (int64_t j = 0; j < inner; ++j) {
        const unsigned char* src = cond[off[0] + j * sc] ? x + (off[1] + j * sx) * elem_ : y + (off[2] + j * sy) * elem_;
        std::memcpy(out + (r * inner + j) * elem_, src, elem_);
      }
    }
  }

 private:
  Shape out_;
  std::vector<std::vector<int64_t>> strides_;
  size_t elem_ = 0;
};

template <typename K, typename Arg>
KernelFactory factory(Arg a, unsigned dtypes) {
  return [a, dtypes](const ir::Node&) -> std::unique_ptr<Kernel> { return std::make_unique<K>(a, dtypes); };
}

KernelFactory logic_factory(Logic l) {
  return [l](const ir::Node&) -> std::unique_ptr<Kernel> { return std::make_unique<LogicKernel>(l); };
}

ANVIL_REGISTER_OP_VERSIONS("Equal", 7, 19);  // 19 adds strings, which Anvil's kernel refuses
ANVIL_REGISTER_KERNEL("Equal", kRef, factory<CompareKernel>(Compare::kEqual, kAll));
ANVIL_REGISTER_KERNEL("Less", kRef, factory<CompareKernel>(Compare::kLess, kNumeric | kHalfs));
ANVIL_REGISTER_KERNEL("Greater", kRef, factory<CompareKernel>(Compare::kGreater, kNumeric | kHalfs));
ANVIL_REGISTER_KERNEL("LessOrEqual", kRef, factory<CompareKernel>(Compare::kLessOrEqual, kNumeric | kHalfs));
ANVIL_REGISTER_KERNEL("GreaterOrEqual", kRef, factory<CompareKernel>(Compare::kGreaterOrEqual, kNumeric | kHalfs));
ANVIL_REGISTER_KERNEL("And", kRef, logic_factory(Logic::kAnd));
ANVIL_REGISTER_KERNEL("Or", kRef, logic_factory(Logic::kOr));
ANVIL_REGISTER_KERNEL("Xor", kRef, logic_factory(Logic::kXor));
ANVIL_REGISTER_KERNEL_CLASS("Not", kRef, NotKernel);
ANVIL_REGISTER_KERNEL_CLASS("Where", kRef, WhereKernel);

}  // namespace
}  // namespace anvil::kernels
