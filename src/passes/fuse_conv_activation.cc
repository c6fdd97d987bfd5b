// Conv [-> Add(residual)] [-> activation] becomes one anvil.FusedConv node, which
// oneDNN runs as a convolution with sum and eltwise post-ops.
//
// FusedConv: inputs X, W, B (may be omitted), Sum (may be omitted: added to the
// conv result, same shape); the Conv attributes plus
//   activation, activation_alpha, activation_beta: see FusedActivation (passes/match.h).
#include <algorithm>

#include "passes/match.h"
#include "passes/pipeline.h"

namespace anvil::passes {

namespace {

// Weights known only at run time (training's) fuse where both sides are
// whole channel blocks on every ISA (multiples of 16 channels, one group):
// there oneDNN's blocked kernels take them and apply the post-op for free
// (cnn-32's forward ReLUs, 1.7% of its step). Elsewhere the convolution may
// run oneDNN's im2col GEMM, whose fused ReLU cost more than the pass apart
// (a first convolution on 3 channels: 3.4 ms against 1.3 + 0.2).
bool run_time_weights_fuse(const ir::Node& conv) {
  const ir::Value *x = conv.input(0), *w = conv.input(1);
  if (!x || !w || !x->type.has_shape() || !w->type.has_shape() || x->type.rank() < 3 || w->type.rank() < 1)
    return false;
  const int64_t in = x->type.dims()[1].value, out = w->type.dims()[0].value;
  return conv.attrs.get_int("group", 1) == 1 && in > 0 && out > 0 && in % 16 == 0 && out % 16 == 0;
}

void make_fused(ir::Node& conv) {
  if (conv.op_type == "FusedConv") return;
  conv.op_type = "FusedConv";
  conv.domain = "anvil";
  conv.inputs.resize(4, nullptr);
}

class FuseConvActivation : public Pass {
 public:
  std::string name() const override { return "fuse_conv_activation"; }
  bool run(ir::Graph& graph) override {
    bool changed = false;
    for (const auto& ptr : graph.nodes()) {
      ir::Node& conv = *ptr;
      if (!is_convolution(&conv) || conv.attrs.has("activation")) continue;
      const ir::Value* w = conv.input(1);
      if (!w || w->dtype() != DType::kFloat32 || (!w->is_constant() && !run_time_weights_fuse(conv))) continue;
      ir::Node* next = single_consumer(graph, conv.output(0));
      if (!next || next->dead) continue;
      if (next->op_type == "Add" && next->domain.empty() && !conv.input(3)) {
        changed |= fuse_add(conv, *next);
      } else {
        std::optional<FusedActivation> act = fusable_activation(*next);
        if (next->input(0) != conv.output(0) || !act) continue;
        make_fused(conv);
        set_activation(conv, *act);
        absorb(conv, *next);
        changed = true;
      }
    }
    return changed;
  }

 private:
  static bool fuse_add(ir::Node& conv, ir::Node& add) {
    if (add.num_inputs() != 2) return false;
    ir::Value* out = conv.output(0);
    ir::Value* other = add.input(0) == out ? add.input(1) : add.input(0);
    if (other == out || !other || !surely_same_shape(other->type, out->type) || other->dtype() != DType::kFloat32)
      return false;
    make_fused(conv);
    conv.inputs.resize(std::max<size_t>(conv.inputs.size(), 4), nullptr);  // one read from a file may have fewer
    conv.inputs[3] = other;
    absorb(conv, add);
    return true;
  }
};

}  // namespace

std::unique_ptr<Pass> make_fuse_conv_activation() { return std::make_unique<FuseConvActivation>(); }

}  // namespace anvil::passes
