// MatMul (numpy semantics, batched, broadcasting), anvil.FusedMatMul (MatMul
// with a bias, a residual sum and an activation as post-ops), Gemm,
// anvil.FusedGemm (Gemm and an activation) and anvil.GemmReluGrad on
// oneDNN's matmul (float32).
//
// One rule picks another implementation per node: unless oneDNN's choice is
// one of its brgemm kernels (AVX-512 and up, which take prepacked weights),
// that is where it would run its gemm:jit sgemm (every CPU without AVX-512,
// for oneDNN 2.6.3), which reads a constant B in the plain layout and
// repacks it on every call, or its reference matmul (a Gemm's C of the
// output's shape), a 2-D product runs on Anvil's GEMM (vec/gemm.h): a
// constant B packed once and shared through the session's weight cache, or
// operands known only at run time (training's products and gradients, A or
// B transposed) packed per run, from M of one row tile up. Against brgemm
// too for products of few rows when the model's weights pass half of what
// the last-level cache keeps (streams_weights_faster). `--tune` times both instead
// (Kernel::alternatives). On brgemm, a B known only at run time is staged
// per run in brgemm's own blocked layout where the product has rows enough
// to repay that pass (staging_b_pays: training's forward products at large
// batches).
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "kernels/activation.h"
#include "kernels/dnnl/common.h"
#include "kernels/nn_geometry.h"
#include "kernels/ref/common.h"
#include "kernels/registry.h"
#include "kernels/thread_share.h"
#include "kernels/vec/gemm.h"
#include "kernels/vec/vec_kernels.h"
#include "kernels/weight_cache.h"

namespace anvil::kernels {

namespace {

using dnnl::memory;
namespace du = dnnl_util;

// Whether Anvil's GEMM, packing B (K x N) on every run, beats oneDNN's
// sgemm on a product of M rows with B known only at run time. The pass over
// B is repaid from about 256 rows on, or at any M of a full row tile when K
// is short (attention's products: K is a head's width), where oneDNN's own
// fixed cost is the larger. Measured with anvil_gemm_ab on Zen 3: at K >=
// 256, M = 24-192 ran 5-20% slower than oneDNN and M >= 256 level or
// faster; at K <= 128, M = 32-128 ran 1-20% faster; with fewer rows than a
// tile (M = 2, a two-class weight gradient) twice as long.
bool packing_per_run_pays(int64_t m, int64_t k) {
  constexpr int64_t kRowsThatRepayPacking = 256, kShortK = 128;
  return m >= vec::vec_kernels().gemm.mr && (m >= kRowsThatRepayPacking || k <= kShortK);
}

// Whether a B known only at run time pays for a pass that stages it, each
// run, in the layout oneDNN's brgemm prefers (blocks of 16 k x 64 n): brgemm
// reading plain B ran 0.88 of its time staged at M = 25,000 (K = N = 1024),
// 0.92 at 2048, level at 1024; B stored transposed (Gemm's transB, as
// PyTorch exports Linear) 0.95 and 0.97 (Intel Xeon with AMX, two threads,
// the staging pass included).
bool staging_b_pays(int64_t m) {
  constexpr int64_t kRowsThatRepayStaging = 2048;
  return m >= kRowsThatRepayStaging;
}

// Whether Anvil's packed GEMM beats oneDNN's brgemm on a product of M rows
// with a constant B: when the model's weights come from memory on every run
// (du::weights_stream), a product of few rows is bound by those reads,
// which the GEMM makes as one stream a thread, prefetched a panel ahead
// (vec::GemmPrefetch), and brgemm does not. Measured with
// anvil_stream_gemm_ab, BERT-base's 768 x 3072 weights streamed: on two
// AVX-512 cores of an Intel Xeon, 0.79-0.87 of brgemm's time at M = 8-96,
// 0.96 at 128, 0.97 at 1; resident in the caches, level at M = 32 and
// 1.08-1.15 from M = 128 on. On a Zen 4 (docs/benchmarks.md, "Decoding
// steps"), 0.65 of brgemm's time at M = 1 on one thread and 0.76 on two,
// 0.60 and 0.65 at M = 2, level and 0.75 at M = 4: brgemm read the weights
// at 13-15 GB/s on one thread, the GEMM at 21-23. So from one row on: a
// decoder's step with a cache of past keys and values is such a product.
// The rule is the model's, not the product's: a one-row product whose small
// weights stay in the caches between its reads (a Loop's body) runs slower
// on the GEMM (0.12 against 0.07 ms for 5 MB, docs/benchmarks.md).
// The bound is half the one for streaming (du::weights_stream_past_few_rows):
// on a Zen 4 guest (32 MiB of L3 shared with other tenants) brgemm read
// 9.6 MB of weights in turn at 0.78 of its in-cache speed and 14 MB at
// 0.62, while with its weights in the caches the GEMM ran these products
// at 0.95-0.98 of brgemm's speed (M = 16-196, K = 256-384,
// anvil_stream_gemm_ab): a wrong choice costs less this way round.
// LeViT-128S (31 MB of weights, products of 16-196 rows) ran 0.97 of its
// time; GPT-2's 14 MB at sequence 64 stay on brgemm (on the GEMM they ran
// 1.04 of its time at two threads).
bool streams_weights_faster(const PrepareContext& ctx, int64_t m) {
  constexpr int64_t kMaxRows = 128;
  return m <= kMaxRows && du::weights_stream_past_few_rows(ctx);
}

// A matrix operand as oneDNN sees it: logical dims and element strides.
struct Operand {
  memory::dims dims;
  memory::dims strides;
  memory::desc desc() const { return memory::desc(dims, memory::data_type::f32, strides); }
};

Operand contiguous(const Shape& shape) {
  Operand o{du::dims(shape), memory::dims(shape.size())};
  std::vector<int64_t> s = contiguous_strides(shape);
  for (size_t i = 0; i < s.size(); ++i) o.strides[i] = s[i];
  return o;
}

// A contiguous tensor of `shape` read with its last two axes swapped when `trans` (FusedMatMul's transA / transB).
Operand maybe_transposed(const Shape& shape, bool trans) {
  Operand o = contiguous(shape);
  if (trans && shape.size() >= 2) {
    std::swap(o.dims[shape.size() - 2], o.dims.back());
    std::swap(o.strides[shape.size() - 2], o.strides.back());
  }
  return o;
}

// out[j] = the sum of row t of `partial` (threads x n doubles) over the
// threads, as float: GemmReluGrad's column sums.
void reduce_column_sums(const std::vector<double>& partial, int threads, int64_t n, float* out) {
  for (int64_t j = 0; j < n; ++j) {
    double sum = 0;
    for (int t = 0; t < threads; ++t) sum += partial[static_cast<size_t>(t * n + j)];
    out[j] = static_cast<float>(sum);
  }
}

// The column sums of C (m x n, rows contiguous) into out[n], a pass of its
// own: where the product ran on oneDNN or on a prepacked B.
void column_sums_of(const float* c, int64_t m, int64_t n, float* out) {
  const int threads = m * n > 65536 ? omp_get_max_threads() : 1;
  std::vector<double> partial(static_cast<size_t>(threads * n), 0.0);
#pragma omp parallel num_threads(threads)
  {
    const int t = omp_get_thread_num(), team = omp_get_num_threads();
    const auto [r0, r1] = share(m, t, team);
    for (int64_t j = 0; j < n; j += vec::kFoldColumns)
      vec::vec_kernels().sum_columns(vec::Reduction::kSum, c + r0 * n + j, r1 - r0, n,
                                     std::min(vec::kFoldColumns, n - j), nullptr, partial.data() + t * n + j);
  }
  reduce_column_sums(partial, threads, n, out);
}

class DnnlMatMulBase : public Kernel {
 public:
  size_t scratch_bytes() const override { return scratch_; }
  std::string impl_name() const override { return impl_; }

  int inplace_input() const override { return has_sum_ ? 3 : -1; }
  std::vector<std::string> alternatives() const override {
    if (!anvil_gemm_fits_) return {};
    return {"dnnl", constant_b_ ? "packed_gemm" : "gemm"};
  }

  void run(const RunContext& ctx) const override {
    run_product(ctx);
    if (column_sums_ && !(anvil_gemm_ && !constant_b_))  // run_gemm adds them up in the GEMM
      column_sums_of(ctx.out(0).data<float>(), sums_m_, sums_n_, ctx.out(1).data<float>());
    if (gate_products_ && !gate_products_in_gemm()) gate_products_pass(ctx);
  }

 protected:
  void run_product(const RunContext& ctx) const {
    if (anvil_gemm_) return constant_b_ ? run_packed_gemm(ctx) : run_gemm(ctx);
    if (has_sum_ && ctx.in(3).raw() != ctx.out(0).raw())  // the sum post-op adds to what dst holds
      std::memcpy(ctx.out(0).raw(), ctx.in(3).raw(), ctx.out(0).nbytes());
    std::unordered_map<int, memory> args;
    args[DNNL_ARG_SRC] = du::wrap(src_md_, ctx.in(0).raw());
    args[DNNL_ARG_WEIGHTS] = packed_b_ ? packed_.memory
                                       : b_staging_.staged() ? b_staging_.input(ctx.in(1).raw(), ctx.scratch)
                                                             : du::wrap(weights_md_, ctx.in(1).raw());
    if (has_bias_) args[DNNL_ARG_BIAS] = du::wrap(bias_md_, bias_data(ctx));
    args[DNNL_ARG_DST] = du::wrap(dst_md_, ctx.out(0).raw());
    if (scratchpad_md_.get_size() > 0) args[DNNL_ARG_SCRATCHPAD] = du::wrap(scratchpad_md_, ctx.scratch);
    primitive_.execute(du::stream(), args);
    du::stream().wait();
    if (gate_input_ >= 0) apply_gate(ctx);
  }

  // Builds the primitive; `b_data` is the constant B (already scaled) or nullptr.
  // `b_source` is the constant input itself when b_data is its unscaled bytes:
  // then the packed B is shared through the session's weight cache.
  void build(const PrepareContext& ctx, const Operand& a, const Operand& b, const Operand& c, const void* b_data,
             const Tensor* b_source = nullptr) {
    // oneDNN 2.6.3 divides by zero creating a matmul with an empty dimension
    // (a fuzzed Gemm of [0, 10] by [10, 3]): the reference kernel takes those.
    for (const Operand* o : {&a, &b})
      for (int64_t d : o->dims)
        ANVIL_PREPARE_CHECK(ctx, d > 0, ErrorKind::kUnsupported, "an empty operand [{}]", fmt::join(o->dims, ", "));
    src_md_ = a.desc();
    weights_md_ = b.desc();
    dst_md_ = c.desc();
    try {
      const dnnl::matmul::desc desc = matmul_desc(b_data ? any_layout(weights_md_) : weights_md_);
      dnnl::primitive_attr attr = du::user_scratchpad_attr();
      if (post_ops_.len() > 0) attr.set_post_ops(post_ops_);
      dnnl::matmul::primitive_desc pd(desc, attr, du::engine());
      // A constant B is packed once, for A read in place; B known only at
      // run time is packed per run (A too where its rows are not contiguous).
      constant_b_ = b_data != nullptr;
      anvil_gemm_fits_ = anvil_gemm_fits(a, b, c) && (!constant_b_ || a.strides[1] == 1);
      const bool gemm_rule = constant_b_ || packing_per_run_pays(a.dims[0], a.dims[1]);
      // The rule: Anvil's GEMM where oneDNN's choice is gemm:jit (see the top
      // of the file), and for a gated product (GemmReluGrad) even against
      // brgemm: the GEMM applies the gate in its epilogue, where after
      // oneDNN's product it is a pass of its own over C.
      const bool brgemm = du::impl_name(pd).rfind("dnnl:brg", 0) == 0;
      const bool anvil = ctx.choice() >= 0 ? ctx.choice() == 1
                                           : gemm_rule && (!brgemm || gate_input_ >= 0 ||
                                                           (constant_b_ && streams_weights_faster(ctx, a.dims[0])));
      if (anvil_gemm_fits_ && anvil) {
        set_gemm_shape(a, b, c);
        if (constant_b_) prepare_packed_gemm(ctx, b, static_cast<const float*>(b_data), b_source);
        return;
      }
      if (!b_data && brgemm && a.dims.size() == 2 && staging_b_pays(a.dims[0])) stage_b(pd, attr);
      primitive_ = dnnl::matmul(pd);
      scratchpad_md_ = pd.scratchpad_desc();
      scratch_ = b_staging_.staged() ? staged_b_end_ : scratchpad_md_.get_size();
      impl_ = du::impl_name(pd) + (b_staging_.staged() ? ":b_staged" : "");
      if (b_data) {
        packed_ = b_source ? du::pack_shared(ctx, *b_source, weights_md_, pd.weights_desc())
                           : du::pack(weights_md_, b_data, pd.weights_desc());
        packed_b_ = true;
      }
    } catch (const dnnl::error& e) {
      ctx.fail(ErrorKind::kUnsupported, "oneDNN has no matmul for this case ({})", e.what());
    }
  }

  static memory::desc any_layout(const memory::desc& md) {
    return memory::desc(md.dims(), memory::data_type::f32, memory::format_tag::any);
  }
  // The matmul of A, `weights` (B's descriptor, or `any` to let oneDNN pick), the bias and C.
  dnnl::matmul::desc matmul_desc(const memory::desc& weights) const {
    return has_bias_ ? dnnl::matmul::desc(src_md_, weights, bias_md_, dst_md_)
                     : dnnl::matmul::desc(src_md_, weights, dst_md_);
  }

  // Takes `pd` onto B in brgemm's preferred layout, staged per run into the
  // node's scratch after the matmul's scratchpad (du::Staging), where oneDNN
  // prefers a layout other than B's own (staging_b_pays). Where oneDNN
  // declines any of it, B is read as it is.
  void stage_b(dnnl::matmul::primitive_desc& pd, const dnnl::primitive_attr& attr) {
    try {
      dnnl::matmul::primitive_desc staged(matmul_desc(any_layout(weights_md_)), attr, du::engine());
      if (du::impl_name(staged).rfind("dnnl:brg", 0) != 0 || staged.weights_desc() == weights_md_) return;
      staged_b_end_ = b_staging_.init(weights_md_, staged.weights_desc(), staged.scratchpad_desc().get_size());
      pd = staged;
    } catch (const dnnl::error&) {
      b_staging_ = {};
    }
  }

  // The fused activation (FusedMatMul, FusedGemm): oneDNN's post-op, or Anvil's GEMM's epilogue.
  void set_activation(const PrepareContext& ctx, const std::string& act, float alpha, float beta) {
    ANVIL_PREPARE_CHECK(ctx, du::append_activation(post_ops_, act, alpha, beta), ErrorKind::kUnsupported,
                        "activation '{}' (alpha {}, beta {}) has no oneDNN post-op", act, alpha, beta);
    activation_ = act;
    epilogue_.alpha = alpha;
    epilogue_.beta = beta;
  }

  // The bias: input 2, or its copy scaled by Gemm's beta at prepare().
  const void* bias_data(const RunContext& ctx) const { return bias_const_.empty() ? ctx.in(2).raw() : bias_const_.raw(); }

  // GemmReluGrad: C is kept where this input is positive (the GEMM's
  // epilogue, or a pass after oneDNN's product).
  int gate_input_ = -1;
  // GemmReluGrad with a second output: C's column sums (passes/fuse_bias_grad.cc), C being sums_m_ x sums_n_.
  bool column_sums_ = false;
  int64_t sums_m_ = 0, sums_n_ = 0;
  // GemmReluGrad with a third output: A^T x gate, [K, N] (passes/fuse_head_grad.cc); A's element (i, q) at
  // a_rows_ * i + a_cols_ * q.
  bool gate_products_ = false;
  int64_t a_rows_ = 0, a_cols_ = 0, products_k_ = 0;

  // A^T x gate as a pass of its own, where the product ran elsewhere than
  // Anvil's GEMM packing per run (oneDNN at few rows, A transposed): in
  // double, each thread a range of A's columns.
  void gate_products_pass(const RunContext& ctx) const {
    const float* a = ctx.in(0).data<float>();
    const float* gate = ctx.in(static_cast<size_t>(gate_input_)).data<float>();
    float* out = ctx.out(2).data<float>();
    const int64_t m = sums_m_, n = sums_n_, k = products_k_;
    const int threads = m * n * k > 65536 ? omp_get_max_threads() : 1;
    std::vector<double> rows(static_cast<size_t>(threads * n));  // a row of the result per thread
#pragma omp parallel for num_threads(threads)
    for (int64_t q = 0; q < k; ++q) {
      double* row = rows.data() + omp_get_thread_num() * n;
      std::fill(row, row + n, 0.0);
      for (int64_t i = 0; i < m; ++i) {
        const auto w = static_cast<double>(a[i * a_rows_ + q * a_cols_]);
        for (int64_t j = 0; j < n; ++j) row[j] += w * static_cast<double>(gate[i * n + j]);
      }
      for (int64_t j = 0; j < n; ++j) out[q * n + j] = static_cast<float>(row[j]);
    }
  }

  dnnl::primitive primitive_;
  dnnl::post_ops post_ops_;
  bool has_sum_ = false;
  memory::desc src_md_, weights_md_, bias_md_, dst_md_, scratchpad_md_;
  du::PackedWeights packed_;
  bool packed_b_ = false;
  // B known only at run time, staged per run in scratch up to staged_b_end_ (stage_b).
  du::Staging b_staging_;
  size_t staged_b_end_ = 0;
  bool has_bias_ = false;
  Tensor bias_const_;
  size_t scratch_ = 0;
  std::string impl_;

 private:
  void apply_gate(const RunContext& ctx) const {
    float* c = ctx.out(0).data<float>();
    relu_grad(c, ctx.in(static_cast<size_t>(gate_input_)).data<float>(), c, ctx.out(0).numel());
  }

  // Whether Anvil's GEMM has the shape and the epilogue for the product:
  // 2-D, C with contiguous rows, a bias along N (or a C of the output's
  // shape, as a residual) and a vectorized activation.
  bool anvil_gemm_fits(const Operand& a, const Operand& b, const Operand& c) {
    if (a.dims.size() != 2 || c.strides[1] != 1 || !vec::gemm_activation(activation_)) return false;
    if (!has_bias_) return true;
    const memory::dims bias = bias_md_.dims();
    const int64_t m = a.dims[0], n = b.dims[1];
    if (bias[0] == 1 && bias[1] == n) gemm_bias_ = GemmInput::kBias;
    else if (bias[0] == m && bias[1] == n && !has_sum_) gemm_bias_ = GemmInput::kResidual;
    else return false;
    return true;
  }

  // Takes the product onto Anvil's GEMM (anvil_gemm_fits said it can).
  void set_gemm_shape(const Operand& a, const Operand& b, const Operand& c) {
    gemm_.a = {nullptr, a.strides[0], a.strides[1]};
    gemm_.b = {nullptr, b.strides[0], b.strides[1]};
    gemm_.ldc = c.strides[0];
    gemm_.m = a.dims[0];
    gemm_.k = a.dims[1];
    gemm_.n = b.dims[1];
    epilogue_.activation = *vec::gemm_activation(activation_);
    gemm_.epilogue = epilogue_;
    anvil_gemm_ = true;
    impl_ = std::string(vec::vec_impl_name()) + (constant_b_ ? ":packed_gemm" : ":gemm");
  }

  // Packs the constant B once, shared through the session's weight cache.
  void prepare_packed_gemm(const PrepareContext& ctx, const Operand& b, const float* b_data, const Tensor* b_source) {
    // Prefetching B pays where it comes from memory; from the caches it
    // cost 1-3% (anvil_stream_gemm_ab, one copy of 0.8-3 MB of weights).
    prefetch_b_ = du::weights_stream(ctx);
    const int64_t k = gemm_.k, n = gemm_.n;
    const vec::GemmKernels& g = vec::vec_kernels().gemm;
    const int64_t sk = b.strides[0], sn = b.strides[1];
    auto pack = [&] { return vec::pack_gemm_b(g, b_data, k, n, sk, sn); };
    WeightCache* cache = ctx.weight_cache();
    if (b_source && cache) {
      auto unpack = [g, k, n, sk, sn](const Tensor& packed, void* dst) {
        vec::unpack_gemm_b(g, packed.data<float>(), k, n, static_cast<float*>(dst), sk, sn);
      };
      gemm_b_ = cache->get(*b_source, vec::gemm_layout_key(g, k, n, sk, sn), pack, unpack);
    } else {
      gemm_b_ = pack();
    }
  }

  void run_packed_gemm(const RunContext& ctx) const {
    vec::GemmArgs args;
    args.a = ctx.in(0).data<float>();
    args.lda = gemm_.a.row_stride;
    args.m = gemm_.m;
    args.k = gemm_.k;
    args.n = gemm_.n;
    args.b_packed = gemm_b_.data<float>();
    args.prefetch_b = prefetch_b_;
    set_gemm_outputs(ctx, args);
    vec::packed_gemm(vec::vec_kernels().gemm, args);
  }

  void run_gemm(const RunContext& ctx) const {
    vec::GemmProduct product = gemm_;
    product.a.data = ctx.in(0).data<float>();
    product.b.data = ctx.in(1).data<float>();
    set_gemm_outputs(ctx, product);
    const int threads = omp_get_max_threads();
    std::vector<double> sums, products;
    if (column_sums_) {
      sums.assign(static_cast<size_t>(threads * gemm_.n), 0.0);
      product.column_sums = sums.data();
    }
    if (gate_products_in_gemm()) {
      products.assign(static_cast<size_t>(threads * gemm_.k * gemm_.n), 0.0);
      product.gate_products = products.data();
    }
    vec::gemm(vec::vec_kernels().gemm, product);
    if (column_sums_) reduce_column_sums(sums, threads, gemm_.n, ctx.out(1).data<float>());
    if (gate_products_in_gemm()) reduce_column_sums(products, threads, gemm_.k * gemm_.n, ctx.out(2).data<float>());
  }

  // Whether Anvil's GEMM, packing per run, adds up GemmReluGrad's A^T x gate
  // as it finishes each tile (A's columns contiguous, few of them: each adds
  // K sums per tile and a K x N block per thread), not a pass after it.
  bool gate_products_in_gemm() const {
    constexpr int64_t kMaxInTiles = 16;  // passes/fuse_head_grad.cc's kMaxHeadOutputs
    return gate_products_ && anvil_gemm_ && !constant_b_ && gemm_.a.col_stride == 1 && gemm_.k <= kMaxInTiles;
  }

  // The bias, residual, C and epilogue of a run.
  void set_gemm_outputs(const RunContext& ctx, vec::GemmOutput& args) const {
    const float* bias = has_bias_ ? static_cast<const float*>(bias_data(ctx)) : nullptr;
    args.bias = gemm_bias_ == GemmInput::kBias ? bias : nullptr;
    args.residual = has_sum_ ? ctx.in(3).data<float>() : gemm_bias_ == GemmInput::kResidual ? bias : nullptr;
    args.c = ctx.out(0).data<float>();
    args.ldc = gemm_.ldc;
    args.epilogue = gemm_.epilogue;
    if (gate_input_ >= 0) {
      args.epilogue.gate = ctx.in(static_cast<size_t>(gate_input_)).data<float>();
      args.epilogue.gate_ld = gemm_.n;
    }
  }

  enum class GemmInput { kNone, kBias, kResidual };  // what the bias input is to Anvil's GEMM
  bool anvil_gemm_ = false, anvil_gemm_fits_ = false;
  bool constant_b_ = false;  // B known at plan time: Anvil's GEMM packs it once (oneDNN's path: packed_b_)
  Tensor gemm_b_;
  bool prefetch_b_ = false;  // GemmArgs::prefetch_b
  vec::GemmProduct gemm_;  // the shape and strides; pointers are set per run
  GemmInput gemm_bias_ = GemmInput::kNone;
  std::string activation_;
  vec::GemmEpilogue epilogue_;
};

// MatMul, and FusedMatMul: its bias (input 2, along the last dimension), its
// residual (input 3, the output's shape) and its activation become the
// matmul's bias and post-ops; an operand it takes transposed (transA /
// transB) is read through swapped strides.
class DnnlMatMul : public DnnlMatMulBase {
 public:
  // transA / transB are FusedMatMul's: ONNX's MatMul has no such attributes.
  explicit DnnlMatMul(const ir::Node& node)
      : trans_a_(node.domain == "anvil" && node.attrs.get_int("transA", 0) != 0),
        trans_b_(node.domain == "anvil" && node.attrs.get_int("transB", 0) != 0) {}
  bool reads_input_packed_only(size_t i) const override { return i == 1; }  // a constant B is packed

  std::vector<TensorType> prepare(const PrepareContext& ctx) override {
    // The schema has checked the operands (a transposed one has rank 2 or
    // more); 1-D ones gain a dimension here, as in numpy.
    Shape a = ctx.input_shape(0), b = ctx.input_shape(1);
    if (b.size() == 2 && a.size() > 2 && !trans_a_ && a.back() > 0)  // (K = 0 declines in build())
      a = {shape_numel(a) / a.back(), a.back()};  // one 2-D matmul: faster than batched
    if (a.size() == 1) a.insert(a.begin(), 1);
    if (b.size() == 1) b.push_back(1);
    size_t rank = std::max(a.size(), b.size());
    ANVIL_PREPARE_CHECK(ctx, rank <= 12, ErrorKind::kUnsupported, "rank {} matmul", rank);
    a.insert(a.begin(), rank - a.size(), 1);
    b.insert(b.begin(), rank - b.size(), 1);
    const Operand oa = maybe_transposed(a, trans_a_), ob = maybe_transposed(b, trans_b_);
    Shape c(rank);
    for (size_t i = 0; i + 2 < rank; ++i) c[i] = oa.dims[i] == 1 ? ob.dims[i] : oa.dims[i];
    c[rank - 2] = oa.dims[rank - 2];
    c[rank - 1] = ob.dims[rank - 1];
    prepare_fusion(ctx, rank);
    const Tensor* bconst = ctx.constant(1);
    build(ctx, oa, ob, contiguous(c), bconst ? bconst->raw() : nullptr, bconst);
    return ctx.output_types();  // without the dimensions 1-D operands gained
  }

 private:
  const bool trans_a_, trans_b_;

  void prepare_fusion(const PrepareContext& ctx, size_t rank) {
    if (ctx.has_input(2)) {  // [N] or [1, ..., N]: the schema checked it
      Shape bias(rank, 1);
      bias.back() = ctx.input_shape(2).back();
      bias_md_ = contiguous(bias).desc();
      has_bias_ = true;
      if (const Tensor* c = ctx.constant(2)) bias_const_ = *c;
    }
    if (ctx.has_input(3)) {
      ANVIL_PREPARE_CHECK(ctx, ctx.input_shape(3) == ctx.output_shape(0), ErrorKind::kInvalidArgument,
                          "residual {} must have the output's shape {}", shape_str(ctx.input_shape(3)),
                          shape_str(ctx.output_shape(0)));
      post_ops_.append_sum(1.f);
      has_sum_ = true;
    }
    set_activation(ctx, ctx.attrs().get_string("activation", ""), ctx.attrs().get_float("activation_alpha", 0.f),
                   ctx.attrs().get_float("activation_beta", 0.f));
  }
};

class DnnlGemm : public DnnlMatMulBase {
 public:
  // anvil.GemmReluGrad (passes/fuse_relu_grad.cc) is a Gemm without C whose
  // input 2 gates the output.
  explicit DnnlGemm(const ir::Node& node)
      : unscaled_b_(node.attrs.get_float("alpha", 1.f) == 1.f), fused_activation_(node.op_type == "FusedGemm") {
    if (node.op_type == "GemmReluGrad") gate_input_ = 2;
  }
  // A constant B is packed as it is, unless alpha scales it first.
  bool reads_input_packed_only(size_t i) const override { return i == 1 && unscaled_b_; }

  std::vector<TensorType> prepare(const PrepareContext& ctx) override {
    const auto [m, k, n, ta, tb] = gemm_dims(ctx);
    float alpha = ctx.attrs().get_float("alpha", 1.f), beta = ctx.attrs().get_float("beta", 1.f);
    Operand oa{{m, k}, ta ? memory::dims{1, m} : memory::dims{k, 1}};
    Operand ob{{k, n}, tb ? memory::dims{1, k} : memory::dims{n, 1}};
    const Tensor* bconst = ctx.constant(1);
    ANVIL_PREPARE_CHECK(ctx, alpha == 1.f || bconst, ErrorKind::kUnsupported, "alpha != 1 with a non-constant B");
    Tensor scaled_b;
    if (bconst && alpha != 1.f) {
      scaled_b = bconst->clone();
      for (int64_t i = 0; i < scaled_b.numel(); ++i) scaled_b.data<float>()[i] *= alpha;
    }
    if (fused_activation_)
      set_activation(ctx, ctx.attrs().get_string("activation", ""), ctx.attrs().get_float("activation_alpha", 0.f),
                     ctx.attrs().get_float("activation_beta", 0.f));
    if (gate_input_ >= 0) {
      ANVIL_PREPARE_CHECK(ctx, ctx.input_shape(2) == Shape({m, n}) && ctx.input_dtype(2) == DType::kFloat32,
                          ErrorKind::kInvalidModel, "the gate must be float32 of the product's shape [{}, {}], got {} {}",
                          m, n, dtype_name(ctx.input_dtype(2)), shape_str(ctx.input_shape(2)));
      column_sums_ = ctx.node().output(1) != nullptr;
      sums_m_ = m;
      sums_n_ = n;
      gate_products_ = ctx.node().output(2) != nullptr;
      if (gate_products_)
        ANVIL_PREPARE_CHECK(ctx, ctx.output_type(2).shape == Shape({k, n}), ErrorKind::kInvalidModel,
                            "A^T x the gate is [{}, {}], not {}", k, n, shape_str(ctx.output_type(2).shape));
      a_rows_ = oa.strides[0];
      a_cols_ = oa.strides[1];
      products_k_ = k;
    } else {
      prepare_bias(ctx, beta);
    }
    build(ctx, oa, ob, contiguous({m, n}), bconst ? (scaled_b.empty() ? bconst->raw() : scaled_b.raw()) : nullptr,
          scaled_b.empty() ? bconst : nullptr);
    return ctx.output_types();
  }

 private:
  // C, broadcast to [M, N], becomes the matmul bias (scaled by beta when constant).
  void prepare_bias(const PrepareContext& ctx, float beta) {
    if (!ctx.has_input(2) || beta == 0.f) return;
    Shape c = ctx.input_shape(2);  // broadcasts to [m, n]: the schema checked it
    c.insert(c.begin(), 2 - c.size(), 1);
    const Tensor* cconst = ctx.constant(2);
    ANVIL_PREPARE_CHECK(ctx, beta == 1.f || cconst, ErrorKind::kUnsupported, "beta != 1 with a non-constant C");
    if (cconst && beta != 1.f) {
      bias_const_ = cconst->clone();
      for (int64_t i = 0; i < bias_const_.numel(); ++i) bias_const_.data<float>()[i] *= beta;
    }
    bias_md_ = contiguous(c).desc();
    has_bias_ = true;
  }

  bool unscaled_b_;
  bool fused_activation_;  // FusedGemm: Gemm's inputs, then the activation attributes'
};

ANVIL_REGISTER_KERNEL_CLASS_TYPED("MatMul", kDnnl, DnnlMatMul, {kFloat32Only});
ANVIL_REGISTER_KERNEL_CLASS_TYPED("Gemm", kDnnl, DnnlGemm, {kFloat32Only});
static Registrar fused_gemm_dnnl("FusedGemm", Backend::kDnnl, factory_of<DnnlGemm>(), "anvil", {{kFloat32Only}});
static Registrar gemm_relu_grad_dnnl("GemmReluGrad", Backend::kDnnl, factory_of<DnnlGemm>(), "anvil",
                                      {{kFloat32Only}});
static Registrar fused_matmul_dnnl("FusedMatMul", Backend::kDnnl, factory_of<DnnlMatMul>(), "anvil", {{kFloat32Only}});

}  // namespace

}  // namespace anvil::kernels
