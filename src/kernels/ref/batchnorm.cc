// Reference BatchNormalization, inference mode (float32 and float64):
//   y = (x - mean) / sqrt(var + epsilon) * scale + B
// over X of any rank >= 2 with channels on axis 1. Per channel this is
// y = x * a + b, with a and b computed once per (batch, channel) plane.
//
// Training mode (opset 14/15 training_mode = 1) normalizes with the batch's
// own mean and (population) variance per channel and updates the running
// statistics: running = input * momentum + batch * (1 - momentum). The extra
// training outputs of opsets 7-13 are not supported. Opset 7-8's
// spatial = 0 normalizes every activation separately: scale, B, mean and var
// then have X's shape without the batch axis, which is the same computation
// with C * D1 * ... * Dn "channels" of one element each.
#include <cmath>

#include "kernels/activation.h"
#include "kernels/ref/common.h"
#include "kernels/registry.h"

namespace anvil::kernels {
namespace {

constexpr int64_t kParallelThreshold = 32768;
constexpr const char* kParamNames[] = {"X", "scale", "B", "mean", "var"};

// Element i of a float32 or float64 parameter (opset 15 lets them differ from X).
double load(const Tensor& t, int64_t i) {
  return t.dtype() == DType::kFloat64 ? t.data<double>()[i] : static_cast<double>(t.data<float>()[i]);
}

class BatchNormKernel : public Kernel {
 public:
  explicit BatchNormKernel(const ir::Node&) {}

  std::vector<TensorType> prepare(const PrepareContext& ctx) override {
    check_modes(ctx);
    ANVIL_PREPARE_CHECK(ctx, ctx.num_inputs() == 5, ErrorKind::kInvalidModel,
                        "expected 5 inputs (X, scale, B, mean, var), got {}", ctx.num_inputs());
    for (size_t i = 0; i < 5; ++i) {
      ANVIL_PREPARE_CHECK(ctx, ctx.has_input(i), ErrorKind::kInvalidModel, "input {} is required", kParamNames[i]);
      DType dt = ctx.input_dtype(i);
      ANVIL_PREPARE_CHECK(ctx, dt == DType::kFloat32 || dt == DType::kFloat64, ErrorKind::kUnsupported,
                          "input {} has dtype {}; the reference kernel supports float32 and float64", kParamNames[i],
                          dtype_name(dt));
    }
    const Shape& x = ctx.input_shape(0);
    ANVIL_PREPARE_CHECK(ctx, x.size() >= 2, ErrorKind::kInvalidArgument, "input X has shape {}; expected [N, C, ...]",
                        shape_str(x));
    const bool spatial = ctx.opset() >= 9 || ctx.attrs().get_int("spatial", 1) != 0;
    Shape param = spatial ? Shape{x[1]} : Shape(x.begin() + 1, x.end());
    for (size_t i = 1; i < 5; ++i)
      ANVIL_PREPARE_CHECK(ctx, ctx.input_shape(i) == param, ErrorKind::kInvalidArgument,
                          "input {} has shape {}; expected {} for X {}", kParamNames[i], shape_str(ctx.input_shape(i)),
                          shape_str(param), shape_str(x));
    batch_ = x[0];
    channels_ = shape_numel(param);
    inner_ = x[0] * channels_ == 0 ? 0 : shape_numel(x) / (x[0] * channels_);
    epsilon_ = ctx.attrs().get_float("epsilon", 1e-5f);
    momentum_ = ctx.attrs().get_float("momentum", 0.9f);
    training_ = ctx.opset() >= 14 && ctx.attrs().get_int("training_mode", 0) != 0;
    if (training_) return ctx.output_types();  // Y, running_mean, running_var
    return {ctx.output_type(0)};
  }

  void run(const RunContext& ctx) const override {
    dispatch_float(ctx.in(0).dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      compute<T>(ctx);
    });
  }

 private:
  static void check_modes(const PrepareContext& ctx) {
    size_t extra_outputs = 0;
    const auto& outputs = ctx.node().outputs;
    for (size_t i = 1; i < outputs.size(); ++i) extra_outputs += outputs[i] != nullptr;
    // Opsets 1-6 say inference with is_test=1.
    ANVIL_PREPARE_CHECK(ctx, ctx.opset() >= 7 || ctx.attrs().get_int("is_test", 0) != 0, ErrorKind::kUnsupported,
                        "is_test=0 (training mode) is not supported; only inference mode is");
    if (ctx.opset() >= 14) {
      ANVIL_PREPARE_CHECK(ctx, extra_outputs == 0 || ctx.attrs().get_int("training_mode", 0) != 0,
                          ErrorKind::kInvalidModel,
                          "running_mean and running_var are outputs of training mode only, but training_mode=0");
    } else {
      ANVIL_PREPARE_CHECK(ctx, extra_outputs == 0, ErrorKind::kUnsupported,
                          "the outputs mean, var, saved_mean and saved_var are produced in training mode, "
                          "which is not supported; only inference mode (output Y alone) is");
    }
  }

  // Batch statistics per channel, the normalization with them, and the running statistics.
  template <typename T>
  void compute_training(const RunContext& ctx) const {
    const T* x = ctx.in(0).data<T>();
    T* y = ctx.out(0).data<T>();
    const Tensor &scale = ctx.in(1), &bias = ctx.in(2), &mean = ctx.in(3), &var = ctx.in(4);
    Tensor* running_mean = ctx.outputs.size() > 1 ? ctx.outputs[1] : nullptr;
    Tensor* running_var = ctx.outputs.size() > 2 ? ctx.outputs[2] : nullptr;
    const int64_t inner = inner_, count = batch_ * inner_;
    for (int64_t c = 0; c < channels_; ++c) {
      double sum = 0, sq = 0;
      for (int64_t n = 0; n < batch_; ++n)
        for (int64_t i = 0; i < inner; ++i) sum += static_cast<double>(x[(n * channels_ + c) * inner + i]);
      const double m = count ? sum / static_cast<double>(count) : 0;
      for (int64_t n = 0; n < batch_; ++n)
        for (int64_t i = 0; i < inner; ++i) {
          const double d = static_cast<double>(x[(n * channels_ + c) * inner + i]) - m;
          sq += d * d;
        }
      const double v = count ? sq / static_cast<double>(count) : 0;
      const double a = load(scale, c) / std::sqrt(v + static_cast<double>(epsilon_)), b = load(bias, c) - m * a;
      for (int64_t n = 0; n < batch_; ++n)
        for (int64_t i = 0; i < inner; ++i) {
          const int64_t at = (n * channels_ + c) * inner + i;
          y[at] = static_cast<T>(static_cast<double>(x[at]) * a + b);
        }
      const double keep = static_cast<double>(momentum_);
      if (running_mean) store(*running_mean, c, load(mean, c) * keep + m * (1 - keep));
      if (running_var) store(*running_var, c, load(var, c) * keep + v * (1 - keep));
    }
  }

  static void store(Tensor& t, int64_t i, double v) {
    if (t.dtype() == DType::kFloat64) t.data<double>()[i] = v;
    else t.data<float>()[i] = static_cast<float>(v);
  }

  template <typename T>
  void compute(const RunContext& ctx) const {
    if (training_) return compute_training<T>(ctx);
    const T* x = ctx.in(0).data<T>();
    T* y = ctx.out(0).data<T>();
    const Tensor &scale = ctx.in(1), &bias = ctx.in(2), &mean = ctx.in(3), &var = ctx.in(4);
    const int64_t inner = inner_;
#pragma omp parallel for collapse(2) if (batch_ * channels_ * inner > kParallelThreshold)
    for (int64_t n = 0; n < batch_; ++n) {
      for (int64_t c = 0; c < channels_; ++c) {
        const double a = load(scale, c) / std::sqrt(load(var, c) + static_cast<double>(epsilon_));
        const T ta = static_cast<T>(a), tb = static_cast<T>(load(bias, c) - load(mean, c) * a);
        const T* xp = x + (n * channels_ + c) * inner;
        T* yp = y + (n * channels_ + c) * inner;
        for (int64_t i = 0; i < inner; ++i) yp[i] = xp[i] * ta + tb;
      }
    }
  }

  int64_t batch_ = 0, channels_ = 0, inner_ = 0;
  float epsilon_ = 1e-5f, momentum_ = 0.9f;
  bool training_ = false;
};

// Reference anvil.FusedBatchNorm: BatchNormalization in inference (as at
// opset 15, whatever the model's opset), then the activation.
class RefFusedBatchNorm : public Kernel {
 public:
  explicit RefFusedBatchNorm(const ir::Node& node) : bn_node_(node) {
    bn_node_.op_type = "BatchNormalization";
    bn_node_.domain = "";
    bn_node_.opset = 15;
    bn_node_.attrs.erase("training_mode");
    act_ = take_activation(bn_node_);
  }

  std::vector<TensorType> prepare(const PrepareContext& ctx) override {
    ANVIL_PREPARE_CHECK(ctx, is_known_activation(act_.name), ErrorKind::kInvalidModel, "unknown activation '{}'",
                        act_.name);
    std::vector<TensorType> types;
    std::vector<const Tensor*> constants;
    for (size_t i = 0; i < ctx.num_inputs(); ++i) {
      types.push_back(ctx.has_input(i) ? ctx.input_type(i) : TensorType{});
      constants.push_back(ctx.constant(i));
    }
    PrepareContext bn_ctx(bn_node_, types, constants, ctx.num_threads());
    bn_.prepare(bn_ctx);
    std::vector<TensorType> out = ctx.output_types();
    ANVIL_PREPARE_CHECK(ctx, out.size() == 1 && out[0].dtype == DType::kFloat32, ErrorKind::kInvalidModel,
                        "FusedBatchNorm has one float32 output");
    return out;
  }

  void run(const RunContext& ctx) const override {
    bn_.run(ctx);
    Tensor& y = ctx.out(0);
    apply_activation(y.data<float>(), y.numel(), act_.name, act_.alpha, act_.beta);
  }

 private:
  ir::Node bn_node_;
  BatchNormKernel bn_{bn_node_};  // its constructor reads nothing of the node (prepare() gets the edited one)
  FusedActivationSpec act_;
};

ANVIL_REGISTER_OP_VERSIONS("BatchNormalization", 1, 15);  // 1-6: is_test, spatial
ANVIL_REGISTER_KERNEL_CLASS("BatchNormalization", kRef, BatchNormKernel);
static Registrar fused_batchnorm_ref("FusedBatchNorm", Backend::kRef, factory_of<RefFusedBatchNorm>(), "anvil");

}  // namespace
}  // namespace anvil::kernels
