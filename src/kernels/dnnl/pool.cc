// MaxPool, AveragePool, GlobalAveragePool and GlobalMaxPool on oneDNN (float32).
// A 2-D MaxPool in a plan's blocked or NHWC layout runs Anvil's own loop
// (vec/pool_impl.h) instead: oneDNN 2.6.3's jit:avx2 max pooling read nChw8c
// at about 4 GB/s (SqueezeNet's three pools: 1.6 ms against ONNX Runtime's 0.4).
#include <algorithm>
#include <optional>

#include <omp.h>

#include "kernels/dnnl/common.h"
#include "kernels/nn_geometry.h"
#include "kernels/registry.h"
#include "kernels/vec/vec_kernels.h"

namespace anvil::kernels {

namespace {

using dnnl::memory;
namespace du = dnnl_util;

// A 2-D pooling's planes for Anvil's loops (vec/pool_impl.h): the input's
// and output's sizes and the window, from X's and Y's shapes.
struct PoolPlane {
  int64_t in_h = 0, in_w = 0, out_h = 0, out_w = 0;
  vec::PoolWindow window{};

  PoolPlane() = default;
  PoolPlane(const Shape& x, const Shape& y, const SpatialGeometry& g)
      : in_h(x[2]), in_w(x[3]), out_h(y[2]), out_w(y[3]),
        window{g.kernel[0], g.kernel[1], g.strides[0], g.strides[1], g.dilations[0], g.dilations[1],
               g.pads_begin[0], g.pads_begin[1]} {}
};

class DnnlPool : public Kernel {
 public:
  DnnlPool(const ir::Node& node) : op_(node.op_type) {}

  std::vector<TensorType> prepare(const PrepareContext& ctx) override {
    const Shape& x = ctx.input_shape(0);
    ANVIL_PREPARE_CHECK(ctx, x.size() >= 3 && x.size() <= 5, ErrorKind::kUnsupported, "oneDNN pools ranks 3 to 5");
    bool global = op_.rfind("Global", 0) == 0;
    SpatialGeometry g;
    if (global) {
      g.kernel.assign(x.begin() + 2, x.end());
      g.strides.assign(g.kernel.size(), 1);
      g.dilations.assign(g.kernel.size(), 1);
      g.pads_begin.assign(g.kernel.size(), 0);
      g.pads_end.assign(g.kernel.size(), 0);
    } else {
      g = pool_geometry(ctx, x);
    }
    dnnl::algorithm alg = dnnl::algorithm::pooling_max;
    if (op_ == "AveragePool" || op_ == "GlobalAveragePool") {
      bool include_pad = ctx.attrs().get_int("count_include_pad", 0) != 0;
      bool ceil_padded = false;
      for (int64_t e : g.ceil_extra) ceil_padded |= e != 0;
      // ONNX does not count ceil_mode's extra end padding; oneDNN would.
      ANVIL_PREPARE_CHECK(ctx, !(include_pad && ceil_padded), ErrorKind::kUnsupported,
                          "count_include_pad with ceil_mode padding");
      alg = include_pad ? dnnl::algorithm::pooling_avg_include_padding : dnnl::algorithm::pooling_avg_exclude_padding;
    }
    const Shape& y = ctx.output_shape(0);
    src_md_ = du::plain_desc(x, DType::kFloat32);
    dst_md_ = du::plain_desc(y, DType::kFloat32);
    memory::dims dil;
    for (int64_t d : g.dilations) dil.push_back(d - 1);
    auto make_pd = [&](const memory::desc& src, const memory::desc& dst) {
      dnnl::pooling_v2_forward::desc desc(dnnl::prop_kind::forward_inference, alg, src, dst, du::dims(g.strides),
                                          du::dims(g.kernel), dil, du::dims(g.pads_begin), du::dims(g.pads_end));
      return dnnl::pooling_v2_forward::primitive_desc(desc, du::user_scratchpad_attr(), du::engine());
    };
    auto is_jit = [](const dnnl::pooling_v2_forward::primitive_desc& pd) {
      return std::string(pd.impl_info_str()).find("jit") != std::string::npos;
    };
    try {
      std::optional<dnnl::pooling_v2_forward::primitive_desc> pd;
      // In a plan, pool in the layout the producer wrote (a blocked conv output
      // stays blocked), the output in the same format.
      if (Layout in = ctx.incoming_layout(0); in && ctx.blocked_inputs_allowed()) {
        memory::desc src = du::desc_of({DType::kFloat32, x, in});
        memory::desc any(du::dims(y), memory::data_type::f32, memory::format_tag::any);
        if (auto same = make_pd(src, any); is_jit(same)) pd = same;
      }
      if (!pd) pd = make_pd(src_md_, dst_md_);
      // oneDNN has only reference pooling for NCHW: run the JIT kernel on the blocked layout instead.
      if (x.size() >= 4 && !is_jit(*pd)) {
        dnnl::pooling_v2_forward::primitive_desc blocked = make_pd(du::blocked_desc(x), du::blocked_desc(y));
        if (is_jit(blocked)) pd = blocked;
      }
      scratchpad_md_ = pd->scratchpad_desc();
      scratch_ = io_.init(ctx, src_md_, pd->src_desc(), dst_md_, pd->dst_desc(), scratchpad_md_.get_size());
      impl_ = du::impl_name(*pd);
      if (op_ == "MaxPool" && io_.planned && x.size() == 4) prepare_own_max_pool(ctx, *pd, x, y, g);
      if (!own_max_) primitive_ = dnnl::pooling_v2_forward(*pd);  // not compiled for a node Anvil's loop runs
    } catch (const dnnl::error& e) {
      ctx.fail(ErrorKind::kUnsupported, "oneDNN has no pooling for this case ({})", e.what());
    }
    std::vector<TensorType> out = ctx.output_types();
    out[0].layout = io_.dst_layout;
    return out;
  }

  void run(const RunContext& ctx) const override {
    if (own_max_) return run_own_max_pool(ctx);
    memory dst = io_.dst.output(ctx.out(0).raw(), ctx.scratch);
    std::unordered_map<int, memory> args{{DNNL_ARG_SRC, io_.src.input(ctx.in(0).raw(), ctx.scratch)}, {DNNL_ARG_DST, dst}};
    if (scratchpad_md_.get_size()) args[DNNL_ARG_SCRATCHPAD] = du::wrap(scratchpad_md_, ctx.scratch);
    primitive_.execute(du::stream(), args);
    io_.dst.finish(dst, ctx.out(0).raw());
    du::stream().wait();
  }

  size_t scratch_bytes() const override { return scratch_; }
  std::string impl_name() const override { return impl_; }
  std::string layout_name() const override { return io_.name(); }
  Layout input_layout(size_t i) const override { return i == 0 ? io_.src_layout : nullptr; }
  std::vector<std::string> alternatives() const override {
    if (!own_max_fits_) return {};
    return {"dnnl", "max_pool"};
  }

 private:
  // Anvil's loop when both tensors keep each pixel's channels together.
  void prepare_own_max_pool(const PrepareContext& ctx, const dnnl::pooling_v2_forward::primitive_desc& pd,
                            const Shape& x, const Shape& y, const SpatialGeometry& g) {
    const std::optional<du::PixelLayout> src = du::pixel_layout(pd.src_desc()), dst = du::pixel_layout(pd.dst_desc());
    if (!src || !dst || src->channels != dst->channels || src->planes != dst->planes) return;
    own_max_fits_ = true;
    if (ctx.choice() == 0) return;  // the rule: Anvil's loop wherever it fits
    src_pixels_ = *src;
    dst_pixels_ = *dst;
    plane_ = PoolPlane(x, y, g);
    own_max_ = true;
    impl_ = std::string(vec::vec_impl_name()) + ":max_pool";
  }

  void run_own_max_pool(const RunContext& ctx) const {
    const float* src = ctx.in(0).data<float>();
    auto* dst = static_cast<float*>(ctx.out(0).raw());
    const auto pool = vec::vec_kernels().max_pool_rows;
    const PoolPlane& pp = plane_;
    const int64_t items = src_pixels_.planes * pp.out_h;
#pragma omp parallel for schedule(static) if (items * pp.out_w * src_pixels_.channels > 32768)
    for (int64_t item = 0; item < items; ++item) {
      const int64_t plane = item / pp.out_h, row = item % pp.out_h;
      pool(src + plane * src_pixels_.plane, pp.in_h, pp.in_w, src_pixels_.pixel, dst + plane * dst_pixels_.plane,
           pp.out_w, dst_pixels_.pixel, src_pixels_.channels, pp.window, row, row + 1);
    }
  }

  std::string op_;
  bool own_max_ = false, own_max_fits_ = false;
  du::PixelLayout src_pixels_{}, dst_pixels_{};
  PoolPlane plane_;
  dnnl::primitive primitive_;
  memory::desc src_md_, dst_md_, scratchpad_md_;
  du::ActivationLayouts io_;
  size_t scratch_ = 0;
  std::string impl_;
};

// anvil.MaxPoolGrad(dY, X) -> dX in a plan's layout: where X arrives with
// each pixel's channels together (NHWC, or channel blocks without padding:
// the forward pooling's format), dY is read and dX written in the same
// format, on Anvil's vectorized loop (vec/pool_impl.h), so training's
// gradients between convolutions need no reorder to plain and back around
// the pooling. 2-D only; plain tensors are left to the reference kernel,
// whose values this loop gives bit for bit.
class PlannedMaxPoolGrad : public Kernel {
 public:
  explicit PlannedMaxPoolGrad(const ir::Node&) {}

  std::vector<TensorType> prepare(const PrepareContext& ctx) override {
    const Shape &dy = ctx.input_shape(0), &x = ctx.input_shape(1);
    const Layout in = ctx.incoming_layout(1);
    ANVIL_PREPARE_CHECK(ctx, in && ctx.blocked_inputs_allowed() && ctx.blocked_outputs_allowed() && x.size() == 4,
                        ErrorKind::kUnsupported, "X arrives plain, or is not 2-D: the reference kernel");
    ANVIL_PREPARE_CHECK(ctx, dy.size() == x.size() && dy[0] == x[0] && dy[1] == x[1], ErrorKind::kInvalidModel,
                        "dY {} is not MaxPool's output shape for X {}", shape_str(dy), shape_str(x));
    const memory::desc x_md = du::desc_of({DType::kFloat32, x, in});
    const du::Format format = du::format_of(in, x);  // dY in X's: NHWC, or the channel blocks pooling keeps
    const memory::desc dy_md = format ? format(dy) : memory::desc();
    const std::optional<du::PixelLayout> xp = du::pixel_layout(x_md);
    const std::optional<du::PixelLayout> dp = dy_md ? du::pixel_layout(dy_md) : std::nullopt;
    ANVIL_PREPARE_CHECK(ctx, xp && dp && xp->channels == dp->channels && xp->planes == dp->planes,
                        ErrorKind::kUnsupported, "X's layout {} keeps no whole pixels: the reference kernel",
                        in->name());
    const SpatialGeometry g = pool_geometry(ctx, x, &dy);
    x_pixels_ = *xp;
    dy_pixels_ = *dp;
    x_layout_ = in;
    dy_layout_ = du::layout_of(dy_md, dy, DType::kFloat32);
    plane_ = PoolPlane(x, dy, g);
    relu_gate_ = ctx.attrs().get_int("relu_gate", 0) != 0;
    std::vector<TensorType> out = ctx.output_types();
    out[0].layout = x_layout_;
    return out;
  }

  Layout input_layout(size_t i) const override { return i == 0 ? dy_layout_ : i == 1 ? x_layout_ : nullptr; }
  std::string layout_name() const override { return kernels::layout_name(x_layout_); }
  std::string impl_name() const override { return std::string(vec::vec_impl_name()) + ":max_pool_grad"; }

  // A thread per plane (batch item, or its channel block): overlapping
  // windows add into the same rows of dX.
  void run(const RunContext& ctx) const override {
    const float* dy = ctx.in(0).data<float>();
    const float* x = ctx.in(1).data<float>();
    float* dx = ctx.out(0).data<float>();
    const auto grad = vec::vec_kernels().max_pool_grad_rows;
    const PoolPlane& pp = plane_;
    const int64_t planes = x_pixels_.planes, plane_floats = pp.in_h * pp.in_w * x_pixels_.pixel;
#pragma omp parallel for schedule(static) if (planes * plane_floats > 32768)
    for (int64_t p = 0; p < planes; ++p) {
      float* dxp = dx + p * x_pixels_.plane;
      std::fill(dxp, dxp + plane_floats, 0.f);
      grad(dy + p * dy_pixels_.plane, pp.out_w, dy_pixels_.pixel, x + p * x_pixels_.plane, pp.in_h, pp.in_w,
           x_pixels_.pixel, dxp, x_pixels_.channels, pp.window, relu_gate_, 0, pp.out_h);
    }
  }

 private:
  du::PixelLayout x_pixels_{}, dy_pixels_{};
  Layout x_layout_, dy_layout_;
  PoolPlane plane_;
  bool relu_gate_ = false;
};

static Registrar max_pool_grad_planned("MaxPoolGrad", Backend::kDnnl, factory_of<PlannedMaxPoolGrad>(), "anvil",
                                       {{kFloat32Only}});

// MaxPool's optional Indices output is left to the reference kernel.
std::unique_ptr<Kernel> make_pool(const ir::Node& node) {
  if (node.output(1)) return nullptr;
  return std::make_unique<DnnlPool>(node);
}

ANVIL_REGISTER_KERNEL_TYPED("MaxPool", kDnnl, make_pool, {kFloat32Only});
ANVIL_REGISTER_KERNEL_TYPED("AveragePool", kDnnl, make_pool, {kFloat32Only});
ANVIL_REGISTER_KERNEL_TYPED("GlobalMaxPool", kDnnl, make_pool, {kFloat32Only});
ANVIL_REGISTER_KERNEL_TYPED("GlobalAveragePool", kDnnl, make_pool, {kFloat32Only});

}  // namespace

}  // namespace anvil::kernels
