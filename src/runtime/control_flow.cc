// Control flow: If and Loop run their subgraphs with a GraphExecutor each.
//
// They live in the runtime layer, not kernels/, because running a graph is
// the runtime's job. Both are dynamic steps (their output shapes are known only
// once a body has run) and allocate their outputs. A body reads enclosing
// values through captures: capture k of a body is the node's implicit input
// Graph::Capture::implicit_index.
#include <cstring>

#include "core/check.h"
#include "kernels/registry.h"
#include "runtime/executor.h"

namespace anvil::runtime {
namespace {

using kernels::PrepareContext;
using kernels::RunContext;
using kernels::TensorType;

// Appends the tensors a body's captures stand for.
void append_captures(const ir::Graph& body, const RunContext& ctx, size_t first_implicit, std::vector<Tensor>& in) {
  for (const ir::Graph::Capture& c : body.captures) in.push_back(ctx.value(first_implicit + c.implicit_index));
}

bool scalar_bool(const Tensor& t, const char* what, const ir::Node& node) {
  ANVIL_CHECK(t.dtype() == DType::kBool && t.numel() == 1, ErrorKind::kInvalidArgument,
              "{}: {} must be one bool, got {} {}", node.describe(), what, dtype_name(t.dtype()), shape_str(t.shape()));
  return t.data<bool>()[0];
}

class ControlFlowKernel : public kernels::Kernel {
 public:
  explicit ControlFlowKernel(const ir::Node& node) : node_(node) {}
  bool allocates_outputs() const override { return true; }
  std::string impl_name() const override { return "control-flow"; }

 protected:
  ir::Graph& body(const PrepareContext& ctx, const char* attr) const {
    ir::Graph* g = node_.attrs.get_graph(attr);
    ANVIL_PREPARE_CHECK(ctx, g != nullptr, ErrorKind::kInvalidModel, "attribute '{}' (a graph) is required", attr);
    return *g;
  }
  std::vector<TensorType> placeholders() const { return std::vector<TensorType>(node_.outputs.size()); }

  const ir::Node& node_;
  int threads_ = 1;
};

class IfKernel : public ControlFlowKernel {
 public:
  using ControlFlowKernel::ControlFlowKernel;
  std::vector<TensorType> prepare(const PrepareContext& ctx) override {
    ANVIL_PREPARE_CHECK(ctx, ctx.input_dtype(0) == DType::kBool && shape_numel(ctx.input_shape(0)) == 1,
                        ErrorKind::kInvalidModel, "cond must be one bool");
    for (const char* branch : {"then_branch", "else_branch"}) {
      ir::Graph& g = body(ctx, branch);
      ANVIL_PREPARE_CHECK(ctx, g.inputs().empty(), ErrorKind::kInvalidModel, "{} must have no inputs", branch);
      ANVIL_PREPARE_CHECK(ctx, g.outputs().size() == node_.outputs.size(), ErrorKind::kInvalidModel,
                          "{} has {} outputs, the node {}", branch, g.outputs().size(), node_.outputs.size());
    }
    then_ = std::make_unique<GraphExecutor>(body(ctx, "then_branch"), ctx.weight_cache());
    else_ = std::make_unique<GraphExecutor>(body(ctx, "else_branch"), ctx.weight_cache());
    threads_ = ctx.num_threads();
    return placeholders();
  }

  void run(const RunContext& ctx) const override {
    const bool cond = scalar_bool(ctx.in(0), "cond", node_);
    const char* branch = cond ? "then_branch" : "else_branch";
    const ir::Graph& g = *node_.attrs.get_graph(branch);
    std::vector<Tensor> inputs;
    append_captures(g, ctx, node_.num_explicit_inputs(), inputs);
    std::vector<Tensor> out = (cond ? then_ : else_)->run(inputs, threads_);
    for (size_t i = 0; i < ctx.outputs.size() && i < out.size(); ++i) {
      // The consumers were typed at import; a branch whose output's type was
      // unknown there (schemas/nn.cc, infer_if) is held to that type here.
      const ir::Type& declared = node_.outputs[i] ? node_.outputs[i]->type : ir::Type();
      ANVIL_CHECK(!declared.is_tensor() || declared.dtype() == DType::kUndefined || out[i].is_sequence() ||
                      out[i].dtype() == declared.dtype(),
                  ErrorKind::kInvalidModel, "{}: {} gives output {} as {}, where the model types it {}",
                  node_.describe(), branch, i, dtype_name(out[i].dtype()), dtype_name(declared.dtype()));
      if (ctx.outputs[i]) *ctx.outputs[i] = std::move(out[i]);
    }
  }

 private:
  std::unique_ptr<GraphExecutor> then_, else_;
};

// Loop(M?, cond?, v_initial...): body(iteration, cond, v...) -> (cond, v..., scan...).
// Final loop-carried values, then each scan output stacked along a new axis 0.
class LoopKernel : public ControlFlowKernel {
 public:
  using ControlFlowKernel::ControlFlowKernel;
  std::vector<TensorType> prepare(const PrepareContext& ctx) override {
    ir::Graph& g = body(ctx, "body");
    carried_ = node_.num_explicit_inputs() >= 2 ? node_.num_explicit_inputs() - 2 : 0;
    ANVIL_PREPARE_CHECK(ctx, node_.num_explicit_inputs() >= 2, ErrorKind::kInvalidModel,
                        "Loop needs the inputs M and cond (either may be empty)");
    ANVIL_PREPARE_CHECK(ctx, g.inputs().size() == carried_ + 2, ErrorKind::kInvalidModel,
                        "the body has {} inputs; it needs {} (iteration, cond, {} loop-carried)", g.inputs().size(),
                        carried_ + 2, carried_);
    ANVIL_PREPARE_CHECK(ctx, g.outputs().size() >= carried_ + 1, ErrorKind::kInvalidModel,
                        "the body has {} outputs; it needs at least {} (cond, {} loop-carried)", g.outputs().size(),
                        carried_ + 1, carried_);
    scans_ = g.outputs().size() - 1 - carried_;
    ANVIL_PREPARE_CHECK(ctx, node_.outputs.size() == carried_ + scans_, ErrorKind::kInvalidModel,
                        "the node has {} outputs; the body gives {} loop-carried and {} scan outputs",
                        node_.outputs.size(), carried_, scans_);
    if (ctx.has_input(0))
      ANVIL_PREPARE_CHECK(ctx, ctx.input_dtype(0) == DType::kInt64 && shape_numel(ctx.input_shape(0)) == 1,
                          ErrorKind::kInvalidModel, "M must be one int64");
    executor_ = std::make_unique<GraphExecutor>(g, ctx.weight_cache());
    threads_ = ctx.num_threads();
    return placeholders();
  }

  void run(const RunContext& ctx) const override {
    const ir::Graph& g = *node_.attrs.get_graph("body");
    int64_t trips = ctx.inputs[0] ? ctx.in(0).data<int64_t>()[0] : INT64_MAX;
    bool cond = ctx.inputs.size() > 1 && ctx.inputs[1] ? scalar_bool(ctx.in(1), "cond", node_) : true;
    std::vector<Tensor> carried;
    for (size_t i = 0; i < carried_; ++i) carried.push_back(ctx.value(2 + i));
    std::vector<std::vector<Tensor>> scans(scans_);
    Tensor iteration(DType::kInt64, {}), cond_in(DType::kBool, {});
    for (int64_t i = 0; i < trips && cond; ++i) {
      iteration.data<int64_t>()[0] = i;
      cond_in.data<bool>()[0] = cond;
      std::vector<Tensor> inputs = {iteration, cond_in};
      inputs.insert(inputs.end(), carried.begin(), carried.end());
      append_captures(g, ctx, node_.num_explicit_inputs(), inputs);
      std::vector<Tensor> out = executor_->run(inputs, threads_);
      cond = scalar_bool(out[0], "the body's cond output", node_);
      for (size_t k = 0; k < carried_; ++k) carried[k] = std::move(out[1 + k]);
      for (size_t k = 0; k < scans_; ++k) scans[k].push_back(std::move(out[1 + carried_ + k]));
    }
    for (size_t k = 0; k < carried_; ++k)
      if (ctx.outputs[k]) *ctx.outputs[k] = carried[k].clone();  // inputs are views; outputs must own
    for (size_t k = 0; k < scans_; ++k)
      if (ctx.outputs[carried_ + k]) *ctx.outputs[carried_ + k] = stack(scans[k], k);
  }

 private:
  // Iteration results [a, b...] -> [iterations, a, b...]; every iteration must agree on the shape.
  Tensor stack(const std::vector<Tensor>& parts, size_t k) const {
    if (parts.empty()) return Tensor(DType::kFloat32, {0});
    Shape shape = parts[0].shape();
    for (const Tensor& t : parts)
      ANVIL_CHECK(t.shape() == shape && t.dtype() == parts[0].dtype(), ErrorKind::kInvalidArgument,
                  "{}: scan output {} changes from {} {} to {} {} between iterations", node_.describe(), k,
                  dtype_name(parts[0].dtype()), shape_str(shape), dtype_name(t.dtype()), shape_str(t.shape()));
    shape.insert(shape.begin(), static_cast<int64_t>(parts.size()));
    Tensor out(parts[0].dtype(), shape);
    size_t bytes = parts[0].nbytes();
    for (size_t i = 0; i < parts.size(); ++i)
      if (bytes) std::memcpy(static_cast<char*>(out.raw()) + i * bytes, parts[i].raw(), bytes);
    return out;
  }

  size_t carried_ = 0, scans_ = 0;
  std::unique_ptr<GraphExecutor> executor_;
};

// 19 and 21 add element types only.
ANVIL_REGISTER_OP_VERSIONS("If", 1, 21);
ANVIL_REGISTER_OP_VERSIONS("Loop", 1, 21);
ANVIL_REGISTER_KERNEL_CLASS("If", kRef, IfKernel);
ANVIL_REGISTER_KERNEL_CLASS("Loop", kRef, LoopKernel);

}  // namespace
}  // namespace anvil::runtime
