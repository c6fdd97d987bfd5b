// Slices and shuffles of channels in a plan's NHWC layout (float32), where a
// 4-D tensor arrives so: ShuffleNet's units split their input's channels in
// two (Slice), convolve one half in NHWC (brgconv on AVX-512), concatenate
// and shuffle (anvil.ChannelShuffle). On plain data each of these ops needs
// a reorder before it and after; here each pixel's channels are copied as
// they lie. Other layouts, ranks and slices are the reference kernels'.
#include <cstring>

#include "ir/dim_math.h"
#include "kernels/dnnl/common.h"
#include "kernels/ref/common.h"
#include "kernels/registry.h"

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

}  // namespace

static Registrar pixel_slice("Slice", Backend::kDnnl, factory_of<PixelChannelSlice>(), "", {{kFloat32Only, kInt32And64}});
static Registrar pixel_shuffle("ChannelShuffle", Backend::kDnnl, factory_of<PixelChannelShuffle>(), "anvil",
                               {{kFloat32Only}});

}  // namespace anvil::kernels
