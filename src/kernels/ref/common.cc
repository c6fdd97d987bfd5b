#include "kernels/ref/common.h"

#include <optional>

#include "core/checked.h"

namespace anvil::kernels {

std::vector<int64_t> contiguous_strides(const Shape& shape) {
  std::vector<int64_t> s(shape.size());
  int64_t acc = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    s[i] = acc;
    acc *= shape[i];
  }
  return s;
}

std::vector<int64_t> broadcast_strides(const Shape& shape, const Shape& out_shape) {
  std::vector<int64_t> strides(out_shape.size(), 0);
  std::vector<int64_t> own = contiguous_strides(shape);
  size_t offset = out_shape.size() - shape.size();
  for (size_t i = 0; i < shape.size(); ++i) strides[i + offset] = shape[i] == 1 ? 0 : own[i];
  return strides;
}

int64_t normalize_axis(const PrepareContext& ctx, int64_t axis, int64_t rank) {
  if (axis < -rank || axis >= rank)
    ctx.fail(ErrorKind::kInvalidArgument, "axis {} is out of range for rank {}", axis, rank);
  return axis < 0 ? axis + rank : axis;
}

std::vector<bool> reduced_axes(const PrepareContext& ctx, int64_t rank) {
  const bool axes_input = ctx.node().op_type == "ReduceSum" ? ctx.opset() >= 13 : ctx.opset() >= 18;
  // From those opsets an `axes` attribute is not ONNX's; the schemas ignore
  // it (schemas/shape_ops.cc, axes_of), and so must the output's shape here.
  std::vector<int64_t> axes = axes_input ? std::vector<int64_t>{} : ctx.attrs().get_ints("axes");
  if (axes_input && ctx.has_input(1)) {
    ANVIL_PREPARE_CHECK(ctx, ctx.input_dtype(1) == DType::kInt64, ErrorKind::kInvalidModel,
                        "axes must be int64, got {}", dtype_name(ctx.input_dtype(1)));
    axes = tensor_to_ints(ctx.require_constant(1, "axes"));
  }
  const bool noop = ctx.attrs().get_int("noop_with_empty_axes", 0) != 0;
  std::vector<bool> reduced(static_cast<size_t>(rank), axes.empty() && !noop);
  for (int64_t a : axes) {
    int64_t axis = normalize_axis(ctx, a, rank);
    ANVIL_PREPARE_CHECK(ctx, !reduced[axis], ErrorKind::kInvalidModel, "axis {} is listed twice", a);
    reduced[axis] = true;
  }
  return reduced;
}

std::vector<int64_t> tensor_to_ints(const Tensor& t) {
  std::vector<int64_t> v(static_cast<size_t>(t.numel()));
  if (t.dtype() == DType::kInt64) {
    for (size_t i = 0; i < v.size(); ++i) v[i] = t.data<int64_t>()[i];
  } else if (t.dtype() == DType::kInt32) {
    for (size_t i = 0; i < v.size(); ++i) v[i] = t.data<int32_t>()[i];
  } else {
    fail(ErrorKind::kInvalidModel, "expected an int64 or int32 tensor, got {}", dtype_name(t.dtype()));
  }
  return v;
}

std::vector<float> tensor_to_floats(const Tensor& t) {
  std::vector<float> v(static_cast<size_t>(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i) v[static_cast<size_t>(i)] = static_cast<float>(element_as_double(t, i));
  return v;
}

void floats_to_tensor(const std::vector<float>& v, Tensor& t) {
  ANVIL_CHECK(static_cast<int64_t>(v.size()) == t.numel(), ErrorKind::kInternal, "{} values for a tensor of {}",
              v.size(), t.numel());
  dispatch_float_or_half(t.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* out = t.data<T>();
    for (size_t i = 0; i < v.size(); ++i) out[i] = T(v[i]);
  });
}

QkvColumns qkv_columns(const PrepareContext& ctx, const std::vector<int64_t>& qkv_sizes) {
  const Shape& x = ctx.input_shape(0);
  QkvColumns c{};
  std::optional<int64_t> end = int64_t{0};
  for (size_t i = 0; i < 3 && end && i < qkv_sizes.size(); ++i) {
    c.first[i] = *end;
    c.width[i] = qkv_sizes[i];
    end = add_overflow_free(*end, qkv_sizes[i]);
  }
  ANVIL_PREPARE_CHECK(ctx, x.size() == 3 && qkv_sizes.size() == 3 && end && *end == x[2], ErrorKind::kInvalidModel,
                      "QKV {} does not hold qkv_sizes' columns", shape_str(x));
  return c;
}

}  // namespace anvil::kernels
