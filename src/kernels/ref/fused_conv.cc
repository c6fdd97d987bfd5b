// Reference anvil.FusedConv: the reference Conv, then the residual add, then
// the activation — the oracle for the oneDNN post-op path.
#include <cstring>

#include "kernels/activation.h"
#include "kernels/registry.h"

namespace anvil::kernels {

namespace {

class RefFusedConv : public Kernel {
 public:
  explicit RefFusedConv(const ir::Node& node) : conv_node_(node) {
    conv_node_.op_type = "Conv";
    conv_node_.domain = "";
    conv_node_.inputs.resize(3, nullptr);
    const FusedActivationSpec act = take_activation(conv_node_);
    activation_ = act.name;
    alpha_ = act.alpha;
    beta_ = act.beta;
  }

  std::vector<TensorType> prepare(const PrepareContext& ctx) override {
    ANVIL_PREPARE_CHECK(ctx, is_known_activation(activation_), ErrorKind::kInvalidModel, "unknown activation '{}'",
                        activation_);
    conv_ = Registry::global().make_reference(conv_node_);
    std::vector<TensorType> types;
    std::vector<const Tensor*> constants;
    for (size_t i = 0; i < 3; ++i) {
      types.push_back(ctx.has_input(i) ? ctx.input_type(i) : TensorType{});
      constants.push_back(ctx.constant(i));
    }
    PrepareContext conv_ctx(conv_node_, types, constants, ctx.num_threads());
    std::vector<TensorType> out = conv_->prepare(conv_ctx);
    has_sum_ = ctx.has_input(3);
    ANVIL_PREPARE_CHECK(ctx, !has_sum_ || ctx.input_type(3) == out[0], ErrorKind::kInvalidModel,
                        "residual input {} must match the conv output {}", shape_str(ctx.input_shape(3)),
                        shape_str(out[0].shape));
    ANVIL_PREPARE_CHECK(ctx, out[0].dtype == DType::kFloat32 || (activation_.empty() && !has_sum_),
                        ErrorKind::kUnsupported, "fused conv is float32 only");
    return out;
  }

  size_t scratch_bytes() const override { return conv_->scratch_bytes(); }

  void run(const RunContext& ctx) const override {
    Tensor& y = ctx.out(0);
    int64_t n = y.numel();
    // The residual may share memory with y (in place): save it before the conv overwrites y.
    const float* sum = has_sum_ ? ctx.in(3).data<float>() : nullptr;
    std::vector<float> saved;
    if (sum && static_cast<const void*>(sum) == y.raw()) {
      saved.assign(sum, sum + n);
      sum = saved.data();
    }
    RunContext conv_ctx;
    conv_ctx.inputs = {ctx.inputs[0], ctx.inputs[1], ctx.inputs.size() > 2 ? ctx.inputs[2] : nullptr};
    conv_ctx.outputs = {&y};
    conv_ctx.scratch = ctx.scratch;
    conv_->run(conv_ctx);
    float* out = y.data<float>();
    if (sum)
      for (int64_t i = 0; i < n; ++i) out[i] += sum[i];
    apply_activation(out, n, activation_, alpha_, beta_);
  }

  int inplace_input() const override { return 3; }

 private:
  ir::Node conv_node_;
  std::unique_ptr<Kernel> conv_;
  std::string activation_;
  float alpha_ = 0, beta_ = 0;
  bool has_sum_ = false;
};

static Registrar fused_conv_ref("FusedConv", Backend::kRef,
                                [](const ir::Node& n) -> std::unique_ptr<Kernel> { return std::make_unique<RefFusedConv>(n); },
                                "anvil");

}  // namespace

}  // namespace anvil::kernels
