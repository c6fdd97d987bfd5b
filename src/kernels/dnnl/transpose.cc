// Transpose(perm = [0, 2, 3, 1]) of a float32 image that arrives in a pixel
// layout (NHWC or channel blocks, where a convolution wrote it): the output,
// plain [N, H, W, C], is each pixel's channels in order, so from NHWC it is
// one copy per batch item and from channel blocks one run of a block's
// channels per pixel and block. Detection and segmentation heads end this
// way (SSD's and RetinaNet's permute(0, 2, 3, 1), YOLO's heads after
// passes/channels_last_before_split.cc); the vectorized Transpose needs plain
// NCHW, which cost a reorder of the whole map first. Plain inputs, padded
// channel blocks and other permutations go to the vectorized or reference
// Transpose.
#include <cstring>
#include <optional>

#include "core/vector_isa.h"
#include "kernels/dnnl/common.h"
#include "kernels/fusion_advice.h"
#include "kernels/registry.h"

namespace anvil::kernels {

namespace {

namespace du = dnnl_util;

constexpr int64_t kParallelFloats = 1 << 15;  // smaller images copy on one thread

class PixelTranspose : public Kernel {
 public:
  explicit PixelTranspose(const ir::Node& node) : perm_(node.attrs.get_ints("perm")) {}

  Layout input_layout(size_t i) const override { return i == 0 ? in_layout_ : nullptr; }
  std::string layout_name() const override { return kernels::layout_name(in_layout_) + "->plain"; }
  std::string impl_name() const override { return "pixels:transpose"; }

  std::vector<TensorType> prepare(const PrepareContext& ctx) override {
    const Shape& x = ctx.input_shape(0);
    const bool channels_last = perm_ == std::vector<int64_t>{0, 2, 3, 1};
    ANVIL_PREPARE_CHECK(ctx, ctx.input_dtype(0) == DType::kFloat32 && x.size() == 4 && channels_last,
                        ErrorKind::kUnsupported, "not an image's channels moved last");
    const du::Format format = ctx.blocked_inputs_allowed() ? du::format_of(ctx.incoming_layout(0), x) : nullptr;
    const std::optional<du::PixelLayout> layout = format ? du::pixel_layout(format(x)) : std::nullopt;
    ANVIL_PREPARE_CHECK(ctx, layout.has_value(), ErrorKind::kUnsupported,
                        "the image arrives plain or in padded channel blocks");
    in_layout_ = ctx.incoming_layout(0);
    in_ = du::PixelAddressing::of(layout, x);
    batch_ = x[0];
    channels_ = x[1];
    pixels_ = x[2] * x[3];
    return ctx.output_types();
  }

  void run(const RunContext& ctx) const override {
    const float* x = ctx.in(0).data<float>();
    float* y = ctx.out(0).data<float>();
    const int64_t block = in_.block;
    const auto run_bytes = static_cast<size_t>(block) * sizeof(float);
    if (batch_ * pixels_ * channels_ == 0) return;
    if (block == channels_ && in_.pixel == channels_) {  // NHWC: already each pixel's channels in order
      std::memcpy(y, x, static_cast<size_t>(batch_ * pixels_ * channels_) * sizeof(float));
      return;
    }
    const int64_t rows = batch_ * pixels_;
#pragma omp parallel for schedule(static) if (rows * channels_ >= kParallelFloats)
    for (int64_t row = 0; row < rows; ++row) {  // (n, pixel)
      const int64_t n = row / pixels_, p = row % pixels_;
      float* out = y + row * channels_;
      for (int64_t c = 0; c < channels_; c += block)
        std::memcpy(out + c, x + in_.at(n, c, 0, 0) + p * in_.pixel, run_bytes);
    }
  }

 private:
  std::vector<int64_t> perm_;
  Layout in_layout_;
  du::PixelAddressing in_;
  int64_t batch_ = 0, channels_ = 0, pixels_ = 0;
};

}  // namespace

bool channels_last_transpose_reads_layout(const ir::Node& probe) {
  const ir::Value* x = probe.inputs.empty() ? nullptr : probe.input(0);
  if (!x || x->dtype() != DType::kFloat32 || !x->type.has_shape() || x->type.rank() != 4) return false;
  if (!du::blocked_layouts_allowed()) return false;
  if (vector_isa() == VectorIsa::kAvx512) return true;
  const ir::Dim& channels = x->type.dims()[1];
  return channels.is_known() && channels.value > 0 && channels.value % du::channel_block({1, channels.value, 1, 1}) == 0;
}

static Registrar pixel_transpose("Transpose", Backend::kDnnl,
                                 [](const ir::Node& n) -> std::unique_ptr<Kernel> {
                                   return std::make_unique<PixelTranspose>(n);
                                 },
                                 "", {{kFloat32Only}});

}  // namespace anvil::kernels
