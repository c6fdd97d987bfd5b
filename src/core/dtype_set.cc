#include "core/dtype_set.h"

namespace anvil {

std::string dtype_set_names(unsigned set) {
  std::string names;
  for (unsigned d = 1; d <= static_cast<unsigned>(DType::kBool); ++d) {
    if (!dtype_in(static_cast<DType>(d), set)) continue;
    if (!names.empty()) names += "|";
    names += dtype_name(static_cast<DType>(d));
  }
  return names;
}

}  // namespace anvil
