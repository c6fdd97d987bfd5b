// x * sigmoid(x) (SiLU, as PyTorch exports nn.SiLU and EfficientNet's
// activations) becomes one Swish node (ONNX opset 24, alpha 1), and x *
// HardSigmoid(x) with PyTorch's alpha 1/6 and beta 1/2 (nn.Hardswish below
// opset 14, MobileNetV3's activations) one HardSwish node (opset 14): oneDNN
// runs each as one eltwise pass over blocked or plain data, and the
// Conv/MatMul fusions take them as post-ops. The sigmoid must feed only the
// product.
#include <cmath>

#include "passes/match.h"
#include "passes/pipeline.h"

namespace anvil::passes {

namespace {

bool is_float(DType t) {
  return t == DType::kFloat32 || t == DType::kFloat16 || t == DType::kBFloat16 || t == DType::kFloat64;
}

// HardSigmoid(x) = max(0, min(1, alpha x + beta)); HardSwish(x) = x * that
// with alpha 1/6 and beta 1/2 (PyTorch writes 1/6 rounded to float).
bool is_hardswish_gate(const ir::Node& hard) {
  const float alpha = hard.attrs.get_float("alpha", 0.2f), beta = hard.attrs.get_float("beta", 0.5f);
  return std::abs(alpha - 1.f / 6) <= 1e-7f && beta == 0.5f;
}

class FuseSwish : public Pass {
 public:
  std::string name() const override { return "fuse_swish"; }
  bool run(ir::Graph& graph) override {
    bool changed = false;
    for (const auto& node : graph.nodes()) {
      ir::Node* mul = node.get();
      if (!is_op(mul, "Mul") || mul->num_inputs() != 2) continue;
      for (int side = 0; side < 2; ++side) {
        ir::Node* sigmoid = producer_op(mul->input(side), "Sigmoid");
        ir::Node* hard = producer_op(mul->input(side), "HardSigmoid");
        ir::Node* gate = sigmoid ? sigmoid : hard;
        ir::Value* x = mul->input(1 - side);
        if (!gate || gate->input(0) != x || !used_once(graph, gate->output(0))) continue;
        if (!is_float(x->dtype()) || (hard && !is_hardswish_gate(*hard))) continue;
        gate->dead = true;
        mul->inputs = {x};
        mul->attrs = {};
        if (sigmoid) {
          mul->op_type = "Swish";
          mul->opset = 24;  // Swish's first version, whatever the model's opset
          mul->attrs.set("alpha", 1.f);
        } else {
          mul->op_type = "HardSwish";
          mul->opset = 14;  // likewise
        }
        changed = true;
        break;
      }
    }
    return changed;
  }
};

}  // namespace

std::unique_ptr<Pass> make_fuse_swish() { return std::make_unique<FuseSwish>(); }

}  // namespace anvil::passes
