// A squeeze-and-excitation block's gates, GlobalAveragePool -> 1x1
// convolution [+ activation] -> 1x1 convolution [+ activation], each read
// only by the next, become one anvil.SqueezeExcite node (EfficientNet,
// MobileNetV3, RegNet-Y, ...: the block's Mul by the gates stays as it is).
// The three run on a 1x1 plane, where each was mostly a oneDNN call's and a
// thread team's overhead (kernels/dnnl/squeeze_excite.cc).
//
// SqueezeExcite: inputs X [N, C, H, W], W1 [R, C, 1, 1], B1 [R], W2 [C, R,
// 1, 1], B2 [C] (the biases may be omitted); attributes activation,
// activation_alpha, activation_beta (the reduction's, see FusedActivation in
// passes/match.h) and gate, gate_alpha, gate_beta (the expansion's); Y
// [N, C, 1, 1] = gate(W2 activation(W1 mean(X) + B1) + B2).
#include "passes/match.h"
#include "passes/pipeline.h"

namespace anvil::passes {

namespace {

// The activations the fused kernel's products apply in their epilogue; with
// another (Elu, Tanh) the block would run on the reference kernel instead.
bool applied_in_epilogue(const FusedActivation& a) { return a.name != "Elu" && a.name != "Tanh"; }

// The 1x1 convolution that alone reads `v` (not a graph output) as its input, else nullptr.
ir::Node* unit_conv_reading(const ir::Graph& graph, const ir::Value* v) {
  ir::Node* conv = single_consumer(graph, v);
  return conv && is_unit_conv(*conv) && conv->input(0) == v ? conv : nullptr;
}

bool fuse_at(ir::Graph& graph, ir::Node& pool) {
  if (!is_op(&pool, "GlobalAveragePool")) return false;
  const ir::Value* x = pool.input(0);  // float32 where the convolutions' weights fit it
  if (!x || !x->type.has_shape() || x->type.rank() != 4) return false;
  ir::Node* reduce = unit_conv_reading(graph, pool.output(0));
  ir::Node* expand = reduce ? unit_conv_reading(graph, reduce->output(0)) : nullptr;
  if (!expand) return false;
  const Shape &w1 = reduce->input(1)->constant->shape(), &w2 = expand->input(1)->constant->shape();
  const ir::Dim& c = x->type.dims()[1];
  if (w2[0] != w1[1] || w2[1] != w1[0] || (c.is_known() && c.value != w1[1])) return false;
  const FusedActivation act = activation_of(*reduce), gate = activation_of(*expand);
  if (!applied_in_epilogue(act) || !applied_in_epilogue(gate)) return false;

  pool.op_type = "SqueezeExcite";
  pool.domain = "anvil";
  pool.inputs = {pool.input(0), reduce->input(1), reduce->input(2), expand->input(1), expand->input(2)};
  while (!pool.inputs.back()) pool.inputs.pop_back();
  set_activation(pool, act);
  pool.attrs.set("gate", gate.name);
  pool.attrs.set("gate_alpha", gate.alpha);
  pool.attrs.set("gate_beta", gate.beta);
  absorb(pool, *reduce);
  absorb(pool, *expand);
  return true;
}

class FuseSqueezeExcite : public Pass {
 public:
  std::string name() const override { return "fuse_squeeze_excite"; }
  bool run(ir::Graph& graph) override {
    return rewrite_each_node(graph, [&](ir::Node& n) { return fuse_at(graph, n); });
  }
};

}  // namespace

std::unique_ptr<Pass> make_fuse_squeeze_excite() { return std::make_unique<FuseSqueezeExcite>(); }

}  // namespace anvil::passes
