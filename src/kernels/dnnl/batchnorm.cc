// BatchNormalization in inference (global statistics), and anvil.FusedBatchNorm
// (the same, then a ReLU: passes/fuse_batchnorm_activation.cc), float32, on
// Anvil's vectorized loop (vec batch_norm_rows). Usually a BatchNormalization
// is folded into the preceding Conv (fuse_conv_batchnorm); those left follow a
// Concat or an Add (DenseNet's and pre-activation ResNets' BN-ReLU-Conv).
//
// In a plan it keeps the layout its input arrives in where that layout holds
// each pixel's channels together (nChw8c / nChw16c without padding, NHWC), so
// a chain of convolutions and concatenations is not reordered to plain data
// and back around it. oneDNN's batch normalization took 3x a ReLU's time on
// the same tensor (DenseNet-121's [1, 64, 56, 56]: 0.128 against 0.042 ms).
#include <algorithm>
#include <cmath>

#include "kernels/dnnl/common.h"
#include "kernels/registry.h"
#include "kernels/vec/vec_kernels.h"

namespace anvil::kernels {

namespace {

namespace du = dnnl_util;

constexpr int64_t kChunkFloats = 8192;        // a work item: 32 KiB of the tensor
constexpr int64_t kParallelFloats = 1 << 15;  // smaller tensors run on one thread

class ChannelBatchNorm : public Kernel {
 public:
  explicit ChannelBatchNorm(const ir::Node& node) {
    if (node.domain == "anvil") activation_ = node.attrs.get_string("activation", "");
  }

  std::vector<TensorType> prepare(const PrepareContext& ctx) override {
    check_inference(ctx);
    ANVIL_PREPARE_CHECK(ctx, activation_.empty() || activation_ == "Relu", ErrorKind::kUnsupported,
                        "activation {}: the reference kernel", activation_);
    const Shape& x = ctx.input_shape(0);
    ANVIL_PREPARE_CHECK(ctx, ctx.num_inputs() == 5 && x.size() >= 2, ErrorKind::kUnsupported,
                        "X {} with {} inputs: the reference kernel", shape_str(x), ctx.num_inputs());
    for (size_t i = 1; i < 5; ++i)
      ANVIL_PREPARE_CHECK(ctx, ctx.has_input(i) && ctx.input_dtype(i) == DType::kFloat32 && ctx.input_shape(i) == Shape{x[1]},
                          ErrorKind::kUnsupported, "input {} is not float32 [{}]: the reference kernel", i, x[1]);
    epsilon_ = ctx.attrs().get_float("epsilon", 1e-5f);
    channels_ = x[1];
    numel_ = shape_numel(x);
    planes_ = numel_ ? x[0] * x[1] : 0;  // no larger than numel_ then (an empty axis could make x[0] * x[1] overflow)
    if (all_constant(ctx)) {
      params_.resize(3 * static_cast<size_t>(channels_));
      fold_parameters(ctx.constant(1), ctx.constant(2), ctx.constant(3), ctx.constant(4), params_.data());
    }
    choose_layout(ctx, x);
    TensorType out = ctx.output_type(0);
    out.layout = layout_;
    return {out};
  }

  size_t scratch_bytes() const override { return params_.empty() ? 3 * static_cast<size_t>(channels_) * 4 : 0; }
  int inplace_input() const override { return 0; }
  Layout input_layout(size_t i) const override { return i == 0 ? layout_ : nullptr; }
  std::string layout_name() const override { return kernels::layout_name(layout_); }
  std::string impl_name() const override { return std::string(vec::vec_impl_name()) + ":batchnorm"; }

  void run(const RunContext& ctx) const override {
    if (numel_ == 0) return;
    const float* params = params_.data();
    if (params_.empty()) {  // statistics known only now (rare): folded into scratch
      auto* scratch = static_cast<float*>(ctx.scratch);
      fold_parameters(ctx.inputs[1], ctx.inputs[2], ctx.inputs[3], ctx.inputs[4], scratch);
      params = scratch;
    }
    if (pixels_) run_pixels(ctx.in(0).data<float>(), ctx.out(0).data<float>(), params);
    else run_planes(ctx.in(0).data<float>(), ctx.out(0).data<float>(), params);
  }

 private:
  // Training mode and its outputs are the reference kernel's.
  static void check_inference(const PrepareContext& ctx) {
    const ir::Node& node = ctx.node();
    for (size_t i = 1; i < node.outputs.size(); ++i)
      ANVIL_PREPARE_CHECK(ctx, !node.outputs[i], ErrorKind::kUnsupported, "training outputs: the reference kernel");
    if (node.domain == "anvil") return;  // FusedBatchNorm is inference, at any opset
    ANVIL_PREPARE_CHECK(ctx, ctx.attrs().get_int("training_mode", 0) == 0, ErrorKind::kUnsupported, "training mode");
    ANVIL_PREPARE_CHECK(ctx, ctx.opset() >= 7 || ctx.attrs().get_int("is_test", 0) != 0, ErrorKind::kUnsupported,
                        "is_test=0 (training)");
    ANVIL_PREPARE_CHECK(ctx, ctx.opset() >= 9 || ctx.attrs().get_int("spatial", 1) == 1, ErrorKind::kUnsupported,
                        "spatial=0");
  }

  static bool all_constant(const PrepareContext& ctx) {
    for (size_t i = 1; i < 5; ++i)
      if (!ctx.constant(i)) return false;
    return true;
  }

  // Per channel c: mean, scale / sqrt(var + epsilon) and the shift B, in
  // three arrays of C floats, computed in double.
  void fold_parameters(const Tensor* scale, const Tensor* shift, const Tensor* mean, const Tensor* var,
                       float* p) const {
    for (int64_t c = 0; c < channels_; ++c) {
      const double inv = 1.0 / std::sqrt(static_cast<double>(var->data<float>()[c]) + epsilon_);
      p[c] = mean->data<float>()[c];
      p[channels_ + c] = static_cast<float>(scale->data<float>()[c] * inv);
      p[2 * channels_ + c] = shift->data<float>()[c];
    }
  }

  void choose_layout(const PrepareContext& ctx, const Shape& x) {
    if (x.size() != 4) return;
    const Layout in = du::elementwise_layout(ctx, 0, x);
    if (!in) return;
    const std::optional<du::PixelLayout> px = du::pixel_layout(du::desc_of({DType::kFloat32, x, in}));
    if (!px) return;
    layout_ = in;
    pixels_ = px;
  }

  // Plain [N, C, D...]: one plane of D... values per (image, channel), in
  // chunks so that a few large planes still split between threads. [N, C]
  // (a BatchNorm1d after a Linear) is N rows of C channels instead.
  void run_planes(const float* x, float* y, const float* params) const {
    const int64_t plane = numel_ / planes_;
    if (plane == 1) return run_rows(x, y, params);
    const auto bn = vec::vec_kernels().batch_norm_rows;
    const int64_t chunks = (plane + kChunkFloats - 1) / kChunkFloats;
    const bool relu = activation_ == "Relu";
#pragma omp parallel for schedule(static) if (numel_ >= kParallelFloats)
    for (int64_t item = 0; item < planes_ * chunks; ++item) {
      const int64_t p = item / chunks, first = item % chunks * kChunkFloats, c = p % channels_;
      const int64_t at = p * plane + first;
      bn(x + at, y + at, 1, std::min(kChunkFloats, plane - first), params + c, params + channels_ + c,
         params + 2 * channels_ + c, false, relu);
    }
  }

  // Rows of C values, one per image, in runs of rows.
  void run_rows(const float* x, float* y, const float* params) const {
    const auto bn = vec::vec_kernels().batch_norm_rows;
    const int64_t batch = planes_ / channels_, run = std::max<int64_t>(1, kChunkFloats / channels_);
    const int64_t runs = (batch + run - 1) / run;
    const bool relu = activation_ == "Relu";
#pragma omp parallel for schedule(static) if (numel_ >= kParallelFloats)
    for (int64_t item = 0; item < runs; ++item) {
      const int64_t first = item * run, at = first * channels_;
      bn(x + at, y + at, std::min(run, batch - first), channels_, params, params + channels_, params + 2 * channels_,
         true, relu);
    }
  }

  // Pixels of `channels` values (a channel block, or NHWC's all), in runs of
  // whole pixels.
  void run_pixels(const float* x, float* y, const float* params) const {
    const auto bn = vec::vec_kernels().batch_norm_rows;
    const du::PixelLayout& px = *pixels_;
    const int64_t pixels = px.plane / px.pixel, run = std::max<int64_t>(1, kChunkFloats / px.channels);
    const int64_t runs = (pixels + run - 1) / run, blocks = channels_ / px.channels;
    const bool relu = activation_ == "Relu";
#pragma omp parallel for schedule(static) if (numel_ >= kParallelFloats)
    for (int64_t item = 0; item < px.planes * runs; ++item) {
      const int64_t plane = item / runs, first = item % runs * run, c = plane % blocks * px.channels;
      const int64_t at = plane * px.plane + first * px.pixel;
      bn(x + at, y + at, std::min(run, pixels - first), px.channels, params + c, params + channels_ + c,
         params + 2 * channels_ + c, true, relu);
    }
  }

  std::string activation_;  // "" or "Relu"
  float epsilon_ = 1e-5f;
  int64_t channels_ = 0, numel_ = 0, planes_ = 0;  // planes: N x C
  std::vector<float> params_;  // mean, scale / sqrt(var + epsilon), shift: C each; empty: folded per run
  Layout layout_;              // the producer's, kept; null: plain
  std::optional<du::PixelLayout> pixels_;
};

}  // namespace

ANVIL_REGISTER_KERNEL_CLASS_TYPED("BatchNormalization", kDnnl, ChannelBatchNorm, {kFloat32Only});
static Registrar fused_batchnorm("FusedBatchNorm", Backend::kDnnl, factory_of<ChannelBatchNorm>(), "anvil",
                                 {{kFloat32Only}});

}  // namespace anvil::kernels
