// Einsum equations ("bij,bjk->bik", "...ii->...i", "i,i"): parsed into a
// label per input axis and the output's labels. An ellipsis stands for the
// leading axes not named by letters; its axes become labels of their own,
// right-aligned across the inputs (numpy broadcasting). Without "->" the
// output is the ellipsis, then the letters used once, in alphabetical order.
#pragma once

#include <string>
#include <vector>

namespace anvil::ir {

struct EinsumSpec {
  std::vector<std::vector<int>> inputs;  // a label per axis of each input
  std::vector<int> output;               // the output's labels
  int num_labels = 0;
  std::vector<bool> ellipsis_label;      // labels standing for ellipsis axes (they broadcast)
};

// Throws Error(kInvalidModel) naming the problem; `ranks` are the inputs' ranks.
EinsumSpec parse_einsum(const std::string& equation, const std::vector<size_t>& ranks);

}  // namespace anvil::ir
