// Unary activations and math on oneDNN's eltwise primitive (float32), in place
// when the planner allows, in the layout the input arrives in where it can
// (du::elementwise_layout); Swish and Sigmoid on Anvil's vectorized loops, in
// the same way. Erf, HardSigmoid and Log (oneDNN's AVX2 log is off by ~1e-6
// near 1, past the conformance tolerance) stay on the reference kernels, and
// so does Pow but by a constant 2 (a square).
#include <algorithm>
#include <limits>
#include <optional>

#include "kernels/dnnl/common.h"
#include "kernels/registry.h"
#include "kernels/vec/vec_kernels.h"

namespace anvil::kernels {

namespace {

using dnnl::algorithm;
using dnnl::memory;
namespace du = dnnl_util;

struct EltwiseSpec {
  algorithm alg;
  float alpha, beta;
};

class DnnlEltwise : public du::PrimitiveKernel {
 public:
  explicit DnnlEltwise(const ir::Node& node) : node_(node) {}

  std::vector<TensorType> prepare(const PrepareContext& ctx) override {
    EltwiseSpec spec = spec_for(ctx);
    layout_ = du::elementwise_layout(ctx, 0, ctx.input_shape(0));
    md_ = du::desc_of({DType::kFloat32, ctx.input_shape(0), layout_});
    // Anvil's loops (vec_kernels.h): SiLU at 0.6-0.8x oneDNN's time, Sigmoid 0.6-0.75x.
    if (spec.alg == algorithm::eltwise_swish || spec.alg == algorithm::eltwise_logistic) {
      vec_alg_ = spec.alg;
      swish_alpha_ = spec.alpha;
      impl_ = std::string(vec::vec_impl_name()) + (vec_alg_ == algorithm::eltwise_swish ? ":swish" : ":sigmoid");
      std::vector<TensorType> out = ctx.output_types();
      out[0].layout = layout_;
      return out;
    }
    create<dnnl::eltwise_forward, dnnl::eltwise_forward::primitive_desc>(ctx, [&] {
      dnnl::eltwise_forward::desc d(dnnl::prop_kind::forward_inference, spec.alg, md_, spec.alpha, spec.beta);
      return dnnl::eltwise_forward::primitive_desc(d, du::user_scratchpad_attr(), du::engine());
    });
    std::vector<TensorType> out = ctx.output_types();
    out[0].layout = layout_;
    return out;
  }

  int inplace_input() const override { return 0; }
  Layout input_layout(size_t i) const override { return i == 0 ? layout_ : nullptr; }
  std::string layout_name() const override { return kernels::layout_name(layout_); }

  void run(const RunContext& ctx) const override {
    if (ctx.out(0).numel() == 0) return;
    if (vec_alg_) return run_vec(ctx);
    std::unordered_map<int, memory> args{{DNNL_ARG_SRC, du::wrap(md_, ctx.in(0).raw())},
                                         {DNNL_ARG_DST, du::wrap(md_, ctx.out(0).raw())}};
    execute(args, ctx.scratch);
  }

 private:
  // Element by element in any layout the kernel keeps (du::readable_layout
  // takes none with padded channels).
  void run_vec(const RunContext& ctx) const {
    constexpr int64_t kChunk = 16384;
    const int64_t n = ctx.out(0).numel();
    const float* x = static_cast<const float*>(ctx.in(0).raw());
    float* y = static_cast<float*>(ctx.out(0).raw());
    const vec::VecKernels& k = vec::vec_kernels();
    const bool swish = *vec_alg_ == algorithm::eltwise_swish;
#pragma omp parallel for if (n > 2 * kChunk)
    for (int64_t begin = 0; begin < n; begin += kChunk) {
      const int64_t count = std::min(kChunk, n - begin);
      if (swish) k.swish(x + begin, y + begin, count, swish_alpha_);
      else k.sigmoid(x + begin, y + begin, count);
    }
  }

  EltwiseSpec spec_for(const PrepareContext& ctx) const {
    const std::string& op = node_.op_type;
    const ir::Attributes& a = node_.attrs;
    if (op == "Relu") return {algorithm::eltwise_relu, 0.f, 0.f};
    if (op == "LeakyRelu") return {algorithm::eltwise_relu, a.get_float("alpha", 0.01f), 0.f};
    if (op == "Elu") return {algorithm::eltwise_elu, a.get_float("alpha", 1.f), 0.f};
    if (op == "Sigmoid") return {algorithm::eltwise_logistic, 0.f, 0.f};
    if (op == "Tanh") return {algorithm::eltwise_tanh, 0.f, 0.f};
    if (op == "HardSwish") return {algorithm::eltwise_hardswish, 0.f, 0.f};
    if (op == "Swish") return {algorithm::eltwise_swish, a.get_float("alpha", 1.f), 0.f};
    if (op == "Sqrt") return {algorithm::eltwise_sqrt, 0.f, 0.f};
    if (op == "Exp") return {algorithm::eltwise_exp, 0.f, 0.f};
    if (op == "Abs") return {algorithm::eltwise_abs, 0.f, 0.f};
    if (op == "Neg") return {algorithm::eltwise_linear, -1.f, 0.f};
    if (op == "Clip") return clip_spec(ctx);
    if (op == "Gelu") return gelu_spec(ctx);
    if (op == "Pow") return pow_spec(ctx);
    ctx.fail(ErrorKind::kUnsupported, "no oneDNN eltwise for {}", op);
  }

  // Pow by a constant float32 2 as a square, which is exact (Hugging Face's
  // ConvNeXt writes a channels-first LayerNorm's variance so: on the
  // reference kernel, in double, 2.6 ms of its 104 for one [96, 56, 56]).
  // Other exponents stay on the reference kernel: oneDNN's pow goes through
  // exp and log.
  EltwiseSpec pow_spec(const PrepareContext& ctx) const {
    const Tensor* exponent = ctx.has_input(1) ? ctx.constant(1) : nullptr;
    const bool square = exponent && exponent->dtype() == DType::kFloat32 && exponent->numel() == 1 &&
                        exponent->shape().size() <= ctx.input_shape(0).size() && *exponent->data<float>() == 2.f;
    ANVIL_PREPARE_CHECK(ctx, square, ErrorKind::kUnsupported, "oneDNN eltwise takes Pow by a constant 2 only");
    return {algorithm::eltwise_square, 0.f, 0.f};
  }

  EltwiseSpec gelu_spec(const PrepareContext& ctx) const {
    const std::string approximate = node_.attrs.get_string("approximate", "none");
    if (approximate == "tanh") return {algorithm::eltwise_gelu_tanh, 0.f, 0.f};
    ANVIL_PREPARE_CHECK(ctx, approximate == "none", ErrorKind::kInvalidModel, "approximate '{}' is not none or tanh",
                        approximate);
    return {algorithm::eltwise_gelu_erf, 0.f, 0.f};
  }

  // Clip's bounds: attributes before opset 11, constant scalar inputs after.
  EltwiseSpec clip_spec(const PrepareContext& ctx) const {
    float lo = std::numeric_limits<float>::lowest(), hi = std::numeric_limits<float>::max();
    if (ctx.opset() < 11) {
      lo = node_.attrs.get_float("min", lo);
      hi = node_.attrs.get_float("max", hi);
    } else {
      for (size_t i = 1; i < 3; ++i) {
        if (!ctx.has_input(i)) continue;
        const Tensor* t = ctx.constant(i);
        ANVIL_PREPARE_CHECK(ctx, t && t->dtype() == DType::kFloat32 && t->numel() == 1, ErrorKind::kUnsupported,
                            "oneDNN clip needs constant float bounds");
        (i == 1 ? lo : hi) = *t->data<float>();
      }
    }
    return {algorithm::eltwise_clip_v2, lo, hi};
  }

  const ir::Node& node_;
  Layout layout_;  // the producer's, kept (du::elementwise_layout); null: plain
  memory::desc md_;
  std::optional<algorithm> vec_alg_;  // set: Swish or Sigmoid, on Anvil's vectorized loops instead of a primitive
  float swish_alpha_ = 1.f;
};

}  // namespace

#define ANVIL_DNNL_ELTWISE(op) ANVIL_REGISTER_KERNEL_CLASS_TYPED(op, kDnnl, DnnlEltwise, {kFloat32Only})
ANVIL_DNNL_ELTWISE("Relu");
ANVIL_DNNL_ELTWISE("LeakyRelu");
ANVIL_DNNL_ELTWISE("Elu");
ANVIL_DNNL_ELTWISE("Sigmoid");
ANVIL_DNNL_ELTWISE("Tanh");
ANVIL_DNNL_ELTWISE("HardSwish");
ANVIL_DNNL_ELTWISE("Swish");
ANVIL_DNNL_ELTWISE("Sqrt");
ANVIL_DNNL_ELTWISE("Exp");
ANVIL_DNNL_ELTWISE("Abs");
ANVIL_DNNL_ELTWISE("Neg");
ANVIL_DNNL_ELTWISE("Clip");
ANVIL_DNNL_ELTWISE("Gelu");
ANVIL_DNNL_ELTWISE("Pow");
#undef ANVIL_DNNL_ELTWISE

}  // namespace anvil::kernels
