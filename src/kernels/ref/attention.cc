// Attention (opsets 23-25): softmax(Q K^T * scale + bias) V per batch and
// query head, following ONNX's definition:
// - 3-D inputs [B, S, heads * size] are split into heads (q_num_heads,
//   kv_num_heads); 4-D inputs are [B, heads, S, size]. Query heads share key
//   and value heads in groups (grouped-query attention: head h reads kv head
//   h / (q_heads / kv_heads)).
// - past_key/past_value are prepended to K/V; present_* return the result.
// - The bias: attn_mask (bool: attend where true; float: added; padded with
//   "masked" to the total length), is_causal (query i attends key j <= i +
//   offset, offset = the past length, or nonpad_kv_seqlen[b] - q_len),
//   nonpad_kv_seqlen (keys from it on are padding), and opset 25's sliding
//   window; softcap (c * tanh(x / c)) comes before the bias.
// - A row every key of which is masked gives zeros.
// - qk_matmul_output: the scores (modes 0 and 1), with the bias (2), or the
//   softmax (3).
// Scores accumulate in double. A reference kernel: the speed issue fuses it.
//
// anvil.QkvAttention (fuse_qkv_attention.cc) is Attention on one 3-D input
// [B, S, q + k + v] holding Q, K and V side by side (qkv_sizes), as the
// product before a Split wrote them, with only attn_mask beside it; with
// sequence_first, input [S, B, q + k + v] and Y [S, B, ...]
// (fuse_sequence_first_attention.cc).
//
// RotaryEmbedding (opset 23) rotates the first rotary_embedding_dim values of
// each head by position: pairs (x1, x2), halves or (interleaved) neighbours,
// become (cos x1 - sin x2, sin x1 + cos x2), the caches read at position_ids
// ([max_position, dim / 2]) or given per [batch, sequence] without them.
#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/ref/common.h"
#include "kernels/registry.h"

namespace anvil::kernels {

namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

template <typename T>
double load(const T* p, int64_t i) {
  if constexpr (std::is_class_v<T>) return static_cast<double>(static_cast<float>(p[i]));
  else return static_cast<double>(p[i]);
}

// v rounded to T, as a double.
template <typename T>
double round_to(double v) {
  if constexpr (std::is_class_v<T>) return static_cast<double>(static_cast<float>(T(static_cast<float>(v))));
  else return static_cast<double>(static_cast<T>(v));
}

template <typename T>
void store(T* p, int64_t i, double v) {
  if constexpr (std::is_class_v<T>) p[i] = T(static_cast<float>(v));
  else p[i] = static_cast<T>(v);
}

// A 4-D view [B, heads, S, size] of a 3-D or 4-D input.
struct HeadView {
  int64_t batch = 0, heads = 0, seq = 0, size = 0;
  // 3-D: rows of [B, S, width] (or [S, B, width], sequence first), the heads
  // from column `offset` on; rows `item` apart over b, `step` apart over s.
  bool split = false;
  int64_t item = 0, step = 0, offset = 0;
  int64_t at(int64_t b, int64_t h, int64_t s, int64_t d) const {
    return split ? b * item + s * step + offset + h * size + d : ((b * heads + h) * seq + s) * size + d;
  }
};

// `width` columns from `offset` on of a 3-D input's rows, as `heads` heads.
HeadView columns_view(const Shape& s, int64_t heads, int64_t width, int64_t offset, bool sequence_first = false) {
  HeadView v;
  v.split = true;
  v.batch = s[sequence_first ? 1 : 0];
  v.seq = s[sequence_first ? 0 : 1];
  v.heads = heads;
  v.size = heads ? width / heads : 0;
  v.item = sequence_first ? s[2] : s[1] * s[2];
  v.step = sequence_first ? s[1] * s[2] : s[2];
  v.offset = offset;
  return v;
}

HeadView view_of(const Shape& s, int64_t heads) {
  if (s.size() == 3) return columns_view(s, heads, s[2], 0);
  HeadView v;
  v.batch = s[0];
  v.heads = s[1];
  v.seq = s[2];
  v.size = s[3];
  return v;
}

class AttentionKernel : public Kernel {
 public:
  explicit AttentionKernel(const ir::Node& node)
      : packed_(node.op_type == "QkvAttention"),
        qkv_sizes_(node.attrs.get_ints("qkv_sizes")),
        sequence_first_(packed_ && node.attrs.get_int("sequence_first", 0) != 0),
        causal_(node.attrs.get_int("is_causal", 0) != 0),
        q_heads_attr_(node.attrs.get_int("q_num_heads", 0)),
        kv_heads_attr_(node.attrs.get_int("kv_num_heads", 0)),
        mode_(node.attrs.get_int("qk_matmul_output_mode", 0)),
        has_scale_(node.attrs.has("scale")),
        scale_(node.attrs.get_float("scale", 0.f)),
        softcap_(node.attrs.get_float("softcap", 0.f)),
        left_(node.attrs.get_int("left_window_size", -1)),
        right_(node.attrs.get_int("right_window_size", -1)) {}

  std::vector<TensorType> prepare(const PrepareContext& ctx) override {
    // The schema checked the ranks, heads and sizes.
    const Shape& q = ctx.input_shape(0);
    if (packed_) {
      const QkvColumns c = qkv_columns(ctx, qkv_sizes_);
      q_ = columns_view(q, q_heads_attr_, c.width[0], c.first[0], sequence_first_);
      k_ = columns_view(q, kv_heads_attr_, c.width[1], c.first[1], sequence_first_);
      v_ = columns_view(q, kv_heads_attr_, c.width[2], c.first[2], sequence_first_);
    } else {
      q_ = view_of(q, q_heads_attr_);
      k_ = view_of(ctx.input_shape(1), kv_heads_attr_);
      v_ = view_of(ctx.input_shape(2), kv_heads_attr_);
    }
    ANVIL_PREPARE_CHECK(ctx, mode_ >= 0 && mode_ <= 3, ErrorKind::kInvalidModel, "qk_matmul_output_mode {} is not 0-3",
                        mode_);
    ANVIL_PREPARE_CHECK(ctx, k_.heads > 0 && q_.heads % k_.heads == 0, ErrorKind::kInvalidArgument,
                        "{} query heads cannot share {} key/value heads", q_.heads, k_.heads);
    ANVIL_PREPARE_CHECK(ctx, packed_ || ctx.input_dtype(2) == ctx.input_dtype(0), ErrorKind::kUnsupported,
                        "V as {} beside Q as {}", dtype_name(ctx.input_dtype(2)), dtype_name(ctx.input_dtype(0)));
    past_ = !packed_ && ctx.has_input(4) ? ctx.input_shape(4)[2] : 0;
    total_ = past_ + k_.seq;
    if (ctx.has_input(mask_input())) {
      mask_shape_ = ctx.input_shape(mask_input());
      mask_bool_ = ctx.input_dtype(mask_input()) == DType::kBool;
    }
    return ctx.output_types();
  }

  void run(const RunContext& ctx) const override {
    dispatch_dtype(ctx.in(0).dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      if constexpr (std::is_floating_point_v<T> || std::is_class_v<T>) compute<T>(ctx);
    });
  }

 private:
  static const Tensor* input(const RunContext& ctx, size_t i) { return i < ctx.inputs.size() ? ctx.inputs[i] : nullptr; }
  size_t mask_input() const { return packed_ ? 1 : 3; }
  static Tensor* output(const RunContext& ctx, size_t i) { return i < ctx.outputs.size() ? ctx.outputs[i] : nullptr; }

  // The mask's value for (b, h, i, j), as an additive bias; j beyond its last axis is masked.
  double mask_bias(const Tensor& mask, int64_t b, int64_t h, int64_t i, int64_t j) const {
    const Shape& m = mask_shape_;
    const int64_t idx[4] = {b, h, i, j};
    if (j >= m.back()) return kNegInf;
    int64_t off = 0, stride = 1;
    for (size_t d = m.size(); d-- > 0;) {
      const int64_t c = idx[4 - m.size() + d];
      off += (m[d] == 1 ? 0 : c) * stride;
      stride *= m[d];
    }
    if (mask_bool_) return mask.data<bool>()[off] ? 0.0 : kNegInf;
    return dispatch_dtype(mask.dtype(), [&](auto tag) -> double {
      using M = typename decltype(tag)::type;
      if constexpr (std::is_floating_point_v<M> || std::is_class_v<M>) return load(mask.data<M>(), off);
      else if constexpr (std::is_arithmetic_v<M>) return static_cast<double>(mask.data<M>()[off]);  // ONNX allows ints
      else return 0.0;
    });
  }

  template <typename T>
  void compute(const RunContext& ctx) const {
    const T* q = ctx.in(0).data<T>();
    const T* k = packed_ ? q : ctx.in(1).data<T>();
    const T* v = packed_ ? q : ctx.in(2).data<T>();
    const Tensor* mask = input(ctx, mask_input());
    // QkvAttention has two inputs: no past or nonpad_kv_seqlen.
    const T* past_k = !packed_ && input(ctx, 4) ? input(ctx, 4)->template data<T>() : nullptr;
    const T* past_v = !packed_ && input(ctx, 5) ? input(ctx, 5)->template data<T>() : nullptr;
    const Tensor* nonpad = packed_ ? nullptr : input(ctx, 6);
    const int64_t b_n = q_.batch, hq = q_.heads, hk = k_.heads, sq = q_.seq, d = q_.size, dv = v_.size;
    const int64_t group = hq / hk, total = total_;
    // present_key/value: [B, kv_heads, total, size], the past first.
    std::vector<double> keys(static_cast<size_t>(b_n * hk * total * d)), values(static_cast<size_t>(b_n * hk * total * dv));
    for (int64_t b = 0; b < b_n; ++b)
      for (int64_t h = 0; h < hk; ++h)
        for (int64_t t = 0; t < total; ++t) {
          const bool from_past = t < past_;
          for (int64_t e = 0; e < d; ++e)
            keys[static_cast<size_t>(((b * hk + h) * total + t) * d + e)] =
                from_past ? load(past_k, ((b * hk + h) * past_ + t) * d + e) : load(k, k_.at(b, h, t - past_, e));
          for (int64_t e = 0; e < dv; ++e)
            values[static_cast<size_t>(((b * hk + h) * total + t) * dv + e)] =
                from_past ? load(past_v, ((b * hk + h) * past_ + t) * dv + e) : load(v, v_.at(b, h, t - past_, e));
        }
    if (Tensor* pk = output(ctx, 1))
      for (size_t i = 0; i < keys.size(); ++i) store(pk->data<T>(), static_cast<int64_t>(i), keys[i]);
    if (Tensor* pv = output(ctx, 2))
      for (size_t i = 0; i < values.size(); ++i) store(pv->data<T>(), static_cast<int64_t>(i), values[i]);
    Tensor* qk_out = output(ctx, 3);
    // sqrt(scale) applied to Q and K each, rounded to T as ONNX's definition does.
    const double s = round_to<T>(std::sqrt(has_scale_ ? scale_ : 1.0 / std::sqrt(static_cast<double>(d))));
    T* y = ctx.out(0).data<T>();
    std::vector<double> row(static_cast<size_t>(total)), bias(static_cast<size_t>(total));
    for (int64_t b = 0; b < b_n; ++b) {
      const int64_t offset = past_ > 0 || !nonpad ? past_ : nonpad->data<int64_t>()[b] - sq;
      for (int64_t h = 0; h < hq; ++h) {
        const int64_t hkv = h / group;
        for (int64_t i = 0; i < sq; ++i) {
          double bias_max = kNegInf;
          for (int64_t j = 0; j < total; ++j) {
            double bj = mask ? mask_bias(*mask, b, h, i, j) : 0.0;
            if (causal_ && j > i + offset) bj = kNegInf;
            if (left_ >= 0 && (i + offset) - j > left_) bj = kNegInf;
            if (right_ >= 0 && j - (i + offset) > right_) bj = kNegInf;
            if (nonpad && j >= nonpad->data<int64_t>()[b]) bj = kNegInf;
            bias[static_cast<size_t>(j)] = bj;
            bias_max = std::max(bias_max, bj);
            double dot = 0;
            for (int64_t e = 0; e < d; ++e)
              dot += load(q, q_.at(b, h, i, e)) * s * (keys[static_cast<size_t>(((b * hk + hkv) * total + j) * d + e)] * s);
            if (softcap_ > 0) dot = softcap_ * std::tanh(dot / softcap_);
            row[static_cast<size_t>(j)] = dot;
          }
          const int64_t qk_at = ((b * hq + h) * sq + i) * total;
          if (qk_out && mode_ <= 2)
            for (int64_t j = 0; j < total; ++j)
              store(qk_out->data<T>(), qk_at + j, row[static_cast<size_t>(j)] + (mode_ == 2 ? bias[static_cast<size_t>(j)] : 0.0));
          // Softmax of scores + bias; a row with every key masked is all zeros.
          const bool all_masked = std::isinf(bias_max) && bias_max < 0;
          double m = kNegInf;
          for (int64_t j = 0; j < total; ++j) {
            row[static_cast<size_t>(j)] += bias[static_cast<size_t>(j)];
            m = std::max(m, row[static_cast<size_t>(j)]);
          }
          double sum = 0;
          for (int64_t j = 0; j < total; ++j) {
            double& r = row[static_cast<size_t>(j)];
            r = all_masked || std::isinf(m) ? 0.0 : std::exp(r - m);
            sum += r;
          }
          for (int64_t j = 0; j < total; ++j) {
            double& r = row[static_cast<size_t>(j)];
            r = sum > 0 ? r / sum : 0.0;
            r = round_to<T>(r);  // the probabilities in T, as ONNX casts them
          }
          if (qk_out && mode_ == 3)
            for (int64_t j = 0; j < total; ++j) store(qk_out->data<T>(), qk_at + j, row[static_cast<size_t>(j)]);
          for (int64_t e = 0; e < dv; ++e) {
            double acc = 0;
            for (int64_t j = 0; j < total; ++j)
              acc += row[static_cast<size_t>(j)] * values[static_cast<size_t>(((b * hk + hkv) * total + j) * dv + e)];
            // Y: [B, heads, S, size], or [B, S, heads * size] for 3-D inputs
            // ([S, B, heads * size] sequence first).
            const int64_t token = sequence_first_ ? i * b_n + b : b * sq + i;
            const int64_t at = q_.split ? (token * hq + h) * dv + e : ((b * hq + h) * sq + i) * dv + e;
            store(y, at, acc);
          }
        }
      }
    }
  }

  bool packed_;  // anvil.QkvAttention
  std::vector<int64_t> qkv_sizes_;
  bool sequence_first_;  // QkvAttention's [S, B, q + k + v]
  bool causal_;
  int64_t q_heads_attr_, kv_heads_attr_, mode_;
  bool has_scale_;
  double scale_, softcap_;
  int64_t left_, right_;
  HeadView q_, k_, v_;
  int64_t past_ = 0, total_ = 0;
  Shape mask_shape_;
  bool mask_bool_ = false;
};

class RotaryEmbeddingKernel : public Kernel {
 public:
  explicit RotaryEmbeddingKernel(const ir::Node& node)
      : interleaved_(node.attrs.get_int("interleaved", 0) != 0),
        dim_attr_(node.attrs.get_int("rotary_embedding_dim", 0)),
        heads_attr_(node.attrs.get_int("num_heads", 0)) {}

  std::vector<TensorType> prepare(const PrepareContext& ctx) override {
    const Shape& x = ctx.input_shape(0);  // rank 3 with num_heads, or 4: the schema's checks
    x_ = view_of(x, heads_attr_);
    ANVIL_PREPARE_CHECK(ctx, x.size() == 4 || x[2] % heads_attr_ == 0, ErrorKind::kInvalidArgument,
                        "input {} does not split into {} heads", shape_str(x), heads_attr_);
    rot_ = dim_attr_ ? dim_attr_ : x_.size;
    ANVIL_PREPARE_CHECK(ctx, rot_ > 0 && rot_ % 2 == 0 && rot_ <= x_.size, ErrorKind::kInvalidArgument,
                        "rotary_embedding_dim {} must be even and at most the head size {}", rot_, x_.size);
    const Shape &cos = ctx.input_shape(1), &sin = ctx.input_shape(2);
    ANVIL_PREPARE_CHECK(ctx, cos == sin, ErrorKind::kInvalidArgument, "cos_cache {} and sin_cache {} differ",
                        shape_str(cos), shape_str(sin));
    with_positions_ = ctx.has_input(3);
    if (with_positions_) {
      ANVIL_PREPARE_CHECK(ctx, cos.size() == 2 && cos[1] == rot_ / 2, ErrorKind::kInvalidArgument,
                          "with position_ids the caches must be [max_position, {}], got {}", rot_ / 2, shape_str(cos));
      ANVIL_PREPARE_CHECK(ctx, ctx.input_shape(3) == (Shape{x_.batch, x_.seq}), ErrorKind::kInvalidArgument,
                          "position_ids {} must be [{}, {}]", shape_str(ctx.input_shape(3)), x_.batch, x_.seq);
      positions_ = cos[0];
    } else {
      ANVIL_PREPARE_CHECK(ctx, cos == (Shape{x_.batch, x_.seq, rot_ / 2}), ErrorKind::kInvalidArgument,
                          "without position_ids the caches must be [{}, {}, {}], got {}", x_.batch, x_.seq, rot_ / 2,
                          shape_str(cos));
    }
    return ctx.output_types();
  }

  void run(const RunContext& ctx) const override {
    std::vector<float> x = tensor_to_floats(ctx.in(0));
    const std::vector<float> cos = tensor_to_floats(ctx.in(1)), sin = tensor_to_floats(ctx.in(2));
    const int64_t half = rot_ / 2;
    for (int64_t b = 0; b < x_.batch; ++b)
      for (int64_t s = 0; s < x_.seq; ++s) {
        int64_t row = b * x_.seq + s;  // the caches' row
        if (with_positions_) {
          row = ctx.in(3).data<int64_t>()[b * x_.seq + s];
          ANVIL_CHECK(row >= 0 && row < positions_, ErrorKind::kInvalidArgument,
                      "RotaryEmbedding: position id {} is outside the caches' {} positions", row, positions_);
        }
        for (int64_t h = 0; h < x_.heads; ++h) {
          float* v = x.data() + x_.at(b, h, s, 0);
          for (int64_t i = 0; i < half; ++i) {
            const int64_t a = interleaved_ ? 2 * i : i, c = interleaved_ ? 2 * i + 1 : i + half;
            const float x1 = v[a], x2 = v[c], co = cos[static_cast<size_t>(row * half + i)],
                        si = sin[static_cast<size_t>(row * half + i)];
            v[a] = co * x1 - si * x2;
            v[c] = si * x1 + co * x2;
          }
        }
      }
    floats_to_tensor(x, ctx.out(0));
  }

 private:
  bool interleaved_;
  int64_t dim_attr_, heads_attr_;
  HeadView x_;
  int64_t rot_ = 0, positions_ = 0;
  bool with_positions_ = false;
};

}  // namespace

ANVIL_REGISTER_OP_VERSIONS("RotaryEmbedding", 23, 23);
ANVIL_REGISTER_KERNEL_CLASS_TYPED("RotaryEmbedding", kRef, RotaryEmbeddingKernel,
                                  {kFloats | kHalfs, kFloats | kHalfs, kFloats | kHalfs, dtype_bit(DType::kInt64)});
ANVIL_REGISTER_OP_VERSIONS("Attention", 23, 25);
ANVIL_REGISTER_KERNEL_CLASS_TYPED("Attention", kRef, AttentionKernel, {kFloats | kHalfs, kFloats | kHalfs, kFloats | kHalfs, kAll, kFloats | kHalfs, kFloats | kHalfs, dtype_bit(DType::kInt64)});
static Registrar qkv_attention("QkvAttention", Backend::kRef, factory_of<AttentionKernel>(), "anvil",
                               {{kFloats | kHalfs, kAll}});

}  // namespace anvil::kernels
