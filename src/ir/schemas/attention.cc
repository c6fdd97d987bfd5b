// Schemas of the attention family: Attention (opsets 23-25: Y, present_key,
// present_value and qk_matmul_output from Q, K, V, 3-D [B, S, heads * size]
// or 4-D [B, heads, S, size], and the past key/value cache), RotaryEmbedding
// (23), TensorScatter (24, the cache update), and the recurrent-state ops of
// opset 27: LinearAttention and CausalConvWithState.
#include <optional>

#include "core/checked.h"
#include "ir/schemas/common.h"

namespace anvil::ir::schemas {

namespace {

struct Heads {
  Dim batch, heads, seq, size;
};

// A 3-D input's heads come from the attribute; 4-D inputs carry them.
Heads heads_of(const InferContext& ctx, const SymShape& s, const char* heads_attr, const char* name) {
  if (s.size() == 4) return {s[0], s[1], s[2], s[3]};
  if (s.size() != 3) ctx.fail_input("{} {} must have rank 3 or 4", name, dims_str(s));
  const int64_t h = ctx.attr_int(heads_attr);
  if (h < 1) ctx.fail("{} is required (and positive) for 3-D inputs", heads_attr);
  if (s[2].is_known() && s[2].value % h != 0)
    ctx.fail_input("{} {} does not split into {} = {} heads", name, dims_str(s), heads_attr, h);
  return {s[0], Dim::known(h), s[1], dim_div(s[2], Dim::known(h)).value_or(Dim::unknown())};
}

// attn_mask (input `index`) broadcasts to `full` [B, q_heads, q_seq, total]; its last axis may be shorter (padded as masked).
void check_attn_mask(const InferContext& ctx, size_t index, const SymShape& full) {
  const SymShape& m = ctx.dims(index);
  bool fits = !m.empty() && m.size() <= 4;
  for (size_t i = 0; fits && i < m.size(); ++i) {
    const Dim& want = full[4 - m.size() + i];
    if (!m[i].is_known() || !want.is_known()) continue;
    fits = i + 1 == m.size() ? m[i].value <= want.value : (m[i].value == 1 || m[i] == want);
  }
  if (!fits) ctx.fail_input("attn_mask {} does not broadcast to {}", dims_str(m), dims_str(full));
}

void infer_attention(InferContext& ctx) {
  const DType t = ctx.dtype(0);
  for (size_t o : {0, 1, 3}) ctx.set_output(o, Type::tensor(t));
  ctx.set_output(2, Type::tensor(ctx.dtype(2)));  // V's type (T2): last, as it may be unknown
  const SymShape &qs = ctx.dims(0), &ks = ctx.dims(1), &vs = ctx.dims(2);
  if (qs.size() != ks.size() || qs.size() != vs.size())
    ctx.fail_input("Q {}, K {} and V {} must have one rank", dims_str(qs), dims_str(ks), dims_str(vs));
  const Heads q = heads_of(ctx, qs, "q_num_heads", "Q"), k = heads_of(ctx, ks, "kv_num_heads", "K"),
              v = heads_of(ctx, vs, "kv_num_heads", "V");
  if (q.size.is_known() && k.size.is_known() && q.size != k.size)
    ctx.fail_input("Q's head size {} differs from K's {}", q.size.value, k.size.value);
  if (k.heads.is_known() && k.heads.value == 0)  // (a fuzzed file: the check below divided by it)
    ctx.fail_input("K {} has no key/value heads", dims_str(ks));
  if (q.heads.is_known() && k.heads.is_known() && q.heads.value % k.heads.value != 0)
    ctx.fail_input("{} query heads cannot share {} key/value heads", q.heads.value, k.heads.value);
  auto same = [](const Dim& a, const Dim& b) { return !a.is_known() || !b.is_known() || a == b; };
  if (!same(q.batch, k.batch) || !same(q.batch, v.batch) || !same(k.heads, v.heads) || !same(k.seq, v.seq))
    ctx.fail_input("Q {}, K {} and V {} disagree on batch, key/value heads or sequence", dims_str(qs), dims_str(ks),
                   dims_str(vs));
  Dim past = Dim::known(0);
  if (ctx.has_input(4) != ctx.has_input(5)) ctx.fail("past_key and past_value come together");
  if (ctx.has_input(4)) {
    const SymShape &pk = ctx.dims(4), &pv = ctx.dims(5);
    if (pk.size() != 4 || pv.size() != 4 || !same(pk[0], k.batch) || !same(pk[1], k.heads) || !same(pk[3], k.size) ||
        !same(pv[0], v.batch) || !same(pv[1], v.heads) || !same(pv[3], v.size) || !same(pk[2], pv[2]))
      ctx.fail_input("past_key {} and past_value {} must be [B, kv_heads, past, size] like K and V", dims_str(pk),
                     dims_str(pv));
    past = pk[2];
  }
  const Dim total = dim_add(past, k.seq);
  if (ctx.has_input(3)) check_attn_mask(ctx, 3, SymShape{q.batch, q.heads, q.seq, total});
  if (ctx.has_input(6)) {
    const SymShape& n = ctx.dims(6);
    if (n.size() != 1 || !same(n[0], q.batch)) ctx.fail_input("nonpad_kv_seqlen {} must be [B]", dims_str(n));
  }
  if (qs.size() == 3) ctx.set_output(0, Type::tensor(t, SymShape{q.batch, q.seq, dim_mul(q.heads, v.size)}));
  else ctx.set_output(0, Type::tensor(t, SymShape{q.batch, q.heads, q.seq, v.size}));
  ctx.set_output(1, Type::tensor(t, SymShape{k.batch, k.heads, total, k.size}));
  ctx.set_output(2, Type::tensor(ctx.dtype(2), SymShape{v.batch, v.heads, total, v.size}));
  ctx.set_output(3, Type::tensor(t, SymShape{q.batch, q.heads, q.seq, total}));
}

// anvil.QkvAttention(QKV, attn_mask): Attention on Q, K and V side by side
// in one [B, S, q + k + v] input, qkv_sizes = {q, k, v} columns
// (fuse_qkv_attention.cc); Y is [B, S, q_heads * v / kv_heads]. With
// sequence_first = 1 QKV is [S, B, q + k + v] and Y [S, B, ...]
// (fuse_sequence_first_attention.cc).
void infer_qkv_attention(InferContext& ctx) {
  const int64_t qh = ctx.attr_int("q_num_heads"), kvh = ctx.attr_int("kv_num_heads");
  const std::vector<int64_t> sizes = ctx.attr_ints("qkv_sizes");
  if (qh < 1 || kvh < 1 || qh % kvh != 0)
    ctx.fail("q_num_heads {} must be a positive multiple of kv_num_heads {}", qh, kvh);
  if (sizes.size() != 3 || sizes[0] < 1 || sizes[1] < 1 || sizes[2] < 1 || sizes[0] % qh || sizes[1] % kvh ||
      sizes[2] % kvh || sizes[0] / qh != sizes[1] / kvh)
    ctx.fail("qkv_sizes must be 3 positive widths splitting into {} query and {} key/value heads of one size", qh, kvh);
  for (const char* lacking : {"softcap", "left_window_size", "right_window_size", "qk_matmul_output_mode"})
    if (ctx.has_attr(lacking)) ctx.fail("takes no {} (ONNX's Attention does)", lacking);
  const std::optional<int64_t> qk = add_overflow_free(sizes[0], sizes[1]);
  const std::optional<int64_t> total = qk ? add_overflow_free(*qk, sizes[2]) : std::nullopt;
  const std::optional<int64_t> y_width = mul_overflow_free(qh, sizes[2] / kvh);
  if (!total || !y_width) ctx.fail("qkv_sizes {}, {}, {} are too large", sizes[0], sizes[1], sizes[2]);
  ctx.set_output(0, Type::tensor(ctx.dtype(0)));  // the dtype, should QKV's shape be unknown here
  const int64_t sequence_first = ctx.attr_int("sequence_first");
  if (sequence_first != 0 && sequence_first != 1) ctx.fail("sequence_first {} is not 0 or 1", sequence_first);
  const SymShape& x = ctx.dims(0);
  if (x.size() != 3) ctx.fail_input("QKV {} must be [{}, q + k + v]", dims_str(x), sequence_first ? "S, B" : "B, S");
  if (x[2].is_known() && x[2].value != *total)
    ctx.fail_input("QKV {} does not hold qkv_sizes {} + {} + {} columns", dims_str(x), sizes[0], sizes[1], sizes[2]);
  const Dim &batch = x[sequence_first], &seq = x[1 - sequence_first];
  if (ctx.has_input(1)) check_attn_mask(ctx, 1, SymShape{batch, Dim::known(qh), seq, seq});
  ctx.set_output(0, Type::tensor(ctx.dtype(0), SymShape{x[0], x[1], Dim::known(*y_width)}));
}

// LinearAttention: output [B, T, q_heads * d_v] like the query; present_state
// [B, kv_heads, d_k, d_v] in past_state's type (the query's without one).
void infer_linear_attention(InferContext& ctx) {
  const int64_t qh = ctx.attr_int("q_num_heads"), kvh = ctx.attr_int("kv_num_heads");
  if (qh < 1 || kvh < 1 || qh % kvh != 0)
    ctx.fail("q_num_heads {} must be a positive multiple of kv_num_heads {}", qh, kvh);
  const std::string rule = ctx.attr_string("update_rule");
  if (rule != "linear" && rule != "gated" && rule != "delta" && rule != "gated_delta")
    ctx.fail("update_rule '{}' is not linear, gated, delta or gated_delta", rule);
  const bool gated = rule == "gated" || rule == "gated_delta", delta = rule == "delta" || rule == "gated_delta";
  if (ctx.has_input(4) != gated) ctx.fail("update_rule '{}' {} a decay input", rule, gated ? "needs" : "forbids");
  if (ctx.has_input(5) != delta) ctx.fail("update_rule '{}' {} a beta input", rule, delta ? "needs" : "forbids");
  const DType t = ctx.dtype(0);
  const SymShape &q = ctx.dims(0), &k = ctx.dims(1), &v = ctx.dims(2);
  if (q.size() != 3 || k.size() != 3 || v.size() != 3)
    ctx.fail_input("query {}, key {} and value {} must be [B, T, heads * size]", dims_str(q), dims_str(k), dims_str(v));
  const Dim dk = dim_div(q[2], Dim::known(qh)).value_or(Dim::unknown());
  const Dim dv = dim_div(v[2], Dim::known(kvh)).value_or(Dim::unknown());
  if ((q[2].is_known() && q[2].value % qh) || (v[2].is_known() && v[2].value % kvh) ||
      (k[2].is_known() && dk.is_known() && k[2].value != kvh * dk.value))
    ctx.fail_input("query {}, key {} and value {} do not split into {} query and {} key/value heads", dims_str(q),
                   dims_str(k), dims_str(v), qh, kvh);
  const SymShape state{q[0], Dim::known(kvh), dk, dv};
  if (ctx.has_input(3)) {
    const SymShape& p = ctx.dims(3);
    bool fits = p.size() == 4;
    for (size_t i = 0; fits && i < 4; ++i) fits = !p[i].is_known() || !state[i].is_known() || p[i] == state[i];
    if (!fits) ctx.fail_input("past_state {} must be {}", dims_str(p), dims_str(state));
  }
  ctx.set_output(0, Type::tensor(t, SymShape{q[0], q[1], dim_mul(Dim::known(qh), dv)}));
  ctx.set_output(1, Type::tensor(ctx.has_input(3) ? ctx.dtype(3) : t, state));
}

// CausalConvWithState: a depthwise causal 1-D convolution, weight [C, 1, k];
// output like the input [B, C, L], present_state [B, C, k - 1].
void infer_causal_conv(InferContext& ctx) {
  const std::string act = ctx.attr_string("activation");
  if (act != "none" && act != "silu" && act != "swish") ctx.fail("activation '{}' is not none, silu or swish", act);
  const SymShape &x = ctx.dims(0), &w = ctx.dims(1);
  if (x.size() != 3 || w.size() != 3) ctx.fail_input("input {} and weight {} must have rank 3", dims_str(x), dims_str(w));
  if (w[2].is_known() && w[2].value < 1) ctx.fail_input("the kernel length must be positive, weight {}", dims_str(w));
  if ((w[0].is_known() && x[1].is_known() && w[0] != x[1]) || (w[1].is_known() && w[1].value != 1))
    ctx.fail_input("weight {} must be [channels, 1, k] for input {}", dims_str(w), dims_str(x));
  const Dim keep = w[2].is_known() ? Dim::known(w[2].value - 1) : Dim::unknown();
  const SymShape state{x[0], x[1], keep};
  if (ctx.has_input(2)) {
    const SymShape& b = ctx.dims(2);
    if (b.size() != 1 || (b[0].is_known() && x[1].is_known() && b[0] != x[1]))
      ctx.fail_input("bias {} must be [channels]", dims_str(b));
  }
  if (ctx.has_input(3)) {
    const SymShape& p = ctx.dims(3);
    bool fits = p.size() == 3;
    for (size_t i = 0; fits && i < 3; ++i) fits = !p[i].is_known() || !state[i].is_known() || p[i] == state[i];
    if (!fits) ctx.fail_input("past_state {} must be {}", dims_str(p), dims_str(state));
  }
  copy_type(ctx, 0, 0);
  ctx.set_output(1, Type::tensor(ctx.dtype(0), state));
}

// RotaryEmbedding: the input's type; the caches' last axis is half the rotated size.
void infer_rotary(InferContext& ctx) {
  const SymShape& x = ctx.dims(0);
  if (x.size() != 3 && x.size() != 4) ctx.fail_input("input {} must have rank 3 or 4", dims_str(x));
  if (x.size() == 3 && ctx.attr_int("num_heads") < 1) ctx.fail("num_heads is required for 3-D inputs");
  copy_type(ctx, 0, 0);
}

// TensorScatter: present_cache like past_cache; the update fits inside it.
void infer_tensor_scatter(InferContext& ctx) {
  const std::string mode = ctx.attr_string("mode");
  if (mode != "linear" && mode != "circular") ctx.fail("mode '{}' is not linear or circular", mode);
  const SymShape &c = ctx.dims(0), &u = ctx.dims(1);
  if (c.empty() || c.size() != u.size()) ctx.fail_input("update {} must have the cache's rank, cache {}", dims_str(u), dims_str(c));
  const int64_t axis = ctx.axis(ctx.attr_int("axis"), static_cast<int64_t>(c.size()));
  if (axis == 0) ctx.fail("axis must not be the batch axis");
  for (size_t i = 0; i < c.size(); ++i) {
    if (!c[i].is_known() || !u[i].is_known()) continue;
    if (static_cast<int64_t>(i) == axis ? u[i].value > c[i].value : u[i] != c[i])
      ctx.fail_input("update {} does not fit the cache {} along axis {}", dims_str(u), dims_str(c), axis);
  }
  copy_type(ctx, 0, 0);
}

struct Registrations {
  Registrations() {
    auto& r = SchemaRegistry::global();
    r.add(OpSchema("LinearAttention")
              .inputs({kFloats | kHalfs})
              .attr("q_num_heads", int64_t{0})
              .attr("kv_num_heads", int64_t{0})
              .attr("scale", 0.f)
              .attr("chunk_size", int64_t{64})
              .attr("update_rule", std::string("gated_delta"))
              .infer(infer_linear_attention));
    r.add(OpSchema("CausalConvWithState")
              .inputs({kFloats | kHalfs})
              .attr("activation", std::string("none"))
              .infer(infer_causal_conv));
    r.add(OpSchema("RotaryEmbedding")
              .inputs({kFloats | kHalfs, kFloats | kHalfs, kFloats | kHalfs, dtype_bit(DType::kInt64)})
              .attr("interleaved", int64_t{0})
              .attr("rotary_embedding_dim", int64_t{0})
              .attr("num_heads", int64_t{0})
              .infer(infer_rotary));
    r.add(OpSchema("TensorScatter")
              .inputs({kAnyDType, kAnyDType, dtype_bit(DType::kInt64)})
              .attr("mode", std::string("linear"))
              .attr("axis", int64_t{-2})
              .infer(infer_tensor_scatter));
    r.add(OpSchema("QkvAttention", "anvil")
              .inputs({kFloats | kHalfs, kAnyDType})
              .attr("is_causal", int64_t{0})
              .attr("sequence_first", int64_t{0})
              .infer(infer_qkv_attention));
    r.add(OpSchema("Attention")
              .inputs({kFloats | kHalfs, kFloats | kHalfs, kFloats | kHalfs, kNumeric | kHalfs | dtype_bit(DType::kBool),
                       kFloats | kHalfs, kFloats | kHalfs, dtype_bit(DType::kInt64)})
              // ONNX's T1 and T2 (a fuzzed float16 K beside a float32 Q was read as float32)
              .same_types({0, 1, 4}, {"Q", "K", "past_key"})
              .same_types({2, 5}, {"V", "past_value"})
              .attr("is_causal", int64_t{0})
              .attr("q_num_heads", int64_t{0})
              .attr("kv_num_heads", int64_t{0})
              .attr("qk_matmul_output_mode", int64_t{0})
              .infer(infer_attention));
  }
};
const Registrations registrations;

}  // namespace

}  // namespace anvil::ir::schemas
