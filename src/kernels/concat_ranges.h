// A concat of one row per input (Kernel::input_offsets_in_output): where each
// input's bytes start in the output when they are laid end to end.
#pragma once

#include <cstddef>
#include <vector>

namespace anvil::kernels {

inline std::vector<size_t> offsets_end_to_end(const std::vector<size_t>& sizes) {
  std::vector<size_t> offsets;
  size_t at = 0;
  for (size_t size : sizes) {
    offsets.push_back(at);
    at += size;
  }
  return offsets;
}

}  // namespace anvil::kernels
