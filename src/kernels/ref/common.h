// Helpers shared by the reference kernels: dtype dispatch, broadcasting, axes.
#pragma once

#include <cstdint>
#include <type_traits>
#include <vector>

#include "core/half.h"
#include "core/dtype_set.h"
#include "kernels/kernel.h"

namespace anvil::kernels {

template <typename T> struct TypeTag { using type = T; };

// float16 and bfloat16: storage types the kernels compute on in float.
template <typename T>
constexpr bool kIs16BitFloat = std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>;

// Calls fn(TypeTag<T>{}) for the C++ type of `dtype`.
template <typename Fn>
decltype(auto) dispatch_dtype(DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::kFloat32: return fn(TypeTag<float>{});
    case DType::kFloat64: return fn(TypeTag<double>{});
    case DType::kInt8: return fn(TypeTag<int8_t>{});
    case DType::kUInt8: return fn(TypeTag<uint8_t>{});
    case DType::kInt16: return fn(TypeTag<int16_t>{});
    case DType::kUInt16: return fn(TypeTag<uint16_t>{});
    case DType::kInt32: return fn(TypeTag<int32_t>{});
    case DType::kUInt32: return fn(TypeTag<uint32_t>{});
    case DType::kInt64: return fn(TypeTag<int64_t>{});
    case DType::kUInt64: return fn(TypeTag<uint64_t>{});
    case DType::kBool: return fn(TypeTag<bool>{});
    case DType::kFloat16: return fn(TypeTag<Half>{});
    case DType::kBFloat16: return fn(TypeTag<BFloat16>{});
    default: break;  // undefined, and the low-precision types, which kernels convert themselves
  }
  fail(ErrorKind::kInternal, "a kernel dispatched on dtype {}", dtype_name(dtype));
}

// Calls fn(TypeTag<T>{}) for float32 and float64, the types of the
// floating-point-only reference kernels (their registrations admit no others).
template <typename Fn>
void dispatch_float(DType dtype, Fn&& fn) {
  if (dtype == DType::kFloat32) return fn(TypeTag<float>{});
  if (dtype == DType::kFloat64) return fn(TypeTag<double>{});
  fail(ErrorKind::kInternal, "a float32/float64 kernel ran on {}", dtype_name(dtype));
}

// Calls fn(TypeTag<T>{}) for float32, float64, float16 and bfloat16.
template <typename Fn>
void dispatch_float_or_half(DType dtype, Fn&& fn) {
  if (dtype == DType::kFloat16) return fn(TypeTag<Half>{});
  if (dtype == DType::kBFloat16) return fn(TypeTag<BFloat16>{});
  return dispatch_float(dtype, fn);
}

// Strides (in elements) of `shape` viewed as `out_shape` under broadcasting:
// 0 on broadcast dimensions, right-aligned.
std::vector<int64_t> broadcast_strides(const Shape& shape, const Shape& out_shape);
std::vector<int64_t> contiguous_strides(const Shape& shape);
// anvil.QkvAttention's Q, K and V: columns [first[i], first[i] + width[i])
// of its [B, S, q + k + v] input 0. The widths are qkv_sizes, read from a
// file: fails the prepare unless the input holds exactly their sum.
struct QkvColumns {
  int64_t width[3], first[3];
};
QkvColumns qkv_columns(const PrepareContext& ctx, const std::vector<int64_t>& qkv_sizes);
// Maps a possibly negative axis into [0, rank); throws naming the node.
int64_t normalize_axis(const PrepareContext& ctx, int64_t axis, int64_t rank);
// Which axes of a rank-`rank` input a Reduce* node reduces: its `axes`
// attribute, or its constant axes input (ReduceSum from opset 13, the others
// from 18); empty axes mean all of them unless noop_with_empty_axes is set.
std::vector<bool> reduced_axes(const PrepareContext& ctx, int64_t rank);
// Reads an int64 or int32 tensor into a vector.
std::vector<int64_t> tensor_to_ints(const Tensor& t);
// The elements of a float32, float64, float16 or bfloat16 tensor as floats,
// and back (rounded to the tensor's type): for reference kernels that compute
// in float32 whatever the storage type, as ONNX's reference does.
std::vector<float> tensor_to_floats(const Tensor& t);
void floats_to_tensor(const std::vector<float>& v, Tensor& t);

// Runs compute(widened inputs, float output) for 16-bit float tensors: the
// inputs (nullptr: an omitted one, left empty) widened to float32, the result
// rounded back into `out` once.
template <typename Fn>
void via_float32(const std::vector<const Tensor*>& inputs, Tensor& out, Fn&& compute) {
  std::vector<std::vector<float>> wide;
  for (const Tensor* t : inputs) wide.push_back(t ? tensor_to_floats(*t) : std::vector<float>{});
  std::vector<float> y(static_cast<size_t>(out.numel()));
  compute(wide, y.data());
  floats_to_tensor(y, out);
}

}  // namespace anvil::kernels
