#include "runtime/constant_evaluator.h"

#include "runtime/plan.h"

namespace anvil::runtime {

namespace {
// Folding must not blow up the model: results past this size stay computed at run time.
constexpr size_t kMaxFoldedBytes = size_t{64} << 20;
}  // namespace

passes::ConstantEvaluator reference_evaluator() {
  return [](const ir::Node& node, const std::vector<const Tensor*>& inputs) -> std::optional<std::vector<Tensor>> {
    std::vector<kernels::TensorType> types;
    for (const Tensor* t : inputs) types.push_back(t ? kernels::TensorType{t->dtype(), t->shape()} : kernels::TensorType{});
    try {
      PreparedKernel prepared = prepare_kernel(node, types, inputs, 1, /*ref_only=*/true);
      if (prepared.kernel->allocates_outputs()) return std::nullopt;  // sequences and optionals stay nodes
      size_t bytes = 0;
      for (const auto& t : prepared.output_types) bytes += static_cast<size_t>(shape_numel(t.shape)) * dtype_size(t.dtype);
      if (bytes > kMaxFoldedBytes || prepared.output_types.size() < node.outputs.size()) return std::nullopt;
      return evaluate_kernel(prepared, inputs);
    } catch (const Error&) {
      return std::nullopt;  // the planner reports the error with full context
    }
  };
}

}  // namespace anvil::runtime
