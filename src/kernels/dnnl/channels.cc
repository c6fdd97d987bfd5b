// Slices and shuffles of channels in a plan's NHWC layout (float32), where a
// 4-D tensor arrives so: ShuffleNet's units split their input's channels in
// two (Slice), convolve one half in NHWC (brgconv on AVX-512), concatenate
// and shuffle (anvil.ChannelShuffle); and DepthToSpace, which ends
// super-resolution nets (PyTorch's PixelShuffle) after a convolution. On
// plain data each of these ops needs a reorder before it and after; here each
// pixel's channels are copied as they lie. Other layouts, ranks and slices
// are the reference kernels'.
#include <algorithm>
#include <cstring>
#include <optional>

#include "ir/dim_math.h"
#include "kernels/dnnl/common.h"
#include "kernels/ref/common.h"
#include "kernels/registry.h"
#include "kernels/thread_share.h"

namespace anvil::kernels {

namespace {

namespace du = dnnl_util;

constexpr int64_t kParallelFloats = 1 << 15;  // smaller tensors run on one thread

// NHWC's layout of `shape` (4-D, float32) where the input arrives in it and
// the plan lets the output keep it; null otherwise.
Layout nhwc_input(const PrepareContext& ctx, const Shape& shape) {
  if (shape.size() != 4 || !ctx.blocked_inputs_allowed() || !ctx.blocked_outputs_allowed()) return nullptr;
  const Layout nhwc = du::layout_of(du::nhwc_desc(shape), shape, DType::kFloat32);
  return nhwc && same_layout(ctx.incoming_layout(0), nhwc) ? nhwc : nullptr;
}

// Base of the two: the layouts in and out, and a loop over pixels.
class PixelChannelKernel : public Kernel {
 public:
  Layout input_layout(size_t i) const override { return i == 0 ? in_layout_ : nullptr; }
  std::string layout_name() const override { return kernels::layout_name(in_layout_); }

 protected:
  // Takes NHWC for input [N, C, H, W] and output [N, C', H, W], or throws kUnsupported.
  TensorType take_nhwc(const PrepareContext& ctx) {
    const Shape& x = ctx.input_shape(0);
    ANVIL_PREPARE_CHECK(ctx, ctx.input_dtype(0) == DType::kFloat32, ErrorKind::kUnsupported, "not float32");
    in_layout_ = nhwc_input(ctx, x);
    ANVIL_PREPARE_CHECK(ctx, in_layout_ != nullptr, ErrorKind::kUnsupported, "the input is not NHWC");
    TensorType out = ctx.output_type(0);
    out.layout = du::layout_of(du::nhwc_desc(out.shape), out.shape, DType::kFloat32);
    ANVIL_PREPARE_CHECK(ctx, out.layout != nullptr, ErrorKind::kUnsupported, "the output's NHWC is plain");
    pixels_ = shape_numel(x) ? x[0] * x[2] * x[3] : 0;  // an empty axis could make the product overflow
    in_channels_ = x[1];
    out_channels_ = out.shape[1];
    return out;
  }

  // f(x pixel, y pixel) for every pixel, split between threads when large.
  template <typename F>
  void for_pixels(const RunContext& ctx, F f) const {
    if (pixels_ == 0 || out_channels_ == 0) return;
    const float* x = ctx.in(0).data<float>();
    float* y = ctx.out(0).data<float>();
#pragma omp parallel for schedule(static) if (pixels_ * out_channels_ >= kParallelFloats)
    for (int64_t p = 0; p < pixels_; ++p) f(x + p * in_channels_, y + p * out_channels_);
  }

  Layout in_layout_;
  int64_t pixels_ = 0, in_channels_ = 0, out_channels_ = 0;
};

// Slice of one range of channels (axis 1, step 1), constant bounds.
class PixelChannelSlice : public PixelChannelKernel {
 public:
  explicit PixelChannelSlice(const ir::Node&) {}

  std::vector<TensorType> prepare(const PrepareContext& ctx) override {
    ANVIL_PREPARE_CHECK(ctx, ctx.opset() >= 10 && ctx.num_inputs() >= 3, ErrorKind::kUnsupported, "Slice-1");
    // starts and ends omitted (empty names): the reference kernel says so
    ANVIL_PREPARE_CHECK(ctx, ctx.has_input(1) && ctx.has_input(2), ErrorKind::kUnsupported, "no starts or ends");
    for (size_t i = 1; i < ctx.num_inputs(); ++i)
      ANVIL_PREPARE_CHECK(ctx, !ctx.has_input(i) || ctx.constant(i), ErrorKind::kUnsupported, "run-time bounds");
    const std::vector<int64_t> starts = tensor_to_ints(*ctx.constant(1)), ends = tensor_to_ints(*ctx.constant(2));
    const std::vector<int64_t> axes = ctx.has_input(3) ? tensor_to_ints(*ctx.constant(3)) : std::vector<int64_t>{0};
    const std::vector<int64_t> steps = ctx.has_input(4) ? tensor_to_ints(*ctx.constant(4)) : std::vector<int64_t>{1};
    ANVIL_PREPARE_CHECK(ctx, starts.size() == 1 && ends.size() == 1 && axes.size() == 1 && steps.size() == 1 && steps[0] == 1,
                        ErrorKind::kUnsupported, "not one range of one axis");
    ANVIL_PREPARE_CHECK(ctx, axes[0] == 1 || axes[0] == -3, ErrorKind::kUnsupported, "not the channels");
    TensorType out = take_nhwc(ctx);
    first_ = ir::slice_range(in_channels_, starts[0], ends[0], 1).first;
    ANVIL_INTERNAL_CHECK(first_ >= 0 && first_ + out_channels_ <= in_channels_);
    return {out};
  }

  std::string impl_name() const override { return "pixels:slice"; }

  void run(const RunContext& ctx) const override {
    const size_t bytes = static_cast<size_t>(out_channels_) * sizeof(float);
    const int64_t first = first_;
    for_pixels(ctx, [&](const float* x, float* y) { std::memcpy(y, x + first, bytes); });
  }

 private:
  int64_t first_ = 0;
};

// anvil.ChannelShuffle: y[j * group + i] = x[i * C / group + j] in each pixel.
class PixelChannelShuffle : public PixelChannelKernel {
 public:
  explicit PixelChannelShuffle(const ir::Node&) {}

  std::vector<TensorType> prepare(const PrepareContext& ctx) override {
    TensorType out = take_nhwc(ctx);
    group_ = ctx.attrs().get_int("group", 1);  // the schema checked that it divides C
    return {out};
  }

  std::string impl_name() const override { return "pixels:channel_shuffle"; }

  void run(const RunContext& ctx) const override {
    const int64_t group = group_, per_group = in_channels_ / group_;
    if (group == 2)  // ShuffleNet's: two halves interleaved, which the compiler vectorizes
      return for_pixels(ctx, [&](const float* x, float* y) {
        for (int64_t j = 0; j < per_group; ++j) {
          y[2 * j] = x[j];
          y[2 * j + 1] = x[per_group + j];
        }
      });
    for_pixels(ctx, [&](const float* x, float* y) {
      for (int64_t j = 0; j < per_group; ++j)
        for (int64_t i = 0; i < group; ++i) y[j * group + i] = x[i * per_group + j];
    });
  }

 private:
  int64_t group_ = 1;
};

// out[w * b + j] = in[w * stride + j] for w < width, j < b: a run of b floats
// from every pixel; b a constant for PixelShuffle's usual factors, so that
// the runs are straight copies.
template <int B>
void copy_runs_of(const float* in, int64_t stride, float* out, int64_t width) {
  for (int64_t w = 0; w < width; ++w)
    for (int j = 0; j < B; ++j) out[w * B + j] = in[w * stride + j];
}
void copy_runs(const float* in, int64_t stride, float* out, int64_t width, int64_t b) {
  switch (b) {
    case 2: return copy_runs_of<2>(in, stride, out, width);
    case 3: return copy_runs_of<3>(in, stride, out, width);
    case 4: return copy_runs_of<4>(in, stride, out, width);
    default:
      for (int64_t w = 0; w < width; ++w) std::memcpy(out + w * b, in + w * stride, static_cast<size_t>(b) * sizeof(float));
  }
}

// DepthToSpace with blocksize b from a pixel layout: output pixel (h b + i,
// w b + j) holds input pixel (h, w)'s channels (i b + j) C' + c (DCR) or c b
// b + i b + j (CRD, PyTorch's PixelShuffle), c < C'. The output keeps the
// input's format (NHWC, or channel blocks where C' fills them) where the
// plan lets it, else is plain. Each output value's place in its input
// pixel is worked out once (plan_sources): DCR's channels then copy as runs
// a pixel holds together, one channel's taps as runs of b, and CRD's
// channels (b b apart) one by one. Upsamplers (PixelShuffle between
// convolutions) and the super-resolution net use it; on plain data it took
// a reorder before and after the reference's strided copy (conv 64 -> 256,
// PixelShuffle(2), conv at 96 x 96: 0.53 + 0.91 + 0.48 ms of 11.5).
class PixelDepthToSpace : public Kernel {
 public:
  explicit PixelDepthToSpace(const ir::Node&) {}

  Layout input_layout(size_t i) const override { return i == 0 ? in_layout_ : nullptr; }
  std::string layout_name() const override { return kernels::layout_name(in_layout_); }
  std::string impl_name() const override { return "pixels:depth_to_space"; }

  std::vector<TensorType> prepare(const PrepareContext& ctx) override {
    const Shape& x = ctx.input_shape(0);  // the schema checked it is 4-D and divides by the blocksize
    ANVIL_PREPARE_CHECK(ctx, ctx.input_dtype(0) == DType::kFloat32 && ctx.blocked_inputs_allowed(),
                        ErrorKind::kUnsupported, "not float32, or plain data");
    const Layout in = ctx.incoming_layout(0);
    const du::Format format = du::format_of(in, x);  // NHWC or channel blocks; null for anything else
    ANVIL_PREPARE_CHECK(ctx, format != nullptr, ErrorKind::kUnsupported, "the input keeps no whole pixels");
    const std::optional<du::PixelLayout> xp = du::pixel_layout(format(x));
    ANVIL_PREPARE_CHECK(ctx, xp.has_value(), ErrorKind::kUnsupported, "the input's channel blocks are padded");
    in_layout_ = in;
    const std::string mode = ctx.attrs().get_string("mode", "DCR");
    ANVIL_PREPARE_CHECK(ctx, mode == "DCR" || mode == "CRD", ErrorKind::kInvalidModel, "mode '{}' is not DCR or CRD",
                        mode);
    dcr_ = mode == "DCR";
    block_ = ctx.attrs().get_int("blocksize", 0);
    batch_ = x[0];
    height_ = x[2];
    width_ = x[3];
    in_ = du::PixelAddressing::of(xp, x);
    TensorType out = ctx.output_type(0);
    out_channels_ = out.shape[1];
    std::optional<du::PixelLayout> yp;
    if (ctx.blocked_outputs_allowed()) {
      const dnnl::memory::desc y_md = format(out.shape);
      yp = du::pixel_layout(y_md);  // none where C' does not fill the blocks: plain then
      if (yp) out.layout = du::layout_of(y_md, out.shape, DType::kFloat32);  // null where it is plain's order
    }
    out_ = du::PixelAddressing::of(yp, out.shape);
    plan_sources(out.shape);
    return {out};
  }

  void run(const RunContext& ctx) const override {
    if (batch_ * height_ * width_ * out_channels_ == 0) return;
    const float* x = ctx.in(0).data<float>();
    float* y = ctx.out(0).data<float>();
    const int64_t b = block_, rows = batch_ * height_, ob_count = out_blocks();
    const int64_t ob_size = out_.block;
    const size_t block_bytes = static_cast<size_t>(ob_size) * sizeof(float);
#pragma omp parallel for schedule(static) if (rows * width_ * out_channels_ * b * b >= kParallelFloats)
    for (int64_t row = 0; row < rows; ++row) {  // input row (n, h): output rows h b .. h b + b - 1
      const int64_t n = row / height_, h = row % height_;
      const float* in_row = x + in_.at(n, 0, h, 0);
      for (int64_t ob = 0; ob < ob_count; ++ob)
        for (int64_t i = 0; i < b; ++i) {
          float* out_row = y + out_.at(n, ob * ob_size, h * b + i, 0);
          const int64_t* from = &sources_[static_cast<size_t>((ob * b + i) * b * ob_size)];  // [j][k]
          const uint8_t kind = kinds_[static_cast<size_t>(ob * b + i)];
          if (kind == kRunOfTaps) {  // one channel: the b taps of each input pixel lie together
            copy_runs(in_row + from[0], in_.pixel, out_row, width_, b);
            continue;
          }
          for (int64_t w = 0; w < width_; ++w) {
            const float* pixel = in_row + w * in_.pixel;
            for (int64_t j = 0; j < b; ++j) {
              float* dst = out_row + (w * b + j) * out_.pixel;
              const int64_t* f = from + j * ob_size;
              if (kind == kRunOfChannels) std::memcpy(dst, pixel + f[0], block_bytes);
              else
                for (int64_t k = 0; k < ob_size; ++k) dst[k] = pixel[f[k]];
            }
          }
        }
    }
  }

 private:
  int64_t out_blocks() const { return out_channels_ / out_.block; }

  // Where each output channel's value lies in its input pixel, as an offset
  // from the pixel's channel 0 (planes included): sources_[((ob b + i) b +
  // j) B + k] for output channel ob B + k at tap (i, j), B the output's
  // block; and how each (ob, i) row of taps copies (kinds_).
  void plan_sources(const Shape& y) {
    const int64_t b = block_, ob_size = out_.block, co = y[1];
    sources_.assign(static_cast<size_t>(out_blocks() * b * b * ob_size), 0);
    kinds_.assign(static_cast<size_t>(out_blocks() * b), kGather);
    for (int64_t ob = 0; ob < out_blocks(); ++ob)
      for (int64_t i = 0; i < b; ++i) {
        bool channel_runs = true, tap_runs = ob_size == 1 && out_.pixel == 1;
        for (int64_t j = 0; j < b; ++j)
          for (int64_t k = 0; k < ob_size; ++k) {
            const int64_t c = ob * ob_size + k, cin = dcr_ ? (i * b + j) * co + c : c * b * b + i * b + j;
            const int64_t at = cin / in_.block * in_.plane + cin % in_.block;
            int64_t& slot = sources_[static_cast<size_t>(((ob * b + i) * b + j) * ob_size + k)];
            slot = at;
            if (k > 0) channel_runs &= at == (&slot)[-1] + 1;
            if (j > 0 && k == 0) tap_runs &= at == sources_[static_cast<size_t>((ob * b + i) * b * ob_size)] + j;
          }
        kinds_[static_cast<size_t>(ob * b + i)] = tap_runs ? kRunOfTaps : channel_runs && ob_size > 1 ? kRunOfChannels : kGather;
      }
  }

  static constexpr uint8_t kGather = 0, kRunOfChannels = 1, kRunOfTaps = 2;
  Layout in_layout_;
  bool dcr_ = true;
  int64_t block_ = 1, batch_ = 0, out_channels_ = 0, height_ = 0, width_ = 0;
  du::PixelAddressing in_, out_;
  std::vector<int64_t> sources_;
  std::vector<uint8_t> kinds_;
};

}  // namespace

static Registrar pixel_depth_to_space("DepthToSpace", Backend::kDnnl, factory_of<PixelDepthToSpace>(), "",
                                      {{kFloat32Only}});
static Registrar pixel_slice("Slice", Backend::kDnnl, factory_of<PixelChannelSlice>(), "", {{kFloat32Only, kInt32And64}});
static Registrar pixel_shuffle("ChannelShuffle", Backend::kDnnl, factory_of<PixelChannelShuffle>(), "anvil",
                               {{kFloat32Only}});

}  // namespace anvil::kernels
