// Reductions over axes: ReduceMean, ReduceSum, ReduceMax, ReduceMin, ReduceProd,
// ReduceL1, ReduceL2, ReduceSumSquare, ReduceLogSum, ReduceLogSumExp.
//
// Axes come from the `axes` attribute, or from an optional input for ReduceSum
// from opset 13 (the others from opset 18); empty axes reduce everything unless
// noop_with_empty_axes is set. Adding a reduction is one Reduction value, one
// case in step() and finish(), and one registration line.
#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>


#include "kernels/ref/common.h"
#include "kernels/registry.h"

namespace anvil::kernels {

namespace {

enum class Reduction { kMean, kSum, kMax, kMin, kProd, kL1, kL2, kSumSquare, kLogSum, kLogSumExp };

// Floats accumulate in double; integers in 64 bits, wrapping like the narrow
// type would (the result is converted back modulo 2^bits). Float32 reductions
// over one run of axes have a vectorized kernel (vec/reduce.cc).
template <typename T>
using Acc = std::conditional_t<std::is_floating_point_v<T>, double,
                               std::conditional_t<std::is_signed_v<T>, int64_t, uint64_t>>;

template <typename A>
A initial(Reduction r) {
  switch (r) {
    case Reduction::kMax:
      return std::is_floating_point_v<A> ? -std::numeric_limits<A>::infinity() : std::numeric_limits<A>::lowest();
    case Reduction::kMin:
      return std::is_floating_point_v<A> ? std::numeric_limits<A>::infinity() : std::numeric_limits<A>::max();
    case Reduction::kProd: return A(1);
    default: return A(0);
  }
}

// Integer sums and products wrap (through uint64) instead of overflowing.
template <typename A>
A add(A x, A y) {
  if constexpr (std::is_integral_v<A>) return static_cast<A>(static_cast<uint64_t>(x) + static_cast<uint64_t>(y));
  else return x + y;
}
template <typename A>
A mul(A x, A y) {
  if constexpr (std::is_integral_v<A>) return static_cast<A>(static_cast<uint64_t>(x) * static_cast<uint64_t>(y));
  else return x * y;
}

// Folds one element into the accumulator. `shift` is the max subtracted by LogSumExp.
template <typename A>
A step(Reduction r, A acc, A v, A shift) {
  switch (r) {
    case Reduction::kMean: case Reduction::kSum: case Reduction::kLogSum: return add(acc, v);
    case Reduction::kMax: return (v > acc || v != v) ? v : acc;  // NaN propagates
    case Reduction::kMin: return (v < acc || v != v) ? v : acc;
    case Reduction::kProd: return mul(acc, v);
    case Reduction::kL1: return add(acc, v < A(0) ? add(A(0), mul(v, A(-1))) : v);
    case Reduction::kL2: case Reduction::kSumSquare: return add(acc, mul(v, v));
    case Reduction::kLogSumExp:
      return acc + static_cast<A>(std::exp(static_cast<double>(v) - static_cast<double>(shift)));
  }
  return acc;
}

// A double result stored in T: integer types saturate (and NaN becomes 0)
// instead of the undefined behaviour of an out-of-range float-to-int cast.
template <typename T>
T from_double(double v) {
  if constexpr (std::is_integral_v<T>) {
    if (v != v) return T(0);
    if (v <= static_cast<double>(std::numeric_limits<T>::lowest())) return std::numeric_limits<T>::lowest();
    if (v >= static_cast<double>(std::numeric_limits<T>::max())) return std::numeric_limits<T>::max();
  }
  return static_cast<T>(v);
}

template <typename T, typename A>
T finish(Reduction r, A acc, int64_t count, A shift) {
  switch (r) {
    case Reduction::kMean:  // an empty float mean is 0/0 = NaN, as numpy gives
      if constexpr (std::is_floating_point_v<A>) return static_cast<T>(acc / static_cast<A>(count));
      else return static_cast<T>(count ? acc / static_cast<A>(count) : A(0));
    case Reduction::kL2: return from_double<T>(std::sqrt(static_cast<double>(acc)));
    case Reduction::kLogSum: return from_double<T>(std::log(static_cast<double>(acc)));
    case Reduction::kLogSumExp: return from_double<T>(static_cast<double>(shift) + std::log(static_cast<double>(acc)));
    default: return static_cast<T>(acc);
  }
}

class ReduceKernel : public Kernel {
 public:
  explicit ReduceKernel(Reduction r) : r_(r) {}

  std::vector<TensorType> prepare(const PrepareContext& ctx) override {
    ANVIL_PREPARE_CHECK(ctx, ctx.has_input(0), ErrorKind::kInvalidModel, "input 0 is missing");
    DType d = ctx.input_dtype(0);
    const bool bool_extreme =
        d == DType::kBool && ctx.opset() >= 20 && (r_ == Reduction::kMax || r_ == Reduction::kMin);
    ANVIL_PREPARE_CHECK(ctx, dtype_in(d, kNumeric | kHalfs) || bool_extreme, ErrorKind::kUnsupported,
                        "dtype {} is not supported", dtype_name(d));
    const Shape& x = ctx.input_shape(0);
    const int64_t rank = static_cast<int64_t>(x.size());

    std::vector<bool> reduced = reduced_axes(ctx, rank);  // the output's shape is the schema's

    // Collapse runs of adjacent kept / reduced axes (size-1 axes are dropped),
    // so the common cases become one kept and one reduced dimension.
    kept_.clear();
    red_.clear();
    std::vector<int64_t> strides = contiguous_strides(x);
    int last = -1;  // 0: the previous axis was kept, 1: reduced
    for (int64_t i = 0; i < rank; ++i) {
      if (x[i] == 1) continue;
      std::vector<Dim>& dims = reduced[i] ? red_ : kept_;
      int kind = reduced[i] ? 1 : 0;
      if (kind == last) {
        dims.back().size *= x[i];
        dims.back().stride = strides[i];
      } else {
        dims.push_back({x[i], strides[i]});
      }
      last = kind;
    }
    count_ = 1;
    for (const Dim& dim : red_) count_ *= dim.size;
    return ctx.output_types();
  }

  void run(const RunContext& ctx) const override {
    if (dtype_in(ctx.in(0).dtype(), kHalfs))  // 16-bit floats: in float32, rounded once
      return via_float32({&ctx.in(0)}, ctx.out(0),
                         [&](const auto& w, float* y) { compute<float>(w[0].data(), y, ctx.out(0).numel()); });
    if (ctx.in(0).dtype() == DType::kBool) {  // max/min of bytes 0 and 1; an empty min gives 255: true
      auto* y = static_cast<uint8_t*>(ctx.out(0).raw());
      compute<uint8_t>(static_cast<const uint8_t*>(ctx.in(0).raw()), y, ctx.out(0).numel());
      for (int64_t i = 0; i < ctx.out(0).numel(); ++i) y[i] = y[i] != 0;
      return;
    }
    dispatch_dtype(ctx.in(0).dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      if constexpr (std::is_arithmetic_v<T> && !std::is_same_v<T, bool>)
        compute<T>(ctx.in(0).data<T>(), ctx.out(0).data<T>(), ctx.out(0).numel());
    });
  }

 private:
  struct Dim {
    int64_t size, stride;  // stride in input elements
  };

  // Offset in the input of reduced position r (all but the innermost reduced dimension).
  int64_t reduced_offset(int64_t r) const {
    int64_t off = 0;
    if (red_.empty()) return 0;
    for (size_t d = red_.size() - 1; d-- > 0;) {
      off += (r % red_[d].size) * red_[d].stride;
      r /= red_[d].size;
    }
    return off;
  }

  template <typename T>
  void compute(const T* x, T* y, int64_t n_out) const {
    using A = Acc<T>;
    const int64_t inner = red_.empty() ? 1 : red_.back().size;
    const int64_t inner_stride = red_.empty() ? 0 : red_.back().stride;
    const int64_t outer = inner ? count_ / inner : 0;
    const bool two_pass = r_ == Reduction::kLogSumExp;
#pragma omp parallel for if (n_out > 1 && n_out * count_ > 32768)
    for (int64_t o = 0; o < n_out; ++o) {
      int64_t base = 0, rem = o;
      for (size_t d = kept_.size(); d-- > 0;) {
        base += (rem % kept_[d].size) * kept_[d].stride;
        rem /= kept_[d].size;
      }
      // LogSumExp subtracts the max first so exp() cannot overflow.
      A shift = 0;
      if (two_pass && count_ > 0) {
        shift = initial<A>(Reduction::kMax);
        for (int64_t r = 0; r < outer; ++r) {
          const T* p = x + base + reduced_offset(r);
          for (int64_t j = 0; j < inner; ++j)
            shift = step(Reduction::kMax, shift, static_cast<A>(p[j * inner_stride]), A(0));
        }
        if constexpr (std::is_floating_point_v<A>)
          if (std::isinf(shift)) shift = 0;  // all -inf (or +inf present): let exp/log give the IEEE answer
      }
      A acc = initial<A>(r_);
      for (int64_t r = 0; r < outer; ++r) {
        const T* p = x + base + reduced_offset(r);
        for (int64_t j = 0; j < inner; ++j) acc = step(r_, acc, static_cast<A>(p[j * inner_stride]), shift);
      }
      y[o] = finish<T>(r_, acc, count_, shift);
    }
  }

  Reduction r_;
  std::vector<Dim> kept_, red_;
  int64_t count_ = 1;
};

// Versions 1 to 20: axes as an input (13 for ReduceSum, 18 for the rest) and
// 20's bool ReduceMax/Min are handled.
#define ANVIL_REDUCE(op, r)                                                        \
  ANVIL_REGISTER_OP_VERSIONS(op, 1, 20);                                           \
  ANVIL_REGISTER_KERNEL(op, kRef, [](const ir::Node&) -> std::unique_ptr<Kernel> { \
    return std::make_unique<ReduceKernel>(r);                                      \
  })
ANVIL_REDUCE("ReduceMean", Reduction::kMean);
ANVIL_REDUCE("ReduceSum", Reduction::kSum);
ANVIL_REDUCE("ReduceMax", Reduction::kMax);
ANVIL_REDUCE("ReduceMin", Reduction::kMin);
ANVIL_REDUCE("ReduceProd", Reduction::kProd);
ANVIL_REDUCE("ReduceL1", Reduction::kL1);
ANVIL_REDUCE("ReduceL2", Reduction::kL2);
ANVIL_REDUCE("ReduceSumSquare", Reduction::kSumSquare);
ANVIL_REDUCE("ReduceLogSum", Reduction::kLogSum);
ANVIL_REDUCE("ReduceLogSumExp", Reduction::kLogSumExp);
#undef ANVIL_REDUCE

}  // namespace

}  // namespace anvil::kernels
