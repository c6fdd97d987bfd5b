#include "ir/einsum.h"

#include <algorithm>
#include <map>

#include "anvil/error.h"
#include "core/check.h"

namespace anvil::ir {

namespace {

std::vector<std::string> split_terms(const std::string& s) {
  std::vector<std::string> terms(1);
  for (char c : s) {
    if (c == ',') terms.emplace_back();
    else terms.back() += c;
  }
  return terms;
}

}  // namespace

EinsumSpec parse_einsum(const std::string& equation, const std::vector<size_t>& ranks) {
  std::string eq;
  for (char c : equation)
    if (c != ' ') eq += c;
  const size_t arrow = eq.find("->");
  const std::vector<std::string> terms = split_terms(eq.substr(0, arrow));
  ANVIL_CHECK(terms.size() == ranks.size(), ErrorKind::kInvalidModel,
              "Einsum equation '{}' has {} operands for {} inputs", equation, terms.size(), ranks.size());
  EinsumSpec spec;
  std::map<char, int> letter;
  std::map<char, int> uses;
  size_t ellipsis_rank = 0;
  // Ellipsis axes: labels 0..E-1 (right-aligned), letters after them.
  for (size_t t = 0; t < terms.size(); ++t) {
    const std::string& term = terms[t];
    const size_t dots = term.find("...");
    const size_t letters = term.size() - (dots == std::string::npos ? 0 : 3);
    ANVIL_CHECK(ranks[t] >= letters && (dots != std::string::npos || ranks[t] == letters), ErrorKind::kInvalidModel,
                "Einsum operand '{}' does not fit an input of rank {}", term, ranks[t]);
    if (dots != std::string::npos) ellipsis_rank = std::max(ellipsis_rank, ranks[t] - letters);
  }
  spec.num_labels = static_cast<int>(ellipsis_rank);
  spec.ellipsis_label.assign(ellipsis_rank, true);
  auto label_of = [&](char c) {
    ANVIL_CHECK((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'), ErrorKind::kInvalidModel,
                "Einsum equation '{}' has the character '{}'", equation, std::string(1, c));
    auto [it, fresh] = letter.emplace(c, spec.num_labels);
    if (fresh) {
      ++spec.num_labels;
      spec.ellipsis_label.push_back(false);
    }
    return it->second;
  };
  for (size_t t = 0; t < terms.size(); ++t) {
    const std::string& term = terms[t];
    std::vector<int> labels;
    for (size_t i = 0; i < term.size(); ++i) {
      if (term.compare(i, 3, "...") == 0) {
        const size_t e = ranks[t] - (term.size() - 3);
        for (size_t k = 0; k < e; ++k) labels.push_back(static_cast<int>(ellipsis_rank - e + k));
        i += 2;
        continue;
      }
      labels.push_back(label_of(term[i]));
      ++uses[term[i]];
    }
    spec.inputs.push_back(labels);
  }
  if (arrow != std::string::npos) {
    const std::string out = eq.substr(arrow + 2);
    std::vector<bool> seen(static_cast<size_t>(spec.num_labels), false);
    for (size_t i = 0; i < out.size(); ++i) {
      if (out.compare(i, 3, "...") == 0) {
        for (size_t k = 0; k < ellipsis_rank; ++k) spec.output.push_back(static_cast<int>(k));
        i += 2;
        continue;
      }
      ANVIL_CHECK(letter.count(out[i]) != 0, ErrorKind::kInvalidModel,
                  "Einsum equation '{}' outputs '{}', which no operand has", equation, std::string(1, out[i]));
      const int l = letter[out[i]];
      ANVIL_CHECK(!seen[static_cast<size_t>(l)], ErrorKind::kInvalidModel, "Einsum equation '{}' repeats '{}' in its output",
                  equation, std::string(1, out[i]));
      seen[static_cast<size_t>(l)] = true;
      spec.output.push_back(l);
    }
  } else {
    for (size_t k = 0; k < ellipsis_rank; ++k) spec.output.push_back(static_cast<int>(k));
    for (const auto& [c, n] : uses)  // std::map: alphabetical (upper case first, as numpy)
      if (n == 1) spec.output.push_back(letter[c]);
  }
  return spec;
}

}  // namespace anvil::ir
