// Conv, anvil.FusedConv and ConvTranspose on oneDNN (float32, 1-D to 3-D).
#include <cstdlib>
#include <cstring>

#include "kernels/dnnl/common.h"
#include "kernels/nn_geometry.h"
#include "kernels/registry.h"

namespace anvil::kernels {

namespace {

using dnnl::memory;
namespace du = dnnl_util;

// ANVIL_CONV_LAYOUT=plain keeps convolutions on NCHW kernels (no reorders).
bool allow_blocked_layout() {
  static const bool allow = [] {
    const char* v = std::getenv("ANVIL_CONV_LAYOUT");
    return !(v && std::string(v) == "plain");
  }();
  return allow;
}

memory::desc activation_desc(const Shape& shape) {
  if (!allow_blocked_layout()) return du::plain_desc(shape, DType::kFloat32);
  return memory::desc(du::dims(shape), memory::data_type::f32, memory::format_tag::any);
}

// What Conv and ConvTranspose share: input checks, weights handling, execution.
class DnnlConvBase : public Kernel {
 public:
  bool reads_input_packed_only(size_t i) const override { return i == 1; }  // constant weights are packed
  size_t scratch_bytes() const override { return scratch_; }
  std::string impl_name() const override { return impl_; }
  std::string layout_name() const override { return io_.name(); }
  Layout input_layout(size_t i) const override {
    if (i == 0) return io_.src_layout;
    if (i == 3) return io_.dst_layout;  // the residual of a sum post-op arrives in the output's layout
    return nullptr;
  }

 protected:
  void check_inputs(const PrepareContext& ctx) {
    // The schema checked ranks, channels, group and bias shape.
    const Shape& x = ctx.input_shape(0);
    ANVIL_PREPARE_CHECK(ctx, x.size() <= 5, ErrorKind::kUnsupported, "input X has {} spatial dimensions; at most 3 are supported",
                        x.size() - 2);
    group_ = ctx.attrs().get_int("group", 1);
  }

  // Weights packed (when constant), bias, and the activations' layouts.
  void finish_prepare(const PrepareContext& ctx, const dnnl::primitive_desc_base& pd, const memory::desc& plain) {
    weights_plain_ = plain;
    if (const Tensor* w = ctx.constant(1)) {
      packed_ = du::pack_shared(ctx, *w, plain, pd.weights_desc());
      weights_packed_ = true;
    }
    if (ctx.has_input(2)) bias_desc_ = du::plain_desc(ctx.input_shape(2), DType::kFloat32);
    impl_ = du::impl_name(pd);
    scratch_ = io_.init(ctx, src_md_, pd.src_desc(), dst_md_, pd.dst_desc(), pd.scratchpad_desc().get_size());
    dst_bytes_ = pd.dst_desc().get_size();
  }

  memory::desc bias_md(const PrepareContext& ctx, int64_t channels) const {
    if (!ctx.has_input(2)) return memory::desc();
    return du::plain_desc({channels}, DType::kFloat32);
  }

  void execute(const RunContext& ctx, const Tensor* sum) const {
    memory dst = io_.dst.output(ctx.out(0).raw(), ctx.scratch);
    if (sum) {
      if (io_.dst.staged()) io_.dst.load(sum->raw(), dst);
      else if (sum->raw() != ctx.out(0).raw()) std::memcpy(ctx.out(0).raw(), sum->raw(), dst_bytes_);
    }
    std::unordered_map<int, memory> args;
    args[DNNL_ARG_SRC] = io_.src.input(ctx.in(0).raw(), ctx.scratch);
    args[DNNL_ARG_WEIGHTS] = weights_packed_ ? packed_.memory : du::wrap(weights_plain_, ctx.in(1).raw());
    if (ctx.inputs.size() > 2 && ctx.inputs[2]) args[DNNL_ARG_BIAS] = du::wrap(bias_desc_, ctx.in(2).raw());
    args[DNNL_ARG_DST] = dst;
    if (scratchpad_md_.get_size()) args[DNNL_ARG_SCRATCHPAD] = du::wrap(scratchpad_md_, ctx.scratch);
    primitive_.execute(du::stream(), args);
    io_.dst.finish(dst, ctx.out(0).raw());
    du::stream().wait();
  }

  int64_t group_ = 1;
  dnnl::primitive primitive_;
  memory::desc src_md_, dst_md_, weights_plain_, bias_desc_, scratchpad_md_;
  du::ActivationLayouts io_;
  size_t dst_bytes_ = 0;
  du::PackedWeights packed_;
  bool weights_packed_ = false;
  size_t scratch_ = 0;
  std::string impl_;
};

class DnnlConv : public DnnlConvBase {
 public:
  explicit DnnlConv(const ir::Node& node) : fused_(node.op_type == "FusedConv") {}

  std::vector<TensorType> prepare(const PrepareContext& ctx) override {
    check_inputs(ctx);
    const Shape& x = ctx.input_shape(0);
    const Shape& w = ctx.input_shape(1);
    const int64_t cout = w[0];
    SpatialGeometry g = conv_geometry(ctx, x, std::vector<int64_t>(w.begin() + 2, w.end()));
    const Shape& y = ctx.output_shape(0);

    dnnl::primitive_attr attr = du::user_scratchpad_attr();
    dnnl::post_ops ops;
    if (fused_) {
      has_sum_ = ctx.has_input(3);
      if (has_sum_) {
        ANVIL_PREPARE_CHECK(ctx, ctx.input_shape(3) == y && ctx.input_dtype(3) == DType::kFloat32,
                            ErrorKind::kUnsupported, "residual input must match the output {}", shape_str(y));
        ops.append_sum(1.f);
      }
      std::string act = ctx.attrs().get_string("activation", "");
      ANVIL_PREPARE_CHECK(ctx, du::append_activation(ops, act, ctx.attrs().get_float("activation_alpha", 0.f),
                                                     ctx.attrs().get_float("activation_beta", 0.f)),
                          ErrorKind::kUnsupported, "activation {} has no oneDNN post-op", act);
      attr.set_post_ops(ops);
    }

    src_md_ = du::plain_desc(x, DType::kFloat32);
    dst_md_ = du::plain_desc(y, DType::kFloat32);
    Shape wdims = w;
    if (group_ > 1) {
      wdims.insert(wdims.begin(), group_);
      wdims[1] = cout / group_;
    }
    memory::desc w_plain = du::plain_desc(wdims, DType::kFloat32);
    memory::desc w_any = ctx.constant(1) ? memory::desc(du::dims(wdims), memory::data_type::f32, memory::format_tag::any)
                                         : w_plain;
    try {
      memory::desc src_any = activation_desc(x), dst_any = activation_desc(y);
      dnnl::convolution_forward::desc desc(dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct,
                                           src_any, w_any, bias_md(ctx, cout), dst_any, du::dims(g.strides),
                                           du::dims_minus(g.dilations, 1), du::dims(g.pads_begin), du::dims(g.pads_end));
      dnnl::convolution_forward::primitive_desc pd(desc, attr, du::engine());
      primitive_ = dnnl::convolution_forward(pd);
      scratchpad_md_ = pd.scratchpad_desc();
      finish_prepare(ctx, pd, w_plain);
    } catch (const dnnl::error& e) {
      ctx.fail(ErrorKind::kUnsupported, "oneDNN has no convolution for this case ({})", e.what());
    }
    std::vector<TensorType> out = ctx.output_types();
    out[0].layout = io_.dst_layout;
    return out;
  }

  int inplace_input() const override { return fused_ ? 3 : -1; }

  void run(const RunContext& ctx) const override { execute(ctx, has_sum_ ? &ctx.in(3) : nullptr); }

 private:
  bool fused_;
  bool has_sum_ = false;
};

class DnnlConvTranspose : public DnnlConvBase {
 public:
  explicit DnnlConvTranspose(const ir::Node&) {}

  std::vector<TensorType> prepare(const PrepareContext& ctx) override {
    check_inputs(ctx);
    const Shape& x = ctx.input_shape(0);
    const Shape& w = ctx.input_shape(1);  // [C_in, C_out / group, k...]
    const int64_t cin_g = w[0] / group_, cout_g = w[1];
    SpatialGeometry g = conv_transpose_geometry(ctx, x, std::vector<int64_t>(w.begin() + 2, w.end()));
    const Shape& y = ctx.output_shape(0);
    // oneDNN's end padding absorbs output_padding: out = (in-1)*s + keff - pl - pr.
    std::vector<int64_t> pads_end(g.out.size());
    for (size_t i = 0; i < g.out.size(); ++i) {
      int64_t keff = (g.kernel[i] - 1) * g.dilations[i] + 1;
      pads_end[i] = (x[2 + i] - 1) * g.strides[i] + keff - g.pads_begin[i] - g.out[i];
    }
    src_md_ = du::plain_desc(x, DType::kFloat32);
    dst_md_ = du::plain_desc(y, DType::kFloat32);
    // ONNX stores [g * IC/g, OC/g, k...]; oneDNN wants logical [g,] OC/g, IC/g, k... — describe it with strides.
    int64_t spatial = shape_numel(Shape(w.begin() + 2, w.end()));
    memory::dims wd, ws;
    if (group_ > 1) {
      wd = {group_, cout_g, cin_g};
      ws = {cin_g * cout_g * spatial, spatial, cout_g * spatial};
    } else {
      wd = {cout_g, cin_g};
      ws = {spatial, cout_g * spatial};
    }
    memory::dims ksp = du::dims(std::vector<int64_t>(w.begin() + 2, w.end()));
    for (size_t i = 0; i < ksp.size(); ++i) {
      wd.push_back(ksp[i]);
      int64_t s = 1;
      for (size_t j = i + 1; j < ksp.size(); ++j) s *= ksp[j];
      ws.push_back(s);
    }
    memory::desc w_plain(wd, memory::data_type::f32, ws);
    memory::desc w_any = ctx.constant(1) ? memory::desc(wd, memory::data_type::f32, memory::format_tag::any) : w_plain;
    try {
      dnnl::deconvolution_forward::desc desc(dnnl::prop_kind::forward_inference,
                                             dnnl::algorithm::deconvolution_direct, src_md_, w_any, bias_md(ctx, y[1]),
                                             dst_md_, du::dims(g.strides), du::dims_minus(g.dilations, 1),
                                             du::dims(g.pads_begin), du::dims(pads_end));
      dnnl::deconvolution_forward::primitive_desc pd(desc, du::user_scratchpad_attr(), du::engine());
      primitive_ = dnnl::deconvolution_forward(pd);
      scratchpad_md_ = pd.scratchpad_desc();
      finish_prepare(ctx, pd, w_plain);
    } catch (const dnnl::error& e) {
      ctx.fail(ErrorKind::kUnsupported, "oneDNN has no deconvolution for this case ({})", e.what());
    }
    return ctx.output_types();
  }

  void run(const RunContext& ctx) const override { execute(ctx, nullptr); }
};

ANVIL_REGISTER_KERNEL_CLASS_TYPED("Conv", kDnnl, DnnlConv, {kFloat32Only});
ANVIL_REGISTER_KERNEL_CLASS_TYPED("ConvTranspose", kDnnl, DnnlConvTranspose, {kFloat32Only});
static Registrar fused_conv_dnnl("FusedConv", Backend::kDnnl, factory_of<DnnlConv>(), "anvil", {{kFloat32Only}});

}  // namespace

}  // namespace anvil::kernels
