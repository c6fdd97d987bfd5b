#include "kernels/ref/common.h"

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

}  // namespace anvil::kernels
