// Schema of Attention (opsets 23-25): Y, present_key, present_value and
// qk_matmul_output from Q, K, V (3-D [B, S, heads * size] or 4-D [B, heads,
// S, size]) and the past key/value cache.
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

void infer_attention(InferContext& ctx) {
  const DType t = ctx.dtype(0);
  for (size_t o = 0; o < 4; ++o) ctx.set_output(o, Type::tensor(t));
  const SymShape &qs = ctx.dims(0), &ks = ctx.dims(1), &vs = ctx.dims(2);
  if (qs.size() != ks.size() || qs.size() != vs.size())
    ctx.fail_input("Q {}, K {} and V {} must have one rank", dims_str(qs), dims_str(ks), dims_str(vs));
  const Heads q = heads_of(ctx, qs, "q_num_heads", "Q"), k = heads_of(ctx, ks, "kv_num_heads", "K"),
              v = heads_of(ctx, vs, "kv_num_heads", "V");
  if (q.size.is_known() && k.size.is_known() && q.size != k.size)
    ctx.fail_input("Q's head size {} differs from K's {}", q.size.value, k.size.value);
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
  // attn_mask broadcasts to [B, q_heads, q_seq, total]; its last axis may be shorter (padded as masked).
  if (ctx.has_input(3)) {
    const SymShape& m = ctx.dims(3);
    const SymShape full{q.batch, q.heads, q.seq, total};
    bool fits = !m.empty() && m.size() <= 4;
    for (size_t i = 0; fits && i < m.size(); ++i) {
      const Dim& want = full[4 - m.size() + i];
      if (!m[i].is_known() || !want.is_known()) continue;
      fits = i + 1 == m.size() ? m[i].value <= want.value : (m[i].value == 1 || m[i] == want);
    }
    if (!fits) ctx.fail_input("attn_mask {} does not broadcast to {}", dims_str(m), dims_str(full));
  }
  if (ctx.has_input(6)) {
    const SymShape& n = ctx.dims(6);
    if (n.size() != 1 || !same(n[0], q.batch)) ctx.fail_input("nonpad_kv_seqlen {} must be [B]", dims_str(n));
  }
  if (qs.size() == 3) ctx.set_output(0, Type::tensor(t, SymShape{q.batch, q.seq, dim_mul(q.heads, v.size)}));
  else ctx.set_output(0, Type::tensor(t, SymShape{q.batch, q.heads, q.seq, v.size}));
  ctx.set_output(1, Type::tensor(t, SymShape{k.batch, k.heads, total, k.size}));
  ctx.set_output(2, Type::tensor(t, SymShape{v.batch, v.heads, total, v.size}));
  ctx.set_output(3, Type::tensor(t, SymShape{q.batch, q.heads, q.seq, total}));
}

struct Registrations {
  Registrations() {
    SchemaRegistry::global().add(OpSchema("Attention")
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
