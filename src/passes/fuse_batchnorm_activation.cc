// BatchNormalization (inference) -> Relu becomes one anvil.FusedBatchNorm
// node, which normalizes and rectifies in one pass over the data
// (kernels/dnnl/batchnorm.cc). These are the BatchNormalizations that
// fuse_conv_batchnorm cannot fold into a convolution: those after a Concat
// or a residual Add, as in DenseNet's and pre-activation ResNets' BN-ReLU-Conv.
//
// FusedBatchNorm: inputs X, scale, B, mean, var (float32); attribute epsilon,
// plus activation (here "Relu"): see FusedActivation (passes/match.h).
#include <algorithm>

#include "passes/match.h"
#include "passes/pipeline.h"

namespace anvil::passes {

namespace {

bool is_inference_batch_norm(const ir::Node& bn) {
  if (bn.dead || !is_op(&bn, "BatchNormalization") || bn.num_inputs() != 5 || bn.opset < 7) return false;
  if (std::any_of(bn.outputs.begin() + 1, bn.outputs.end(), [](const ir::Value* o) { return o; }))
    return false;  // training outputs requested
  if (bn.attrs.get_int("training_mode", 0) != 0 || bn.attrs.get_int("spatial", 1) != 1) return false;
  return std::all_of(bn.inputs.begin(), bn.inputs.end(),
                     [](const ir::Value* v) { return v && v->dtype() == DType::kFloat32; });
}

class FuseBatchNormActivation : public Pass {
 public:
  std::string name() const override { return "fuse_batchnorm_activation"; }
  bool run(ir::Graph& graph) override {
    bool changed = false;
    for (const auto& ptr : graph.nodes()) {
      ir::Node& bn = *ptr;
      if (bn.outputs.empty() || !is_inference_batch_norm(bn)) continue;
      ir::Node* next = single_consumer(graph, bn.output(0));
      if (!next || next->dead || next->input(0) != bn.output(0)) continue;
      const std::optional<FusedActivation> act = fusable_activation(*next);
      if (!act || act->name != "Relu") continue;  // the one the fast kernel applies
      bn.op_type = "FusedBatchNorm";
      bn.domain = "anvil";
      bn.outputs.resize(1);
      for (const char* a : {"momentum", "training_mode", "spatial"}) bn.attrs.erase(a);
      set_activation(bn, *act);
      absorb(bn, *next);
      changed = true;
    }
    return changed;
  }
};

}  // namespace

std::unique_ptr<Pass> make_fuse_batchnorm_activation() { return std::make_unique<FuseBatchNormActivation>(); }

}  // namespace anvil::passes
