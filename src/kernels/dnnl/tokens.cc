// anvil.TokensToImage and anvil.ImageToTokens (passes/tokens_as_image.cc)
// as views, float32: a transformer's tokens [N, positions, C] are, byte for
// byte, the image [N, C, S...] in channels-last layout (NWC, NHWC, NDHWC).
// Where the plan lets the image take a layout of its own, TokensToImage's
// output is its input in that layout, and ImageToTokens reads its input in
// it: neither copies (the planner gives input and output one buffer).
// SegFormer's blocks go from tokens to a convolution and back twice each
// (the attention's spatial reduction, the Mix-FFN's depthwise convolution),
// and its decode head resizes and concatenates the projected tokens as
// images: as Transpose + Reshape pairs, each took a transpose to plain NCHW
// and a reorder to NHWC around every convolution. Elsewhere (an image that
// must be plain: a graph output, ANVIL_CONV_LAYOUT=plain; outside a plan)
// the vectorized kernel transposes (vec/transpose.cc), or the reference one.
#include "kernels/dnnl/common.h"
#include "kernels/registry.h"

namespace anvil::kernels {

namespace {

namespace du = dnnl_util;
using dnnl::memory;

// The channels-last layout of a float32 image of `shape` (rank 3 to 5);
// null where it is plain's order (one channel, or one pixel).
Layout channels_last(const Shape& shape) {
  static constexpr memory::format_tag kTags[] = {memory::format_tag::nwc, memory::format_tag::nhwc,
                                                 memory::format_tag::ndhwc};
  const memory::desc md(du::dims(shape), memory::data_type::f32, kTags[shape.size() - 3]);
  return du::layout_of(md, shape, DType::kFloat32);
}

// The image's rank the view takes: 1 to 3 spatial dims.
bool image_rank_fits(const Shape& image) { return image.size() >= 3 && image.size() <= 5; }

class TokensToImageView : public Kernel {
 public:
  explicit TokensToImageView(const ir::Node&) {}

  std::vector<TensorType> prepare(const PrepareContext& ctx) override {
    std::vector<TensorType> out = ctx.output_types();
    ANVIL_PREPARE_CHECK(ctx, du::blocked_layouts_allowed() && ctx.blocked_outputs_allowed() &&
                                 image_rank_fits(out[0].shape),
                        ErrorKind::kUnsupported, "the image must be plain");
    out[0].layout = channels_last(out[0].shape);
    layout_ = out[0].layout;
    return out;
  }
  int output_aliases_input() const override { return 0; }
  void run(const RunContext& ctx) const override { copy_if_distinct(ctx, 0); }
  std::string impl_name() const override { return "view"; }
  std::string layout_name() const override { return "plain->" + kernels::layout_name(layout_); }

 private:
  Layout layout_;
};

class ImageToTokensView : public Kernel {
 public:
  explicit ImageToTokensView(const ir::Node&) {}

  std::vector<TensorType> prepare(const PrepareContext& ctx) override {
    const Shape& x = ctx.input_shape(0);
    ANVIL_PREPARE_CHECK(ctx, du::blocked_layouts_allowed() && ctx.blocked_inputs_allowed() && image_rank_fits(x),
                        ErrorKind::kUnsupported, "the image arrives plain");
    in_layout_ = channels_last(x);
    return ctx.output_types();
  }
  Layout input_layout(size_t i) const override { return i == 0 ? in_layout_ : nullptr; }
  int output_aliases_input() const override { return 0; }
  void run(const RunContext& ctx) const override { copy_if_distinct(ctx, 0); }
  std::string impl_name() const override { return "view"; }
  std::string layout_name() const override { return kernels::layout_name(in_layout_) + "->plain"; }

 private:
  Layout in_layout_;
};

}  // namespace

static Registrar tokens_to_image_view("TokensToImage", Backend::kDnnl, factory_of<TokensToImageView>(), "anvil",
                                      {{kFloat32Only}});
static Registrar image_to_tokens_view("ImageToTokens", Backend::kDnnl, factory_of<ImageToTokensView>(), "anvil",
                                      {{kFloat32Only}});

}  // namespace anvil::kernels
