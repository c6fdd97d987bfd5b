// Ops whose output size depends on the data: NonZero (the coordinates of the
// non-zero elements) and Compress (the slices a bool condition selects). They
// make their outputs in run() (allocates_outputs), so they run as dynamic steps.
#include <cstring>
#include <type_traits>

#include "kernels/ref/common.h"
#include "kernels/registry.h"

namespace anvil::kernels {

namespace {

// NonZero: [rank, count] int64 coordinates, in row-major order (floats compare
// by value, so -0.0 is zero).
class NonZeroKernel : public Kernel {
 public:
  explicit NonZeroKernel(const ir::Node&) {}
  bool allocates_outputs() const override { return true; }
  std::vector<TensorType> prepare(const PrepareContext&) override { return {TensorType{}}; }

  void run(const RunContext& ctx) const override {
    const Tensor& x = ctx.in(0);
    std::vector<int64_t> flat;
    dispatch_dtype(x.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T* v = x.data<T>();
      for (int64_t i = 0; i < x.numel(); ++i)
        if constexpr (std::is_class_v<T>) {  // 16-bit floats
          if (static_cast<float>(v[i]) != 0.f) flat.push_back(i);
        } else if (v[i] != T(0)) {
          flat.push_back(i);
        }
    });
    const Shape& shape = x.shape();
    const auto rank = static_cast<int64_t>(shape.size());
    const auto count = static_cast<int64_t>(flat.size());
    Tensor out(DType::kInt64, {rank, count});
    int64_t* o = out.data<int64_t>();
    for (int64_t j = 0; j < count; ++j) {
      int64_t rem = flat[static_cast<size_t>(j)];
      for (int64_t d = rank; d-- > 0;) {
        o[d * count + j] = rem % shape[static_cast<size_t>(d)];
        rem /= shape[static_cast<size_t>(d)];
      }
    }
    *ctx.outputs[0] = std::move(out);
  }
};

// Compress: the slices along `axis` where the condition is true (the
// condition may be shorter than the axis); without an axis, the flattened input.
class CompressKernel : public Kernel {
 public:
  explicit CompressKernel(const ir::Node& node) : has_axis_(node.attrs.has("axis")), axis_(node.attrs.get_int("axis", 0)) {}
  bool allocates_outputs() const override { return true; }

  std::vector<TensorType> prepare(const PrepareContext& ctx) override {
    const Shape& x = ctx.input_shape(0);
    if (has_axis_) axis_ = normalize_axis(ctx, axis_, static_cast<int64_t>(x.size()));
    ANVIL_PREPARE_CHECK(ctx, ctx.input_shape(1).size() == 1, ErrorKind::kInvalidArgument,
                        "condition must be 1-D, got {}", shape_str(ctx.input_shape(1)));
    return {TensorType{}};
  }

  void run(const RunContext& ctx) const override {
    const Tensor& x = ctx.in(0);
    const Tensor& cond = ctx.in(1);
    const Shape shape = has_axis_ ? x.shape() : Shape{x.numel()};
    const size_t axis = has_axis_ ? static_cast<size_t>(axis_) : 0;
    const int64_t len = shape[axis];
    ANVIL_CHECK(cond.numel() <= len, ErrorKind::kInvalidArgument,
                "Compress: the condition has {} entries for an axis of {}", cond.numel(), len);
    std::vector<int64_t> picked;
    for (int64_t i = 0; i < cond.numel(); ++i)
      if (cond.data<bool>()[i]) picked.push_back(i);
    int64_t outer = 1, inner = 1;
    for (size_t d = 0; d < shape.size(); ++d)
      if (d < axis) outer *= shape[d];
      else if (d > axis) inner *= shape[d];
    Shape out_shape = shape;
    out_shape[axis] = static_cast<int64_t>(picked.size());
    Tensor out(x.dtype(), out_shape);
    const size_t bytes = static_cast<size_t>(inner) * dtype_size(x.dtype());
    const auto* src = static_cast<const unsigned char*>(x.raw());
    auto* dst = static_cast<unsigned char*>(out.raw());
    for (int64_t o = 0; o < outer; ++o)
      for (size_t k = 0; k < picked.size(); ++k)
        if (bytes)
          std::memcpy(dst + (static_cast<size_t>(o) * picked.size() + k) * bytes,
                      src + static_cast<size_t>(o * len + picked[k]) * bytes, bytes);
    *ctx.outputs[0] = std::move(out);
  }

 private:
  bool has_axis_;
  int64_t axis_;
};

}  // namespace

ANVIL_REGISTER_OP_VERSIONS("NonZero", 9, 13);
ANVIL_REGISTER_OP_VERSIONS("Compress", 9, 11);
ANVIL_REGISTER_KERNEL_CLASS_TYPED("NonZero", kRef, NonZeroKernel, {kAll});
ANVIL_REGISTER_KERNEL_CLASS_TYPED("Compress", kRef, CompressKernel, {kAll, kBoolType});

}  // namespace anvil::kernels
