// InstanceNormalization and GroupNormalization (float32) in the pixel layout
// their input arrives in (NWC, NHWC, NDHWC or their channel blocks:
// du::spatial_pixel_layout), kept for the output. wav2vec2's feature
// extractor normalizes its first Conv1d's output, which brgconv writes NWC
// on AVX-512, and PoolFormer a GroupNorm(1, C) of every block's input
// (passes/fuse_group_norm.cc); on plain data each took a reorder to plain
// and one back, more time than the normalization. Each image's channels are
// summed a chunk at a time over its pixels (vec sum_columns: float runs
// added in double), the means (of a channel, or of a group's channels)
// rounded to float, and a second pass sums the squared deviations from
// them, as the plain kernel's moments_row does per plane; then the pixels
// are normalized a run of rows at a time (vec batch_norm_rows, one mean,
// factor and shift per channel). Plain inputs are vec/normalization.cc's
// (InstanceNormalization) and the reference kernel's (GroupNormalization).
#include <algorithm>
#include <cmath>
#include <optional>

#include "kernels/dnnl/common.h"
#include "kernels/ref/common.h"
#include "kernels/registry.h"
#include "kernels/vec/vec_kernels.h"

namespace anvil::kernels {

namespace {

namespace du = dnnl_util;

constexpr int64_t kGroup = 64;                // a work item's channels in the statistics' pass
constexpr int64_t kParallelFloats = 1 << 15;  // smaller tensors run on one thread
constexpr int64_t kRunFloats = 1 << 14;       // a work item's floats in the normalizing pass

class PixelNorm : public Kernel {
 public:
  explicit PixelNorm(const ir::Node& node)
      : eps_(node.attrs.get_float("epsilon", 1e-5f)),
        num_groups_(node.op_type == "GroupNormalization" ? node.attrs.get_int("num_groups", 1) : 0) {}

  std::vector<TensorType> prepare(const PrepareContext& ctx) override {
    const Shape& x = ctx.input_shape(0);  // the schema checked [N, C, ...], the groups and scale, B
    ANVIL_PREPARE_CHECK(ctx, x.size() >= 3 && x.size() <= 5 && shape_numel(x) > 0, ErrorKind::kUnsupported,
                        "not an image of 1-3 spatial dims with pixels");
    layout_ = du::elementwise_layout(ctx, 0, x);
    ANVIL_PREPARE_CHECK(ctx, layout_ != nullptr, ErrorKind::kUnsupported, "the input arrives plain");
    pixels_ = du::spatial_pixel_layout(du::desc_of({DType::kFloat32, x, layout_}));
    ANVIL_PREPARE_CHECK(ctx, pixels_.has_value(), ErrorKind::kUnsupported, "the input's layout is not a pixel layout");
    batch_ = x[0];
    channels_ = x[1];
    plane_ = pixels_->plane / pixels_->channels;  // a pixel's channels are contiguous: pixel == channels
    // InstanceNormalization: a group per channel. GroupNormalization's
    // scale and bias are per channel from opset 21, per group before.
    groups_ = num_groups_ ? num_groups_ : channels_;  // the schema checked that they divide C
    params_per_group_ = num_groups_ && ctx.opset() < 21;
    TensorType out = ctx.output_type(0);
    out.layout = layout_;
    return {out};
  }

  Layout input_layout(size_t i) const override { return i == 0 ? layout_ : nullptr; }
  std::string layout_name() const override { return kernels::layout_name(layout_); }
  // The statistics' pass reads every pixel before the normalizing one writes.
  int inplace_input() const override { return 0; }
  // mean, factor and shift per (n, c); where groups span channels, each
  // channel's sums and squared deviations in double after them.
  size_t scratch_bytes() const override {
    return doubles_at() + (groups_ == channels_ ? 0 : 2 * static_cast<size_t>(batch_ * channels_) * sizeof(double));
  }
  std::string impl_name() const override { return num_groups_ ? "pixels:group_norm" : "pixels:instance_norm"; }

  void run(const RunContext& ctx) const override {
    auto* mean = static_cast<float*>(ctx.scratch);
    float* factor = mean + batch_ * channels_;
    float* shift = factor + batch_ * channels_;
    auto* sums = reinterpret_cast<double*>(static_cast<char*>(ctx.scratch) + doubles_at());
    double* squares = sums + batch_ * channels_;
    const float *x = ctx.in(0).data<float>(), *scale = ctx.in(1).data<float>(), *bias = ctx.in(2).data<float>();
    if (groups_ == channels_) statistics(x, scale, bias, mean, factor, shift);
    else group_statistics(x, scale, bias, sums, squares, mean, factor, shift);
    normalize(x, mean, factor, shift, ctx.out(0).data<float>());
  }

 private:
  bool parallel() const { return batch_ * channels_ * plane_ >= kParallelFloats; }
  // Bytes to the scratch's doubles: after the three floats per (n, c), 8-aligned.
  size_t doubles_at() const { return (3 * static_cast<size_t>(batch_ * channels_) * sizeof(float) + 7) / 8 * 8; }
  // Offset of plane p's first channel in the [N, C] statistics.
  int64_t first_channel(int64_t p) const {
    const int64_t blocks = channels_ / pixels_->channels;
    return p / blocks * channels_ + p % blocks * pixels_->channels;
  }

  // mean[i], factor[i], shift[i] for i = n * C + c: (x - mean) * factor +
  // shift normalizes image n's channel c.
  void statistics(const float* x, const float* scale, const float* bias, float* mean, float* factor,
                  float* shift) const {
    const du::PixelLayout& px = *pixels_;
    const vec::VecKernels& v = vec::vec_kernels();
    const int64_t group = std::min(px.channels, kGroup), groups = (px.channels + group - 1) / group;
    const int64_t items = px.planes * groups;
    const auto count = static_cast<double>(plane_);
#pragma omp parallel for schedule(static) if (parallel())
    for (int64_t item = 0; item < items; ++item) {
      const int64_t p = item / groups, first = item % groups * group, width = std::min(group, px.channels - first);
      const float* xp = x + p * px.plane + first;
      double sums[kGroup] = {}, squares[kGroup] = {};
      float rounded[kGroup];
      v.sum_columns(vec::Reduction::kSum, xp, plane_, px.pixel, width, nullptr, sums);
      for (int64_t j = 0; j < width; ++j) rounded[j] = static_cast<float>(sums[j] / count);
      v.sum_columns(vec::Reduction::kSquaredDeviation, xp, plane_, px.pixel, width, rounded, squares);
      const int64_t i0 = first_channel(p) + first;
      for (int64_t j = 0; j < width; ++j) {
        const int64_t i = i0 + j, c = i % channels_;
        // sum (x - m)^2 = sum (x - mean)^2 + n (mean - m)^2, m the rounded mean
        const double off = sums[j] / count - static_cast<double>(rounded[j]);
        double variance = squares[j] / count - off * off;
        variance = variance < 0 ? 0.0 : variance;  // rounding below zero; a NaN stays
        mean[i] = rounded[j];
        factor[i] = static_cast<float>(static_cast<double>(scale[c]) / std::sqrt(variance + static_cast<double>(eps_)));
        shift[i] = bias[c];
      }
    }
  }

  // The same where each group holds several channels: every channel's sum
  // first, then its squared deviations from its group's rounded mean, each
  // pooled per group.
  void group_statistics(const float* x, const float* scale, const float* bias, double* sums, double* squares,
                        float* mean, float* factor, float* shift) const {
    const int64_t per_group = channels_ / groups_;
    const auto count = static_cast<double>(plane_) * static_cast<double>(per_group);
    std::fill(sums, sums + batch_ * channels_, 0.0);  // sum_columns adds into them
    std::fill(squares, squares + batch_ * channels_, 0.0);
    for_channel_chunks(x, [&](const float* xp, int64_t width, int64_t i0) {
      vec::vec_kernels().sum_columns(vec::Reduction::kSum, xp, plane_, pixels_->pixel, width, nullptr, sums + i0);
    });
    for (int64_t ng = 0; ng < batch_ * groups_; ++ng) {
      double total = 0;
      for (int64_t i = ng * per_group; i < (ng + 1) * per_group; ++i) total += sums[i];
      std::fill(mean + ng * per_group, mean + (ng + 1) * per_group, static_cast<float>(total / count));
      sums[ng * per_group] = total / count;  // the exact mean, kept for the variance
    }
    for_channel_chunks(x, [&](const float* xp, int64_t width, int64_t i0) {
      vec::vec_kernels().sum_columns(vec::Reduction::kSquaredDeviation, xp, plane_, pixels_->pixel, width, mean + i0,
                                     squares + i0);
    });
    for (int64_t ng = 0; ng < batch_ * groups_; ++ng) {
      double total = 0;
      for (int64_t i = ng * per_group; i < (ng + 1) * per_group; ++i) total += squares[i];
      const int64_t first = ng * per_group;
      const double off = sums[first] - static_cast<double>(mean[first]);
      double variance = total / count - off * off;
      variance = variance < 0 ? 0.0 : variance;  // rounding below zero; a NaN stays
      const double inverse = 1.0 / std::sqrt(variance + static_cast<double>(eps_));
      for (int64_t i = first; i < first + per_group; ++i) {
        const int64_t c = i % channels_, p = params_per_group_ ? c / per_group : c;
        factor[i] = static_cast<float>(static_cast<double>(scale[p]) * inverse);
        shift[i] = bias[p];
      }
    }
  }

  // f(first float of the chunk in x, its channels, their first index in
  // [N, C]) for each chunk of at most kGroup channels of each plane, split
  // between threads when large. The chunks' indices do not overlap.
  template <typename F>
  void for_channel_chunks(const float* x, F f) const {
    const du::PixelLayout& px = *pixels_;
    const int64_t group = std::min(px.channels, kGroup), groups = (px.channels + group - 1) / group;
#pragma omp parallel for schedule(static) if (parallel())
    for (int64_t item = 0; item < px.planes * groups; ++item) {
      const int64_t p = item / groups, first = item % groups * group, width = std::min(group, px.channels - first);
      f(x + p * px.plane + first, width, first_channel(p) + first);
    }
  }

  // Each plane's pixels in runs of rows, a pixel's channels per row.
  void normalize(const float* x, const float* mean, const float* factor, const float* shift, float* y) const {
    const du::PixelLayout& px = *pixels_;
    const vec::VecKernels& v = vec::vec_kernels();
    const int64_t rows = std::max<int64_t>(1, kRunFloats / px.channels), runs = (plane_ + rows - 1) / rows;
    const int64_t items = px.planes * runs;
#pragma omp parallel for schedule(static) if (parallel())
    for (int64_t item = 0; item < items; ++item) {
      const int64_t p = item / runs, r0 = item % runs * rows, count = std::min(rows, plane_ - r0);
      const int64_t at = p * px.plane + r0 * px.pixel, i = first_channel(p);
      v.batch_norm_rows(x + at, y + at, count, px.channels, mean + i, factor + i, shift + i, true, false);
    }
  }

  float eps_;
  int64_t num_groups_;  // GroupNormalization's; 0 for InstanceNormalization
  int64_t groups_ = 0;  // channels for InstanceNormalization
  bool params_per_group_ = false;
  Layout layout_;  // the input's, kept
  std::optional<du::PixelLayout> pixels_;
  int64_t batch_ = 0, channels_ = 0, plane_ = 0;  // plane_: pixels per image
};

}  // namespace

ANVIL_REGISTER_KERNEL_CLASS_TYPED("InstanceNormalization", kDnnl, PixelNorm, {kFloat32Only});
ANVIL_REGISTER_KERNEL_CLASS_TYPED("GroupNormalization", kDnnl, PixelNorm, {kFloat32Only});

}  // namespace anvil::kernels
