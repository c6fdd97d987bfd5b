// Reductions over axes: ReduceMean, ReduceSum, ReduceMax, ReduceMin, ReduceProd,
// ReduceL2, ReduceSumSquare. Axes come from the `axes` attribute, or (ReduceSum
// from opset 13) from an optional input; keepdims and noop_with_empty_axes.
#include <cmath>
#include <limits>

#include "kernels/ref/common.h"
#include "kernels/registry.h"

namespace anvil::kernels {

namespace {

enum class Reduction { kMean, kSum, kMax, kMin, kProd, kL2, kSumSquare };

class ReduceKernel : public Kernel {
 public:
  explicit ReduceKernel(Reduction r) : r_(r) {}

  std::vector<TensorType> prepare(const PrepareContext& ctx) override {
    DType d = ctx.input_dtype(0);
    ANVIL_PREPARE_CHECK(ctx, dtype_in(d, kNumeric), ErrorKind::kUnsupported, "dtype {} is not supported", dtype_name(d));
    const Shape& x = ctx.input_shape(0);
    int64_t rank = static_cast<int64_t>(x.size());
    std::vector<int64_t> axes = ctx.attrs().get_ints("axes");
    // ReduceSum took its axes as an input from opset 13 (the others from opset 18).
    bool axes_input = ctx.node().op_type == "ReduceSum" ? ctx.opset() >= 13 : ctx.opset() >= 18;
    if (axes_input && ctx.has_input(1)) axes = tensor_to_ints(ctx.require_constant(1, "axes"));
    bool noop = ctx.attrs().get_int("noop_with_empty_axes", 0) != 0;
    std::vector<bool> reduced(static_cast<size_t>(rank), axes.empty() && !noop);
    for (int64_t a : axes) {
      int64_t ax = normalize_axis(ctx, a, rank);
      ANVIL_PREPARE_CHECK(ctx, !reduced[ax] || axes.empty(), ErrorKind::kInvalidModel, "axis {} appears twice", a);
      reduced[ax] = true;
    }
    bool keep = ctx.attrs().get_int("keepdims", 1) != 0;
    Shape out, kept;
    for (int64_t i = 0; i < rank; ++i) {
      kept.push_back(reduced[i] ? 1 : x[i]);
      if (!reduced[i] || keep) out.push_back(reduced[i] ? 1 : x[i]);
    }
    out_strides_ = broadcast_strides(kept, x);  // input index -> output index (0 on reduced axes)
    in_shape_ = x;
    count_ = 1;
    for (int64_t i = 0; i < rank; ++i)
      if (reduced[i]) count_ *= x[i];
    return {{d, out}};
  }

  void run(const RunContext& ctx) const override {
    dispatch_dtype(ctx.in(0).dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      if constexpr (std::is_arithmetic_v<T> && !std::is_same_v<T, bool>) compute<T>(ctx.in(0).data<T>(), ctx.out(0));
    });
  }

 private:
  template <typename T>
  void compute(const T* x, Tensor& out) const {
    using Acc = std::conditional_t<std::is_floating_point_v<T>, double, T>;
    int64_t n_out = out.numel(), n_in = shape_numel(in_shape_);
    std::vector<Acc> acc(static_cast<size_t>(n_out), init<Acc>());
    int rank = static_cast<int>(in_shape_.size());
    for (int64_t i = 0; i < n_in; ++i) {
      int64_t rem = i, o = 0;
      for (int d = rank - 1; d >= 0; --d) {
        o += (rem % in_shape_[d]) * out_strides_[d];
        rem /= in_shape_[d];
      }
      Acc v = static_cast<Acc>(x[i]);
      Acc& a = acc[o];
      switch (r_) {
        case Reduction::kMean: case Reduction::kSum: a += v; break;
        case Reduction::kMax: a = std::max(a, v); break;
        case Reduction::kMin: a = std::min(a, v); break;
        case Reduction::kProd: a *= v; break;
        case Reduction::kL2: case Reduction::kSumSquare: a += v * v; break;
      }
    }
    T* y = out.data<T>();
    for (int64_t o = 0; o < n_out; ++o) {
      Acc a = acc[o];
      if (r_ == Reduction::kMean) a = count_ ? a / static_cast<Acc>(count_) : a;
      if (r_ == Reduction::kL2) a = static_cast<Acc>(std::sqrt(static_cast<double>(a)));
      y[o] = static_cast<T>(a);
    }
  }

  template <typename Acc>
  Acc init() const {
    if (r_ == Reduction::kMax) return std::numeric_limits<Acc>::lowest();
    if (r_ == Reduction::kMin) return std::numeric_limits<Acc>::max();
    if (r_ == Reduction::kProd) return Acc(1);
    return Acc(0);
  }

  Reduction r_;
  Shape in_shape_;
  std::vector<int64_t> out_strides_;
  int64_t count_ = 1;
};

#define ANVIL_REDUCE(op, r) \
  ANVIL_REGISTER_KERNEL(op, kRef, [](const ir::Node&) -> std::unique_ptr<Kernel> { return std::make_unique<ReduceKernel>(r); })
ANVIL_REDUCE("ReduceMean", Reduction::kMean);
ANVIL_REDUCE("ReduceSum", Reduction::kSum);
ANVIL_REDUCE("ReduceMax", Reduction::kMax);
ANVIL_REDUCE("ReduceMin", Reduction::kMin);
ANVIL_REDUCE("ReduceProd", Reduction::kProd);
ANVIL_REDUCE("ReduceL2", Reduction::kL2);
ANVIL_REDUCE("ReduceSumSquare", Reduction::kSumSquare);
#undef ANVIL_REDUCE

}  // namespace

}  // namespace anvil::kernels
