// Sets of dtypes as bit masks: what a kernel accepts for an input.
//
//   ANVIL_REGISTER_KERNEL_TYPED("Conv", kDnnl, factory, {kFloat32Only});
//   if (!dtype_in(ctx.input_dtype(0), kFloats | kHalfs)) ...
#pragma once

#include <string>

#include "anvil/tensor.h"

namespace anvil {

constexpr unsigned dtype_bit(DType d) { return 1u << static_cast<unsigned>(d); }

enum DTypeSet : unsigned {
  kFloat32Only = dtype_bit(DType::kFloat32),
  kFloats = dtype_bit(DType::kFloat32) | dtype_bit(DType::kFloat64),
  kSignedInts = dtype_bit(DType::kInt8) | dtype_bit(DType::kInt16) | dtype_bit(DType::kInt32) |
                dtype_bit(DType::kInt64),
  kUnsignedInts = dtype_bit(DType::kUInt8) | dtype_bit(DType::kUInt16) | dtype_bit(DType::kUInt32) |
                  dtype_bit(DType::kUInt64),
  kBoolType = dtype_bit(DType::kBool),
  kHalfs = dtype_bit(DType::kFloat16) | dtype_bit(DType::kBFloat16),  // converted through float
  kInt32And64 = dtype_bit(DType::kInt32) | dtype_bit(DType::kInt64),
  kNumeric = kFloats | kSignedInts | kUnsignedInts,
  kAll = kNumeric | kBoolType | kHalfs,
  // The 8-bit floats and 4-bit float (core/low_precision.h).
  kMinifloats = dtype_bit(DType::kFloat8E4M3FN) | dtype_bit(DType::kFloat8E4M3FNUZ) | dtype_bit(DType::kFloat8E5M2) |
                dtype_bit(DType::kFloat8E5M2FNUZ) | dtype_bit(DType::kFloat8E8M0) | dtype_bit(DType::kFloat4E2M1),
  kNarrowInts = dtype_bit(DType::kInt4) | dtype_bit(DType::kUInt4) | dtype_bit(DType::kInt2) | dtype_bit(DType::kUInt2),
  kLowPrecision = kMinifloats | kNarrowInts,
  // Every dtype but strings: for kernels that only move bytes. Kernels
  // registered without dtype masks take kAll only.
  kAnyDType = kAll | kLowPrecision,
  kStringType = dtype_bit(DType::kString),
};

constexpr bool dtype_in(DType d, unsigned set) { return d != DType::kUndefined && (set & dtype_bit(d)) != 0; }

// ONNX TensorProto.DataType code -> DType; kUndefined for codes Anvil lacks.
DType dtype_from_onnx_code(int64_t code);

// "float32|float64|int32": the dtypes of a set, for messages.
std::string dtype_set_names(unsigned set);

}  // namespace anvil
