// x * sigmoid(x) (SiLU, as PyTorch exports nn.SiLU and EfficientNet's
// activations) becomes one Swish node (ONNX opset 24, alpha 1): oneDNN runs it
// as one eltwise pass over blocked or plain data, and the Conv/MatMul fusions
// take it as a post-op. The sigmoid must feed only the product.
#include "passes/match.h"
#include "passes/pipeline.h"

namespace anvil::passes {

namespace {

bool is_float(DType t) {
  return t == DType::kFloat32 || t == DType::kFloat16 || t == DType::kBFloat16 || t == DType::kFloat64;
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
        ir::Value* x = mul->input(1 - side);
        if (!sigmoid || sigmoid->input(0) != x || !used_once(graph, sigmoid->output(0))) continue;
        if (!is_float(x->dtype())) continue;
        sigmoid->dead = true;
        mul->op_type = "Swish";
        mul->opset = 24;  // Swish's first version, whatever the model's opset
        mul->inputs = {x};
        mul->attrs = {};
        mul->attrs.set("alpha", 1.f);
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
