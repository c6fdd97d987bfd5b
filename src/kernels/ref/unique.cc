// Unique: the distinct elements (or, with `axis`, the distinct slices along
// it), sorted ascending (sorted=1) or in order of first occurrence; with the
// index of each one's first occurrence, the inverse indices (input position ->
// output position) and the counts. Sized by the data (allocates_outputs).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <numeric>

#include "kernels/ref/common.h"
#include "kernels/registry.h"

namespace anvil::kernels {

namespace {

// Lexicographic order of slices in which NaN sorts after every number and
// equals any NaN (a strict weak order, as std::map and std::sort need).
struct SliceLess {
  template <typename T>
  bool operator()(const std::vector<T>& a, const std::vector<T>& b) const {
    for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
      if constexpr (std::is_floating_point_v<T>) {
        const bool na = std::isnan(a[i]), nb = std::isnan(b[i]);
        if (na || nb) {
          if (na != nb) return nb;  // the number first
          continue;
        }
      }
      if (a[i] < b[i]) return true;
      if (b[i] < a[i]) return false;
    }
    return a.size() < b.size();
  }
};

class UniqueKernel : public Kernel {
 public:
  explicit UniqueKernel(const ir::Node& node)
      : sorted_(node.attrs.get_int("sorted", 1) != 0), has_axis_(node.attrs.has("axis")),
        axis_(node.attrs.get_int("axis", 0)) {}
  bool allocates_outputs() const override { return true; }

  std::vector<TensorType> prepare(const PrepareContext& ctx) override {
    if (has_axis_) axis_ = normalize_axis(ctx, axis_, static_cast<int64_t>(ctx.input_shape(0).size()));
    return std::vector<TensorType>(ctx.node().outputs.size());
  }

  void run(const RunContext& ctx) const override {
    dispatch_dtype(ctx.in(0).dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      compute<T>(ctx);
    });
  }

 private:
  // Slices along the axis (single elements without one) compared lexicographically.
  template <typename T>
  void compute(const RunContext& ctx) const {
    const Tensor& x = ctx.in(0);
    const Shape shape = has_axis_ ? x.shape() : Shape{x.numel()};
    const auto axis = static_cast<size_t>(has_axis_ ? axis_ : 0);
    const int64_t len = shape[axis];
    int64_t outer = 1, inner = 1;
    for (size_t d = 0; d < shape.size(); ++d)
      if (d < axis) outer *= shape[d];
      else if (d > axis) inner *= shape[d];
    const T* v = x.data<T>();
    using Key = std::conditional_t<kIs16BitFloat<T>, float, T>;  // 16-bit floats compare as floats
    auto slice = [&](int64_t i) {
      std::vector<Key> s;
      for (int64_t o = 0; o < outer; ++o)
        for (int64_t j = 0; j < inner; ++j) s.push_back(static_cast<Key>(v[(o * len + i) * inner + j]));
      return s;
    };
    std::map<std::vector<Key>, int64_t, SliceLess> first;  // slice -> first index
    std::vector<int64_t> order;               // first indices, in order of appearance
    std::vector<std::vector<Key>> keys(static_cast<size_t>(len));
    for (int64_t i = 0; i < len; ++i) {
      keys[static_cast<size_t>(i)] = slice(i);
      if (first.emplace(keys[static_cast<size_t>(i)], i).second) order.push_back(i);
    }
    if (sorted_)
      std::sort(order.begin(), order.end(),
                [&](int64_t a, int64_t b) { return SliceLess()(keys[static_cast<size_t>(a)], keys[static_cast<size_t>(b)]); });
    std::map<std::vector<Key>, int64_t, SliceLess> position;
    for (size_t k = 0; k < order.size(); ++k) position[keys[static_cast<size_t>(order[k])]] = static_cast<int64_t>(k);
    const auto u = static_cast<int64_t>(order.size());
    Shape y_shape = shape;
    y_shape[axis] = u;
    Tensor y(x.dtype(), y_shape), indices(DType::kInt64, {u}), inverse(DType::kInt64, {len}), counts(DType::kInt64, {u});
    std::fill(counts.data<int64_t>(), counts.data<int64_t>() + u, 0);
    for (int64_t k = 0; k < u; ++k) {
      indices.data<int64_t>()[k] = order[static_cast<size_t>(k)];
      for (int64_t o = 0; o < outer; ++o)
        for (int64_t j = 0; j < inner; ++j)
          y.data<T>()[(o * u + k) * inner + j] = v[(o * len + order[static_cast<size_t>(k)]) * inner + j];
    }
    for (int64_t i = 0; i < len; ++i) {
      const int64_t p = position[keys[static_cast<size_t>(i)]];
      inverse.data<int64_t>()[i] = p;
      ++counts.data<int64_t>()[p];
    }
    Tensor* outs[] = {&y, &indices, &inverse, &counts};
    for (size_t o = 0; o < ctx.outputs.size() && o < 4; ++o)
      if (ctx.outputs[o]) *ctx.outputs[o] = std::move(*outs[o]);
  }

  bool sorted_, has_axis_;
  int64_t axis_;
};

}  // namespace

ANVIL_REGISTER_OP_VERSIONS("Unique", 11, 28);  // 28 adds element types (16-bit floats here)
ANVIL_REGISTER_KERNEL_CLASS_TYPED("Unique", kRef, UniqueKernel, {kNumeric | kBoolType | kHalfs});

}  // namespace anvil::kernels
