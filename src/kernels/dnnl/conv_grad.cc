// Convolution gradients on oneDNN's backward primitives (anvil domain, emitted
// by the autodiff in src/train/gradients/conv_pool.cc), float32, 1-D to 3-D,
// grouped or not. The attributes are the forward Conv's.
//
//   anvil.ConvGradInput(dY, W, X)   -> dX  (X for its shape only)
//   anvil.ConvGradWeight(dY, X, W)  -> dW [, dB]  (W for its shape only; dB
//                                      when the node has a second output)
//
// Tensors arrive and leave plain (NCHW). Where the channels fill oneDNN's
// blocks (du::fills_channel_blocks), the primitives take the layouts they
// pick, and the kernels reorder in their scratch memory on the way in and
// out: a 3x3 convolution of 16 into 32 channels at 8x8, batch 64 (Intel
// Xeon, two threads), ran its backward data and weights in 0.12 and 0.14 ms
// on the blocked kernels against 0.41 and 0.44 on the im2col GEMM
// (gemm:jit) over plain data; 64 into 64 at 32x32, batch 128, 36 and 30
// against 65 and 87 ms. A network's first convolution, on an image's few
// channels, stays plain for its backward data (10-80x slower blocked), but
// not for its weights' gradient, whose blocked kernel reads the image plain
// (3 into 32 channels at 32x32, batch 64: 0.64 against 2.86 ms).
#include "kernels/dnnl/common.h"
#include "kernels/nn_geometry.h"
#include "kernels/registry.h"

namespace anvil::kernels {

namespace {

using dnnl::memory;
namespace du = dnnl_util;

// What both gradients need: the forward convolution's descriptors, from the
// shapes of X, W and dY and the node's attributes. `blocked`: the
// primitives pick the layouts (pick()); else plain.
struct ForwardConv {
  memory::desc src, weights, dst, bias;  // plain
  memory::dims strides, dilations, pads_begin, pads_end;
  bool blocked = false;
  dnnl::convolution_forward::primitive_desc pd;

  memory::desc pick(const memory::desc& plain) const {
    return blocked ? memory::desc(plain.dims(), plain.data_type(), memory::format_tag::any) : plain;
  }
};

// `blocked`: where the channels fill blocks (du::fills_channel_blocks; on
// the output's side alone with `outputs_only`).
ForwardConv forward_conv(const PrepareContext& ctx, const Shape& x, const Shape& w, const Shape& dy, bool bias,
                         bool blocked, bool outputs_only = false) {
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
  f.blocked = blocked && du::fills_channel_blocks(x, w[0], group, outputs_only);
  f.src = du::plain_desc(x, DType::kFloat32);
  f.dst = du::plain_desc(dy, DType::kFloat32);
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
                                         f.pick(f.src), f.pick(f.weights), f.bias, f.pick(f.dst), f.strides,
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

// The backward primitive `make(f)` builds: on blocked layouts where the
// channels fill them (the output's alone with `outputs_only`) and a direct
// kernel takes them, else on plain ones.
template <typename Make>
auto backward_pd(const PrepareContext& ctx, const Shape& x, const Shape& w, const Shape& dy, bool bias,
                 bool outputs_only, Make make) {
  const bool try_blocked = du::fills_channel_blocks(x, w[0], ctx.attrs().get_int("group", 1), outputs_only);
  if (try_blocked) {
    try {
      const ForwardConv blocked = forward_conv(ctx, x, w, dy, bias, true, outputs_only);
      auto pd = make(blocked);
      if (blocked_kernel(pd)) return std::make_pair(blocked, pd);
    } catch (const dnnl::error&) {
    } catch (const Error&) {  // no blocked forward primitive: the plain one below says what is wrong, if anything
    }
  }
  const ForwardConv plain = forward_conv(ctx, x, w, dy, bias, false);
  return std::make_pair(plain, make(plain));
}

// What both gradient kernels share: the primitive, its scratchpad (at the
// start of the kernel's scratch, the staged operands after it), execution.
class ConvGradKernel : public Kernel {
 public:
  size_t scratch_bytes() const override { return scratch_; }
  std::string impl_name() const override { return impl_; }

 protected:
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
};

class ConvGradInputKernel : public ConvGradKernel {
 public:
  explicit ConvGradInputKernel(const ir::Node&) {}

  std::vector<TensorType> prepare(const PrepareContext& ctx) override {
    try {
      const auto [f, pd] = backward_pd(ctx, ctx.input_shape(2), ctx.input_shape(1), ctx.input_shape(0), false,
                                       false, [&](const ForwardConv& f) {
                                         dnnl::convolution_backward_data::desc desc(
                                             dnnl::algorithm::convolution_direct, f.pick(f.src), f.pick(f.weights),
                                             f.pick(f.dst), f.strides, f.dilations, f.pads_begin, f.pads_end);
                                         return dnnl::convolution_backward_data::primitive_desc(
                                             desc, du::user_scratchpad_attr(), du::engine(), f.pd);
                                       });
      size_t offset = set_primitive(pd, dnnl::convolution_backward_data(pd));
      offset = diff_dst_.init(f.dst, pd.diff_dst_desc(), offset);
      offset = weights_.init(f.weights, pd.weights_desc(), offset);
      scratch_ = diff_src_.init(f.src, pd.diff_src_desc(), offset);
    } catch (const dnnl::error& e) {
      ctx.fail(ErrorKind::kUnsupported, "oneDNN has no convolution backward-data for this case ({})", e.what());
    }
    return ctx.output_types();
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
                                       true, [&](const ForwardConv& f) {
                                         dnnl::convolution_backward_weights::desc desc(
                                             dnnl::algorithm::convolution_direct, f.pick(f.src), f.pick(f.weights),
                                             f.bias, f.pick(f.dst), f.strides, f.dilations, f.pads_begin, f.pads_end);
                                         return dnnl::convolution_backward_weights::primitive_desc(
                                             desc, du::user_scratchpad_attr(), du::engine(), f.pd);
                                       });
      size_t offset = set_primitive(pd, dnnl::convolution_backward_weights(pd));
      offset = diff_dst_.init(f.dst, pd.diff_dst_desc(), offset);
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
