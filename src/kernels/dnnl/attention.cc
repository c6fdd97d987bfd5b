// Attention (opsets 23-25) on oneDNN for the case the attention fusion makes
// (passes/fuse_attention.cc) and most exporters' graphs reduce to: float32,
// 3-D Q [B, Sq, H*D], K [B, Skv, H*D], V [B, Skv, H*Dv] with as many key/value
// heads as query heads, an optional float or boolean attn_mask of the full
// key length (broadcast to [B, H, Sq, Skv]) or is_causal with Sq = Skv, and no
// past, padding lengths, softcap, windows or extra outputs. Anything else is
// declined (kUnsupported) and runs on the reference kernel.
//
// Per run: scores = (Q K^T) * scale by one batched matmul that reads the
// heads in place (strided views, no transposes), + mask by a binary add,
// softmax along the keys, rows whose every key is masked set to zero (as
// ONNX defines them), then P V by a second matmul that writes the heads
// straight into Y's [B, Sq, H*Dv] layout.
#include <cmath>
#include <cstring>
#include <limits>

#include "kernels/dnnl/common.h"
#include "kernels/ref/common.h"
#include "kernels/registry.h"

namespace anvil::kernels {

namespace {

using dnnl::memory;
namespace du = dnnl_util;

constexpr size_t kAlign = 64;
size_t aligned(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

class DnnlAttention : public Kernel {
 public:
  explicit DnnlAttention(const ir::Node& node) : node_(node) {}

  std::vector<TensorType> prepare(const PrepareContext& ctx) override {
    check_supported(ctx);
    const Shape &q = ctx.input_shape(0), &k = ctx.input_shape(1), &v = ctx.input_shape(2);
    heads_ = node_.attrs.get_int("q_num_heads", 0);
    b_ = q[0], sq_ = q[1], skv_ = k[1], d_ = q[2] / heads_, dv_ = v[2] / heads_;
    const float scale_attr = node_.attrs.get_float("scale", 0.f);
    const float scale = scale_attr != 0.f ? scale_attr : 1.f / std::sqrt(static_cast<float>(d_));
    scores_md_ = memory::desc({b_, heads_, sq_, skv_}, memory::data_type::f32, memory::format_tag::abcd);
    prepare_mask(ctx);
    try {
      make_primitives(scale);
    } catch (const dnnl::error& e) {
      ctx.fail(ErrorKind::kUnsupported, "oneDNN cannot run this attention ({})", e.what());
    }
    return ctx.output_types();
  }

  size_t scratch_bytes() const override { return scratch_bytes_; }
  std::string impl_name() const override { return impl_; }

  void run(const RunContext& ctx) const override {
    auto* base = static_cast<unsigned char*>(ctx.scratch);
    void* scores = base;
    void* pad = base + scratchpad_offset_;
    const float* mask = mask_kind_ == MaskKind::kCausal ? causal_.data<float>() : nullptr;
    if (mask_kind_ == MaskKind::kBool) mask = bool_to_float(ctx.in(3), reinterpret_cast<float*>(base + mask_offset_));
    if (mask_kind_ == MaskKind::kFloat) mask = ctx.in(3).data<float>();

    const memory scores_mem = du::wrap(scores_md_, scores);
    run_primitive(qk_, {{DNNL_ARG_SRC, du::wrap(q_md_, ctx.in(0).raw())},
                        {DNNL_ARG_WEIGHTS, du::wrap(kt_md_, ctx.in(1).raw())},
                        {DNNL_ARG_DST, scores_mem}}, qk_pad_, pad);
    if (mask)
      run_primitive(add_mask_, {{DNNL_ARG_SRC_0, scores_mem}, {DNNL_ARG_SRC_1, du::wrap(mask_md_, mask)},
                                {DNNL_ARG_DST, scores_mem}}, add_pad_, pad);
    run_primitive(softmax_, {{DNNL_ARG_SRC, scores_mem}, {DNNL_ARG_DST, scores_mem}}, softmax_pad_, pad);
    if (mask && mask_kind_ != MaskKind::kCausal) zero_masked_rows(mask, static_cast<float*>(scores));  // causal keeps the diagonal
    run_primitive(pv_, {{DNNL_ARG_SRC, scores_mem},
                        {DNNL_ARG_WEIGHTS, du::wrap(v_md_, ctx.in(2).raw())},
                        {DNNL_ARG_DST, du::wrap(y_md_, ctx.out(0).raw())}}, pv_pad_, pad);
  }

 private:
  enum class MaskKind { kNone, kFloat, kBool, kCausal };

  void check_supported(const PrepareContext& ctx) const {
    auto decline = [&](const char* what) { ctx.fail(ErrorKind::kUnsupported, "the oneDNN attention lacks {}", what); };
    for (size_t i = 4; i < ctx.num_inputs(); ++i)
      if (ctx.has_input(i)) decline("past key/value and nonpad_kv_seqlen");
    for (size_t o = 1; o < node_.outputs.size(); ++o)
      if (node_.output(o)) decline("present key/value and qk_matmul_output");
    if (node_.attrs.get_float("softcap", 0.f) != 0.f) decline("softcap");
    if (node_.attrs.get_int("left_window_size", -1) != -1 || node_.attrs.get_int("right_window_size", -1) != -1)
      decline("sliding windows");
    const int64_t qh = node_.attrs.get_int("q_num_heads", 0), kvh = node_.attrs.get_int("kv_num_heads", 0);
    const Shape &q = ctx.input_shape(0), &k = ctx.input_shape(1), &v = ctx.input_shape(2);
    if (q.size() != 3 || k.size() != 3 || v.size() != 3) decline("4-D inputs");
    if (qh < 1 || qh != kvh) decline("grouped key/value heads");
    if (shape_numel(q) == 0 || shape_numel(k) == 0 || shape_numel(v) == 0) decline("empty inputs");
  }

  void prepare_mask(const PrepareContext& ctx) {
    const bool causal = node_.attrs.get_int("is_causal", 0) != 0;
    if (causal) {
      ANVIL_PREPARE_CHECK(ctx, !ctx.has_input(3) && sq_ == skv_, ErrorKind::kUnsupported,
                          "the oneDNN attention runs is_causal only alone and with as many queries as keys");
      mask_kind_ = MaskKind::kCausal;
      mask_dims_ = {1, 1, sq_, skv_};
      causal_ = Tensor(DType::kFloat32, {sq_, skv_});
      float* m = causal_.data<float>();
      for (int64_t i = 0; i < sq_; ++i)
        for (int64_t j = 0; j < skv_; ++j) m[i * skv_ + j] = j <= i ? 0.f : -std::numeric_limits<float>::infinity();
    } else if (ctx.has_input(3)) {
      const TensorType& t = ctx.input_type(3);
      ANVIL_PREPARE_CHECK(ctx, t.dtype == DType::kFloat32 || t.dtype == DType::kBool, ErrorKind::kUnsupported,
                          "a {} attn_mask", dtype_name(t.dtype));
      ANVIL_PREPARE_CHECK(ctx, !t.shape.empty() && t.shape.size() <= 4 && t.shape.back() == skv_,
                          ErrorKind::kUnsupported, "an attn_mask {} shorter than the {} keys", shape_str(t.shape), skv_);
      mask_kind_ = t.dtype == DType::kBool ? MaskKind::kBool : MaskKind::kFloat;
      mask_dims_ = Shape(4 - t.shape.size(), 1);
      mask_dims_.insert(mask_dims_.end(), t.shape.begin(), t.shape.end());
    }
    if (mask_kind_ != MaskKind::kNone)
      mask_md_ = memory::desc(du::dims(mask_dims_), memory::data_type::f32, memory::format_tag::abcd);
  }

  void make_primitives(float scale) {
    const int64_t hd = heads_ * d_, hdv = heads_ * dv_;
    q_md_ = memory::desc({b_, heads_, sq_, d_}, memory::data_type::f32, memory::dims{sq_ * hd, d_, hd, 1});
    kt_md_ = memory::desc({b_, heads_, d_, skv_}, memory::data_type::f32, memory::dims{skv_ * hd, d_, 1, hd});
    v_md_ = memory::desc({b_, heads_, skv_, dv_}, memory::data_type::f32, memory::dims{skv_ * hdv, dv_, hdv, 1});
    y_md_ = memory::desc({b_, heads_, sq_, dv_}, memory::data_type::f32, memory::dims{sq_ * hdv, dv_, hdv, 1});

    dnnl::primitive_attr qk_attr = du::user_scratchpad_attr();
    qk_attr.set_output_scales(0, {scale});
    dnnl::matmul::primitive_desc qk(dnnl::matmul::desc(q_md_, kt_md_, scores_md_), qk_attr, du::engine());
    qk_ = dnnl::matmul(qk);
    qk_pad_ = qk.scratchpad_desc();
    if (mask_kind_ != MaskKind::kNone) {
      dnnl::binary::primitive_desc add(dnnl::binary::desc(dnnl::algorithm::binary_add, scores_md_, mask_md_, scores_md_),
                                       du::user_scratchpad_attr(), du::engine());
      add_mask_ = dnnl::binary(add);
      add_pad_ = add.scratchpad_desc();
    }
    dnnl::softmax_v2_forward::primitive_desc sm(
        dnnl::softmax_v2_forward::desc(dnnl::prop_kind::forward_inference, dnnl::algorithm::softmax_accurate,
                                       scores_md_, scores_md_, 3),
        du::user_scratchpad_attr(), du::engine());
    softmax_ = dnnl::softmax_v2_forward(sm);
    softmax_pad_ = sm.scratchpad_desc();
    dnnl::matmul::primitive_desc pv(dnnl::matmul::desc(scores_md_, v_md_, y_md_), du::user_scratchpad_attr(),
                                    du::engine());
    pv_ = dnnl::matmul(pv);
    pv_pad_ = pv.scratchpad_desc();
    impl_ = "dnnl:attention(" + du::impl_name(qk) + ")";

    // Scratch: the scores, a float copy of a boolean mask, one scratchpad the primitives take turns with.
    mask_offset_ = aligned(scores_md_.get_size());
    const size_t mask_bytes = mask_kind_ == MaskKind::kBool ? aligned(mask_md_.get_size()) : 0;
    scratchpad_offset_ = mask_offset_ + mask_bytes;
    size_t pad = std::max({qk_pad_.get_size(), add_pad_.get_size(), softmax_pad_.get_size(), pv_pad_.get_size()});
    scratch_bytes_ = scratchpad_offset_ + pad;
  }

  static void run_primitive(const dnnl::primitive& p, std::unordered_map<int, memory> args,
                            const memory::desc& pad_md, void* pad) {
    if (pad_md.get_size()) args[DNNL_ARG_SCRATCHPAD] = du::wrap(pad_md, pad);
    p.execute(du::stream(), args);
    du::stream().wait();
  }

  float* bool_to_float(const Tensor& mask, float* out) const {
    const bool* m = mask.data<bool>();
    for (int64_t i = 0; i < mask.numel(); ++i) out[i] = m[i] ? 0.f : -std::numeric_limits<float>::infinity();
    return out;
  }

  // A softmax over keys that are all masked is NaN; ONNX's attention gives zeros there.
  void zero_masked_rows(const float* mask, float* scores) const {
    const int64_t mb = mask_dims_[0], mh = mask_dims_[1], mq = mask_dims_[2];
    for (int64_t b = 0; b < mb; ++b)
      for (int64_t h = 0; h < mh; ++h)
        for (int64_t i = 0; i < mq; ++i) {
          const float* row = mask + ((b * mh + h) * mq + i) * skv_;
          bool all_masked = true;
          for (int64_t j = 0; j < skv_ && all_masked; ++j) all_masked = std::isinf(row[j]) && row[j] < 0;
          if (!all_masked) continue;
          // The mask row covers every (batch, head, query) its broadcast dims stand for.
          for (int64_t bb = 0; bb < b_; ++bb)
            for (int64_t hh = 0; hh < heads_; ++hh)
              for (int64_t ii = 0; ii < sq_; ++ii) {
                if ((mb > 1 && bb != b) || (mh > 1 && hh != h) || (mq > 1 && ii != i)) continue;
                std::memset(scores + ((bb * heads_ + hh) * sq_ + ii) * skv_, 0, sizeof(float) * skv_);
              }
        }
  }

  const ir::Node& node_;
  int64_t heads_ = 0, b_ = 0, sq_ = 0, skv_ = 0, d_ = 0, dv_ = 0;
  MaskKind mask_kind_ = MaskKind::kNone;
  Shape mask_dims_;
  Tensor causal_;
  memory::desc q_md_, kt_md_, v_md_, y_md_, scores_md_, mask_md_;
  memory::desc qk_pad_, add_pad_, softmax_pad_, pv_pad_;
  dnnl::primitive qk_, add_mask_, softmax_, pv_;
  size_t mask_offset_ = 0, scratchpad_offset_ = 0, scratch_bytes_ = 0;
  std::string impl_;
};

}  // namespace

ANVIL_REGISTER_KERNEL_CLASS_TYPED("Attention", kDnnl, DnnlAttention,
                                  {kFloat32Only, kFloat32Only, kFloat32Only, kAll, kAll});

}  // namespace anvil::kernels
