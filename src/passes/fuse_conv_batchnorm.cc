// Conv -> BatchNormalization (inference, constant parameters) becomes one Conv
// with scaled weights and a shifted bias: W' = W * s, B' = (B - mean) * s + beta,
// s = gamma / sqrt(var + eps), per output channel.
#include <cmath>

#include "passes/pipeline.h"

namespace anvil::passes {

namespace {

bool all_constant_f32(const ir::Node& n, size_t from, size_t to) {
  for (size_t i = from; i < to; ++i) {
    const ir::Value* v = n.input(i);
    if (!v || !v->is_constant() || v->constant->dtype() != DType::kFloat32) return false;
  }
  return true;
}

class FuseConvBatchNorm : public Pass {
 public:
  std::string name() const override { return "fuse_conv_batchnorm"; }
  bool run(ir::Graph& graph) override {
    bool changed = false;
    for (const auto& ptr : graph.nodes()) {
      ir::Node& bn = *ptr;
      if (bn.dead || bn.op_type != "BatchNormalization" || !bn.domain.empty()) continue;
      if (bn.outputs.size() > 1 && std::any_of(bn.outputs.begin() + 1, bn.outputs.end(), [](auto* o) { return o; }))
        continue;  // training outputs requested
      if (bn.attrs.get_int("training_mode", 0) != 0 || !all_constant_f32(bn, 1, 5)) continue;
      ir::Value* x = bn.input(0);
      ir::Node* conv = x ? x->producer : nullptr;
      if (!conv || conv->dead || conv->op_type != "Conv" || !conv->domain.empty() || !used_once(graph, x)) continue;
      const ir::Value* w = conv->input(1);
      if (!w || !w->is_constant() || w->constant->dtype() != DType::kFloat32 || w->constant->rank() < 3) continue;
      if (conv->input(2) && !all_constant_f32(*conv, 2, 3)) continue;
      if (!fold(graph, *conv, bn)) continue;
      changed = true;
    }
    return changed;
  }

 private:
  static bool fold(ir::Graph& graph, ir::Node& conv, ir::Node& bn) {
    const Tensor& w = *conv.input(1)->constant;
    int64_t cout = w.dim(0);
    const Tensor* params[4] = {&*bn.input(1)->constant, &*bn.input(2)->constant, &*bn.input(3)->constant,
                               &*bn.input(4)->constant};
    for (const Tensor* p : params)
      if (p->numel() != cout) return false;
    const Tensor* b = conv.input(2) ? &*conv.input(2)->constant : nullptr;
    if (b && b->numel() != cout) return false;
    float eps = bn.attrs.get_float("epsilon", 1e-5f);
    const float *gamma = params[0]->data<float>(), *beta = params[1]->data<float>();
    const float *mean = params[2]->data<float>(), *var = params[3]->data<float>();

    const int64_t per_channel = w.numel() / cout;
    Tensor& new_w = writable_constant(graph, conv, 1);  // `w` no longer read below
    Tensor new_b(DType::kFloat32, {cout});
    for (int64_t c = 0; c < cout; ++c) {
      float s = gamma[c] / std::sqrt(var[c] + eps);
      float* wc = new_w.data<float>() + c * per_channel;
      for (int64_t i = 0; i < per_channel; ++i) wc[i] *= s;
      float bias = b ? b->data<float>()[c] : 0.f;
      new_b.data<float>()[c] = (bias - mean[c]) * s + beta[c];
    }
    conv.inputs.resize(3);
    conv.inputs[2] = graph.add_constant(graph.unique_name(conv.name + "_bias_bnfolded"), std::move(new_b));
    // The conv now produces the BN's output value (which may be a graph output).
    ir::Value* y = bn.output(0);
    conv.outputs[0] = y;
    y->producer = &conv;
    bn.dead = true;
    return true;
  }
};

}  // namespace

std::unique_ptr<Pass> make_fuse_conv_batchnorm() { return std::make_unique<FuseConvBatchNorm>(); }

}  // namespace anvil::passes
