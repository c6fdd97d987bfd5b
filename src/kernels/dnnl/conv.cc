// Conv, anvil.FusedConv and ConvTranspose on oneDNN (float32, 1-D to 3-D),
// and anvil.FusedConvDepthwise (2-D).
//
// Rules pick other implementations for 2-D convolutions (rule_pick):
// - where oneDNN's choice is its jit:avx2 kernel on small output planes
//   (ResNet's 7x7 stage, and its 14x14 3x3 convolutions; 1x1 windows only
//   with two threads or more), Anvil's GEMM over the same blocked layouts
//   (vec::conv_gemm: the input gathered into the GEMM's panels as an
//   implicit im2col, the weights packed once);
// - Anvil's Winograd convolution (vec::conv_winograd, F(4x4, 3x3)) for 3x3
//   windows at stride 1 over the same blocked layouts, where oneDNN's choice
//   is jit:avx2 on output planes of at least kWinogradMinPlane pixels, and
//   on AVX-512 over oneDNN's Winograd on planes of kAnvilWinogradMinPlane,
//   where each thread gets rows of tiles enough and its weights stay
//   within a bound (anvil_winograd_pays);
// - oneDNN's Winograd convolution (AVX-512 only in oneDNN 2.6: F(2x2, 3x3)
//   at batch 1, F(4x4, 3x3) above) for 3x3 windows at stride 1 on output
//   planes of at least kWinogradMinPlane pixels (winograd_pd);
// - oneDNN's jit_dw kernel where it picks brdgmm_dw for a depthwise
//   convolution, on planes of at least kJitDwMinPlane pixels (jit_dw_pd).
// And one for 1-D convolutions: Anvil's GEMM over channels-last activations
// (vec::conv1d_gemm) where oneDNN's pick is brgconv and its windows start a
// multiple of 4 KiB apart (conv1d_gemm_pays).
// `--tune` times those that fit instead (Kernel::alternatives).
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <optional>

#include <omp.h>

#include "kernels/dnnl/common.h"
#include "kernels/fusion_advice.h"
#include "kernels/nn_geometry.h"
#include "kernels/registry.h"
#include "kernels/vec/gemm.h"
#include "kernels/vec/winograd.h"
#include "kernels/weight_cache.h"

namespace anvil::kernels {

namespace {

using dnnl::memory;
namespace du = dnnl_util;

// Whether environment variable `name` is set to `value` (the switches that
// turn a rule off, read once by each caller).
bool env_is(const char* name, const char* value) {
  const char* v = std::getenv(name);
  return v && std::string(v) == value;
}

memory::desc activation_desc(const Shape& shape) {
  if (!du::blocked_layouts_allowed()) return du::plain_desc(shape, DType::kFloat32);
  return memory::desc(du::dims(shape), memory::data_type::f32, memory::format_tag::any);
}

// One group per channel, as many outputs as inputs.
bool is_depthwise(const Shape& x, const Shape& y, int64_t group) { return group == x[1] && y[1] == x[1]; }

// Whether a 2-D convolution of x into y, dense or depthwise, may run in the ISA's
// channel blocks (nChw16c on AVX-512, nChw8c below): both channel counts
// fill whole blocks, and the plan lets the kernel pick its layouts.
bool channel_blocks_fit(const PrepareContext& ctx, const Shape& x, const Shape& y, int64_t group) {
  if (!du::blocked_layouts_allowed() || !ctx.blocked_inputs_allowed() || !ctx.blocked_outputs_allowed()) return false;
  if (x.size() != 4 || (group != 1 && !is_depthwise(x, y, group))) return false;
  const int64_t block = du::channel_block(x);
  return x[1] % block == 0 && y[1] % block == 0;
}

// Whether a convolution asks for channel blocks rather than oneDNN's pick:
// where its output feeds a channel Concat that the planner can place in
// place once its inputs are whole channel blocks (batch 1; in NHWC, oneDNN's
// pick for brgconv on AVX-512, each input's channels are a strided range and
// the concat copies), and where its input already arrives in those blocks
// (no reorder) and the window moves by one pixel, or the convolution is
// depthwise (jit_dw at either stride: MobileNetV2's first block, after a
// first convolution that writes blocks, reads_plain_image; in NHWC its
// 112x112 planes took reorders). SqueezeNet on AVX-512: its
// concats were 6% of a run, and jit's nChw16c convolutions ran its fire
// modules as fast as brgconv's NHWC ones. ResNet's 3x3s run 3-13% slower in
// nChw16c, so a model without channel concats keeps oneDNN's pick, and its
// strided convolutions after Winograd ones (which write nChw16c) run 10-50%
// slower in jit's nChw16c than brgconv's NHWC after a reorder.
// Whether a convolution takes channel blocks to run on Anvil's conv_gemm on
// AVX-512 (where oneDNN's pick is brgconv in NHWC): output planes of at
// most kStreamedGemmMaxPixels at batch 1, one group, on one thread, where
// the model's weights stream from memory (du::weights_stream) and the
// GEMM's prefetch of its next weight panel pays. ResNet-50's layer4 at one
// thread: its 3x3s 1.61-1.68 ms against brgconv's 1.91-2.17 (ONNX Runtime's
// MLAS 1.79-1.88), its 1x1s 0.70-0.76 against 0.88-0.93, the model 0.94-0.96
// of its time; ResNet-18 0.94-0.96 (alternating runs, Intel Xeon with AMX).
// At two threads ResNet-50 gained as much but ResNet-18 ran 1.01-1.04 of its
// time, so it stays at one thread.
constexpr int64_t kStreamedGemmMaxPixels = 49;
bool streamed_gemm_wanted(const PrepareContext& ctx, const Shape& x, const Shape& y, int64_t group) {
  return y.size() == 4 && y[0] == 1 && y[2] * y[3] <= kStreamedGemmMaxPixels && group == 1 &&
         ctx.num_threads() == 1 && ctx.constant(1) && channel_blocks_fit(ctx, x, y, group) && du::weights_stream(ctx);
}

bool wants_channel_blocks(const PrepareContext& ctx, const Shape& x, const Shape& y, int64_t group, bool strided) {
  if (!channel_blocks_fit(ctx, x, y, group)) return false;
  if (ctx.output_feeds_channel_concat() && y[0] == 1) return true;
  return (!strided || is_depthwise(x, y, group)) &&
         same_layout(ctx.incoming_layout(0), du::layout_of(du::blocked_desc(x), x, DType::kFloat32));
}

// Whether a grouped convolution (not depthwise) keeps NHWC, the layout its
// input arrives in (brgconv's, on AVX-512, for the 1x1 convolutions around
// it). With `any` oneDNN takes channel blocks as wide as a group (nChw8c
// for RegNet's groups of 8), and the reorders into and out of them cost more
// than its NHWC kernel loses. Intel Xeon, 2 threads: RegNet-Y-400MF 6.85 ->
// 6.08 ms (49 reorders -> 4), ResNeXt-50 32x4d 1% faster.
bool grouped_keeps_nhwc(const PrepareContext& ctx, const Shape& x, int64_t group, bool depthwise) {
  if (group == 1 || depthwise || !du::blocked_layouts_allowed() || !ctx.blocked_inputs_allowed() ||
      !ctx.blocked_outputs_allowed() || x.size() != 4)
    return false;
  return same_layout(ctx.incoming_layout(0), du::layout_of(du::nhwc_desc(x), x, DType::kFloat32));
}

// Whether a convolution reads an image (at most kImageChannels channels: a
// network's first convolution) in plain NCHW as it arrives, into channel
// blocks: oneDNN's jit kernel reads that layout directly, where its pick for
// `any` on AVX-512 (brgconv, NHWC) needs the image reordered first and runs
// 1-3 input channels poorly. Intel Xeon, MobileNetV2's first convolution (3
// -> 32 at 224x224, stride 2) with the input's reorder: 0.139 against 0.199
// ms at one thread, 0.072-0.087 against 0.154 at two. Whole models in
// alternating pairs (docs/benchmarks.md): the super-resolution net 0.89,
// ResNet-50 0.955-0.99, ResNet-18 0.96-0.97, SqueezeNet 0.97-0.98,
// MobileNetV2 level at one thread and 0.99 at two (its depthwise
// convolutions keeping the blocks: wants_channel_blocks). Below AVX-512
// oneDNN's pick already reads NCHW.
constexpr int64_t kImageChannels = 4;  // gray, RGB or RGBA (measured with 1 and 3)
bool reads_plain_image(const PrepareContext& ctx, const Shape& x, const Shape& y, int64_t group) {
  if (group != 1 || !du::blocked_layouts_allowed() || !ctx.blocked_outputs_allowed() || x.size() != 4) return false;
  if (ctx.incoming_layout(0)) return false;  // its producer wrote a layout of its own
  const int64_t block = du::channel_block(x);
  return x[1] <= kImageChannels && y[1] % block == 0;
}

// make()'s primitive descriptor, or none where oneDNN has no implementation
// for it (dnnl::error): the optional kernels a convolution may take.
template <typename Make>
auto pd_if_any(Make make) -> std::optional<decltype(make())> {
  try {
    return make();
  } catch (const dnnl::error&) {
    return std::nullopt;
  }
}

// ANVIL_WINOGRAD=0 keeps every convolution on oneDNN's direct algorithm.
bool allow_winograd() {
  static const bool allow = !env_is("ANVIL_WINOGRAD", "0");
  return allow;
}

// Convolution weights w [C_out, C_in, taps] and conv_gemm's B [taps * C_in,
// C_out] hold element (o, c, t) at w[(o * C_in + c) * taps + t] and
// b[(t * C_in + c) * C_out + o]: calls f(w's index, b's index) for each.
template <typename F>
void for_each_conv_weight(int64_t cout, int64_t cin, int64_t taps, F f) {
  for (int64_t o = 0; o < cout; ++o)
    for (int64_t c = 0; c < cin; ++c)
      for (int64_t t = 0; t < taps; ++t) f((o * cin + c) * taps + t, (t * cin + c) * cout + o);
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
    // The schema checked ranks, channels, group and bias shape; the ranks again
    // here, as the geometry below indexes them.
    const Shape& x = ctx.input_shape(0);
    ANVIL_PREPARE_CHECK(ctx, x.size() >= 3 && ctx.input_shape(1).size() == x.size(), ErrorKind::kInvalidArgument,
                        "X {} and W {} must have the same rank >= 3", shape_str(x), shape_str(ctx.input_shape(1)));
    ANVIL_PREPARE_CHECK(ctx, x.size() <= 5, ErrorKind::kUnsupported, "input X has {} spatial dimensions; at most 3 are supported",
                        x.size() - 2);
    group_ = ctx.attrs().get_int("group", 1);
  }

  // Weights packed for oneDNN and its scratchpad (unless the node runs on
  // Anvil's GEMM: pack_weights false), bias, and the activations' layouts.
  void finish_prepare(const PrepareContext& ctx, const dnnl::primitive_desc_base& pd, const memory::desc& plain,
                      bool pack_weights = true) {
    if (const Tensor* w = pack_weights ? ctx.constant(1) : nullptr) {
      packed_ = du::pack_shared(ctx, *w, plain, pd.weights_desc());
      weights_packed_ = true;
    }
    if (ctx.has_input(2)) bias_desc_ = du::plain_desc(ctx.input_shape(2), DType::kFloat32);
    impl_ = du::impl_name(pd);
    const size_t primitive_scratch = pack_weights ? pd.scratchpad_desc().get_size() : 0;  // none on Anvil's GEMM
    scratch_ = io_.init(ctx, src_md_, pd.src_desc(), dst_md_, pd.dst_desc(), primitive_scratch);
    // Weights known only at run time (training) in the primitive's layout:
    // reordered on every run.
    if (pack_weights && !weights_packed_) scratch_ = weights_.init(plain, pd.weights_desc(), scratch_);
    dst_bytes_ = pd.dst_desc().get_size();
  }

  memory::desc bias_md(const PrepareContext& ctx, int64_t channels) const {
    if (!ctx.has_input(2)) return memory::desc();
    return du::plain_desc({channels}, DType::kFloat32);
  }

  // The output in the primitive's layout, holding `sum` (the residual of a
  // sum post-op) when given.
  memory output_with_sum(const RunContext& ctx, const Tensor* sum) const {
    memory dst = io_.dst.output(ctx.out(0).raw(), ctx.scratch);
    if (sum) {
      if (io_.dst.staged()) io_.dst.load(sum->raw(), dst);
      else if (sum->raw() != ctx.out(0).raw()) std::memcpy(ctx.out(0).raw(), sum->raw(), dst_bytes_);
    }
    return dst;
  }

  void execute(const RunContext& ctx, const Tensor* sum) const {
    memory dst = output_with_sum(ctx, sum);
    std::unordered_map<int, memory> args;
    args[DNNL_ARG_SRC] = io_.src.input(ctx.in(0).raw(), ctx.scratch);
    args[DNNL_ARG_WEIGHTS] = weights_packed_ ? packed_.memory : weights_.input(ctx.in(1).raw(), ctx.scratch);
    if (ctx.inputs.size() > 2 && ctx.inputs[2]) args[DNNL_ARG_BIAS] = du::wrap(bias_desc_, ctx.in(2).raw());
    args[DNNL_ARG_DST] = dst;
    if (scratchpad_md_.get_size()) args[DNNL_ARG_SCRATCHPAD] = du::wrap(scratchpad_md_, ctx.scratch);
    add_post_op_args(ctx, args);
    primitive_.execute(du::stream(), args);
    io_.dst.finish(dst, ctx.out(0).raw());
    du::stream().wait();
  }

  // The arguments of post-ops that read tensors of their own.
  virtual void add_post_op_args(const RunContext&, std::unordered_map<int, memory>&) const {}

  int64_t group_ = 1;
  dnnl::primitive primitive_;
  memory::desc src_md_, dst_md_, bias_desc_, scratchpad_md_;
  du::ActivationLayouts io_;
  du::Staging weights_;  // run-time weights (not packed): reordered per run where the primitive wants
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
    std::string act = fused_ ? ctx.attrs().get_string("activation", "") : "";
    if (fused_) {
      has_sum_ = ctx.has_input(3);
      if (has_sum_) {
        ANVIL_PREPARE_CHECK(ctx, ctx.input_shape(3) == y && ctx.input_dtype(3) == DType::kFloat32,
                            ErrorKind::kUnsupported, "residual input must match the output {}", shape_str(y));
        ops.append_sum(1.f);
      }
      const float alpha = ctx.attrs().get_float("activation_alpha", 0.f);
      const float beta = ctx.attrs().get_float("activation_beta", 0.f);
      epilogue_.alpha = alpha;
      epilogue_.beta = beta;
      // A Swish (SiLU) runs after the convolution, on Anvil's vectorized
      // loop over its output, rather than as oneDNN's post-op: the
      // implementations are then picked as for a convolution without one,
      // so 3x3s may take a Winograd convolution (Anvil's takes no Swish). AMD
      // EPYC Zen 4, per node against the post-op: brgconv 0.80, jit 0.84,
      // jit_1x1 0.90, brgconv_1x1 0.94 on a YOLOv5n-like detector, whose
      // run took 0.88 of its time at one thread and 0.94 at two;
      // EfficientNet-B0 0.96-0.98 (its depthwise jit_dw 0.83, its
      // brgconv_1x1 1.01).
      if (act == "Swish") {
        swish_apart_ = true;
        swish_alpha_ = alpha;
        act.clear();
      }
      ANVIL_PREPARE_CHECK(ctx, du::append_activation(ops, act, alpha, beta), ErrorKind::kUnsupported,
                          "activation {} (alpha {}, beta {}) has no oneDNN post-op", act, alpha, beta);
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
    // Weights known only at run time (training's) stay plain, unless the
    // channels fill blocks: then oneDNN's blocked kernels, with the weights
    // reordered on each run, beat its im2col GEMM (gemm:jit) on plain ones
    // (a 3x3 convolution of 16 into 32 channels at 8x8, batch 64, Intel
    // Xeon, two threads: 0.11 against 0.38 ms).
    const bool run_time_blocks = !ctx.constant(1) && du::fills_channel_blocks(x, cout, group_);
    memory::desc w_any = ctx.constant(1) || run_time_blocks
                             ? memory::desc(du::dims(wdims), memory::data_type::f32, memory::format_tag::any)
                             : w_plain;
    try {
      // oneDNN's first implementation for these layouts, or the first whose
      // name starts with `impl` (dnnl::error when none does). The iteration
      // reads the operation descriptor: it must stay in this scope.
      auto make_pd = [&](const memory::desc& src, const memory::desc& dst,
                         dnnl::algorithm algorithm = dnnl::algorithm::convolution_direct,
                         const std::string& impl = "") {
        dnnl::convolution_forward::desc desc(dnnl::prop_kind::forward_inference, algorithm,
                                             src, w_any, bias_md(ctx, cout), dst, du::dims(g.strides),
                                             du::dims_minus(g.dilations, 1), du::dims(g.pads_begin), du::dims(g.pads_end));
        dnnl::convolution_forward::primitive_desc pd(desc, attr, du::engine());
        while (du::impl_name(pd).rfind(impl, 0) != 0)
          if (!pd.next_impl()) throw dnnl::error(dnnl_unimplemented, "no such convolution implementation");
        return pd;
      };
      // Channel blocks only where a jit kernel takes them (some paddings and
      // window sizes leave only the reference kernel): else oneDNN's pick.
      const bool strided = std::any_of(g.strides.begin(), g.strides.end(), [](int64_t s) { return s != 1; });
      std::optional<dnnl::convolution_forward::primitive_desc> blocked;
      if (wants_channel_blocks(ctx, x, y, group_, strided) || streamed_gemm_wanted(ctx, x, y, group_)) {
        blocked = pd_if_any([&] { return make_pd(du::blocked_desc(x), du::blocked_desc(y)); });
        if (blocked && du::impl_name(*blocked).rfind("dnnl:ref", 0) == 0) blocked.reset();
      }
      if (!blocked && grouped_keeps_nhwc(ctx, x, group_, is_depthwise(x, y, group_))) {
        blocked = pd_if_any([&] { return make_pd(du::nhwc_desc(x), du::nhwc_desc(y)); });
        const std::string impl = blocked ? du::impl_name(*blocked) : "";
        if (impl.rfind("dnnl:jit", 0) != 0 && impl.rfind("dnnl:brg", 0) != 0) blocked.reset();  // not gemm or ref
      }
      if (!blocked && reads_plain_image(ctx, x, y, group_)) {
        blocked = pd_if_any([&] { return make_pd(src_md_, activation_desc(y)); });
        if (blocked && du::impl_name(*blocked).rfind("dnnl:jit:", 0) != 0) blocked.reset();
      }
      dnnl::convolution_forward::primitive_desc pd = blocked ? *blocked : make_pd(activation_desc(x), activation_desc(y));
      std::optional<dnnl::convolution_forward::primitive_desc> winograd = winograd_pd(ctx, x, w, y, g, make_pd);
      std::optional<dnnl::convolution_forward::primitive_desc> jit_dw = jit_dw_pd(pd, make_pd);
      alternatives_ = {"dnnl"};
      if (winograd) alternatives_.push_back("dnnl_winograd");
      if (jit_dw) alternatives_.push_back("dnnl_jit_dw");
      const bool gemm_fits = conv_gemm_fits(ctx, x, w, act, pd);
      if (gemm_fits) alternatives_.push_back("conv_gemm");
      std::optional<dnnl::convolution_forward::primitive_desc> nwc =
          conv1d_gemm_fits(ctx, x, act, g) ? pd_if_any([&] { return make_pd(nwc_desc(x), nwc_desc(y)); })
                                           : std::nullopt;
      if (nwc) alternatives_.push_back("conv1d_gemm");
      const bool anvil_winograd_on_pd = gemm_fits && allow_winograd() && is_3x3_dense(w, g);
      const bool anvil_winograd_on_blocks = winograd && conv_gemm_fits(ctx, x, w, act, *winograd);
      const bool anvil_winograd_fits = anvil_winograd_on_pd || anvil_winograd_on_blocks;
      if (anvil_winograd_fits) alternatives_.push_back("winograd");
      const std::string pick =
          ctx.choice() >= 0 && static_cast<size_t>(ctx.choice()) < alternatives_.size()
              ? alternatives_[static_cast<size_t>(ctx.choice())]
              : rule_pick(ctx, w, y, pd, gemm_fits, anvil_winograd_fits,
                          winograd && dnnl_winograd_weights_pay(*winograd, y),
                          jit_dw.has_value(), nwc && conv1d_gemm_pays(x, g, du::impl_name(pd)));
      const bool anvil = pick == "conv_gemm" || pick == "winograd" || pick == "conv1d_gemm";
      if (pick == "dnnl_winograd" || (pick == "winograd" && !anvil_winograd_on_pd)) pd = *winograd;
      if (pick == "dnnl_jit_dw") pd = *jit_dw;
      if (pick == "conv1d_gemm") pd = *nwc;
      if (!anvil) {
        primitive_ = dnnl::convolution_forward(pd);
        scratchpad_md_ = pd.scratchpad_desc();
      }
      finish_prepare(ctx, pd, w_plain, !anvil);
      if (pick == "conv_gemm") prepare_conv_gemm(ctx, x, w, y, g, act == "Relu");
      if (pick == "winograd") prepare_winograd(ctx, x, w, y, g, act == "Relu");
      if (pick == "conv1d_gemm") prepare_conv1d_gemm(ctx, x, w, y, g, act);
    } catch (const dnnl::error& e) {
      ctx.fail(ErrorKind::kUnsupported, "oneDNN has no convolution for this case ({})", e.what());
    }
    std::vector<TensorType> out = ctx.output_types();
    out[0].layout = io_.dst_layout;
    output_floats_ = static_cast<int64_t>(type_bytes(out[0]) / sizeof(float));
    return out;
  }

  int inplace_input() const override { return fused_ ? 3 : -1; }

  // Indexed as the choices: oneDNN's own pick, then those that fit.
  std::vector<std::string> alternatives() const override {
    return alternatives_.size() > 1 ? alternatives_ : std::vector<std::string>{};
  }

  void run(const RunContext& ctx) const override {
    const Tensor* sum = has_sum_ ? &ctx.in(3) : nullptr;
    if (conv_gemm_ || winograd_ || conv1d_gemm_) run_on_anvil(ctx, sum);
    else execute(ctx, sum);
    if (swish_apart_) swish_output(ctx);
  }

 private:
  // Output planes of at most this many pixels run on Anvil's GEMM where
  // oneDNN's choice is jit:avx2 (rule_pick).
  // Measured on Zen 3 (tuner and alternating runs): at 2 threads ResNet's
  // 7x7 stage ran up to 20% faster per node (oneDNN splits 7 output rows
  // unevenly; the GEMM splits C_out's panels), ResNet-18 about 11% and
  // ResNet-50 2% faster in the model. At 14x14, 3x3 windows ran 0.72-1.10
  // of oneDNN's time once the gather did its window arithmetic per tap
  // (ResNet-18 another 9% faster), 1x1 ones 0.99-1.24. At one thread,
  // windows wider than 1x1 on planes of 196 pixels or fewer read 0.65-0.92
  // of oneDNN's time (ResNet-18, ResNet-50, SqueezeNet; ResNet-18 ran 0.93
  // of its time, 7 of 8 pairs faster); 1x1 windows there read 1.03-1.15,
  // so those stay at two threads or more.
  static constexpr int64_t kConvGemmMaxPixels = 64;
  static constexpr int64_t kConvGemmMaxPixelsWindow = 196;  // windows wider than 1x1 (ResNet's 14x14 3x3s)
  // A 1x1 window also needs this many output channels: ResNet's (512, 2048)
  // ran 0.87-0.98 of oneDNN's time at 7x7, MobileNetV2's (160, 320) 1.01-1.04.
  static constexpr int64_t kConvGemmMinOutputs1x1 = 512;

  // Whether the convolution can run on vec::conv_gemm: 2-D, one group,
  // constant weights, channels in whole vectors, no activation but ReLU, and
  // oneDNN's layouts the blocked one of the vector width.
  bool conv_gemm_fits(const PrepareContext& ctx, const Shape& x, const Shape& w, const std::string& act,
                      const dnnl::convolution_forward::primitive_desc& pd) const {
    const int64_t width = vec::vec_kernels().gemm.width;
    if (x.size() != 4 || group_ != 1 || !ctx.constant(1) || (act != "" && act != "Relu")) return false;
    if (x[1] % width != 0 || w[0] % width != 0) return false;
    for (const dnnl::memory::desc& md : {pd.src_desc(), pd.dst_desc()}) {
      const std::optional<du::PixelLayout> layout = du::pixel_layout(md);
      if (!layout || layout->channels != width || layout->pixel != width) return false;
    }
    return true;
  }

  // The implementation the rules pick among those that fit (alternatives_):
  // where oneDNN's choice is its jit:avx2 kernel, Anvil's Winograd on output
  // planes of kWinogradMinPlane pixels or more, and conv_gemm on planes of
  // at most kConvGemmMaxPixels (a 1x1 window, with kConvGemmMinOutputs1x1
  // outputs and two threads or more) or kConvGemmMaxPixelsWindow (wider
  // windows); else (AVX-512) Anvil's Winograd on planes of
  // kAnvilWinogradMinPlane pixels or more and oneDNN's on planes of
  // kWinogradMinPlane or more; else jit_dw over brdgmm_dw on planes of
  // kJitDwMinPlane pixels or more; else oneDNN's own pick. A 1-D
  // convolution takes conv1d_gemm where conv1d_gemm_pays, else oneDNN's pick.
  std::string rule_pick(const PrepareContext& ctx, const Shape& w, const Shape& y,
                        const dnnl::convolution_forward::primitive_desc& pd, bool gemm_fits, bool anvil_winograd_fits,
                        bool winograd_fits, bool jit_dw_fits, bool conv1d_gemm_wanted) const {
    if (conv1d_gemm_wanted) return "conv1d_gemm";
    if (y.size() != 4) return "dnnl";  // each alternative below is 2-D only
    const std::string impl = du::impl_name(pd);
    const int64_t pixels = y[2] * y[3];
    const bool small = w[2] * w[3] > 1 ? pixels <= kConvGemmMaxPixelsWindow
                                       : pixels <= kConvGemmMaxPixels && w[0] >= kConvGemmMinOutputs1x1 &&
                                             ctx.num_threads() >= 2;
    const bool jit_avx2 = impl == "dnnl:jit:avx2" || impl == "dnnl:jit_1x1:avx2";
    if (anvil_winograd_fits && anvil_winograd_pays(ctx, w, y) &&
        (jit_avx2 ? pixels >= kWinogradMinPlane : winograd_fits && pixels >= kAnvilWinogradMinPlane))
      return "winograd";
    if (gemm_fits && jit_avx2 && small) return "conv_gemm";
    if (gemm_fits && streamed_gemm_wanted(ctx, ctx.input_shape(0), y, group_)) return "conv_gemm";
    if (winograd_fits && pixels >= kWinogradMinPlane) return "dnnl_winograd";
    if (jit_dw_fits && pixels >= kJitDwMinPlane) return "dnnl_jit_dw";
    return "dnnl";
  }

  // oneDNN's jit_dw kernel for a depthwise convolution where oneDNN picks
  // brdgmm_dw (AVX-512), in the same layouts (NHWC). MobileNetV2's 17
  // depthwise 3x3s on the Intel Xeon, one thread, alone: jit_dw at 0.79-0.97
  // of brdgmm's time on 8 with output planes of 14x14 and more, 1.03-1.07
  // on the two with 7x7 outputs (hence kJitDwMinPlane); OpenVINO's own
  // depthwise kernels were 7% faster than brdgmm over the model.
  static constexpr int64_t kJitDwMinPlane = 196;
  template <typename MakePd>
  static std::optional<dnnl::convolution_forward::primitive_desc> jit_dw_pd(
      const dnnl::convolution_forward::primitive_desc& pd, MakePd make_pd) {
    if (pd.dst_desc().dims().size() != 4 || du::impl_name(pd).rfind("dnnl:brdgmm_dw", 0) != 0) return std::nullopt;
    return pd_if_any(
        [&] { return make_pd(pd.src_desc(), pd.dst_desc(), dnnl::algorithm::convolution_direct, "dnnl:jit_dw:"); });
  }

  // Whether Anvil's Winograd convolution is worth its costs here: every
  // thread gets kAnvilWinogradMinRowTilesPerThread row tiles or more (the
  // threads split only those: at 28x28 and batch 1 there are 13 on AVX2, 5
  // on AVX-512), and its weights (36/9 of the original's, which the session
  // keeps too) stay within kAnvilWinogradMaxWeightBytes.
  static bool anvil_winograd_pays(const PrepareContext& ctx, const Shape& w, const Shape& y) {
    const vec::GemmKernels& gk = vec::vec_kernels().gemm;
    return vec::winograd_row_tiles(gk, y[0], y[2], y[3]) >= kAnvilWinogradMinRowTilesPerThread * ctx.num_threads() &&
           vec::winograd_weight_bytes(gk, w[0], w[1]) <= kAnvilWinogradMaxWeightBytes;
  }
  static constexpr int64_t kAnvilWinogradMinRowTilesPerThread = 2;
  // ResNet's 256-channel 3x3s (9.7 MB transformed) fit; its 512-channel ones
  // (39 MB, a node's weights read from memory on every run at batch 1) do not.
  static constexpr int64_t kAnvilWinogradMaxWeightBytes = int64_t{16} << 20;

  // Whether oneDNN's Winograd convolution `pd` (y its output) reads few
  // enough transformed weights per output pixel to beat the direct
  // convolution; more, and reading them bounds it, while they take 16/9 or
  // 36/9 of the original's memory beside the original the session keeps. A
  // U-Net's 512-channel 3x3s at 16x16 on oneDNN's F(4x4, 3x3) (74 and 147
  // KiB a pixel) ran 0.85-0.87 of their time on its direct kernel, its 512 ->
  // 256 one at 32x32 (18 KiB a pixel) 1.7x; ResNet's 256-channel 3x3s at
  // 14x14 (48 KiB) 0.87 of brgconv's on Winograd. The U-Net's peak RSS
  // (docs/benchmarks.md): 241 -> 173-178 MiB, 0.86-0.88 of OpenVINO's.
  // rule_pick also gates Anvil's Winograd on AVX-512 by it; where that one
  // fits (planes of 784+ pixels, at most 16 MiB of weights) oneDNN's weigh
  // at most 21 KiB a pixel, so this rule never takes it away.
  static bool dnnl_winograd_weights_pay(const dnnl::convolution_forward::primitive_desc& pd, const Shape& y) {
    const size_t pixels = static_cast<size_t>(y[0] * y[2] * y[3]);
    return pd.weights_desc().get_size() <= kDnnlWinogradMaxWeightBytesPerPixel * pixels;
  }
  static constexpr size_t kDnnlWinogradMaxWeightBytesPerPixel = size_t{64} << 10;

  // A 3x3 window at stride 1 and dilation 1: what either Winograd convolution takes.
  static bool is_3x3_dense(const Shape& w, const SpatialGeometry& g) {
    if (w.size() != 4 || w[2] != 3 || w[3] != 3) return false;
    for (size_t i = 0; i < 2; ++i)
      if (g.strides[i] != 1 || g.dilations[i] != 1) return false;
    return true;
  }

  // oneDNN's Winograd convolution of this node, in channel blocks (its only
  // layout), where it has one: 2-D, one group, a 3x3 window at stride 1 and
  // dilation 1, constant weights, channels in whole blocks, AVX-512 (oneDNN
  // 2.6 has none below).
  template <typename MakePd>
  std::optional<dnnl::convolution_forward::primitive_desc> winograd_pd(const PrepareContext& ctx, const Shape& x,
                                                                       const Shape& w, const Shape& y,
                                                                       const SpatialGeometry& g, MakePd make_pd) {
    if (!allow_winograd() || group_ != 1 || !ctx.constant(1)) return std::nullopt;
    if (!channel_blocks_fit(ctx, x, y, group_)) return std::nullopt;
    if (!is_3x3_dense(w, g)) return std::nullopt;
    // None on ISAs below AVX-512, and for some paddings.
    return pd_if_any(
        [&] { return make_pd(du::blocked_desc(x), du::blocked_desc(y), dnnl::algorithm::convolution_winograd); });
  }

  // Output planes of at least this many pixels run on Winograd where it
  // fits: oneDNN's on AVX-512 (Anvil's on planes of kAnvilWinogradMinPlane),
  // Anvil's below. ResNet-18's 3x3s at batch 1 on
  // AVX-512 (Intel Xeon, per node in the model): oneDNN's at 0.63-0.68 of
  // brgconv's time at 56x56 and 28x28, 0.87 at 14x14, 1.24 at 7x7 (F(2x2,
  // 3x3)'s weights are 16/9 as large, and the 7x7 stage streams 9.4 MB of
  // them per node at batch 1 already). At batch 8 (F(4x4, 3x3), weights 4x
  // as large) 7x7 ran 0.75 of brgconv's time but took the peak RSS from 132
  // to 256 MiB, over both peers'. Anvil's (F(4x4, 3x3)) with AVX2 (the same
  // Xeon capped, one thread): 0.45 of jit:avx2's time at 56x56 and 28x28,
  // 0.67 of conv_gemm's at 14x14; at 7x7 its weights would be 38 MB a node.
  static constexpr int64_t kWinogradMinPlane = 196;
  // On AVX-512, Anvil's F(4x4, 3x3) takes over oneDNN's F(2x2, 3x3) on
  // planes of at least this many pixels (where oneDNN has a Winograd kernel
  // for the node at all): ResNet-18's 56x56 and 28x28 3x3s
  // ran 0.72-0.76 of oneDNN's time per node, the super-resolution net 0.84
  // of its time (alternating pairs, Intel Xeon); at 14x14 Anvil's ran 1.15x
  // (16 tiles of 4x4 for 196 pixels, in two row tiles of 12: 1.6x the work).
  static constexpr int64_t kAnvilWinogradMinPlane = 784;

  // The GEMM's geometry, and the weights as B [KH * KW * C_in, C_out] packed
  // once, shared through the session's weight cache.
  void prepare_conv_gemm(const PrepareContext& ctx, const Shape& x, const Shape& w, const Shape& y,
                         const SpatialGeometry& g, bool relu) {
    const int64_t cout = w[0], cin = w[1], taps = w[2] * w[3];
    conv_.input = {nullptr, cin, x[2], x[3], y[3], w[2], w[3], g.strides[0], g.strides[1], g.pads_begin[0],
                   g.pads_begin[1], g.dilations[0], g.dilations[1]};
    conv_.batch = x[0];
    conv_.x_item = cin * x[2] * x[3];
    conv_.y_item = cout * y[2] * y[3];
    conv_.pixels = y[2] * y[3];
    conv_.k = taps * cin;
    conv_.n = cout;
    conv_.relu = relu;
    conv_b_ = pack_window_weights(ctx, cout, cin, taps);
    conv_.prefetch_b = du::weights_stream(ctx);  // as the matmul's packed GEMM
    conv_gemm_ = true;
    impl_ = std::string(vec::vec_impl_name()) + ":conv_gemm";
  }

  // The weights as B [taps * C_in, C_out] packed once for Anvil's GEMM,
  // shared through the session's weight cache. K runs over a tap's channels
  // (contiguous in the channels-last and blocked layouts), so B's rows are
  // not one stride through ONNX's [C_out, C_in, taps...]: the weights go
  // through a [K, C_out] copy on the way in and out.
  static Tensor pack_window_weights(const PrepareContext& ctx, int64_t cout, int64_t cin, int64_t taps) {
    const vec::GemmKernels& gk = vec::vec_kernels().gemm;
    const Tensor& source = *ctx.constant(1);
    const int64_t k = taps * cin;
    auto pack = [&gk, &source, k, cout, cin, taps] {
      std::vector<float> b(static_cast<size_t>(k * cout));
      const float* w = source.data<float>();
      for_each_conv_weight(cout, cin, taps, [&](int64_t wi, int64_t bi) { b[static_cast<size_t>(bi)] = w[wi]; });
      return vec::pack_gemm_b(gk, b.data(), k, cout, cout, 1);
    };
    WeightCache* cache = ctx.weight_cache();
    if (!cache) return pack();
    auto unpack = [gk, k, cout, cin, taps](const Tensor& packed, void* dst) {
      std::vector<float> b(static_cast<size_t>(k * cout));
      vec::unpack_gemm_b(gk, packed.data<float>(), k, cout, b.data(), cout, 1);
      float* w = static_cast<float*>(dst);
      for_each_conv_weight(cout, cin, taps, [&](int64_t wi, int64_t bi) { w[wi] = b[static_cast<size_t>(bi)]; });
    };
    return cache->get(source, "anvil-conv-gemm " + vec::gemm_layout_key(gk, k, cout, cout, 1), pack, unpack);
  }

  // Whether the convolution can run on vec::conv1d_gemm: 1-D, one group,
  // constant weights, dilation 1, an activation the GEMM's epilogue has, and
  // layouts of the kernels' own allowed (ANVIL_CONV_LAYOUT). Where the plan
  // gives the activations plain, they are staged to and from NWC, as for
  // oneDNN's kernels.
  bool conv1d_gemm_fits(const PrepareContext& ctx, const Shape& x, const std::string& act,
                        const SpatialGeometry& g) const {
    if (x.size() != 3 || group_ != 1 || !ctx.constant(1) || !vec::gemm_activation(act)) return false;
    // A stride past the input (one window) keeps A's row step within the
    // input's size, so stride x C_in cannot overflow.
    return du::blocked_layouts_allowed() && g.dilations[0] == 1 && x[1] > 0 && g.strides[0] <= x[2];
  }

  // Whether conv1d_gemm beats oneDNN's pick: its brgconv (AVX-512, NWC)
  // where consecutive windows start a multiple of 4 KiB apart (stride * C_in
  // floats), which it runs at 0.5-0.7 of its speed elsewhere; in the same
  // cases conv1d_gemm, packing A's blocks, keeps its speed. AMD EPYC Zen 4
  // (anvil_conv1d_ab, one thread): wav2vec2's 512 -> 512 layers at stride 2
  // (3 taps, 3199 positions; 2 taps, 399) 0.74 and 0.77 of brgconv's time, a
  // 1024-channel one at stride 1 0.72, 256 at stride 4 0.68; at two threads
  // 0.65-0.70. Elsewhere brgconv ran level or faster (384 channels at stride
  // 2, Whisper's: conv1d_gemm 1.14x; 256 or 768 at stride 1: 1.04-1.06x), and
  // so did brgconv_1x1 and, below AVX-512, jit:avx2 in its channel blocks
  // (Whisper's: conv1d_gemm 1.09-1.11x).
  static constexpr int64_t kAliasingBytes = 4096;
  static bool conv1d_gemm_pays(const Shape& x, const SpatialGeometry& g, const std::string& impl) {
    if (impl.rfind("dnnl:brgconv:", 0) != 0) return false;
    const int64_t window_step = g.strides[0] * x[1] * static_cast<int64_t>(sizeof(float));  // fits: conv1d_gemm_fits
    return window_step % kAliasingBytes == 0;
  }

  static memory::desc nwc_desc(const Shape& shape) {
    return memory::desc(du::dims(shape), memory::data_type::f32, memory::format_tag::nwc);
  }

  // conv1d_gemm's geometry, its packed weights and the scratch for its
  // padded edge rows (after the layouts' staging).
  void prepare_conv1d_gemm(const PrepareContext& ctx, const Shape& x, const Shape& w, const Shape& y,
                           const SpatialGeometry& g, const std::string& act) {
    conv1d_ = {};
    conv1d_.batch = x[0];
    conv1d_.x_item = x[1] * x[2];
    conv1d_.y_item = y[1] * y[2];
    conv1d_.length = x[2];
    conv1d_.channels = x[1];
    conv1d_.out_length = y[2];
    conv1d_.taps = w[2];
    conv1d_.stride = g.strides[0];
    conv1d_.pad_begin = g.pads_begin[0];
    conv1d_.n = y[1];
    conv1d_.epilogue = epilogue_;
    conv1d_.epilogue.activation = *vec::gemm_activation(act);
    conv1d_.prefetch_b = du::weights_stream(ctx);
    conv_b_ = pack_window_weights(ctx, w[0], w[1], w[2]);
    edge_rows_at_ = (scratch_ + 63) / 64 * 64;
    scratch_ = edge_rows_at_ + static_cast<size_t>(vec::conv1d_gemm_edge_floats(conv1d_)) * sizeof(float);
    conv1d_gemm_ = true;
    impl_ = std::string(vec::vec_impl_name()) + ":conv1d_gemm";
  }

  // Anvil's Winograd geometry, and the transformed weights packed once,
  // shared through the session's weight cache. The transform has no exact
  // inverse, so the cache keeps the original too (no unpack).
  void prepare_winograd(const PrepareContext& ctx, const Shape& x, const Shape& w, const Shape& y,
                        const SpatialGeometry& g, bool relu) {
    const vec::GemmKernels& gk = vec::vec_kernels().gemm;
    const int64_t cout = w[0], cin = w[1];
    winograd_args_ = {};
    winograd_args_.batch = x[0];
    winograd_args_.x_item = cin * x[2] * x[3];
    winograd_args_.y_item = cout * y[2] * y[3];
    winograd_args_.cin = cin;
    winograd_args_.ih = x[2];
    winograd_args_.iw = x[3];
    winograd_args_.cout = cout;
    winograd_args_.oh = y[2];
    winograd_args_.ow = y[3];
    winograd_args_.pad_top = g.pads_begin[0];
    winograd_args_.pad_left = g.pads_begin[1];
    winograd_args_.relu = relu;
    winograd_args_.prefetch_b = du::weights_stream(ctx);  // as conv_gemm's
    const Tensor& source = *ctx.constant(1);
    auto pack = [&gk, &source, cout, cin] { return vec::pack_winograd_weights(gk, source.data<float>(), cout, cin); };
    WeightCache* cache = ctx.weight_cache();
    conv_b_ = cache ? cache->get(source, "anvil-winograd " + vec::gemm_layout_key(gk, cin, cout, cout, 1), pack)
                    : pack();
    winograd_ = true;
    impl_ = std::string(vec::vec_impl_name()) + ":winograd";
  }

  // conv_gemm, conv1d_gemm or the Winograd convolution, between the layouts' staging reorders (if any).
  void run_on_anvil(const RunContext& ctx, const Tensor* sum) const {
    memory dst = output_with_sum(ctx, sum);
    const memory src = io_.src.input(ctx.in(0).raw(), ctx.scratch);
    du::stream().wait();  // the staging reorders, if any, have written
    const auto* x = static_cast<const float*>(src.get_data_handle());
    auto* y = static_cast<float*>(dst.get_data_handle());
    const float* bias = ctx.inputs.size() > 2 && ctx.inputs[2] ? ctx.in(2).data<float>() : nullptr;
    if (winograd_) {
      vec::WinogradConvArgs args = winograd_args_;
      args.x = x;
      args.u_packed = conv_b_.data<float>();
      args.bias = bias;
      args.y = y;
      args.residual = sum ? y : nullptr;
      vec::conv_winograd(vec::vec_kernels(), args);
    } else if (conv1d_gemm_) {
      vec::Conv1dGemmArgs args = conv1d_;
      args.x = x;
      args.b_packed = conv_b_.data<float>();
      args.bias = bias;
      args.y = y;
      args.residual = sum ? y : nullptr;
      vec::conv1d_gemm(vec::vec_kernels().gemm, args, reinterpret_cast<float*>(static_cast<char*>(ctx.scratch) + edge_rows_at_));
    } else {
      vec::ConvGemmArgs args = conv_;
      args.input.x = x;
      args.b_packed = conv_b_.data<float>();
      args.bias = bias;
      args.y = y;
      args.residual = sum ? y : nullptr;
      vec::conv_gemm(vec::vec_kernels().gemm, args);
    }
    io_.dst.finish(dst, ctx.out(0).raw());
    du::stream().wait();  // as execute(): the output is whole when run() returns
  }

  // y = y * sigmoid(alpha * y) over the whole output, padding included
  // (where it stays 0).
  void swish_output(const RunContext& ctx) const {
    constexpr int64_t kChunk = 16384;
    auto* y = static_cast<float*>(ctx.out(0).raw());
    const vec::VecKernels& k = vec::vec_kernels();
#pragma omp parallel for if (output_floats_ > 2 * kChunk)
    for (int64_t begin = 0; begin < output_floats_; begin += kChunk)
      k.swish(y + begin, y + begin, std::min(kChunk, output_floats_ - begin), swish_alpha_);
  }

  bool fused_;
  bool has_sum_ = false;
  bool swish_apart_ = false;
  float swish_alpha_ = 1.f;
  int64_t output_floats_ = 0;
  bool conv_gemm_ = false;
  bool winograd_ = false;
  bool conv1d_gemm_ = false;
  std::vector<std::string> alternatives_;
  vec::ConvGemmArgs conv_;
  vec::Conv1dGemmArgs conv1d_;
  vec::GemmEpilogue epilogue_;  // the activation's alpha and beta
  size_t edge_rows_at_ = 0;     // conv1d_gemm's edge rows in the scratch
  vec::WinogradConvArgs winograd_args_;
  Tensor conv_b_;  // conv_gemm's, conv1d_gemm's or the Winograd convolution's packed weights
};

// oneDNN's 1x1 convolution of x by w with the depthwise 3x3 of an
// anvil.FusedConvDepthwise node after it as a post-op (with the node's
// activations), the activations in `layout` (any: oneDNN's pick). Where
// oneDNN has no kernel that computes both in one pass it runs them one
// after the other ("ref_fused_convolution", the 1x1's output in its
// scratchpad). dnnl::error where it has neither; kUnsupported where an
// activation has no post-op.
dnnl::convolution_forward::primitive_desc conv_depthwise_pd(const ir::Attributes& attrs, const Shape& x,
                                                            const Shape& w, bool has_bias, bool has_dw_bias,
                                                            memory::format_tag layout) {
  dnnl::post_ops ops;
  auto activation = [&](const std::string& prefix) {
    const std::string act = attrs.get_string(prefix + "activation", "");
    const float alpha = attrs.get_float(prefix + "activation_alpha", 0.f);
    const float beta = attrs.get_float(prefix + "activation_beta", 0.f);
    ANVIL_CHECK(du::append_activation(ops, act, alpha, beta), ErrorKind::kUnsupported,
                "activation {} (alpha {}, beta {}) has no oneDNN post-op", act, alpha, beta);
  };
  activation("");
  const memory::data_type f32 = memory::data_type::f32;
  ops.append_dw(f32, has_dw_bias ? f32 : memory::data_type::undef, f32, 3, attrs.get_int("stride", 1), 1, 0, {});
  activation("depthwise_");
  dnnl::primitive_attr attr = du::user_scratchpad_attr();
  attr.set_post_ops(ops);
  const Shape mid{x[0], w[0], x[2], x[3]};
  const memory::desc bias = has_bias ? du::plain_desc({w[0]}, DType::kFloat32) : memory::desc();
  dnnl::convolution_forward::desc desc(dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct,
                                       memory::desc(du::dims(x), f32, layout),
                                       memory::desc(du::dims(w), f32, memory::format_tag::any), bias,
                                       memory::desc(du::dims(mid), f32, layout), {1, 1}, {0, 0}, {0, 0});
  return dnnl::convolution_forward::primitive_desc(desc, attr, du::engine());
}

// Whether oneDNN's pd computes the 1x1 and the depthwise in one pass on
// AVX-512 (jit_1x1's fused kernel). MobileNetV2's first expansion (16 -> 96
// channels at 112x112, then the depthwise at stride 2), Intel Xeon, one
// thread: 0.34 ms fused in NHWC (0.37 in nChw16c, now taken), 0.58 as brgconv_1x1 then
// brdgmm_dw, 0.59 in the model with jit_dw. With AVX2 (the same Xeon capped)
// jit_1x1:avx2's fused kernel took 0.81 ms against 0.74 apart, and at two
// threads oneDNN offers only ref_fused_convolution.
bool fuses_in_one_pass(const dnnl::convolution_forward::primitive_desc& pd) {
  return du::impl_name(pd).rfind("dnnl:jit_1x1:avx512", 0) == 0;
}

// anvil.FusedConvDepthwise (passes/fuse_conv_depthwise.cc): the 1x1
// convolution and its depthwise 3x3 as one oneDNN primitive, the 1x1's
// rows computed as the depthwise window needs them; the depthwise's
// weights packed once like the 1x1's.
class DnnlConvDepthwise : public DnnlConvBase {
 public:
  explicit DnnlConvDepthwise(const ir::Node&) {}

  bool reads_input_packed_only(size_t i) const override { return i == 1 || i == 3; }
  Layout input_layout(size_t i) const override { return i == 0 ? io_.src_layout : nullptr; }  // no residual

  std::vector<TensorType> prepare(const PrepareContext& ctx) override {
    check_inputs(ctx);
    const Shape& x = ctx.input_shape(0);
    const Shape& w = ctx.input_shape(1);
    const Shape& y = ctx.output_shape(0);
    ANVIL_PREPARE_CHECK(ctx, ctx.constant(1) && ctx.constant(3), ErrorKind::kUnsupported,
                        "the convolutions' weights must be constant");
    // oneDNN's depthwise post-op crashes on empty tensors (a batch of 0): the reference kernel takes those.
    ANVIL_PREPARE_CHECK(ctx, shape_numel(x) > 0, ErrorKind::kUnsupported, "the input {} is empty", shape_str(x));
    src_md_ = du::plain_desc(x, DType::kFloat32);
    dst_md_ = du::plain_desc(y, DType::kFloat32);
    const bool has_bias = ctx.has_input(2), has_dw_bias = ctx.has_input(4);
    try {
      auto make_pd = [&](memory::format_tag layout) {
        return conv_depthwise_pd(ctx.attrs(), x, w, has_bias, has_dw_bias, layout);
      };
      // The activations in `any`: oneDNN's one-pass kernel takes nChw16c. In
      // NHWC, where brgconv leaves them on AVX-512, oneDNN 2.6.3's one-pass
      // kernel computed wrong values from 56 x 56 planes up at either
      // stride (EfficientNet-B0's 24 -> 144 at stride 1, and at stride 2
      // with a convolution before it: off by up to a ReLU6's 6, or garbage;
      // tests/unit/test_conv_depthwise.cc), so an NHWC input is reordered.
      const dnnl::convolution_forward::primitive_desc pd =
          make_pd(du::blocked_layouts_allowed() ? memory::format_tag::any : memory::format_tag::nchw);
      const memory::desc nhwc(du::dims(x), memory::data_type::f32, memory::format_tag::nhwc);
      ANVIL_PREPARE_CHECK(ctx, !fuses_in_one_pass(pd) || pd.src_desc() != nhwc, ErrorKind::kUnsupported,
                          "oneDNN's one-pass kernel would read NHWC, where it computes wrong values");
      const memory::dims dst_dims = pd.dst_desc().dims();
      ANVIL_PREPARE_CHECK(ctx, Shape(dst_dims.begin(), dst_dims.end()) == y,
                          ErrorKind::kUnsupported, "oneDNN's depthwise post-op does not give the output {}",
                          shape_str(y));
      primitive_ = dnnl::convolution_forward(pd);
      scratchpad_md_ = pd.scratchpad_desc();
      finish_prepare(ctx, pd, du::plain_desc(w, DType::kFloat32));
      const Shape& w_dw = ctx.input_shape(3);  // [C, 1, 3, 3]: oneDNN's grouped [G, O, I, KH, KW]
      const memory::desc dw_packed =
          pd.query_md(dnnl::query::exec_arg_md, DNNL_ARG_ATTR_POST_OP_DW | DNNL_ARG_WEIGHTS);
      dw_weights_ = du::pack_shared(ctx, *ctx.constant(3),
                                    du::plain_desc({w_dw[0], 1, 1, w_dw[2], w_dw[3]}, DType::kFloat32), dw_packed);
      if (has_dw_bias) dw_bias_desc_ = du::plain_desc(ctx.input_shape(4), DType::kFloat32);
    } catch (const dnnl::error& e) {
      ctx.fail(ErrorKind::kUnsupported, "oneDNN has no convolution with a depthwise post-op for this case ({})",
               e.what());
    }
    std::vector<TensorType> out = ctx.output_types();
    out[0].layout = io_.dst_layout;
    return out;
  }

  void run(const RunContext& ctx) const override { execute(ctx, nullptr); }

 private:
  void add_post_op_args(const RunContext& ctx, std::unordered_map<int, memory>& args) const override {
    args[DNNL_ARG_ATTR_POST_OP_DW | DNNL_ARG_WEIGHTS] = dw_weights_.memory;
    if (ctx.inputs.size() > 4 && ctx.inputs[4])
      args[DNNL_ARG_ATTR_POST_OP_DW | DNNL_ARG_BIAS] = du::wrap(dw_bias_desc_, ctx.in(4).raw());
  }

  du::PackedWeights dw_weights_;
  memory::desc dw_bias_desc_;
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
static Registrar fused_conv_depthwise_dnnl("FusedConvDepthwise", Backend::kDnnl, factory_of<DnnlConvDepthwise>(),
                                           "anvil", {{kFloat32Only}});

}  // namespace

bool conv_depthwise_fusion_pays(const ir::Node& fused, int threads) {
  auto shape_of = [&](size_t i) {
    const ir::Value* v = fused.input(i);
    return v && v->is_static() ? v->type.shape_or_minus_one() : Shape{};
  };
  static const bool allowed = !env_is("ANVIL_FUSE_DEPTHWISE", "0");
  const Shape x = shape_of(0), w = shape_of(1);
  if (!allowed || x.size() != 4 || w.size() != 4 || shape_numel(x) == 0 || !du::blocked_layouts_allowed()) return false;
  // A Swish runs faster after each convolution on Anvil's loop (DnnlConv)
  // than as the one-pass kernel's post-ops: EfficientNet-B0 at one thread,
  // AMD EPYC Zen 4, 0.96 of its time with its two expansions left apart.
  for (const char* prefix : {"", "depthwise_"})
    if (fused.attrs.get_string(std::string(prefix) + "activation", "") == "Swish") return false;
  // At stride 1 the reorders from and to the NHWC around the one-pass
  // kernel's channel blocks cost more than the fusion saves: MobileNetV2's
  // 24 -> 144 at 56 x 56, one thread, Zen 4: 0.54 ms with them, 0.49 apart
  // (brgconv_1x1, jit_dw). At stride 2 MobileNetV2 ran level either way.
  if (fused.attrs.get_int("stride", 1) == 1) return false;
  // oneDNN picks its kernels for the OpenMP team size in force.
  struct TeamSize {
    int saved = omp_get_max_threads();
    explicit TeamSize(int threads) { omp_set_num_threads(threads); }
    ~TeamSize() { omp_set_num_threads(saved); }
  } team(threads);
  bool pays = false;
  try {
    pays = fuses_in_one_pass(conv_depthwise_pd(fused.attrs, x, w, fused.input(2) != nullptr, fused.input(4) != nullptr,
                                               memory::format_tag::any));
  } catch (const std::exception&) {
    // no such primitive, or an activation without a post-op
  }
  return pays;
}

}  // namespace anvil::kernels
