// A 1x1 convolution [+ activation] whose output only a depthwise 3x3
// convolution [+ activation] reads (the expansion of an inverted residual
// block: MobileNetV2, MobileNetV3, EfficientNet) becomes one
// anvil.FusedConvDepthwise node, where the advisor says it pays: oneDNN then
// computes the 1x1's rows as the depthwise window needs them, so its
// output (4.8 MB at MobileNetV2's first expansion) never goes through memory.
//
// FusedConvDepthwise: inputs X [N, C_in, H, W], W [C, C_in, 1, 1], B [C]
// (may be omitted), W_dw [C, 1, 3, 3], B_dw [C] (may be omitted);
// attributes activation, activation_alpha, activation_beta (the 1x1's, see
// FusedActivation in passes/match.h), depthwise_activation,
// depthwise_activation_alpha, depthwise_activation_beta, and stride (the
// depthwise's, 1 or 2; its pads are 1 on every side). Y [N, C, (H - 1) /
// stride + 1, (W - 1) / stride + 1].
#include "passes/match.h"
#include "passes/pipeline.h"

namespace anvil::passes {

namespace {

// A 1x1 window at stride 1, no pads, one group, over a float32 input of a
// static shape (which the advisor asks the kernels about).
bool is_pointwise(const ir::Node& conv) {
  const ir::Value* x = conv.input(0);
  return is_unit_conv(conv) && x && x->is_static() && x->type.rank() == 4 && x->dtype() == DType::kFloat32;
}

// A depthwise 3x3 over `channels` at stride 1 or 2 (the stride, else 0),
// pads of 1 on every side.
int64_t depthwise_stride(const ir::Node& conv, int64_t channels) {
  if (!is_plain_2d_conv(conv, 3) || conv.attrs.get_int("group", 1) != channels) return 0;
  if (conv.input(1)->constant->shape()[0] != channels || conv.input(1)->constant->shape()[1] != 1) return 0;
  const std::vector<int64_t> pads = conv.attrs.get_ints("pads");
  if (pads.size() != 4 || !all_equal_to(pads, 1)) return 0;
  const std::vector<int64_t> strides = conv.attrs.get_ints("strides", {1, 1});
  if (strides.size() != 2 || strides[0] != strides[1] || (strides[0] != 1 && strides[0] != 2)) return 0;
  return strides[0];
}

// The node that computes both (not in the graph): the pointwise's inputs, the
// depthwise's weights, bias and output, both activations and the stride.
ir::Node fused_node(const ir::Node& pointwise, const ir::Node& depthwise, int64_t stride) {
  ir::Node fused;
  fused.op_type = "FusedConvDepthwise";
  fused.domain = "anvil";
  fused.name = pointwise.name;
  fused.opset = 1;
  fused.inputs = {pointwise.input(0), pointwise.input(1), pointwise.input(2), depthwise.input(1), depthwise.input(2)};
  fused.outputs = depthwise.outputs;
  const FusedActivation act = activation_of(pointwise), dw_act = activation_of(depthwise);
  if (!act.name.empty()) set_activation(fused, act);
  if (!dw_act.name.empty()) {
    fused.attrs.set("depthwise_activation", dw_act.name);
    fused.attrs.set("depthwise_activation_alpha", dw_act.alpha);
    fused.attrs.set("depthwise_activation_beta", dw_act.beta);
  }
  fused.attrs.set("stride", stride);
  return fused;
}

class FuseConvDepthwise : public Pass {
 public:
  explicit FuseConvDepthwise(FusionAdvisor advisor) : advisor_(std::move(advisor)) {}
  std::string name() const override { return "fuse_conv_depthwise"; }
  bool run(ir::Graph& graph) override {
    bool changed = false;
    for (const auto& ptr : graph.nodes()) {
      ir::Node& pointwise = *ptr;
      if (!is_pointwise(pointwise)) continue;
      ir::Node* depthwise = single_consumer(graph, pointwise.output(0));
      if (!depthwise || depthwise->input(0) != pointwise.output(0)) continue;
      const int64_t stride = depthwise_stride(*depthwise, pointwise.input(1)->constant->shape()[0]);
      if (stride == 0) continue;
      const ir::Node fused = fused_node(pointwise, *depthwise, stride);
      if (!advisor_(fused)) continue;
      // The pointwise node becomes the fused one in place (its position in
      // the graph's order, its name); the depthwise goes.
      pointwise = fused;
      absorb(pointwise, *depthwise);
      changed = true;
    }
    return changed;
  }

 private:
  FusionAdvisor advisor_;
};

}  // namespace

std::unique_ptr<Pass> make_fuse_conv_depthwise(FusionAdvisor advisor) {
  return std::make_unique<FuseConvDepthwise>(std::move(advisor));
}

}  // namespace anvil::passes
