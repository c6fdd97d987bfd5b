// Resize and Upsample of an image's height and width (float32, 4-D) in the
// layout the image arrives in: NHWC or channel blocks, where a convolution
// wrote it (the output keeps that format where the plan lets it, else is
// plain), or plain NCHW. Every output pixel is the weighted sum of its taps'
// input pixels (resize_spec's samples: one for nearest, 2 x 2 for linear,
// 4 x 4 for cubic, more for antialiased downsampling), a pixel's channels
// being a run of contiguous floats there; a plain output is written a
// channel's row at a time (run_planes). YOLO's and feature pyramids'
// nearest x2 upsamplers sit between convolutions: on the reference kernel
// each took a reorder to plain, a pass in double per axis and a reorder back.
// Resizes of the batch or channel axes, and other types and ranks, are the
// reference kernel's (ref/resize.cc).
#include <algorithm>
#include <cstring>
#include <optional>
#include <vector>

#include "kernels/dnnl/common.h"
#include "kernels/registry.h"
#include "kernels/resize_spec.h"

namespace anvil::kernels {

namespace {

namespace du = dnnl_util;

constexpr int64_t kParallelFloats = 1 << 15;  // smaller outputs run on one thread

// One axis's samples, flattened: output index i reads taps [first[i],
// first[i + 1]) of index/weight; outside[i]: extrapolation_value.
struct AxisTaps {
  std::vector<int64_t> first, index;
  std::vector<float> weight;
  std::vector<uint8_t> outside;

  // Taps of `axis` (samples from resize_spec), or the identity over `size`.
  static AxisTaps of(const ResizeAxis* axis, int64_t size) {
    AxisTaps t;
    t.first.push_back(0);
    for (int64_t i = 0; i < (axis ? axis->out : size); ++i) {
      if (!axis) {
        t.index.push_back(i);
        t.weight.push_back(1.f);
        t.outside.push_back(0);
      } else {
        const ResizeSample& s = axis->samples[static_cast<size_t>(i)];
        for (const ResizeTap& tap : s.taps) {
          t.index.push_back(tap.index);
          t.weight.push_back(static_cast<float>(tap.weight));
        }
        t.outside.push_back(s.outside ? 1 : 0);
      }
      t.first.push_back(static_cast<int64_t>(t.index.size()));
    }
    return t;
  }
  // The taps every output index has when all have as many and none is
  // outside (their runs then lie at i * uniform()); 0 otherwise.
  int64_t uniform() const {
    if (first.size() < 2) return 0;
    const int64_t k = first[1] - first[0];
    for (size_t i = 0; i + 1 < first.size(); ++i)
      if (outside[i] || first[i + 1] - first[i] != k) return 0;
    return k;
  }
  // Whether every output index copies one input index.
  bool copies() const {
    return uniform() == 1 && std::all_of(weight.begin(), weight.end(), [](float w) { return w == 1.f; });
  }
};

class PixelResize : public Kernel {
 public:
  PixelResize(const ir::Node& node, bool upsample) : upsample_(upsample), options_(resize_options(node, upsample)) {}

  Layout input_layout(size_t i) const override { return i == 0 ? in_layout_ : nullptr; }
  std::string layout_name() const override { return kernels::layout_name(in_layout_); }
  std::string impl_name() const override { return copies_ ? "pixels:resize_copy" : "pixels:resize"; }

  std::vector<TensorType> prepare(const PrepareContext& ctx) override {
    const Shape& x = ctx.input_shape(0);
    ANVIL_PREPARE_CHECK(ctx, ctx.input_dtype(0) == DType::kFloat32 && x.size() == 4, ErrorKind::kUnsupported,
                        "not a float32 image");
    const ResizeSpec spec = resize_spec(ctx, options_, upsample_);
    const ResizeAxis *along_h = nullptr, *along_w = nullptr;
    for (const ResizeAxis& a : spec.axes) {
      ANVIL_PREPARE_CHECK(ctx, a.axis >= 2, ErrorKind::kUnsupported, "resizes the batch or the channels");
      (a.axis == 2 ? along_h : along_w) = &a;
    }
    TensorType out(DType::kFloat32, spec.out);
    in_layout_ = nullptr;
    std::optional<du::PixelLayout> xp, yp;
    if (const du::Format format = ctx.blocked_inputs_allowed() ? du::format_of(ctx.incoming_layout(0), x) : nullptr) {
      xp = du::pixel_layout(format(x));  // none where the channel blocks are padded: plain then
      if (xp) {
        in_layout_ = ctx.incoming_layout(0);
        if (ctx.blocked_outputs_allowed()) {
          const dnnl::memory::desc y_md = format(out.shape);
          yp = du::pixel_layout(y_md);
          if (yp) out.layout = du::layout_of(y_md, out.shape, DType::kFloat32);  // null where it is plain's order
        }
      }
    }
    in_ = du::PixelAddressing::of(xp, x);
    out_ = du::PixelAddressing::of(yp, out.shape);
    batch_ = x[0];
    channels_ = x[1];
    out_height_ = out.shape[2];
    height_taps_ = AxisTaps::of(along_h, x[2]);
    width_taps_ = AxisTaps::of(along_w, x[3]);
    width_uniform_ = width_taps_.uniform();
    copies_ = height_taps_.copies() && width_taps_.copies();
    return {out};
  }

  void run(const RunContext& ctx) const override {
    const float* x = ctx.in(0).data<float>();
    float* y = ctx.out(0).data<float>();
    if (out_.block == 1) return run_planes(x, y);
    const int64_t out_width = out_.width, rows = batch_ * in_.blocks * out_height_;
    if (rows * out_width == 0) return;
    const int64_t block = in_.block;
#pragma omp parallel for schedule(static) if (rows * out_width * block >= kParallelFloats)
    for (int64_t row = 0; row < rows; ++row) {  // (n, channel block, output row)
      const int64_t oh = row % out_height_, nb = row / out_height_, n = nb / in_.blocks, c = nb % in_.blocks * block;
      float* out_row = y + out_.at(n, c, oh, 0);
      const float* in_block = x + in_.at(n, c, 0, 0);
      if (copies_)
        copy_row(in_block + height_taps_.index[static_cast<size_t>(oh)] * in_.width * in_.pixel, out_row);
      else
        blend_row(in_block, oh, out_row);
    }
  }

 private:
  // Output row `out` (a block's channels) as copies of input row `in`'s pixels.
  void copy_row(const float* in, float* out) const {
    const size_t bytes = static_cast<size_t>(in_.block) * sizeof(float);
    for (int64_t ow = 0; ow < out_.width; ++ow)
      std::memcpy(out + ow * out_.pixel, in + width_taps_.index[static_cast<size_t>(ow)] * in_.pixel, bytes);
  }

  // Output row oh of a channel block: each pixel the weighted sum of its
  // height x width taps, the block's channels adjacent in the output as in
  // the input.
  void blend_row(const float* in_block, int64_t oh, float* out) const {
    const int64_t block = in_.block;
    const AxisTaps &th = height_taps_, &tw = width_taps_;
    const auto h = static_cast<size_t>(oh);
    for (int64_t ow = 0; ow < out_.width; ++ow) {
      float* dst = out + ow * out_.pixel;
      const auto w = static_cast<size_t>(ow);
      if (th.outside[h] || tw.outside[w]) {
        std::fill(dst, dst + block, options_.extrapolation);
        continue;
      }
      bool first = true;
      for (int64_t i = th.first[h]; i < th.first[h + 1]; ++i) {
        const float* in_row = in_block + th.index[static_cast<size_t>(i)] * in_.width * in_.pixel;
        for (int64_t j = tw.first[w]; j < tw.first[w + 1]; ++j) {
          const float weight = th.weight[static_cast<size_t>(i)] * tw.weight[static_cast<size_t>(j)];
          const float* src = in_row + tw.index[static_cast<size_t>(j)] * in_.pixel;
          if (first)
            for (int64_t k = 0; k < block; ++k) dst[k] = weight * src[k];
          else
            for (int64_t k = 0; k < block; ++k) dst[k] += weight * src[k];
          first = false;
        }
      }
      if (first) std::fill(dst, dst + block, 0.f);  // no taps (every one excluded): zero, as the reference sums
    }
  }

  // A plain output, from any of the input's layouts: per (n, c, output row),
  // the input rows its height taps name blended into one row (reading a
  // channel's values `pixel` floats apart), then each output value from
  // that row's width taps, as the reference's passes go (height, then
  // width). Scattering a pixel's channels into planes a value at a time ran
  // 13 ns a value (LR-ASPP's last upsampling, 21 channels from NHWC).
  void run_planes(const float* x, float* y) const {
    const int64_t rows = batch_ * channels_ * out_height_, out_width = out_.width, in_width = in_.width;
    if (rows * out_width == 0) return;
    const AxisTaps& th = height_taps_;
#pragma omp parallel if (rows * out_width >= kParallelFloats)
    {
      std::vector<float> blended(static_cast<size_t>(in_width));
#pragma omp for schedule(static)
      for (int64_t row = 0; row < rows; ++row) {  // (n, c, output row)
        const int64_t oh = row % out_height_, nc = row / out_height_, n = nc / channels_, c = nc % channels_;
        const auto h = static_cast<size_t>(oh);
        float* out_row = y + out_.at(n, c, oh, 0);
        if (th.outside[h]) {
          std::fill(out_row, out_row + out_width, options_.extrapolation);
          continue;
        }
        std::fill(blended.begin(), blended.end(), 0.f);
        for (int64_t i = th.first[h]; i < th.first[h + 1]; ++i) {
          const float* in_row = x + in_.at(n, c, th.index[static_cast<size_t>(i)], 0);
          const float weight = th.weight[static_cast<size_t>(i)];
          for (int64_t iw = 0; iw < in_width; ++iw) blended[static_cast<size_t>(iw)] += weight * in_row[iw * in_.pixel];
        }
        blend_width(blended.data(), out_row);
      }
    }
  }

  // out[ow] = the width taps of `in` (a row blended along the height);
  // linear's two taps and nearest's one as straight loops.
  void blend_width(const float* in, float* out) const {
    const AxisTaps& tw = width_taps_;
    const int64_t* index = tw.index.data();
    const float* weight = tw.weight.data();
    const int64_t width = out_.width;
    if (width_uniform_ == 1) {
      for (int64_t ow = 0; ow < width; ++ow) out[ow] = weight[ow] * in[index[ow]];
      return;
    }
    if (width_uniform_ == 2) {
      for (int64_t ow = 0; ow < width; ++ow)
        out[ow] = weight[2 * ow] * in[index[2 * ow]] + weight[2 * ow + 1] * in[index[2 * ow + 1]];
      return;
    }
    for (int64_t ow = 0; ow < width; ++ow) {
      const auto w = static_cast<size_t>(ow);
      float v = tw.outside[w] ? options_.extrapolation : 0.f;
      for (int64_t j = tw.first[w]; j < tw.first[w + 1]; ++j) v += weight[j] * in[index[j]];
      out[ow] = v;
    }
  }

  bool upsample_;
  ResizeOptions options_;
  Layout in_layout_;
  du::PixelAddressing in_, out_;
  int64_t batch_ = 0, channels_ = 0, out_height_ = 0, width_uniform_ = 0;
  AxisTaps height_taps_, width_taps_;
  bool copies_ = false;
};

KernelFactory pixel_resize_factory(bool upsample) {
  return [upsample](const ir::Node& n) -> std::unique_ptr<Kernel> { return std::make_unique<PixelResize>(n, upsample); };
}

}  // namespace

// X float32; roi any float type, scales float32, sizes int64 (resize_spec checks them).
static Registrar pixel_resize("Resize", Backend::kDnnl, pixel_resize_factory(false), "",
                              {{kFloat32Only, kFloats | kHalfs, kFloat32Only, dtype_bit(DType::kInt64)}});
static Registrar pixel_upsample("Upsample", Backend::kDnnl, pixel_resize_factory(true), "", {{kFloat32Only}});

}  // namespace anvil::kernels
