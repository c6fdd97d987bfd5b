// Reference kernels for ops that only change a tensor's shape or produce
// metadata/constants: Flatten, Reshape, Squeeze, Unsqueeze, Identity, Shape,
// Size, Constant and ConstantOfShape.
//
// The reshape-like ops never move data themselves: output 0 aliases input 0
// (output_aliases_input() == 0) and run() copies only when the planner could
// not give both one buffer. Their output shapes, like every kernel's, come
// from the op schemas (src/ir/schemas/shape_ops.cc).
#include <algorithm>
#include <cstring>

#include "kernels/ref/common.h"
#include "kernels/registry.h"

namespace anvil::kernels {
namespace {

// Flatten, Reshape, Squeeze, Unsqueeze and Identity: output 0 is input 0's
// bytes under the shape the op's schema computes.
class ReshapeLikeKernel : public Kernel {
 public:
  explicit ReshapeLikeKernel(const ir::Node&) {}
  std::vector<TensorType> prepare(const PrepareContext& ctx) override { return ctx.output_types(); }
  int output_aliases_input() const override { return 0; }
  void run(const RunContext& ctx) const override { copy_if_distinct(ctx, 0); }
};

// Fills `n` elements of `elem` bytes each with the bytes of `value`.
void fill_elements(void* dst, int64_t n, size_t elem, const void* value) {
  auto* p = static_cast<unsigned char*>(dst);
  bool zero = std::all_of(static_cast<const unsigned char*>(value), static_cast<const unsigned char*>(value) + elem,
                          [](unsigned char c) { return c == 0; });
  if (zero) {
    std::memset(p, 0, static_cast<size_t>(n) * elem);
    return;
  }
  for (int64_t i = 0; i < n; ++i) std::memcpy(p + static_cast<size_t>(i) * elem, value, elem);
}

class ShapeKernel : public Kernel {
 public:
  explicit ShapeKernel(const ir::Node&) {}
  std::vector<TensorType> prepare(const PrepareContext& ctx) override {
    int64_t rank = static_cast<int64_t>(ctx.input_shape(0).size());
    start_ = 0;
    int64_t end = rank;
    if (ctx.opset() >= 15) {
      // Out-of-range start/end are clamped, not errors.
      auto clamp = [rank](int64_t v) { return std::clamp(v < 0 ? v + rank : v, int64_t{0}, rank); };
      start_ = clamp(ctx.attrs().get_int("start", 0));
      end = clamp(ctx.attrs().get_int("end", rank));
    }
    count_ = std::max<int64_t>(0, end - start_);
    return ctx.output_types();
  }
  bool reads_only_input_types() const override { return true; }
  void run(const RunContext& ctx) const override {
    const Shape& shape = ctx.in(0).shape();
    int64_t* out = ctx.out(0).data<int64_t>();
    for (int64_t i = 0; i < count_; ++i) out[i] = shape[static_cast<size_t>(start_ + i)];
  }

 private:
  int64_t start_ = 0, count_ = 0;
};

// Size: the input's element count, a scalar int64.
class SizeKernel : public Kernel {
 public:
  explicit SizeKernel(const ir::Node&) {}
  std::vector<TensorType> prepare(const PrepareContext& ctx) override { return ctx.output_types(); }
  bool reads_only_input_types() const override { return true; }
  void run(const RunContext& ctx) const override { *ctx.out(0).data<int64_t>() = ctx.in(0).numel(); }
};

class ConstantKernel : public Kernel {
 public:
  explicit ConstantKernel(const ir::Node&) {}
  std::vector<TensorType> prepare(const PrepareContext& ctx) override {
    const ir::Attributes& a = ctx.attrs();
    int present = 0;
    for (const char* name : {"value", "value_float", "value_floats", "value_int", "value_ints", "value_string",
                             "value_strings", "sparse_value"})
      present += a.has(name) ? 1 : 0;
    ANVIL_PREPARE_CHECK(ctx, present == 1, ErrorKind::kInvalidModel,
                        "exactly one value attribute is required, found {}", present);
    if (const Tensor* t = a.has("value") ? a.get_tensor("value") : nullptr) {
      value_ = *t;
    } else if (a.has("value_float")) {
      value_ = Tensor(DType::kFloat32, {});
      *value_.data<float>() = a.get_float("value_float", 0.f);
    } else if (a.has("value_floats")) {
      std::vector<float> v = a.get_floats("value_floats");
      value_ = Tensor(DType::kFloat32, {static_cast<int64_t>(v.size())});
      std::copy(v.begin(), v.end(), value_.data<float>());
    } else if (a.has("value_int")) {
      value_ = Tensor(DType::kInt64, {});
      *value_.data<int64_t>() = a.get_int("value_int", 0);
    } else if (a.has("value_ints")) {
      std::vector<int64_t> v = a.get_ints("value_ints");
      value_ = Tensor(DType::kInt64, {static_cast<int64_t>(v.size())});
      std::copy(v.begin(), v.end(), value_.data<int64_t>());
    } else {
      ctx.fail(ErrorKind::kUnsupported, "string and sparse constants are not supported");
    }
    ANVIL_PREPARE_CHECK(ctx, value_.dtype() != DType::kUndefined, ErrorKind::kInvalidModel,
                        "the value tensor has no dtype");
    return ctx.output_types();
  }
  void run(const RunContext& ctx) const override {
    Tensor& out = ctx.out(0);
    if (value_.nbytes() && out.raw() != value_.raw()) std::memcpy(out.raw(), value_.raw(), value_.nbytes());
  }

 private:
  Tensor value_;
};

class ConstantOfShapeKernel : public Kernel {
 public:
  explicit ConstantOfShapeKernel(const ir::Node&) {}
  std::vector<TensorType> prepare(const PrepareContext& ctx) override {
    const Tensor& shape_t = ctx.require_constant(0, "input");
    ANVIL_PREPARE_CHECK(ctx, shape_t.rank() == 1, ErrorKind::kInvalidModel, "the shape input must be 1-D, got {}",
                        shape_str(shape_t.shape()));
    value_ = 0;
    if (const Tensor* v = ctx.attrs().get_tensor("value")) {
      ANVIL_PREPARE_CHECK(ctx, v->numel() == 1, ErrorKind::kInvalidModel,
                          "the value attribute must hold one element, it has {}", v->numel());
      ANVIL_PREPARE_CHECK(ctx, v->dtype() != DType::kUndefined, ErrorKind::kInvalidModel,
                          "the value tensor has no dtype");
      ANVIL_PREPARE_CHECK(ctx, v->dtype() != DType::kString && dtype_size(v->dtype()) <= sizeof(value_),
                          ErrorKind::kInvalidModel, "the value tensor is {}, not a number or a bool",
                          dtype_name(v->dtype()));
      std::memcpy(&value_, v->raw(), dtype_size(v->dtype()));
    }
    return ctx.output_types();
  }
  void run(const RunContext& ctx) const override {
    Tensor& out = ctx.out(0);
    fill_elements(out.raw(), out.numel(), dtype_size(out.dtype()), &value_);
  }

 private:
  uint64_t value_ = 0;  // the element's bytes (every dtype fits in 8)
};

}  // namespace

// Versions after opset 17 that only add element types (float8, int4) Anvil does not have.
ANVIL_REGISTER_OP_VERSIONS("Flatten", 1, 21);
ANVIL_REGISTER_OP_VERSIONS("Reshape", 5, 21);
ANVIL_REGISTER_OP_VERSIONS("Squeeze", 1, 21);
ANVIL_REGISTER_OP_VERSIONS("Unsqueeze", 1, 21);
ANVIL_REGISTER_OP_VERSIONS("Identity", 1, 21);
ANVIL_REGISTER_OP_VERSIONS("Shape", 1, 21);
ANVIL_REGISTER_OP_VERSIONS("Size", 1, 21);
ANVIL_REGISTER_OP_VERSIONS("Constant", 1, 21);
ANVIL_REGISTER_OP_VERSIONS("ConstantOfShape", 9, 21);
ANVIL_REGISTER_KERNEL_CLASS("Flatten", kRef, ReshapeLikeKernel);
ANVIL_REGISTER_KERNEL_CLASS("Reshape", kRef, ReshapeLikeKernel);
ANVIL_REGISTER_KERNEL_CLASS("Squeeze", kRef, ReshapeLikeKernel);
ANVIL_REGISTER_KERNEL_CLASS("Unsqueeze", kRef, ReshapeLikeKernel);
ANVIL_REGISTER_KERNEL_CLASS("Identity", kRef, ReshapeLikeKernel);
ANVIL_REGISTER_KERNEL_CLASS("Shape", kRef, ShapeKernel);
ANVIL_REGISTER_KERNEL_CLASS("Size", kRef, SizeKernel);
ANVIL_REGISTER_KERNEL_CLASS("Constant", kRef, ConstantKernel);
ANVIL_REGISTER_KERNEL_CLASS("ConstantOfShape", kRef, ConstantOfShapeKernel);

}  // namespace anvil::kernels
