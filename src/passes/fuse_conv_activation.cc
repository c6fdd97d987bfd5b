// Conv [-> Add(residual)] [-> activation] becomes one anvil.FusedConv node, which
// oneDNN runs as a convolution with sum and eltwise post-ops.
//
// FusedConv: inputs X, W, B (may be omitted), Sum (may be omitted: added to the
// conv result, same shape); the Conv attributes plus
//   activation: "Relu" | "LeakyRelu" | "Clip" | "Sigmoid" | "Tanh" | "HardSigmoid" | "HardSwish" | "Elu"
//   activation_alpha, activation_beta: the activation's parameters (Clip: min, max).
#include <cfloat>
#include <limits>

#include "passes/pipeline.h"

namespace anvil::passes {

namespace {

bool is_conv(const ir::Node& n) {
  return (n.op_type == "Conv" && n.domain.empty()) || (n.op_type == "FusedConv" && n.domain == "anvil");
}

bool static_shape(const ir::Value* v) { return v && v->is_static(); }

float constant_scalar(const ir::Value* v, float fallback, bool* ok) {
  if (!v) return fallback;
  if (!v->is_constant() || v->constant->numel() != 1 || v->constant->dtype() != DType::kFloat32) {
    *ok = false;
    return fallback;
  }
  return *v->constant->data<float>();
}

// Reads the activation's parameters; false when it cannot be fused.
bool activation_params(const ir::Node& act, float* alpha, float* beta) {
  const std::string& op = act.op_type;
  bool ok = true;
  if (op == "Relu" || op == "Sigmoid" || op == "Tanh" || op == "HardSwish") {
    *alpha = 0.f;
    *beta = 0.f;
  } else if (op == "LeakyRelu") {
    *alpha = act.attrs.get_float("alpha", 0.01f);
  } else if (op == "Elu") {
    *alpha = act.attrs.get_float("alpha", 1.0f);
  } else if (op == "HardSigmoid") {
    *alpha = act.attrs.get_float("alpha", 0.2f);
    *beta = act.attrs.get_float("beta", 0.5f);
  } else if (op == "Clip") {
    if (act.opset < 11) {
      *alpha = act.attrs.get_float("min", std::numeric_limits<float>::lowest());
      *beta = act.attrs.get_float("max", std::numeric_limits<float>::max());
    } else {
      *alpha = constant_scalar(act.input(1), std::numeric_limits<float>::lowest(), &ok);
      *beta = constant_scalar(act.input(2), std::numeric_limits<float>::max(), &ok);
    }
  } else {
    return false;
  }
  return ok && act.domain.empty();
}

void make_fused(ir::Node& conv) {
  if (conv.op_type == "FusedConv") return;
  conv.op_type = "FusedConv";
  conv.domain = "anvil";
  conv.inputs.resize(4, nullptr);
}

// Moves `next`'s output onto `conv` and kills `next`.
void absorb(ir::Node& conv, ir::Node& next) {
  ir::Value* y = next.output(0);
  conv.outputs[0] = y;
  y->producer = &conv;
  next.dead = true;
}

class FuseConvActivation : public Pass {
 public:
  std::string name() const override { return "fuse_conv_activation"; }
  bool run(ir::Graph& graph) override {
    bool changed = false;
    for (const auto& ptr : graph.nodes()) {
      ir::Node& conv = *ptr;
      if (conv.dead || !is_conv(conv) || conv.attrs.has("activation")) continue;
      const ir::Value* w = conv.input(1);
      if (!w || !w->is_constant() || w->constant->dtype() != DType::kFloat32) continue;
      ir::Node* next = single_consumer(graph, conv.output(0));
      if (!next || next->dead) continue;
      if (next->op_type == "Add" && next->domain.empty() && !conv.input(3)) {
        changed |= fuse_add(conv, *next);
      } else {
        float alpha = 0, beta = 0;
        if (next->input(0) != conv.output(0) || !activation_params(*next, &alpha, &beta)) continue;
        make_fused(conv);
        conv.attrs.set("activation", next->op_type);
        conv.attrs.set("activation_alpha", alpha);
        conv.attrs.set("activation_beta", beta);
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
    if (other == out || !static_shape(other) || !static_shape(out) || other->type != out->type ||
        other->dtype() != DType::kFloat32)
      return false;
    make_fused(conv);
    conv.inputs[3] = other;
    absorb(conv, add);
    return true;
  }
};

}  // namespace

std::unique_ptr<Pass> make_fuse_conv_activation() { return std::make_unique<FuseConvActivation>(); }

}  // namespace anvil::passes
