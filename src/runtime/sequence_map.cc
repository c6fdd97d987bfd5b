// SequenceMap (opset 17): runs its body once per item of the input sequence.
// Body input j is item i of node input j when that input is a sequence (every
// sequence as long as the first), or the whole input otherwise; each body
// output gathers into a sequence output. Like If and Loop, a dynamic step that
// allocates its outputs.
#include "core/check.h"
#include "kernels/registry.h"
#include "runtime/executor.h"

namespace anvil::runtime {
namespace {

using kernels::PrepareContext;
using kernels::RunContext;
using kernels::TensorType;

class SequenceMapKernel : public kernels::Kernel {
 public:
  explicit SequenceMapKernel(const ir::Node& node) : node_(node) {}
  bool allocates_outputs() const override { return true; }
  std::string impl_name() const override { return "control-flow"; }

  std::vector<TensorType> prepare(const PrepareContext& ctx) override {
    body_ = node_.attrs.get_graph("body");
    ANVIL_PREPARE_CHECK(ctx, body_ != nullptr, ErrorKind::kInvalidModel, "attribute 'body' (a graph) is required");
    const size_t inputs = node_.num_explicit_inputs();
    ANVIL_PREPARE_CHECK(ctx, body_->inputs().size() == inputs, ErrorKind::kInvalidModel,
                        "the body has {} inputs for the node's {}", body_->inputs().size(), inputs);
    ANVIL_PREPARE_CHECK(ctx, body_->outputs().size() == node_.outputs.size(), ErrorKind::kInvalidModel,
                        "the body has {} outputs for the node's {}", body_->outputs().size(), node_.outputs.size());
    executor_ = std::make_unique<GraphExecutor>(*body_, ctx.weight_cache());
    threads_ = ctx.num_threads();
    return std::vector<TensorType>(node_.outputs.size());
  }

  void run(const RunContext& ctx) const override {
    const size_t inputs = node_.num_explicit_inputs();
    ANVIL_CHECK(ctx.inputs[0] && ctx.in(0).is_sequence(), ErrorKind::kInvalidArgument, "{}: input 0 must be a sequence",
                node_.describe());
    const size_t len = ctx.in(0).items().size();
    for (size_t j = 1; j < inputs; ++j)
      ANVIL_CHECK(!ctx.inputs[j] || !ctx.in(j).is_sequence() || ctx.in(j).items().size() == len,
                  ErrorKind::kInvalidArgument, "{}: sequence input {} has {} items, input 0 has {}", node_.describe(), j,
                  ctx.inputs[j] ? ctx.in(j).items().size() : 0, len);
    std::vector<std::vector<Tensor>> gathered(node_.outputs.size());
    for (size_t i = 0; i < len; ++i) {
      std::vector<Tensor> feed;
      for (size_t j = 0; j < inputs; ++j) {
        const Tensor v = ctx.value(j);
        feed.push_back(v.is_sequence() ? v.items()[i] : v);
      }
      for (const ir::Graph::Capture& c : body_->captures) feed.push_back(ctx.value(inputs + c.implicit_index));
      std::vector<Tensor> out = executor_->run(feed, threads_);
      for (size_t o = 0; o < gathered.size() && o < out.size(); ++o) gathered[o].push_back(std::move(out[o]));
    }
    for (size_t o = 0; o < gathered.size(); ++o) {
      if (!ctx.outputs[o]) continue;
      // An empty input gives empty sequences of the body's declared element types.
      const DType elem = gathered[o].empty() ? body_->outputs()[o]->type.dtype() : gathered[o][0].dtype();
      for (const Tensor& t : gathered[o])
        ANVIL_CHECK(t.dtype() == elem && !t.is_sequence(), ErrorKind::kInvalidModel,
                    "{}: body output {} changes type between items", node_.describe(), o);
      *ctx.outputs[o] = Tensor::sequence(elem, std::move(gathered[o]));
    }
  }

 private:
  const ir::Node& node_;
  const ir::Graph* body_ = nullptr;
  std::unique_ptr<GraphExecutor> executor_;
  int threads_ = 1;
};

}  // namespace

ANVIL_REGISTER_OP_VERSIONS("SequenceMap", 17, 17);
ANVIL_REGISTER_KERNEL_CLASS("SequenceMap", kRef, SequenceMapKernel);

}  // namespace anvil::runtime
