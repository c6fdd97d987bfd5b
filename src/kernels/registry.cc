#include "kernels/registry.h"

#include <algorithm>
#include <cstring>
#include <set>
#include <tuple>

#include "ir/op_versions.h"

namespace anvil::kernels {

Registry& Registry::global() {
  static Registry r;
  return r;
}

void Registry::add(KernelEntry entry) { entries_.push_back(std::move(entry)); }

std::vector<const KernelEntry*> Registry::find(const std::string& domain, const std::string& op_type) const {
  std::vector<const KernelEntry*> found;
  for (const auto& e : entries_)
    if (e.op_type == op_type && e.domain == domain) found.push_back(&e);
  std::stable_sort(found.begin(), found.end(),
                   [](const KernelEntry* a, const KernelEntry* b) { return a->backend < b->backend; });
  return found;
}

void Registry::set_versions(const std::string& op_type, int min_version, int max_version) {
  versions_[op_type] = {min_version, max_version};
}

std::optional<SupportProblem> Registry::check_support(const std::string& domain, const std::string& op_type,
                                                      int opset) const {
  const std::string full = domain.empty() ? op_type : domain + "." + op_type;
  if (!has_op(domain, op_type))
    return SupportProblem{ErrorKind::kUnsupported, fmt::format("operator {} is not supported by Anvil", full)};
  if (!domain.empty()) return std::nullopt;  // Anvil's own ops and custom domains carry no ONNX history
  const std::vector<int>& history = ir::onnx_op_history(op_type);
  if (history.empty()) return std::nullopt;
  const int version = ir::onnx_op_version(op_type, opset);
  if (version == 0)
    return SupportProblem{ErrorKind::kInvalidModel, fmt::format("operator {} does not exist in opset {} (it was "
                                                                "added in opset {})", op_type, opset, history.front())};
  int lo, hi;
  if (auto it = versions_.find(op_type); it != versions_.end()) {
    std::tie(lo, hi) = it->second;
  } else {
    lo = ir::onnx_op_version(op_type, 7);
    if (lo == 0) lo = history.front();
    hi = ir::onnx_op_version(op_type, 17);
  }
  if (version >= lo && version <= hi) return std::nullopt;
  return SupportProblem{ErrorKind::kUnsupported,
                        fmt::format("operator {} version {} (opset {}) is not supported by Anvil, which implements "
                                    "versions {} to {}", op_type, version, opset, lo, hi)};
}

bool Registry::has_op(const std::string& domain, const std::string& op_type) const {
  return !find(domain, op_type).empty();
}

std::vector<std::string> Registry::op_types() const {
  std::set<std::string> s;
  for (const auto& e : entries_) s.insert(e.domain.empty() ? e.op_type : e.domain + "." + e.op_type);
  return {s.begin(), s.end()};
}

const TensorType& PrepareContext::input_type(size_t i) const {
  if (i >= types_.size() || types_[i].dtype == DType::kUndefined)
    fail(ErrorKind::kInvalidModel, "input {} is required but missing", i);
  return types_[i];
}

const Tensor* PrepareContext::constant(size_t i) const {
  if (i >= constants_.size()) return nullptr;
  values_read_[i] = true;
  return constants_[i];
}

const Tensor& PrepareContext::require_constant(size_t i, const char* what) const {
  const Tensor* t = constant(i);
  if (!t)
    throw ValueNeeded(ErrorKind::kUnsupported,
                      node_.describe() + ": input '" + what + "' must be known when the node is prepared");
  return *t;
}

void copy_if_distinct(const RunContext& ctx, size_t in) {
  const Tensor& src = ctx.in(in);
  Tensor& dst = ctx.out(0);
  if (src.raw() != dst.raw() && src.nbytes()) std::memcpy(dst.raw(), src.raw(), src.nbytes());
}

}  // namespace anvil::kernels
