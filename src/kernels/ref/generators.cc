// Ops that generate a tensor from a shape and a few values: OneHot (the
// `depth` classes along `axis`, off/on values) and EyeLike (ones on the k-th
// diagonal of a 2-D shape).
#include <cmath>
#include <cstring>
#include <type_traits>

#include "core/checked.h"
#include "kernels/ref/common.h"
#include "kernels/registry.h"

namespace anvil::kernels {

namespace {

double scalar_value(const Tensor& t) {
  return dispatch_dtype(t.dtype(), [&](auto tag) -> double {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_class_v<T>) return static_cast<double>(static_cast<float>(t.data<T>()[0]));
    else return static_cast<double>(t.data<T>()[0]);
  });
}

// OneHot(indices, depth, values=[off, on]): indices in [-depth, depth) set `on`; others stay `off`.
class OneHotKernel : public Kernel {
 public:
  explicit OneHotKernel(const ir::Node& node) : axis_(node.attrs.get_int("axis", -1)) {}

  std::vector<TensorType> prepare(const PrepareContext& ctx) override {
    const Shape& idx = ctx.input_shape(0);
    const auto out_rank = static_cast<int64_t>(idx.size()) + 1;
    const auto axis = static_cast<size_t>(normalize_axis(ctx, axis_, out_rank));
    TensorType out;
    if (ctx.output_known(0)) {  // an integer depth: the schema's
      out = ctx.output_type(0);
    } else {  // a floating-point depth is read here
      const Tensor& d = ctx.require_constant(1, "depth");
      ANVIL_PREPARE_CHECK(ctx, d.numel() == 1, ErrorKind::kInvalidArgument, "depth must be a scalar");
      const double depth = scalar_value(d);
      ANVIL_PREPARE_CHECK(ctx, std::isfinite(depth) && depth >= 1 && depth < 9.0e18, ErrorKind::kInvalidArgument,
                          "depth {} is not a positive size", depth);
      Shape shape = idx;
      shape.insert(shape.begin() + static_cast<std::ptrdiff_t>(axis), static_cast<int64_t>(depth));
      out = TensorType(ctx.input_dtype(2), shape);
    }
    depth_ = out.shape[axis];
    outer_ = shape_numel(Shape(idx.begin(), idx.begin() + static_cast<std::ptrdiff_t>(axis)));
    inner_ = shape_numel(Shape(idx.begin() + static_cast<std::ptrdiff_t>(axis), idx.end()));
    check_allocation(shape_nbytes(out.shape, out.dtype), ctx.node().describe() + ": the one-hot output");
    return {out};
  }

  void run(const RunContext& ctx) const override {
    const Tensor& idx = ctx.in(0);
    const Tensor& values = ctx.in(2);
    Tensor& out = ctx.out(0);
    const size_t elem = dtype_size(out.dtype());
    const auto* off = static_cast<const unsigned char*>(values.raw());
    const unsigned char* on = off + elem;
    auto* dst = static_cast<unsigned char*>(out.raw());
    for (int64_t i = 0; i < out.numel(); ++i) std::memcpy(dst + static_cast<size_t>(i) * elem, off, elem);
    for (int64_t i = 0; i < idx.numel(); ++i) {
      const double v = dispatch_dtype(idx.dtype(), [&](auto tag) -> double {
        using T = typename decltype(tag)::type;
        if constexpr (std::is_class_v<T>) return static_cast<double>(static_cast<float>(idx.data<T>()[i]));
        else return static_cast<double>(idx.data<T>()[i]);
      });
      if (!(v >= -static_cast<double>(depth_) && v < static_cast<double>(depth_))) continue;  // out of range: all off
      auto k = static_cast<int64_t>(v);
      if (k < 0) k += depth_;
      const int64_t o = i / inner_, r = i % inner_;
      std::memcpy(dst + static_cast<size_t>((o * depth_ + k) * inner_ + r) * elem, on, elem);
    }
  }

 private:
  int64_t axis_;
  int64_t depth_ = 0, outer_ = 1, inner_ = 1;
};

// EyeLike: the input's 2-D shape, ones where column - row == k.
class EyeLikeKernel : public Kernel {
 public:
  explicit EyeLikeKernel(const ir::Node& node) : k_(node.attrs.get_int("k", 0)) {}

  std::vector<TensorType> prepare(const PrepareContext& ctx) override { return ctx.output_types(); }

  void run(const RunContext& ctx) const override {
    Tensor& out = ctx.out(0);
    const int64_t rows = out.shape()[0], cols = out.shape()[1];
    std::memset(out.raw(), 0, out.nbytes());
    dispatch_dtype(out.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      T* y = out.data<T>();
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t c = r + k_;
        if (c >= 0 && c < cols) y[r * cols + c] = T(1);
      }
    });
  }

 private:
  int64_t k_;
};

}  // namespace

ANVIL_REGISTER_OP_VERSIONS("OneHot", 9, 11);
ANVIL_REGISTER_OP_VERSIONS("EyeLike", 9, 9);
ANVIL_REGISTER_KERNEL_CLASS_TYPED("OneHot", kRef, OneHotKernel, {kNumeric, kNumeric, kAll});
ANVIL_REGISTER_KERNEL_CLASS_TYPED("EyeLike", kRef, EyeLikeKernel, {kNumeric | kBoolType});

}  // namespace anvil::kernels
