// Attention (opsets 23-25), float32, in one pass over the queries on Anvil's
// own vectorized code: per (batch, query head, block of queries) a thread
// computes the block's scores against every key it may see, exponentiates
// them (scale, mask, softmax's shift: VecKernels::attention_exps) while
// they sit in L1, multiplies them into the values, writing the heads
// straight into Y, and divides each row of Y by its sum of exps (in the
// tile's registers). The products run on the packed GEMM's micro-kernel
// (GemmKernels::tile) against the head's K^T and V, packed once per (batch,
// key/value head) a thread meets. The scores of one row tile are all the
// memory between the steps, so one parallel region does the whole node.
//
// Why not oneDNN: its attention was four primitives (QK^T, mask add,
// softmax, PV), four fork/joins of the team, with the scores written to
// memory and read back between them. In the GPT-2 decoder (sequence 64,
// AVX-512, two threads) a node took 0.060 ms that way and 0.039 this way;
// at BERT's 128 both take the same (docs/benchmarks.md).
//
// Runs: float32 3-D [B, S, heads * size] and 4-D [B, heads, S, size]
// inputs, key and value heads shared by groups of query heads, a float or
// boolean attn_mask of the full key length (broadcast to [B, heads, Sq,
// Skv]), is_causal (query i sees keys j <= i). A row whose largest term is
// infinite, or whose exps sum to NaN, gives zeros, as in the reference
// kernel (ref/attention.cc). Declines (the reference kernel runs them):
// other dtypes and mask types, past key/value, nonpad_kv_seqlen, extra
// outputs, softcap, sliding windows, a mask shorter than the keys, empty
// inputs, heads too long for the scratch (plan_scratch).
//
// anvil.QkvAttention (fuse_qkv_attention.cc) runs here too: Q, K and V are
// column ranges of one [B, S, q + k + v] input (qkv_sizes), read in place
// where a Split would have copied them out; or of [S, B, q + k + v] with
// sequence_first, Y then [S, B, ...] (fuse_sequence_first_attention.cc).
#include <algorithm>
#include <cmath>
#include <limits>

#include <omp.h>

#include "kernels/ref/common.h"
#include "kernels/registry.h"
#include "kernels/thread_share.h"
#include "kernels/vec/vec_kernels.h"

namespace anvil::kernels {
namespace {

constexpr int64_t kAlignFloats = 16;  // 64 bytes
int64_t aligned_floats(int64_t n) { return (n + kAlignFloats - 1) / kAlignFloats * kAlignFloats; }
constexpr int kMaxTileRows = 16;  // GemmKernels::mr of every ISA is at most this
constexpr int64_t kMaxThreadScratchFloats = int64_t{16} << 20;  // 64 MiB

// Where one head's rows lie in an input or the output: element (s, e) of
// head h of batch item b at data + offset + b * batch + h * head + s * row + e.
struct HeadRows {
  int64_t heads = 0, seq = 0, size = 0;
  int64_t batch = 0, head = 0, row = 0, offset = 0;
  const float* at(const float* data, int64_t b, int64_t h) const { return data + offset + b * batch + h * head; }
  float* at(float* data, int64_t b, int64_t h) const { return data + offset + b * batch + h * head; }
};

// `width` columns from `offset` on of a 3-D input [B, S, row] (or [S, B,
// row], sequence first) as `heads` heads.
HeadRows column_rows(const Shape& s, int64_t heads, int64_t width, int64_t offset, bool sequence_first = false) {
  HeadRows r;
  r.heads = heads;
  r.seq = s[sequence_first ? 0 : 1];
  r.size = width / heads;
  r.row = sequence_first ? s[1] * s[2] : s[2];
  r.head = r.size;
  r.batch = sequence_first ? s[2] : s[1] * s[2];
  r.offset = offset;
  return r;
}

// A 3-D input [B, S, heads * size] (heads from the attribute) or 4-D [B, heads, S, size].
HeadRows head_rows(const Shape& s, int64_t heads_attr) {
  if (s.size() == 3) return column_rows(s, heads_attr, s[2], 0);
  HeadRows r;
  r.heads = s[1];
  r.seq = s[2];
  r.size = s[3];
  r.row = s[3];
  r.head = s[2] * s[3];
  r.batch = s[1] * r.head;
  return r;
}

class VecAttention : public Kernel {
 public:
  explicit VecAttention(const ir::Node& node) : node_(node), packed_(node.op_type == "QkvAttention") {}

  std::vector<TensorType> prepare(const PrepareContext& ctx) override {
    check_supported(ctx);
    const Shape& qs = ctx.input_shape(0);
    const int64_t q_heads = node_.attrs.get_int("q_num_heads", 0), kv_heads = node_.attrs.get_int("kv_num_heads", 0);
    const bool sequence_first = packed_ && node_.attrs.get_int("sequence_first", 0) != 0;
    if (packed_) {
      const QkvColumns c = qkv_columns(ctx, node_.attrs.get_ints("qkv_sizes"));
      q_ = column_rows(qs, q_heads, c.width[0], c.first[0], sequence_first);
      k_ = column_rows(qs, kv_heads, c.width[1], c.first[1], sequence_first);
      v_ = column_rows(qs, kv_heads, c.width[2], c.first[2], sequence_first);
    } else {
      q_ = head_rows(qs, q_heads);
      k_ = head_rows(ctx.input_shape(1), kv_heads);
      v_ = head_rows(ctx.input_shape(2), kv_heads);
    }
    const Shape& ys = ctx.output_shape(0);
    y_ = sequence_first ? column_rows(ys, q_.heads, ys[2], 0, true) : head_rows(ys, q_.heads);
    ANVIL_PREPARE_CHECK(ctx, k_.heads > 0 && q_.heads % k_.heads == 0, ErrorKind::kInvalidArgument,
                        "{} query heads cannot share {} key/value heads", q_.heads, k_.heads);
    batch_ = qs[sequence_first ? 1 : 0];
    causal_ = node_.attrs.get_int("is_causal", 0) != 0;
    const float scale_attr = node_.attrs.get_float("scale", 0.f);
    scale_ = node_.attrs.has("scale") ? scale_attr : 1.f / std::sqrt(static_cast<float>(q_.size));
    prepare_mask(ctx);
    plan_scratch(ctx);
    return ctx.output_types();
  }

  size_t scratch_bytes() const override { return static_cast<size_t>(scratch_floats_) * sizeof(float); }
  std::string impl_name() const override { return vec::vec_impl_name(); }

  void run(const RunContext& ctx) const override {
    float* scratch = static_cast<float*>(ctx.scratch);
    const float* mask = nullptr;
    if (mask_kind_ == MaskKind::kFloat) mask = ctx.in(mask_input()).data<float>();
    if (mask_kind_ == MaskKind::kBool) mask = bool_to_float(ctx.in(mask_input()), scratch);
    const float* q = ctx.in(0).data<float>();
    const float* k = packed_ ? q : ctx.in(1).data<float>();
    const float* v = packed_ ? q : ctx.in(2).data<float>();
    float* y = ctx.out(0).data<float>();
    const int64_t items = batch_ * q_.heads * chunks_;
    const double flops = 4.0 * static_cast<double>(batch_ * q_.heads) * q_.seq * k_.seq * q_.size;
#pragma omp parallel if (threads_ > 1 && flops > 1e5 && items > 1)
    {
      const int t = omp_get_thread_num(), team = std::min(omp_get_num_threads(), threads_);
      if (t < team) {
        const auto [first, last] = share(items, t, team);
        ThreadScratch mine = thread_scratch(scratch, t);
        for (int64_t item = first; item < last; ++item) run_item(item, q, k, v, mask, y, mine);
      }
    }
  }

 private:
  enum class MaskKind { kNone, kFloat, kBool };

  // A thread's part of the scratch: K^T and V of the head it last packed, one row tile's scores.
  struct ThreadScratch {
    float *kt, *v, *scores;
    int64_t packed_b = -1, packed_h = -1;
  };

  size_t mask_input() const { return packed_ ? 1 : 3; }

  void check_supported(const PrepareContext& ctx) const {
    ANVIL_PREPARE_CHECK(ctx, ctx.input_dtype(0) == DType::kFloat32 && (packed_ || ctx.input_dtype(2) == DType::kFloat32),
                        ErrorKind::kUnsupported, "the vectorized attention takes float32");
    if (packed_) {  // no past, nonpad or extra outputs; the schema refuses softcap, windows and qk_matmul_output_mode
      ANVIL_PREPARE_CHECK(ctx, shape_numel(ctx.input_shape(0)) > 0, ErrorKind::kUnsupported,
                          "the vectorized attention lacks empty inputs");
      return;
    }
    auto decline = [&](const char* what) {
      ctx.fail(ErrorKind::kUnsupported, "the vectorized attention lacks {}", what);
    };
    for (size_t i = 4; i < ctx.num_inputs(); ++i)
      if (ctx.has_input(i)) decline("past key/value and nonpad_kv_seqlen");
    for (size_t o = 1; o < node_.outputs.size(); ++o)
      if (node_.output(o)) decline("present key/value and qk_matmul_output");
    if (node_.attrs.get_float("softcap", 0.f) != 0.f) decline("softcap");
    if (node_.attrs.get_int("left_window_size", -1) != -1 || node_.attrs.get_int("right_window_size", -1) != -1)
      decline("sliding windows");
    const Shape &q = ctx.input_shape(0), &k = ctx.input_shape(1), &v = ctx.input_shape(2);
    if (q.size() != k.size() || q.size() != v.size() || (q.size() != 3 && q.size() != 4))
      decline("inputs of mixed or other ranks");
    if (shape_numel(q) == 0 || shape_numel(k) == 0 || shape_numel(v) == 0) decline("empty inputs");
  }

  void prepare_mask(const PrepareContext& ctx) {
    mask_kind_ = MaskKind::kNone;
    mask_numel_ = 0;
    if (!ctx.has_input(mask_input())) return;
    const TensorType& t = ctx.input_type(mask_input());
    ANVIL_PREPARE_CHECK(ctx, t.dtype == DType::kFloat32 || t.dtype == DType::kBool, ErrorKind::kUnsupported,
                        "the vectorized attention takes no {} attn_mask", dtype_name(t.dtype));
    ANVIL_PREPARE_CHECK(ctx, !t.shape.empty() && t.shape.size() <= 4 && t.shape.back() == k_.seq,
                        ErrorKind::kUnsupported, "the vectorized attention takes no attn_mask {} for {} keys",
                        shape_str(t.shape), k_.seq);
    mask_kind_ = t.dtype == DType::kBool ? MaskKind::kBool : MaskKind::kFloat;
    mask_numel_ = shape_numel(t.shape);
    // Strides of the mask's dims over (batch, head, query), 0 where it broadcasts.
    const std::vector<int64_t> strides = broadcast_strides(t.shape, {batch_, q_.heads, q_.seq, k_.seq});
    std::copy_n(strides.begin(), 3, mask_stride_);
  }

  // Row tiles of queries per work item, and the scratch: a float copy of a
  // boolean mask, then per thread K^T and V of one head and a tile's scores.
  // Beyond kMaxThreadScratchFloats a thread (tens of thousands of keys) the
  // reference kernel runs the node: packing whole heads per thread would want
  // keys in blocks with an online softmax instead.
  void plan_scratch(const PrepareContext& ctx) {
    const vec::GemmKernels& g = vec::vec_kernels().gemm;
    ANVIL_CHECK(g.mr <= kMaxTileRows, ErrorKind::kInternal, "attention: tiles of {} rows", g.mr);
    ANVIL_PREPARE_CHECK(ctx,
                        k_.seq <= kMaxThreadScratchFloats && q_.size <= kMaxThreadScratchFloats &&
                            v_.size <= kMaxThreadScratchFloats && mask_numel_ <= (int64_t{1} << 40),
                        ErrorKind::kUnsupported, "the vectorized attention takes no heads this large");
    threads_ = std::max(1, ctx.num_threads());
    const int64_t row_tiles = ceil_div(q_.seq, g.mr), heads = batch_ * q_.heads;
    // Whole heads per item while they keep every thread busy; else heads split into blocks of rows.
    chunks_ = std::min(row_tiles, ceil_div(2 * threads_, heads));
    chunk_rows_ = ceil_div(row_tiles, chunks_) * g.mr;
    chunks_ = ceil_div(q_.seq, chunk_rows_);
    key_panels_ = ceil_div(k_.seq, g.nr);
    value_panels_ = ceil_div(v_.size, g.nr);
    // Each factor is at most 2^24 here, so no product overflows.
    kt_floats_ = aligned_floats(key_panels_ * g.nr * q_.size);
    v_floats_ = aligned_floats(value_panels_ * g.nr * k_.seq);
    scores_ld_ = key_panels_ * g.nr;
    thread_floats_ = kt_floats_ + v_floats_ + aligned_floats(g.mr * scores_ld_);
    ANVIL_PREPARE_CHECK(ctx, thread_floats_ <= kMaxThreadScratchFloats, ErrorKind::kUnsupported,
                        "the vectorized attention packs at most {} floats a thread ({} keys of {} and {})",
                        kMaxThreadScratchFloats, k_.seq, q_.size, v_.size);
    mask_floats_ = mask_kind_ == MaskKind::kBool ? aligned_floats(mask_numel_) : 0;
    scratch_floats_ = mask_floats_ + threads_ * thread_floats_;
  }

  ThreadScratch thread_scratch(float* scratch, int t) const {
    float* mine = scratch + mask_floats_ + t * thread_floats_;
    return {mine, mine + kt_floats_, mine + kt_floats_ + v_floats_};
  }

  const float* bool_to_float(const Tensor& mask, float* out) const {
    const bool* m = mask.data<bool>();
    for (int64_t i = 0; i < mask_numel_; ++i) out[i] = m[i] ? 0.f : -std::numeric_limits<float>::infinity();
    return out;
  }

  // K^T of one key/value head as GEMM panels of g.nr keys (d rows of g.nr
  // floats each, keys past the last zero), and V as panels of g.nr value
  // columns (a row of g.nr floats per key).
  void pack_head(const float* k, const float* v, int64_t b, int64_t h, ThreadScratch& s) const {
    const vec::GemmKernels& g = vec::vec_kernels().gemm;
    const float* kh = k_.at(k, b, h);
    for (int64_t p = 0; p < key_panels_; ++p) {
      const int64_t j0 = p * g.nr, keys = std::min<int64_t>(g.nr, k_.seq - j0);
      float* out = s.kt + p * g.nr * q_.size;
      g.transpose32(reinterpret_cast<const uint32_t*>(kh + j0 * k_.row), k_.row, reinterpret_cast<uint32_t*>(out), g.nr,
                    keys, q_.size);
      if (keys < g.nr)
        for (int64_t e = 0; e < q_.size; ++e) std::fill(out + e * g.nr + keys, out + (e + 1) * g.nr, 0.f);
    }
    const float* vh = v_.at(v, b, h);
    for (int64_t p = 0; p < value_panels_; ++p) {
      const int64_t c0 = p * g.nr, cols = std::min<int64_t>(g.nr, v_.size - c0);
      float* out = s.v + p * g.nr * k_.seq;
      for (int64_t j = 0; j < k_.seq; ++j, out += g.nr) {
        std::copy_n(vh + j * v_.row + c0, cols, out);
        std::fill(out + cols, out + g.nr, 0.f);
      }
    }
    s.packed_b = b;
    s.packed_h = h;
  }

  // Work item (batch b, query head h, chunk of rows): per row tile, scores,
  // weights, then the weighted values into Y.
  void run_item(int64_t item, const float* q, const float* k, const float* v, const float* mask, float* y,
                ThreadScratch& s) const {
    const vec::VecKernels& vk = vec::vec_kernels();
    const vec::GemmKernels& g = vk.gemm;
    const int64_t chunk = item % chunks_, bh = item / chunks_, b = bh / q_.heads, h = bh % q_.heads;
    const int64_t kv_head = h / (q_.heads / k_.heads);
    if (s.packed_b != b || s.packed_h != kv_head) pack_head(k, v, b, kv_head, s);
    const float* qh = q_.at(q, b, h);
    float* yh = y_.at(y, b, h);
    const int64_t end = std::min(q_.seq, (chunk + 1) * chunk_rows_);
    for (int64_t i = chunk * chunk_rows_; i < end; i += g.mr) {
      const int m = static_cast<int>(std::min<int64_t>(g.mr, end - i));
      // Row i + r sees keys [0, i + r] when causal: the tile's last row sees the most.
      const int64_t keys = causal_ ? std::min(k_.seq, i + m) : k_.seq;
      for (int64_t p = 0; p * g.nr < keys; ++p)
        g.tile(qh + i * q_.row, q_.row, s.kt + p * g.nr * q_.size, q_.size, nullptr, s.scores + p * g.nr, scores_ld_, m,
               static_cast<int>(std::min<int64_t>(g.nr, keys - p * g.nr)), nullptr, {});
      float norm[kMaxTileRows];
      for (int r = 0; r < m; ++r) {
        const int64_t row = i + r, seen = causal_ ? std::min(k_.seq, row + 1) : k_.seq;
        const float* mask_row =
            mask ? mask + b * mask_stride_[0] + h * mask_stride_[1] + row * mask_stride_[2] : nullptr;
        norm[r] = vk.attention_exps(s.scores + r * scores_ld_, seen, keys, scale_, mask_row);
      }
      vec::GemmTileFinish normalize;
      normalize.row_scale = norm;
      for (int64_t p = 0; p < value_panels_; ++p) {
        const int64_t c0 = p * g.nr, cols = std::min<int64_t>(g.nr, v_.size - c0);
        float* y_tile = yh + i * y_.row + c0;
        const bool whole = cols % g.width == 0;  // the tile applies `finish` to whole vectors only
        g.tile(s.scores, scores_ld_, s.v + c0 * k_.seq, keys, nullptr, y_tile, y_.row, m, static_cast<int>(cols),
               whole ? &normalize : nullptr, {});
        if (!whole)
          for (int r = 0; r < m; ++r)
            for (int64_t e = 0; e < cols; ++e) y_tile[r * y_.row + e] *= norm[r];
      }
    }
  }

  const ir::Node& node_;
  const bool packed_;  // anvil.QkvAttention
  HeadRows q_, k_, v_, y_;
  int64_t batch_ = 0;
  bool causal_ = false;
  float scale_ = 1.f;
  MaskKind mask_kind_ = MaskKind::kNone;
  int64_t mask_numel_ = 0;
  int64_t mask_stride_[3] = {0, 0, 0};  // over batch, head, query
  int threads_ = 1;
  int64_t chunks_ = 1, chunk_rows_ = 0, key_panels_ = 0, value_panels_ = 0, scores_ld_ = 0;
  int64_t kt_floats_ = 0, v_floats_ = 0, thread_floats_ = 0, mask_floats_ = 0, scratch_floats_ = 0;
};

}  // namespace

ANVIL_REGISTER_KERNEL_CLASS_TYPED("Attention", kVec, VecAttention,
                                  {kFloat32Only, kFloat32Only, kFloat32Only, kAll, kAll});
static Registrar qkv_attention("QkvAttention", Backend::kVec, factory_of<VecAttention>(), "anvil",
                               {{kFloat32Only, kAll}});

}  // namespace anvil::kernels
