// Ops that carry a state from one decoding step to the next, as recent LLM
// architectures export them:
// - LinearAttention (opset 27): a [d_k, d_v] state per key/value head,
//   S_t = exp(decay_t) * S_{t-1} + k_t (beta_t (v_t - S^T k_t))^T with the
//   decay and the delta correction as update_rule says, and o_t = scale q_t S_t
//   (query heads share key/value heads in groups);
// - CausalConvWithState (27): a depthwise 1-D convolution over the past k - 1
//   steps (past_state, zeros without one) and the input, optional SiLU, and the
//   last k - 1 steps as the next state;
// - TensorScatter (24): writes an update into a KV cache at per-batch
//   positions along `axis` (wrapping around with mode circular).
// They compute in float32 whatever the storage type, as ONNX's reference does.
#include <cmath>
#include <cstring>

#include "kernels/ref/common.h"
#include "kernels/registry.h"

namespace anvil::kernels {

namespace {

class LinearAttentionKernel : public Kernel {
 public:
  explicit LinearAttentionKernel(const ir::Node& node)
      : q_heads_(node.attrs.get_int("q_num_heads", 0)),
        kv_heads_(node.attrs.get_int("kv_num_heads", 0)),
        scale_(node.attrs.get_float("scale", 0.f)) {}

  std::vector<TensorType> prepare(const PrepareContext& ctx) override {
    // The schema checked heads, ranks, the update rule's inputs and past_state's shape.
    const Shape &q = ctx.input_shape(0), &v = ctx.input_shape(2);
    batch_ = q[0];
    steps_ = q[1];
    dk_ = q[2] / q_heads_;
    dv_ = v[2] / kv_heads_;
    ANVIL_PREPARE_CHECK(ctx, ctx.input_shape(1)[1] == steps_ && v[1] == steps_ && ctx.input_shape(1)[0] == batch_ &&
                                 v[0] == batch_,
                        ErrorKind::kInvalidArgument, "query {}, key {} and value {} differ in batch or steps",
                        shape_str(q), shape_str(ctx.input_shape(1)), shape_str(v));
    decay_per_dim_ = false;
    if (ctx.has_input(4)) {
      const Shape& g = ctx.input_shape(4);
      ANVIL_PREPARE_CHECK(ctx, g.size() == 3 && g[0] == batch_ && g[1] == steps_ &&
                                   (g[2] == kv_heads_ || g[2] == kv_heads_ * dk_),
                          ErrorKind::kInvalidArgument, "decay {} must be [{}, {}, {} or {}]", shape_str(g), batch_,
                          steps_, kv_heads_, kv_heads_ * dk_);
      decay_per_dim_ = g[2] == kv_heads_ * dk_;
    }
    beta_per_head_ = false;
    if (ctx.has_input(5)) {
      const Shape& b = ctx.input_shape(5);
      ANVIL_PREPARE_CHECK(ctx, b.size() == 3 && b[0] == batch_ && b[1] == steps_ && (b[2] == kv_heads_ || b[2] == 1),
                          ErrorKind::kInvalidArgument, "beta {} must be [{}, {}, {} or 1]", shape_str(b), batch_,
                          steps_, kv_heads_);
      beta_per_head_ = b[2] == kv_heads_;
    }
    return ctx.output_types();
  }

  void run(const RunContext& ctx) const override {
    const std::vector<float> q = tensor_to_floats(ctx.in(0)), k = tensor_to_floats(ctx.in(1)),
                             v = tensor_to_floats(ctx.in(2));
    const bool has_past = ctx.inputs.size() > 3 && ctx.inputs[3];
    const bool gated = ctx.inputs.size() > 4 && ctx.inputs[4], delta = ctx.inputs.size() > 5 && ctx.inputs[5];
    const std::vector<float> decay = gated ? tensor_to_floats(ctx.in(4)) : std::vector<float>{};
    const std::vector<float> beta = delta ? tensor_to_floats(ctx.in(5)) : std::vector<float>{};
    std::vector<float> state = has_past ? tensor_to_floats(ctx.in(3))
                                        : std::vector<float>(static_cast<size_t>(batch_ * kv_heads_ * dk_ * dv_), 0.f);
    std::vector<float> out(static_cast<size_t>(batch_ * steps_ * q_heads_ * dv_), 0.f);
    const float scale = scale_ != 0.f ? scale_ : 1.f / std::sqrt(static_cast<float>(dk_));
    const int64_t group = q_heads_ / kv_heads_;
    std::vector<float> update(static_cast<size_t>(dv_));
    for (int64_t b = 0; b < batch_; ++b)
      for (int64_t t = 0; t < steps_; ++t)
        for (int64_t h = 0; h < kv_heads_; ++h) {
          float* s = state.data() + ((b * kv_heads_ + h) * dk_) * dv_;
          const float* kt = k.data() + ((b * steps_ + t) * kv_heads_ + h) * dk_;
          const float* vt = v.data() + ((b * steps_ + t) * kv_heads_ + h) * dv_;
          if (gated) decay_state(s, decay, b, t, h);
          for (int64_t m = 0; m < dv_; ++m) update[static_cast<size_t>(m)] = vt[m];
          if (delta) {  // v_t <- beta_t (v_t - S^T k_t)
            const float bt = beta[static_cast<size_t>((b * steps_ + t) * (beta_per_head_ ? kv_heads_ : 1) +
                                                      (beta_per_head_ ? h : 0))];
            for (int64_t m = 0; m < dv_; ++m) {
              float retrieved = 0;
              for (int64_t d = 0; d < dk_; ++d) retrieved += s[d * dv_ + m] * kt[d];
              update[static_cast<size_t>(m)] = bt * (vt[m] - retrieved);
            }
          }
          for (int64_t d = 0; d < dk_; ++d)
            for (int64_t m = 0; m < dv_; ++m) s[d * dv_ + m] += kt[d] * update[static_cast<size_t>(m)];
          for (int64_t g = 0; g < group; ++g) {  // the query heads reading this state
            const int64_t qh = h * group + g;
            const float* qt = q.data() + ((b * steps_ + t) * q_heads_ + qh) * dk_;
            float* o = out.data() + ((b * steps_ + t) * q_heads_ + qh) * dv_;
            for (int64_t m = 0; m < dv_; ++m) {
              float acc = 0;
              for (int64_t d = 0; d < dk_; ++d) acc += qt[d] * s[d * dv_ + m];
              o[m] = scale * acc;
            }
          }
        }
    floats_to_tensor(out, ctx.out(0));
    if (ctx.outputs.size() > 1 && ctx.outputs[1]) floats_to_tensor(state, ctx.out(1));
  }

 private:
  // S <- exp(g_t) * S, g_t one value per head or one per key dimension.
  void decay_state(float* s, const std::vector<float>& decay, int64_t b, int64_t t, int64_t h) const {
    const int64_t width = decay_per_dim_ ? kv_heads_ * dk_ : kv_heads_;
    const float* g = decay.data() + (b * steps_ + t) * width + (decay_per_dim_ ? h * dk_ : h);
    for (int64_t d = 0; d < dk_; ++d) {
      const float f = std::exp(decay_per_dim_ ? g[d] : g[0]);
      for (int64_t m = 0; m < dv_; ++m) s[d * dv_ + m] *= f;
    }
  }

  int64_t q_heads_, kv_heads_;
  float scale_;
  int64_t batch_ = 0, steps_ = 0, dk_ = 0, dv_ = 0;
  bool decay_per_dim_ = false, beta_per_head_ = false;
};

class CausalConvKernel : public Kernel {
 public:
  explicit CausalConvKernel(const ir::Node& node) : silu_(node.attrs.get_string("activation", "none") != "none") {}

  std::vector<TensorType> prepare(const PrepareContext& ctx) override {
    const Shape& x = ctx.input_shape(0);  // the schema checked the weight, bias and state shapes
    batch_ = x[0];
    channels_ = x[1];
    length_ = x[2];
    taps_ = ctx.input_shape(1)[2];
    return ctx.output_types();
  }

  void run(const RunContext& ctx) const override {
    const std::vector<float> x = tensor_to_floats(ctx.in(0)), w = tensor_to_floats(ctx.in(1));
    const bool has_bias = ctx.inputs.size() > 2 && ctx.inputs[2], has_past = ctx.inputs.size() > 3 && ctx.inputs[3];
    const std::vector<float> bias = has_bias ? tensor_to_floats(ctx.in(2)) : std::vector<float>{};
    const std::vector<float> past = has_past ? tensor_to_floats(ctx.in(3)) : std::vector<float>{};
    const int64_t keep = taps_ - 1, padded_len = keep + length_;
    std::vector<float> y(static_cast<size_t>(batch_ * channels_ * length_));
    std::vector<float> next(static_cast<size_t>(batch_ * channels_ * keep));
    std::vector<float> padded(static_cast<size_t>(padded_len));
    for (int64_t b = 0; b < batch_; ++b)
      for (int64_t c = 0; c < channels_; ++c) {
        const int64_t row = b * channels_ + c;
        for (int64_t i = 0; i < keep; ++i) padded[static_cast<size_t>(i)] = has_past ? past[static_cast<size_t>(row * keep + i)] : 0.f;
        for (int64_t i = 0; i < length_; ++i) padded[static_cast<size_t>(keep + i)] = x[static_cast<size_t>(row * length_ + i)];
        for (int64_t i = 0; i < length_; ++i) {
          float acc = has_bias ? bias[static_cast<size_t>(c)] : 0.f;
          for (int64_t j = 0; j < taps_; ++j) acc += w[static_cast<size_t>(c * taps_ + j)] * padded[static_cast<size_t>(i + j)];
          // The reference rounds the convolution to the input type before the activation.
          acc = round_to_input(ctx, acc);
          y[static_cast<size_t>(row * length_ + i)] = silu_ ? acc / (1.f + std::exp(-acc)) : acc;
        }
        for (int64_t i = 0; i < keep; ++i) next[static_cast<size_t>(row * keep + i)] = padded[static_cast<size_t>(padded_len - keep + i)];
      }
    floats_to_tensor(y, ctx.out(0));
    if (ctx.outputs.size() > 1 && ctx.outputs[1]) floats_to_tensor(next, ctx.out(1));
  }

 private:
  static float round_to_input(const RunContext& ctx, float v) {
    switch (ctx.in(0).dtype()) {
      case DType::kFloat16: return static_cast<float>(Half(v));
      case DType::kBFloat16: return static_cast<float>(BFloat16(v));
      default: return v;
    }
  }

  bool silu_;
  int64_t batch_ = 0, channels_ = 0, length_ = 0, taps_ = 1;
};

class TensorScatterKernel : public Kernel {
 public:
  explicit TensorScatterKernel(const ir::Node& node)
      : circular_(node.attrs.get_string("mode", "linear") == "circular"), axis_(node.attrs.get_int("axis", -2)) {}

  std::vector<TensorType> prepare(const PrepareContext& ctx) override {
    const Shape &cache = ctx.input_shape(0), &update = ctx.input_shape(1);  // the schema checked they fit
    const auto axis = static_cast<size_t>(normalize_axis(ctx, axis_, static_cast<int64_t>(cache.size())));
    ANVIL_PREPARE_CHECK(ctx, ctx.input_dtype(1) == ctx.input_dtype(0), ErrorKind::kInvalidModel,
                        "the update is {} but the cache {}", dtype_name(ctx.input_dtype(1)), dtype_name(ctx.input_dtype(0)));
    if (ctx.has_input(2))
      ANVIL_PREPARE_CHECK(ctx, ctx.input_shape(2) == Shape{cache[0]}, ErrorKind::kInvalidArgument,
                          "write_indices {} must be [{}]", shape_str(ctx.input_shape(2)), cache[0]);
    name_ = ctx.node().describe();
    batch_ = cache[0];
    rows_ = shape_numel(Shape(cache.begin() + 1, cache.begin() + static_cast<std::ptrdiff_t>(axis)));
    max_len_ = cache[axis];
    len_ = update[axis];
    row_bytes_ = static_cast<size_t>(shape_numel(Shape(cache.begin() + static_cast<std::ptrdiff_t>(axis) + 1, cache.end()))) *
                 dtype_size(ctx.input_dtype(0));
    return ctx.output_types();
  }

  void run(const RunContext& ctx) const override {
    const Tensor& cache = ctx.in(0);
    Tensor& out = ctx.out(0);
    if (out.raw() != cache.raw() && cache.nbytes()) std::memcpy(out.raw(), cache.raw(), cache.nbytes());
    const Tensor* indices = ctx.inputs.size() > 2 ? ctx.inputs[2] : nullptr;
    const auto* src = static_cast<const char*>(ctx.in(1).raw());
    auto* dst = static_cast<char*>(out.raw());
    for (int64_t b = 0; b < batch_; ++b) {
      const int64_t start = indices ? indices->data<int64_t>()[b] : 0;
      for (int64_t s = 0; s < len_; ++s) {
        int64_t at = start + s;
        if (circular_) at = ((at % max_len_) + max_len_) % max_len_;
        ANVIL_CHECK(at >= 0 && at < max_len_, ErrorKind::kInvalidArgument,
                    "{}: batch {} writes position {} of a cache of {} (mode linear)", name_, b, at, max_len_);
        for (int64_t r = 0; r < rows_; ++r) {
          const int64_t row = b * rows_ + r;
          std::memcpy(dst + static_cast<size_t>(row * max_len_ + at) * row_bytes_,
                      src + static_cast<size_t>(row * len_ + s) * row_bytes_, row_bytes_);
        }
      }
    }
  }

  int inplace_input() const override { return 0; }

 private:
  bool circular_;
  int64_t axis_;
  std::string name_;
  int64_t batch_ = 0, rows_ = 1, max_len_ = 0, len_ = 0;
  size_t row_bytes_ = 0;
};

}  // namespace

ANVIL_REGISTER_OP_VERSIONS("LinearAttention", 27, 27);
ANVIL_REGISTER_OP_VERSIONS("CausalConvWithState", 27, 27);
ANVIL_REGISTER_OP_VERSIONS("TensorScatter", 24, 24);
ANVIL_REGISTER_KERNEL_CLASS_TYPED("LinearAttention", kRef, LinearAttentionKernel, {kFloats | kHalfs});
ANVIL_REGISTER_KERNEL_CLASS_TYPED("CausalConvWithState", kRef, CausalConvKernel, {kFloats | kHalfs});
ANVIL_REGISTER_KERNEL_CLASS_TYPED("TensorScatter", kRef, TensorScatterKernel,
                                  {kAnyDType, kAnyDType, dtype_bit(DType::kInt64)});

}  // namespace anvil::kernels
