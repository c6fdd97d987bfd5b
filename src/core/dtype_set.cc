#include "core/dtype_set.h"

namespace anvil {

std::string dtype_set_names(unsigned set) {
  std::string names;
  for (unsigned d = 1; d <= static_cast<unsigned>(DType::kString); ++d) {
    if (!dtype_in(static_cast<DType>(d), set)) continue;
    if (!names.empty()) names += "|";
    names += dtype_name(static_cast<DType>(d));
  }
  return names;
}

DType dtype_from_onnx_code(int64_t code) {
  switch (code) {
    case 1: return DType::kFloat32;
    case 2: return DType::kUInt8;
    case 3: return DType::kInt8;
    case 4: return DType::kUInt16;
    case 5: return DType::kInt16;
    case 6: return DType::kInt32;
    case 7: return DType::kInt64;
    case 9: return DType::kBool;
    case 10: return DType::kFloat16;
    case 11: return DType::kFloat64;
    case 12: return DType::kUInt32;
    case 13: return DType::kUInt64;
    case 8: return DType::kString;
    case 16: return DType::kBFloat16;
    case 17: return DType::kFloat8E4M3FN;
    case 18: return DType::kFloat8E4M3FNUZ;
    case 19: return DType::kFloat8E5M2;
    case 20: return DType::kFloat8E5M2FNUZ;
    case 21: return DType::kUInt4;
    case 22: return DType::kInt4;
    case 23: return DType::kFloat4E2M1;
    case 24: return DType::kFloat8E8M0;
    case 25: return DType::kUInt2;
    case 26: return DType::kInt2;
    default: return DType::kUndefined;
  }
}

}  // namespace anvil
