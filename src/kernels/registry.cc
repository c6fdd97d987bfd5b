#include "kernels/registry.h"

#include <algorithm>
#include <cstring>
#include <set>
#include <tuple>

#include "ir/op_versions.h"
#include "ir/schema.h"

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

const char* backend_name(Backend backend) {
  switch (backend) {
    case Backend::kDnnl: return "dnnl";
    case Backend::kVec: return "vec";
    case Backend::kRef: break;
  }
  return "ref";
}

bool InputTypes::accepts(const std::vector<TensorType>& types) const {
  if (masks.empty())  // kernels that check dtypes themselves know only the classic ones
    return std::all_of(types.begin(), types.end(),
                       [](const TensorType& t) { return t.dtype == DType::kUndefined || dtype_in(t.dtype, kAll); });
  for (size_t i = 0; i < types.size(); ++i) {
    if (types[i].dtype == DType::kUndefined) continue;  // omitted optional input
    if (!dtype_in(types[i].dtype, masks[std::min(i, masks.size() - 1)])) return false;
  }
  return true;
}

std::string InputTypes::describe() const {
  std::string s = "(";
  for (size_t i = 0; i < masks.size(); ++i) s += (i ? ", " : "") + dtype_set_names(masks[i]);
  return s + (masks.size() ? "...)" : dtype_set_names(kAll) + ")");
}

namespace {

std::string dtypes_of(const std::vector<TensorType>& types) {
  std::string s = "(";
  for (size_t i = 0; i < types.size(); ++i)
    s += std::string(i ? ", " : "") + (types[i].dtype == DType::kUndefined ? "none" : dtype_name(types[i].dtype));
  return s + ")";
}

// `hi` extended through the later versions (up to `version`) that only widen
// the element types: they run on the kernels of the version before.
int widen_through_type_only(const std::string& op, int hi, int version) {
  for (int v : ir::onnx_op_history(op))
    if (v > hi && v <= version) {
      if (!ir::onnx_version_widens_types_only(op, v)) break;
      hi = v;
    }
  return hi;
}

bool entry_has_version(const KernelEntry& e, const ir::Node& node) {
  if (e.min_version == 0 && e.max_version == 0) return true;
  if (!node.domain.empty()) return node.opset >= e.min_version && node.opset <= e.max_version;
  const int version = ir::onnx_op_version(node.op_type, node.opset);
  return version >= e.min_version && version <= widen_through_type_only(node.op_type, e.max_version, version);
}

}  // namespace

std::vector<const KernelEntry*> Registry::select(const ir::Node& node, const std::vector<TensorType>& types) const {
  std::vector<const KernelEntry*> all = find(node.domain, node.op_type), chosen;
  for (const KernelEntry* e : all)
    if (entry_has_version(*e, node) && e->input_types.accepts(types)) chosen.push_back(e);
  if (!chosen.empty()) return chosen;
  ANVIL_CHECK(!all.empty(), ErrorKind::kUnsupported, "{}: operator {} is not supported by Anvil", node.describe(),
              node.op_type);
  std::string taken;
  for (const KernelEntry* e : all)
    if (entry_has_version(*e, node)) taken += fmt::format("{}{} on {}", taken.empty() ? "" : "; ", e->input_types.describe(),
                                                          backend_name(e->backend));
  fail(ErrorKind::kUnsupported, "{}: no kernel takes input dtypes {}; Anvil's kernels take {}", node.describe(),
       dtypes_of(types), taken.empty() ? "other versions of the op" : taken);
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
  hi = widen_through_type_only(op_type, hi, version);
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

namespace {

ir::Type ir_type_of(const TensorType& t) {
  if (t.dtype == DType::kUndefined) return ir::Type();
  return t.sequence ? ir::Type::sequence(ir::Type::tensor(t.dtype)) : ir::Type::tensor(t.dtype, t.shape);
}

}  // namespace

PrepareContext::PrepareContext(const ir::Node& node, std::vector<TensorType> types,
                               std::vector<const Tensor*> constants, int num_threads, WeightCache* weights)
    : node_(node),
      types_(std::move(types)),
      constants_(std::move(constants)),
      num_threads_(num_threads),
      weights_(weights),
      values_read_(constants_.size(), false),
      outputs_(node.outputs.size()) {
  // Kernels multiply dims freely (strides, outer and inner counts). A tensor with
  // a zero dim has no elements yet may have others whose product overflows
  // int64: such a shape is refused here, before any kernel computes with it.
  for (size_t i = 0; i < types_.size(); ++i) {
    if (types_[i].sequence) continue;
    int64_t product = 1;
    for (int64_t d : types_[i].shape)
      if (d > 0 && __builtin_mul_overflow(product, d, &product))
        fail(ErrorKind::kInvalidArgument, "input {} has shape {}, whose sizes multiply past int64", i,
             shape_str(types_[i].shape));
  }
  std::vector<ir::Type> inputs;
  for (const TensorType& t : types_) inputs.push_back(ir_type_of(t));
  auto inferred = ir::infer_node_outputs(node, inputs, constants_);
  if (!inferred) return;
  has_schema_ = true;
  for (size_t o = 0; o < outputs_.size() && o < inferred->outputs.size(); ++o) {
    const auto& t = inferred->outputs[o];
    if (t && t->is_tensor() && t->is_static() && t->dtype() != DType::kUndefined)
      outputs_[o] = TensorType(t->dtype(), t->shape_or_minus_one());
    else if (t && t->kind() == ir::TypeKind::kSequence && t->element().dtype() != DType::kUndefined)
      outputs_[o] = TensorType(t->element().dtype(), {}, nullptr, /*seq=*/true);
  }
  for (size_t i = 0; i < values_read_.size() && i < inferred->values_read.size(); ++i)
    if (inferred->values_read[i]) values_read_[i] = true;
}

const TensorType& PrepareContext::output_type(size_t o) const {
  if (output_known(o)) return outputs_[o];
  for (size_t i = 0; i < types_.size(); ++i)
    if (has_input(i) && !constants_[i] && (types_[i].dtype == DType::kInt64 || types_[i].dtype == DType::kInt32))
      throw ValueNeeded(ErrorKind::kUnsupported,
                        node_.describe() + ": the output shape depends on input values not known at plan time");
  fail(ErrorKind::kInternal, "the {} of output {} is not given by the op's schema",
       has_schema_ ? "shape" : "type (no schema)", o);
}

std::vector<TensorType> PrepareContext::output_types() const {
  std::vector<TensorType> out;
  for (size_t o = 0; o < outputs_.size(); ++o) out.push_back(node_.outputs[o] ? output_type(o) : outputs_[o]);
  return out;
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

bool same_layout(const Layout& a, const Layout& b) {
  if (!a || !b) return !a && !b;
  return a == b || a->same_as(*b);
}

std::string layout_name(const Layout& layout) { return layout ? layout->name() : "plain"; }

size_t type_bytes(const TensorType& type) {
  return type.layout ? type.layout->bytes() : shape_nbytes(type.shape, type.dtype);
}

void copy_if_distinct(const RunContext& ctx, size_t in) {
  const Tensor& src = ctx.in(in);
  Tensor& dst = ctx.out(0);
  if (src.raw() != dst.raw() && src.nbytes()) std::memcpy(dst.raw(), src.raw(), src.nbytes());
}

std::unique_ptr<Kernel> Registry::make_reference(const ir::Node& node) const {
  for (const KernelEntry* e : find(node.domain, node.op_type))
    if (e->backend == Backend::kRef) return e->factory(node);
  ANVIL_INTERNAL_CHECK(false);
  return nullptr;
}

}  // namespace anvil::kernels
