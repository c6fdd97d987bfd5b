// Reference anvil.FusedConv: the reference Conv, then the residual add, then
// the activation — the oracle for the oneDNN post-op path.
#include <algorithm>
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

// Reference anvil.FusedConvDepthwise: the reference FusedConv of the 1x1
// window with its activation into scratch, then that of the depthwise 3x3
// (pads 1, the node's stride) with its own.
class RefFusedConvDepthwise : public Kernel {
 public:
  explicit RefFusedConvDepthwise(const ir::Node& node) : pointwise_(node), depthwise_(node) {
    pointwise_.op_type = depthwise_.op_type = "FusedConv";
    pointwise_.inputs = {node.input(0), node.input(1), node.input(2)};
    depthwise_.inputs = {node.input(0), node.input(3), node.input(4)};  // input 0 stands for the 1x1's output
    pointwise_.attrs = {};
    depthwise_.attrs = {};
    const std::string depthwise_prefix = "depthwise_";
    for (const auto& [name, value] : node.attrs.all()) {
      if (name.rfind("activation", 0) == 0) pointwise_.attrs.set(name, value);
      if (name.rfind(depthwise_prefix + "activation", 0) == 0)
        depthwise_.attrs.set(name.substr(depthwise_prefix.size()), value);
    }
    const int64_t stride = node.attrs.get_int("stride", 1);
    depthwise_.attrs.set("strides", std::vector<int64_t>{stride, stride});
    depthwise_.attrs.set("pads", std::vector<int64_t>{1, 1, 1, 1});
  }

  std::vector<TensorType> prepare(const PrepareContext& ctx) override {
    for (const char* attr : {"activation", "depthwise_activation"}) {
      const std::string act = ctx.attrs().get_string(attr, "");
      ANVIL_PREPARE_CHECK(ctx, is_known_activation(act), ErrorKind::kInvalidModel, "unknown {} '{}'", attr, act);
    }
    const Shape& w = ctx.input_shape(1);
    depthwise_.attrs.set("group", w.empty() ? int64_t{1} : w[0]);
    auto typed = [&](size_t i) { return ctx.has_input(i) ? ctx.input_type(i) : TensorType{}; };
    pointwise_kernel_ = Registry::global().make_reference(pointwise_);
    PrepareContext pointwise_ctx(pointwise_, {typed(0), typed(1), typed(2)},
                                 {ctx.constant(0), ctx.constant(1), ctx.constant(2)}, ctx.num_threads());
    mid_ = pointwise_kernel_->prepare(pointwise_ctx)[0];
    depthwise_kernel_ = Registry::global().make_reference(depthwise_);
    PrepareContext depthwise_ctx(depthwise_, {mid_, typed(3), typed(4)}, {nullptr, ctx.constant(3), ctx.constant(4)},
                                 ctx.num_threads());
    std::vector<TensorType> out = depthwise_kernel_->prepare(depthwise_ctx);
    ANVIL_PREPARE_CHECK(ctx, out[0].shape == ctx.output_shape(0), ErrorKind::kInvalidModel,
                        "the depthwise convolution gives {}, the node's type {}", shape_str(out[0].shape),
                        shape_str(ctx.output_shape(0)));
    mid_bytes_ = (type_bytes(mid_) + 63) / 64 * 64;
    return out;
  }

  size_t scratch_bytes() const override {
    return mid_bytes_ + std::max(pointwise_kernel_->scratch_bytes(), depthwise_kernel_->scratch_bytes());
  }

  void run(const RunContext& ctx) const override {
    Tensor mid = Tensor::view(mid_.dtype, mid_.shape, ctx.scratch);
    RunContext step;
    step.scratch = static_cast<unsigned char*>(ctx.scratch) + mid_bytes_;
    step.inputs = {ctx.inputs[0], ctx.inputs[1], ctx.inputs.size() > 2 ? ctx.inputs[2] : nullptr};
    step.outputs = {&mid};
    pointwise_kernel_->run(step);
    step.inputs = {&mid, ctx.inputs[3], ctx.inputs.size() > 4 ? ctx.inputs[4] : nullptr};
    step.outputs = {&ctx.out(0)};
    depthwise_kernel_->run(step);
  }

 private:
  ir::Node pointwise_, depthwise_;
  std::unique_ptr<Kernel> pointwise_kernel_, depthwise_kernel_;
  TensorType mid_;
  size_t mid_bytes_ = 0;
};

static Registrar fused_conv_ref("FusedConv", Backend::kRef,
                                [](const ir::Node& n) -> std::unique_ptr<Kernel> { return std::make_unique<RefFusedConv>(n); },
                                "anvil");
static Registrar fused_conv_depthwise_ref(
    "FusedConvDepthwise", Backend::kRef,
    [](const ir::Node& n) -> std::unique_ptr<Kernel> { return std::make_unique<RefFusedConvDepthwise>(n); }, "anvil");

}  // namespace

}  // namespace anvil::kernels
