// Convolution gradients on oneDNN's backward primitives (anvil domain, emitted
// by the autodiff in src/train/gradients/conv_pool.cc), float32, 1-D to 3-D,
// grouped or not. The attributes are the forward Conv's.
//
//   anvil.ConvGradInput(dY, W, X)   -> dX  (X for its shape only)
//   anvil.ConvGradWeight(dY, X, W)  -> dW [, dB]  (W for its shape only; dB
//                                      when the node has a second output)
//
// Activations stay plain (NCHW): a training step's reorders would cost more
// than the blocked kernels save at the sizes trained here.
#include "kernels/dnnl/common.h"
#include "kernels/nn_geometry.h"
#include "kernels/registry.h"

namespace anvil::kernels {

namespace {

using dnnl::memory;
namespace du = dnnl_util;

// What both gradients need: the forward convolution's descriptors, from the
// shapes of X, W and dY and the node's attributes.
struct ForwardConv {
  memory::desc src, weights, dst, bias;
  memory::dims strides, dilations, pads_begin, pads_end;
  dnnl::convolution_forward::primitive_desc pd;
};

ForwardConv forward_conv(const PrepareContext& ctx, const Shape& x, const Shape& w, const Shape& dy, bool bias) {
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
                                         f.src, f.weights, f.bias, f.dst, f.strides, f.dilations, f.pads_begin,
                                         f.pads_end);
    f.pd = dnnl::convolution_forward::primitive_desc(desc, du::engine());
  } catch (const dnnl::error& e) {
    ctx.fail(ErrorKind::kInvalidModel, "the shapes X {}, W {}, dY {} do not fit the convolution's attributes ({})",
             shape_str(x), shape_str(w), shape_str(dy), e.what());
  }
  return f;
}

// What both gradient kernels share: the primitive, its scratchpad, execution.
class ConvGradKernel : public Kernel {
 public:
  size_t scratch_bytes() const override { return scratchpad_.get_size(); }
  std::string impl_name() const override { return impl_; }

 protected:
  void execute(const RunContext& ctx, std::unordered_map<int, memory> args) const {
    if (scratchpad_.get_size()) args[DNNL_ARG_SCRATCHPAD] = du::wrap(scratchpad_, ctx.scratch);
    primitive_.execute(du::stream(), args);
    du::stream().wait();
  }

  dnnl::primitive primitive_;
  memory::desc scratchpad_;
  std::string impl_;
};

class ConvGradInputKernel : public ConvGradKernel {
 public:
  explicit ConvGradInputKernel(const ir::Node&) {}

  std::vector<TensorType> prepare(const PrepareContext& ctx) override {
    const ForwardConv f = forward_conv(ctx, ctx.input_shape(2), ctx.input_shape(1), ctx.input_shape(0), false);
    try {
      dnnl::convolution_backward_data::desc desc(dnnl::algorithm::convolution_direct, f.src, f.weights, f.dst,
                                                 f.strides, f.dilations, f.pads_begin, f.pads_end);
      dnnl::convolution_backward_data::primitive_desc pd(desc, du::user_scratchpad_attr(), du::engine(), f.pd);
      primitive_ = dnnl::convolution_backward_data(pd);
      scratchpad_ = pd.scratchpad_desc();
      impl_ = du::impl_name(pd);
    } catch (const dnnl::error& e) {
      ctx.fail(ErrorKind::kUnsupported, "oneDNN has no convolution backward-data for this case ({})", e.what());
    }
    diff_dst_ = f.dst;
    weights_ = f.weights;
    diff_src_ = f.src;
    return ctx.output_types();
  }

  void run(const RunContext& ctx) const override {
    execute(ctx, {{DNNL_ARG_DIFF_DST, du::wrap(diff_dst_, ctx.in(0).raw())},
                  {DNNL_ARG_WEIGHTS, du::wrap(weights_, ctx.in(1).raw())},
                  {DNNL_ARG_DIFF_SRC, du::wrap(diff_src_, ctx.out(0).raw())}});
  }

 private:
  memory::desc diff_dst_, weights_, diff_src_;
};

class ConvGradWeightKernel : public ConvGradKernel {
 public:
  explicit ConvGradWeightKernel(const ir::Node&) {}

  std::vector<TensorType> prepare(const PrepareContext& ctx) override {
    with_bias_ = ctx.output_types().size() > 1;
    const ForwardConv f = forward_conv(ctx, ctx.input_shape(1), ctx.input_shape(2), ctx.input_shape(0), with_bias_);
    try {
      dnnl::convolution_backward_weights::desc desc(dnnl::algorithm::convolution_direct, f.src, f.weights, f.bias,
                                                    f.dst, f.strides, f.dilations, f.pads_begin, f.pads_end);
      dnnl::convolution_backward_weights::primitive_desc pd(desc, du::user_scratchpad_attr(), du::engine(), f.pd);
      primitive_ = dnnl::convolution_backward_weights(pd);
      scratchpad_ = pd.scratchpad_desc();
      impl_ = du::impl_name(pd);
    } catch (const dnnl::error& e) {
      ctx.fail(ErrorKind::kUnsupported, "oneDNN has no convolution backward-weights for this case ({})", e.what());
    }
    diff_dst_ = f.dst;
    src_ = f.src;
    diff_weights_ = f.weights;
    diff_bias_ = f.bias;
    return ctx.output_types();
  }

  void run(const RunContext& ctx) const override {
    std::unordered_map<int, memory> args{{DNNL_ARG_DIFF_DST, du::wrap(diff_dst_, ctx.in(0).raw())},
                                         {DNNL_ARG_SRC, du::wrap(src_, ctx.in(1).raw())},
                                         {DNNL_ARG_DIFF_WEIGHTS, du::wrap(diff_weights_, ctx.out(0).raw())}};
    if (with_bias_) args[DNNL_ARG_DIFF_BIAS] = du::wrap(diff_bias_, ctx.out(1).raw());
    execute(ctx, std::move(args));
  }

 private:
  bool with_bias_ = false;
  memory::desc diff_dst_, src_, diff_weights_, diff_bias_;
};

static Registrar conv_grad_input("ConvGradInput", Backend::kDnnl, factory_of<ConvGradInputKernel>(), "anvil",
                                 {{kFloat32Only}});
static Registrar conv_grad_weight("ConvGradWeight", Backend::kDnnl, factory_of<ConvGradWeightKernel>(), "anvil",
                                  {{kFloat32Only}});

}  // namespace

}  // namespace anvil::kernels
