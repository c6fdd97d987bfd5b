// Convolution gradients on oneDNN's backward primitives (anvil domain, emitted
// by the autodiff in src/train/gradients/conv_pool.cc), float32, 1-D to 3-D,
// grouped or not. The attributes are the forward Conv's.
//
//   anvil.ConvGradInput(dY, W, X)   -> dX  (X for its shape only)
//   anvil.ConvGradWeight(dY, X, W)  -> dW [, dB]  (W for its shape only; dB
//                                      when the node has a second output)
//
// In a plan, where X arrives in NHWC or the ISA's channel blocks (the format
// the forward convolution's kernel read it in), dY and dX take that format
// too (the planner reorders a dY that arrives otherwise, once for both
// gradients) and the primitives read and write them in place: cnn-32's
// epoch (bench/train_compare) spent 17% of its time reordering between the
// forward's NHWC and plain tensors, and oneDNN's backward kernels run as
// fast on NHWC as on blocks. Elsewhere tensors arrive and leave plain
// (NCHW). Where the channels fill oneDNN's blocks (du::fills_channel_blocks),
// the primitives take the layouts they pick, and the kernels reorder in
// their scratch memory on the way in and out: a 3x3 convolution of 16 into 32 channels at 8x8, batch 64 (Intel
// Xeon, two threads), ran its backward data and weights in 0.12 and 0.14 ms
// on the blocked kernels against 0.41 and 0.44 on the im2col GEMM
// (gemm:jit) over plain data; 64 into 64 at 32x32, batch 128, 36 and 30
// against 65 and 87 ms. A network's first convolution, on an image's few
// channels, stays plain for its backward data (10-80x slower blocked), but
// not for its weights' gradient, whose blocked kernel reads the image plain
// (3 into 32 channels at 32x32, batch 64: 0.64 against 2.86 ms).
#include <optional>
#include <utility>

#include "kernels/dnnl/common.h"
#include "kernels/nn_geometry.h"
#include "kernels/registry.h"

namespace anvil::kernels {

namespace {

using dnnl::memory;
namespace du = dnnl_util;

// The primitives' layouts: plain; the ones they pick (kBlocked); or X, dY
// and dX in the plan's format (kPlanned), the weights in the one they pick.
enum class ConvLayouts { kPlain, kBlocked, kPlanned };

using du::Format;

// What both gradients need: the forward convolution's descriptors, from the
// shapes of X, W and dY and the node's attributes.
struct ForwardConv {
  memory::desc src, weights, dst, bias;  // as the tensors arrive: plain, or src and dst in the plan's format
  memory::dims strides, dilations, pads_begin, pads_end;
  ConvLayouts layouts = ConvLayouts::kPlain;
  dnnl::convolution_forward::primitive_desc pd;

  memory::desc pick_src() const { return pick(src, false); }
  memory::desc pick_weights() const { return pick(weights, true); }
  memory::desc pick_dst() const { return pick(dst, false); }

 private:
  memory::desc pick(const memory::desc& arriving, bool weights) const {
    const bool any = layouts == ConvLayouts::kBlocked || (layouts == ConvLayouts::kPlanned && weights);
    return any ? memory::desc(arriving.dims(), arriving.data_type(), memory::format_tag::any) : arriving;
  }
};

// `layouts`: kBlocked where the channels fill blocks (du::fills_channel_blocks;
// on the output's side alone with `outputs_only`), else plain; kPlanned
// with X and dY in `format`.
ForwardConv forward_conv(const PrepareContext& ctx, const Shape& x, const Shape& w, const Shape& dy, bool bias,
                         ConvLayouts layouts, bool outputs_only = false, Format format = nullptr) {
  ANVIL_PREPARE_CHECK(ctx, x.size() >= 3 && x.size() <= 5 && w.size() == x.size() && dy.size() == x.size(),
                      ErrorKind::kUnsupported, "convolution gradients need 1 to 3 spatial dimensions, got X {}, W {}",
                      shape_str(x), shape_str(w));
  const int64_t group = ctx.attrs().get_int("group", 1);
  ANVIL_PREPARE_CHECK(ctx, group >= 1 && x[1] == w[1] * group && w[0] % group == 0 && dy[1] == w[0] &&
                               dy[0] == x[0],
                      ErrorKind::kInvalidModel, "X {}, W {} and dY {} do not fit a convolution of group {}",
                      shape_str(x), shape_str(w), shape_str(dy), group);
  SpatialGeometry g = conv_geometry(ctx, x, std::vector<int64_t>(w.begin() + 2, w.end()), &dy);
  ForwardConv f;
  f.layouts = layouts == ConvLayouts::kBlocked && !du::fills_channel_blocks(x, w[0], group, outputs_only)
                  ? ConvLayouts::kPlain
                  : layouts;
  const bool planned = f.layouts == ConvLayouts::kPlanned;
  f.src = planned ? format(x) : du::plain_desc(x, DType::kFloat32);
  f.dst = planned ? format(dy) : du::plain_desc(dy, DType::kFloat32);
  Shape wdims = w;
  if (group > 1) {
    wdims.insert(wdims.begin(), group);
    wdims[1] = w[0] / group;
  }
  f.weights = du::plain_desc(wdims, DType::kFloat32);
  if (bias) f.bias = du::plain_desc({w[0]}, DType::kFloat32);
  f.strides = du::dims(g.strides);
  f.dilations = du::dims_minus(g.dilations, 1);
  f.pads_begin = du::dims(g.pads_begin);
  f.pads_end = du::dims(g.pads_end);
  try {
    dnnl::convolution_forward::desc desc(dnnl::prop_kind::forward_training, dnnl::algorithm::convolution_direct,
                                         f.pick_src(), f.pick_weights(), f.bias, f.pick_dst(), f.strides,
                                         f.dilations, f.pads_begin, f.pads_end);
    f.pd = dnnl::convolution_forward::primitive_desc(desc, du::engine());
  } catch (const dnnl::error& e) {
    ctx.fail(ErrorKind::kInvalidModel, "the shapes X {}, W {}, dY {} do not fit the convolution's attributes ({})",
             shape_str(x), shape_str(w), shape_str(dy), e.what());
  }
  return f;
}

// Whether a blocked primitive is one of oneDNN's direct kernels, which the
// staging reorders pay for (not its GEMM or reference fallback).
bool blocked_kernel(const dnnl::primitive_desc_base& pd) {
  const std::string impl = du::impl_name(pd);
  return impl.rfind("dnnl:jit", 0) == 0 || impl.rfind("dnnl:brg", 0) == 0;
}

// The format the gradients keep: for a 2-D convolution of one group in a
// plan that lets the kernel read its own layouts (and, with `writes_dx`,
// write one), X's (input `x_input`) when it arrives in NHWC or the ISA's
// channel blocks, else dY's (input 0) where the channels fill blocks on
// both sides: a network's second convolution reads a plain X that the
// planner reordered for the forward pass already (a first convolution, on
// an image's few channels, ran its weights' gradient 1.5x longer on NHWC).
// Null otherwise.
Format planned_format(const PrepareContext& ctx, size_t x_input, const Shape& x, const Shape& w, bool writes_dx) {
  if (!ctx.blocked_inputs_allowed() || (writes_dx && !ctx.blocked_outputs_allowed()) || x.size() != 4 ||
      ctx.attrs().get_int("group", 1) != 1)
    return nullptr;
  if (const Format f = du::format_of(ctx.incoming_layout(x_input), x)) return f;
  if (!du::fills_channel_blocks(x, w[0], 1)) return nullptr;
  return du::format_of(ctx.incoming_layout(0), ctx.input_shape(0));
}

// The backward primitive `make(f)` builds: in the plan's format of X (input
// `x_input`; planned_format) where a direct kernel takes it; else on blocked
// layouts where the channels fill them (the output's alone with
// `outputs_only`) and a direct kernel takes them; else on plain ones.
template <typename Make>
auto backward_pd(const PrepareContext& ctx, const Shape& x, const Shape& w, const Shape& dy, bool bias,
                 bool outputs_only, size_t x_input, bool writes_dx, Make make) {
  auto direct = [&](ConvLayouts layouts, Format format) -> std::optional<std::pair<ForwardConv, decltype(make(
                                                              std::declval<ForwardConv>()))>> {
    try {
      ForwardConv f = forward_conv(ctx, x, w, dy, bias, layouts, outputs_only, format);
      auto pd = make(f);
      if (f.layouts == layouts && blocked_kernel(pd)) return std::make_pair(std::move(f), pd);
    } catch (const dnnl::error&) {
    } catch (const Error&) {  // no such forward primitive: the plain one below says what is wrong, if anything
    }
    return std::nullopt;
  };
  if (const Format format = planned_format(ctx, x_input, x, w, writes_dx))
    if (auto planned = direct(ConvLayouts::kPlanned, format)) return std::move(*planned);
  if (du::fills_channel_blocks(x, w[0], ctx.attrs().get_int("group", 1), outputs_only))
    if (auto blocked = direct(ConvLayouts::kBlocked, nullptr)) return std::move(*blocked);
  ForwardConv plain = forward_conv(ctx, x, w, dy, bias, ConvLayouts::kPlain);
  auto pd = make(plain);
  return std::make_pair(std::move(plain), pd);
}

// What both gradient kernels share: the primitive, its scratchpad (at the
// start of the kernel's scratch, the staged operands after it), execution.
class ConvGradKernel : public Kernel {
 public:
  size_t scratch_bytes() const override { return scratch_; }
  std::string impl_name() const override { return impl_; }
  std::string layout_name() const override { return planned_ ? kernels::layout_name(planned_) : "plain"; }
  Layout input_layout(size_t i) const override { return i < inputs_.size() ? inputs_[i] : nullptr; }

 protected:
  // Records the layouts the inputs are read in (dY is input 0; X, at
  // x_input, is read when `reads_x`, else taken as it comes: no reorder for
  // a shape) and returns the descriptor dY is staged from. kPlanned: dY and
  // X in the plan's format, read in place. kBlocked: dY as it arrives, one
  // reorder into the primitive's layout in scratch instead of the planner's
  // to plain and the kernel's from plain (a first convolution's dY, NHWC
  // from the ReLU gradient after it). Else plain.
  memory::desc plan_layouts(const ForwardConv& f, const PrepareContext& ctx, size_t x_input, bool reads_x) {
    inputs_.assign(ctx.num_inputs(), nullptr);
    if (!ctx.blocked_inputs_allowed()) return f.dst;
    if (!reads_x) inputs_[x_input] = ctx.incoming_layout(x_input);
    if (f.layouts == ConvLayouts::kPlanned) {
      planned_ = du::layout_of(f.src, ctx.input_shape(x_input), DType::kFloat32);
      inputs_[0] = du::layout_of(f.dst, ctx.input_shape(0), DType::kFloat32);
      if (reads_x) inputs_[x_input] = planned_;
    } else if (const Layout in = ctx.incoming_layout(0); in && f.layouts == ConvLayouts::kBlocked) {
      inputs_[0] = in;
      return du::desc_of({DType::kFloat32, ctx.input_shape(0), in});
    }
    return f.dst;
  }

  // Records the primitive; returns where the staged operands' scratch starts.
  size_t set_primitive(const dnnl::primitive_desc_base& pd, dnnl::primitive primitive) {
    primitive_ = std::move(primitive);
    scratchpad_ = pd.scratchpad_desc();
    impl_ = du::impl_name(pd);
    return scratchpad_.get_size();
  }

  void execute(const RunContext& ctx, std::unordered_map<int, memory> args) const {
    if (scratchpad_.get_size()) args[DNNL_ARG_SCRATCHPAD] = du::wrap(scratchpad_, ctx.scratch);
    primitive_.execute(du::stream(), args);
  }

  dnnl::primitive primitive_;
  memory::desc scratchpad_;
  size_t scratch_ = 0;
  std::string impl_;
  Layout planned_;              // X's (and dX's) format when kPlanned; null otherwise
  std::vector<Layout> inputs_;  // input_layout(): null is plain
};

class ConvGradInputKernel : public ConvGradKernel {
 public:
  explicit ConvGradInputKernel(const ir::Node&) {}

  std::vector<TensorType> prepare(const PrepareContext& ctx) override {
    try {
      const auto [f, pd] = backward_pd(ctx, ctx.input_shape(2), ctx.input_shape(1), ctx.input_shape(0), false,
                                       false, 2, true, [&](const ForwardConv& f) {
                                         dnnl::convolution_backward_data::desc desc(
                                             dnnl::algorithm::convolution_direct, f.pick_src(), f.pick_weights(),
                                             f.pick_dst(), f.strides, f.dilations, f.pads_begin, f.pads_end);
                                         return dnnl::convolution_backward_data::primitive_desc(
                                             desc, du::user_scratchpad_attr(), du::engine(), f.pd);
                                       });
      size_t offset = set_primitive(pd, dnnl::convolution_backward_data(pd));
      offset = diff_dst_.init(plan_layouts(f, ctx, 2, false), pd.diff_dst_desc(), offset);
      offset = weights_.init(f.weights, pd.weights_desc(), offset);
      scratch_ = diff_src_.init(f.src, pd.diff_src_desc(), offset);
    } catch (const dnnl::error& e) {
      ctx.fail(ErrorKind::kUnsupported, "oneDNN has no convolution backward-data for this case ({})", e.what());
    }
    std::vector<TensorType> out = ctx.output_types();
    out[0].layout = planned_;
    return out;
  }

  void run(const RunContext& ctx) const override {
    const memory diff_src = diff_src_.output(ctx.out(0).raw(), ctx.scratch);
    execute(ctx, {{DNNL_ARG_DIFF_DST, diff_dst_.input(ctx.in(0).raw(), ctx.scratch)},
                  {DNNL_ARG_WEIGHTS, weights_.input(ctx.in(1).raw(), ctx.scratch)},
                  {DNNL_ARG_DIFF_SRC, diff_src}});
    diff_src_.finish(diff_src, ctx.out(0).raw());
    du::stream().wait();
  }

 private:
  du::Staging diff_dst_, weights_, diff_src_;
};

class ConvGradWeightKernel : public ConvGradKernel {
 public:
  explicit ConvGradWeightKernel(const ir::Node&) {}

  std::vector<TensorType> prepare(const PrepareContext& ctx) override {
    with_bias_ = ctx.output_types().size() > 1;
    try {
      const auto [f, pd] = backward_pd(ctx, ctx.input_shape(1), ctx.input_shape(2), ctx.input_shape(0), with_bias_,
                                       true, 1, false, [&](const ForwardConv& f) {
                                         dnnl::convolution_backward_weights::desc desc(
                                             dnnl::algorithm::convolution_direct, f.pick_src(), f.pick_weights(),
                                             f.bias, f.pick_dst(), f.strides, f.dilations, f.pads_begin, f.pads_end);
                                         return dnnl::convolution_backward_weights::primitive_desc(
                                             desc, du::user_scratchpad_attr(), du::engine(), f.pd);
                                       });
      size_t offset = set_primitive(pd, dnnl::convolution_backward_weights(pd));
      offset = diff_dst_.init(plan_layouts(f, ctx, 1, true), pd.diff_dst_desc(), offset);
      offset = src_.init(f.src, pd.src_desc(), offset);
      scratch_ = diff_weights_.init(f.weights, pd.diff_weights_desc(), offset);
      diff_bias_ = f.bias;
    } catch (const dnnl::error& e) {
      ctx.fail(ErrorKind::kUnsupported, "oneDNN has no convolution backward-weights for this case ({})", e.what());
    }
    return ctx.output_types();
  }

  void run(const RunContext& ctx) const override {
    const memory diff_weights = diff_weights_.output(ctx.out(0).raw(), ctx.scratch);
    std::unordered_map<int, memory> args{{DNNL_ARG_DIFF_DST, diff_dst_.input(ctx.in(0).raw(), ctx.scratch)},
                                         {DNNL_ARG_SRC, src_.input(ctx.in(1).raw(), ctx.scratch)},
                                         {DNNL_ARG_DIFF_WEIGHTS, diff_weights}};
    if (with_bias_) args[DNNL_ARG_DIFF_BIAS] = du::wrap(diff_bias_, ctx.out(1).raw());
    execute(ctx, std::move(args));
    diff_weights_.finish(diff_weights, ctx.out(0).raw());
    du::stream().wait();
  }

 private:
  bool with_bias_ = false;
  du::Staging diff_dst_, src_, diff_weights_;
  memory::desc diff_bias_;
};

static Registrar conv_grad_input("ConvGradInput", Backend::kDnnl, factory_of<ConvGradInputKernel>(), "anvil",
                                 {{kFloat32Only}});
static Registrar conv_grad_weight("ConvGradWeight", Backend::kDnnl, factory_of<ConvGradWeightKernel>(), "anvil",
                                  {{kFloat32Only}});

}  // namespace

}  // namespace anvil::kernels
