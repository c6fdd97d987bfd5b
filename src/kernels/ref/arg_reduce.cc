// Reductions that select positions along one axis: ArgMax, ArgMin (first or,
// with select_last_index, last position of the extreme) and TopK (the k
// largest or smallest values and their indices; ties go to the lower index,
// as in ONNX Runtime).
//
// The input is viewed as [outer, len, inner] around the axis; each (outer,
// inner) pair is one independent row of `len` elements, strided by `inner`.
// 16-bit floats compare through float.
#include <algorithm>
#include <numeric>
#include <type_traits>

#include "kernels/ref/common.h"
#include "kernels/registry.h"

namespace anvil::kernels {

namespace {

constexpr int64_t kParallelThreshold = 32768;

// The [outer, len, inner] view of a tensor around `axis`.
struct AxisView {
  int64_t outer = 1, len = 1, inner = 1;

  AxisView() = default;
  AxisView(const Shape& shape, size_t axis) {
    for (size_t d = 0; d < shape.size(); ++d) (d < axis ? outer : d == axis ? len : inner) *= shape[d];
  }
};

// Compare values of T; 16-bit floats through float, the rest natively.
template <typename T>
auto key(T v) {
  if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) return static_cast<float>(v);
  else return v;
}

class ArgReduceKernel : public Kernel {
 public:
  ArgReduceKernel(const ir::Node& node, bool max)
      : max_(max), last_(node.attrs.get_int("select_last_index", 0) != 0) {}

  std::vector<TensorType> prepare(const PrepareContext& ctx) override {
    const Shape& x = ctx.input_shape(0);
    const auto axis = static_cast<size_t>(normalize_axis(ctx, ctx.attrs().get_int("axis", 0),
                                                         static_cast<int64_t>(x.size())));
    view_ = AxisView(x, axis);
    ANVIL_PREPARE_CHECK(ctx, view_.len > 0 || view_.outer * view_.inner == 0, ErrorKind::kInvalidArgument,
                        "cannot take the {} over axis {} of size 0", max_ ? "ArgMax" : "ArgMin", axis);
    return ctx.output_types();
  }

  void run(const RunContext& ctx) const override {
    dispatch_dtype(ctx.in(0).dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      if constexpr (!std::is_same_v<T, bool>) compute<T>(ctx.in(0).data<T>(), ctx.out(0).data<int64_t>());
    });
  }

 private:
  template <typename T>
  void compute(const T* x, int64_t* y) const {
    const AxisView v = view_;
    const int64_t rows = v.outer * v.inner;
#pragma omp parallel for if (rows * v.len > kParallelThreshold)
    for (int64_t r = 0; r < rows; ++r) {
      const T* p = x + (r / v.inner) * v.len * v.inner + r % v.inner;
      int64_t best = 0;
      auto best_key = key(p[0]);
      for (int64_t j = 1; j < v.len; ++j) {
        const auto k = key(p[j * v.inner]);
        const bool better = max_ ? (last_ ? k >= best_key : k > best_key) : (last_ ? k <= best_key : k < best_key);
        if (better) {
          best = j;
          best_key = k;
        }
      }
      y[r] = best;
    }
  }

  bool max_, last_;
  AxisView view_;
};

class TopKKernel : public Kernel {
 public:
  explicit TopKKernel(const ir::Node& node)
      : largest_(node.attrs.get_int("largest", 1) != 0) {}

  std::vector<TensorType> prepare(const PrepareContext& ctx) override {
    const Shape& x = ctx.input_shape(0);
    const auto axis = static_cast<size_t>(normalize_axis(ctx, ctx.attrs().get_int("axis", -1),
                                                         static_cast<int64_t>(x.size())));
    view_ = AxisView(x, axis);
    std::vector<TensorType> out = ctx.output_types();  // the schema checked 0 <= k <= len
    k_ = out[0].shape[axis];
    return out;
  }

  void run(const RunContext& ctx) const override {
    dispatch_dtype(ctx.in(0).dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      if constexpr (!std::is_same_v<T, bool>)
        compute<T>(ctx.in(0).data<T>(), ctx.out(0).data<T>(), ctx.out(1).data<int64_t>());
    });
  }

 private:
  template <typename T>
  void compute(const T* x, T* values, int64_t* indices) const {
    const AxisView v = view_;
    const int64_t rows = v.outer * v.inner, k = k_;
    const bool largest = largest_;
#pragma omp parallel for if (rows * v.len > kParallelThreshold)
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t o = r / v.inner, i = r % v.inner;
      const T* p = x + o * v.len * v.inner + i;
      std::vector<int64_t> order(static_cast<size_t>(v.len));
      std::iota(order.begin(), order.end(), int64_t{0});
      // A strict weak order even with NaN: NaN counts as the largest value (numpy's sort order).
      auto before = [&](int64_t a, int64_t b) {
        const auto ka = key(p[a * v.inner]), kb = key(p[b * v.inner]);
        const bool na = ka != ka, nb = kb != kb;
        if (na || nb) return na != nb ? (largest ? na : nb) : a < b;
        if (ka != kb) return largest ? ka > kb : ka < kb;
        return a < b;
      };
      std::partial_sort(order.begin(), order.begin() + k, order.end(), before);
      for (int64_t j = 0; j < k; ++j) {
        const int64_t at = (o * k + j) * v.inner + i;
        values[at] = p[order[static_cast<size_t>(j)] * v.inner];
        indices[at] = order[static_cast<size_t>(j)];
      }
    }
  }

  bool largest_;
  AxisView view_;
  int64_t k_ = 0;
};

}  // namespace

ANVIL_REGISTER_OP_VERSIONS("ArgMax", 1, 13);
ANVIL_REGISTER_OP_VERSIONS("ArgMin", 1, 13);
ANVIL_REGISTER_OP_VERSIONS("TopK", 1, 11);
ANVIL_REGISTER_KERNEL_TYPED("ArgMax", kRef, [](const ir::Node& n) -> std::unique_ptr<Kernel> {
  return std::make_unique<ArgReduceKernel>(n, true);
}, {kNumeric | kHalfs});
ANVIL_REGISTER_KERNEL_TYPED("ArgMin", kRef, [](const ir::Node& n) -> std::unique_ptr<Kernel> {
  return std::make_unique<ArgReduceKernel>(n, false);
}, {kNumeric | kHalfs});
ANVIL_REGISTER_KERNEL_TYPED("TopK", kRef, [](const ir::Node& n) -> std::unique_ptr<Kernel> {
  return std::make_unique<TopKKernel>(n);
}, {kNumeric | kHalfs, dtype_bit(DType::kInt64)});

}  // namespace anvil::kernels
