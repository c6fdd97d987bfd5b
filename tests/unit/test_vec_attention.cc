// Anvil's vectorized attention (src/kernels/vec/attention.cc) and its row
// routine (VecKernels::attention_exps) against ONNX's definition of
// Attention computed here in double: 3-D and 4-D inputs, grouped key/value
// heads, float and boolean masks and their broadcasts, is_causal with as
// many, fewer and more queries than keys, rows whose every key is masked,
// sizes that leave partial tiles and panels, and heads split between
// threads. Named VecKernels.*, so ctest runs them at every ISA cap too.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "anvil/error.h"
#include "core/vector_isa.h"
#include "kernel_tester.h"
#include "kernels/vec/vec_kernels.h"

namespace anvil {
namespace {

using kernels::Backend;
using testing::KernelOptions;
using testing::random_f32;

constexpr float kInf = std::numeric_limits<float>::infinity();

struct AttentionCase {
  std::string name;
  Shape q, k, v;
  int64_t q_heads = 0, kv_heads = 0;  // 3-D inputs only
  bool causal = false;
  float scale = 0.f;  // 0: the default, 1 / sqrt(head size)
  Tensor mask;        // empty: none
  int threads = 1;
};

// (batch, head, position, element) of a 3-D [B, S, heads * size] or 4-D [B, heads, S, size] tensor.
double at(const Tensor& t, int64_t heads, int64_t b, int64_t h, int64_t s, int64_t e) {
  const Shape& d = t.shape();
  const float* p = t.data<float>();
  if (d.size() == 3) return p[(b * d[1] + s) * d[2] + h * (d[2] / heads) + e];
  return p[((b * d[1] + h) * d[2] + s) * d[3] + e];
}

// The mask's additive bias at (b, h, i, j), broadcast from its trailing dims.
double mask_bias(const Tensor& mask, int64_t b, int64_t h, int64_t i, int64_t j) {
  const Shape& m = mask.shape();
  const int64_t idx[4] = {b, h, i, j};
  int64_t off = 0, stride = 1;
  for (size_t d = m.size(); d-- > 0;) {
    off += (m[d] == 1 ? 0 : idx[4 - m.size() + d]) * stride;
    stride *= m[d];
  }
  if (mask.dtype() == DType::kBool) return mask.data<bool>()[off] ? 0.0 : -INFINITY;
  return mask.data<float>()[off];
}

// Y as ONNX defines it, in double, laid out as the output (3-D or 4-D).
std::vector<double> attention_in_double(const AttentionCase& c, const Tensor& q, const Tensor& k, const Tensor& v) {
  const bool split = c.q.size() == 3;
  const int64_t batch = c.q[0], hq = split ? c.q_heads : c.q[1], hk = split ? c.kv_heads : c.k[1];
  const int64_t sq = split ? c.q[1] : c.q[2], skv = split ? c.k[1] : c.k[2];
  const int64_t d = split ? c.q[2] / hq : c.q[3], dv = split ? c.v[2] / hk : c.v[3];
  const double scale = c.scale != 0.f ? c.scale : 1.0 / std::sqrt(static_cast<double>(d));
  std::vector<double> y(static_cast<size_t>(batch * hq * sq * dv));
  std::vector<double> p(static_cast<size_t>(skv));
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t h = 0; h < hq; ++h)
      for (int64_t i = 0; i < sq; ++i) {
        const int64_t kvh = h / (hq / hk);
        double m = -INFINITY;
        for (int64_t j = 0; j < skv; ++j) {
          double dot = 0;
          for (int64_t e = 0; e < d; ++e) dot += at(q, hq, b, h, i, e) * at(k, hk, b, kvh, j, e);
          double bias = !c.mask.empty() ? mask_bias(c.mask, b, h, i, j) : 0.0;
          if (c.causal && j > i) bias = -INFINITY;
          p[j] = dot * scale + bias;
          m = std::max(m, p[j]);
        }
        // As the reference kernel: an infinite max (every key masked, or +inf) or a NaN sum gives zeros.
        double sum = 0;
        for (int64_t j = 0; j < skv; ++j) sum += p[j] = std::isinf(m) ? 0.0 : std::exp(p[j] - m);
        for (int64_t e = 0; e < dv; ++e) {
          double acc = 0;
          for (int64_t j = 0; j < skv; ++j) acc += p[j] * at(v, hk, b, kvh, j, e);
          const int64_t out = split ? (b * sq + i) * hq * dv + h * dv + e : ((b * hq + h) * sq + i) * dv + e;
          y[static_cast<size_t>(out)] = sum > 0 ? acc / sum : 0.0;  // a row with every key masked is zeros
        }
      }
  return y;
}

ir::Attributes attention_attrs(const AttentionCase& c) {
  ir::Attributes a;
  if (c.q.size() == 3) {
    a.set("q_num_heads", c.q_heads);
    a.set("kv_num_heads", c.kv_heads);
  }
  if (c.causal) a.set("is_causal", int64_t{1});
  if (c.scale != 0.f) a.set("scale", c.scale);
  return a;
}

KernelOptions vec_attention_options(int threads) {
  KernelOptions o;
  o.backend = Backend::kVec;
  o.opset = 23;
  o.num_threads = threads;
  return o;
}

void expect_attention_matches_definition(const AttentionCase& c, uint32_t seed) {
  SCOPED_TRACE(c.name);
  const Tensor q = random_f32(c.q, seed), k = random_f32(c.k, seed + 1), v = random_f32(c.v, seed + 2);
  std::vector<Tensor> in = {q, k, v};
  if (!c.mask.empty()) in.push_back(c.mask);
  const auto got = testing::run_kernel_full("Attention", in, attention_attrs(c), vec_attention_options(c.threads));
  EXPECT_EQ(got.impl.rfind("vec:", 0), 0u) << got.impl;
  const std::vector<double> want = attention_in_double(c, q, k, v);
  const Tensor& y = got.outputs[0];
  ASSERT_EQ(y.numel(), static_cast<int64_t>(want.size()));
  int64_t off = 0;  // NaN-safe: a NaN where a number is wanted counts
  for (size_t i = 0; i < want.size(); ++i) off += !(std::abs(y.data<float>()[i] - want[i]) <= 2e-5);
  EXPECT_EQ(off, 0) << "outputs more than 2e-5 from ONNX's definition";
}

Tensor float_mask(Shape shape, uint32_t seed) {
  Tensor m = random_f32(std::move(shape), seed);
  float* p = m.data<float>();
  for (int64_t i = 0; i < m.numel(); ++i)
    if (i % 5 == 3) p[i] = -kInf;
  return m;
}

TEST(VecKernels, AttentionMatchesItsDefinition) {
  // BERT's padding mask [B, 1, 1, S]; batch item 1 has every key masked (zeros).
  Tensor padding = float_mask({2, 1, 1, 37}, 11);
  for (int64_t j = 0; j < 37; ++j) padding.data<float>()[37 + j] = -kInf;
  // A boolean [B, 1, Sq, Skv] mask, broadcast over the heads.
  Tensor keep_per_item(DType::kBool, {2, 1, 6, 9});
  for (int64_t i = 0; i < keep_per_item.numel(); ++i) keep_per_item.data<bool>()[i] = (i * 5) % 7 != 2;
  // A boolean [Sq, Skv] mask whose query 0 keeps nothing.
  Tensor keep(DType::kBool, {13, 29});
  for (int64_t i = 0; i < keep.numel(); ++i) keep.data<bool>()[i] = i >= 29 && (i * 7) % 3 != 0;
  const AttentionCase cases[] = {
      {"a GPT-2 decoder's layer: causal, 4 heads of 64", {1, 64, 256}, {1, 64, 256}, {1, 64, 256}, 4, 4, true, 0.f, {},
       2},
      {"padding mask, head size 32, 37 keys", {2, 37, 96}, {2, 37, 96}, {2, 37, 96}, 3, 3, false, 0.f, padding, 2},
      {"4-D, boolean mask, values of 5", {2, 3, 13, 8}, {2, 3, 29, 8}, {2, 3, 29, 5}, 0, 0, false, 0.f, keep, 3},
      {"4-D, a full float mask", {1, 2, 9, 16}, {1, 2, 21, 16}, {1, 2, 21, 16}, 0, 0, false, 0.25f,
       float_mask({1, 2, 9, 21}, 12), 2},
      {"grouped heads, causal, scaled", {1, 20, 24}, {1, 20, 12}, {1, 20, 12}, 4, 2, true, 0.3f, {}, 2},
      {"causal, fewer queries than keys", {1, 5, 16}, {1, 40, 16}, {1, 40, 16}, 1, 1, true, 0.f, {}, 1},
      {"causal, more queries than keys", {1, 30, 8}, {1, 7, 8}, {1, 7, 8}, 1, 1, true, 0.f, {}, 2},
      {"causal with a padding mask", {1, 33, 64}, {1, 33, 64}, {1, 33, 64}, 2, 2, true, 0.f,
       float_mask({1, 1, 1, 33}, 13), 2},
      {"one head split between threads, head size 40", {1, 100, 40}, {1, 100, 40}, {1, 100, 40}, 1, 1, false, 0.f, {},
       2},
      {"300 keys, values of 80", {1, 50, 128}, {1, 300, 128}, {1, 300, 160}, 2, 2, false, 0.f, {}, 2},
      {"one query, one key", {1, 1, 4}, {1, 1, 4}, {1, 1, 4}, 1, 1, false, 0.f, {}, 1},
      {"4-D grouped heads, a boolean mask per batch item", {2, 4, 6, 8}, {2, 2, 9, 8}, {2, 2, 9, 8}, 0, 0, false, 0.f,
       keep_per_item, 2},
      {"4-D, a full float mask and causal", {1, 2, 9, 16}, {1, 2, 9, 16}, {1, 2, 9, 16}, 0, 0, true, 0.f,
       float_mask({1, 2, 9, 9}, 14), 2},
  };
  uint32_t seed = 100;
  for (const AttentionCase& c : cases) expect_attention_matches_definition(c, seed += 3);
}

// Q, K and V side by side along the last axis, as anvil.QkvAttention reads them.
Tensor side_by_side(const Tensor& q, const Tensor& k, const Tensor& v) {
  const int64_t rows = q.shape()[0] * q.shape()[1], wq = q.shape()[2], wk = k.shape()[2], wv = v.shape()[2];
  Tensor x(DType::kFloat32, {q.shape()[0], q.shape()[1], wq + wk + wv});
  float* out = x.data<float>();
  for (int64_t r = 0; r < rows; ++r) {
    out = std::copy_n(q.data<float>() + r * wq, wq, out);
    out = std::copy_n(k.data<float>() + r * wk, wk, out);
    out = std::copy_n(v.data<float>() + r * wv, wv, out);
  }
  return x;
}

// A 3-D tensor's first two axes swapped: [B, S, E] <-> [S, B, E].
Tensor swap_leading(const Tensor& x) {
  const Shape& d = x.shape();
  Tensor y(DType::kFloat32, {d[1], d[0], d[2]});
  for (int64_t i = 0; i < d[0]; ++i)
    for (int64_t j = 0; j < d[1]; ++j)
      std::copy_n(x.data<float>() + (i * d[1] + j) * d[2], d[2], y.data<float>() + (j * d[0] + i) * d[2]);
  return y;
}

// anvil.QkvAttention, the vectorized and the reference kernels, against
// ONNX's Attention on the same Q, K and V: the parts are read in place with
// the packed row's stride, at their column offsets; with sequence_first
// from [S, B, q + k + v] into Y [S, B, ...].
TEST(VecKernels, QkvAttentionMatchesItsDefinition) {
  Tensor padding = float_mask({2, 1, 1, 37}, 31);
  Tensor keep(DType::kBool, {2, 1, 9, 9});
  for (int64_t i = 0; i < keep.numel(); ++i) keep.data<bool>()[i] = (i * 5) % 7 != 2;
  const AttentionCase cases[] = {
      {"a GPT-2 decoder's layer: causal, 4 heads of 64", {1, 64, 256}, {1, 64, 256}, {1, 64, 256}, 4, 4, true, 0.f, {},
       2},
      {"padding mask, head size 32, 37 positions", {2, 37, 96}, {2, 37, 96}, {2, 37, 96}, 3, 3, false, 0.f, padding, 2},
      {"grouped heads, causal, scaled", {1, 20, 24}, {1, 20, 12}, {1, 20, 12}, 4, 2, true, 0.3f, {}, 2},
      {"values wider than keys, a boolean mask", {2, 9, 16}, {2, 9, 16}, {2, 9, 40}, 2, 2, false, 0.f, keep, 1},
      {"ViT's shape, shrunk: 3 items, 2 heads of 16, 13 positions, scaled", {3, 13, 32}, {3, 13, 32}, {3, 13, 32}, 2,
       2, false, 0.125f, {}, 2},
  };
  uint32_t seed = 300;
  for (bool sequence_first : {false, true})
    for (Backend backend : {Backend::kVec, Backend::kRef})
      for (const AttentionCase& c : cases) {
        SCOPED_TRACE(c.name + (backend == Backend::kVec ? " (vec)" : " (ref)") + (sequence_first ? ", sequence first" : ""));
        const Tensor q = random_f32(c.q, seed), k = random_f32(c.k, seed + 1), v = random_f32(c.v, seed + 2);
        seed += 3;
        const Tensor packed = side_by_side(q, k, v);
        std::vector<Tensor> in = {sequence_first ? swap_leading(packed) : packed};
        if (!c.mask.empty()) in.push_back(c.mask);
        ir::Attributes a = attention_attrs(c);
        a.set("qkv_sizes", std::vector<int64_t>{c.q[2], c.k[2], c.v[2]});
        if (sequence_first) a.set("sequence_first", int64_t{1});
        KernelOptions o = vec_attention_options(c.threads);
        o.backend = backend;
        o.domain = "anvil";
        o.opset = 1;
        const auto got = testing::run_kernel_full("QkvAttention", in, a, o);
        EXPECT_EQ(got.impl.rfind(backend == Backend::kVec ? "vec:" : "ref", 0), 0u) << got.impl;
        const std::vector<double> want = attention_in_double(c, q, k, v);
        const Tensor y = sequence_first ? swap_leading(got.outputs[0]) : got.outputs[0];
        ASSERT_EQ(y.numel(), static_cast<int64_t>(want.size()));
        int64_t off = 0;
        for (size_t i = 0; i < want.size(); ++i) off += !(std::abs(y.data<float>()[i] - want[i]) <= 2e-5);
        EXPECT_EQ(off, 0) << "outputs more than 2e-5 from ONNX's definition";
      }
}

// sequence_first is QkvAttention's: on ONNX's Attention (where a file may
// carry any attribute) both kernels ignore it.
TEST(VecKernels, AttentionIgnoresSequenceFirst) {
  const AttentionCase c{"3-D, a batch of 2", {2, 6, 16}, {2, 6, 16}, {2, 6, 16}, 2, 2, false, 0.f, {}, 1};
  const Tensor q = random_f32(c.q, 41), k = random_f32(c.k, 42), v = random_f32(c.v, 43);
  const std::vector<double> want = attention_in_double(c, q, k, v);
  for (Backend backend : {Backend::kVec, Backend::kRef}) {
    ir::Attributes a = attention_attrs(c);
    a.set("sequence_first", int64_t{1});
    KernelOptions o = vec_attention_options(1);
    o.backend = backend;
    const Tensor y = testing::run_kernel_full("Attention", {q, k, v}, a, o).outputs[0];
    ASSERT_EQ(y.numel(), static_cast<int64_t>(want.size()));
    int64_t off = 0;
    for (size_t i = 0; i < want.size(); ++i) off += !(std::abs(y.data<float>()[i] - want[i]) <= 2e-5);
    EXPECT_EQ(off, 0) << (backend == Backend::kVec ? "vec" : "ref");
  }
}

// qkv_sizes from a file that do not describe the input: one error, no run
// (an inconsistent node, or an input the node does not fit).
TEST(VecKernels, QkvAttentionRejectsSizesThatDoNotFit) {
  const Tensor x = random_f32({1, 4, 24}, 5);
  KernelOptions o = vec_attention_options(1);
  o.domain = "anvil";
  o.opset = 1;
  const std::pair<std::vector<int64_t>, ErrorKind> bad[] = {
      {{8, 8}, ErrorKind::kInvalidModel},                                   // two parts
      {{int64_t{1} << 62, int64_t{1} << 62, 8}, ErrorKind::kInvalidModel},  // a sum past int64
      {{8, 4, 12}, ErrorKind::kInvalidModel},                               // K's heads narrower than Q's
      {{8, 8, 6}, ErrorKind::kInvalidArgument},                             // 22 columns of 24
  };
  for (const auto& [sizes, kind] : bad) {
    ir::Attributes a;
    a.set("q_num_heads", int64_t{2});
    a.set("kv_num_heads", int64_t{2});
    a.set("qkv_sizes", sizes);
    EXPECT_EQ(testing::error_kind_of([&] { testing::run_kernel("QkvAttention", {x}, a, o); }), kind)
        << sizes[0] << " " << sizes[1];
  }
  // Attention's attributes the op lacks (the vectorized kernel would ignore them): refused, not ignored.
  ir::Attributes softcap;
  softcap.set("q_num_heads", int64_t{2});
  softcap.set("kv_num_heads", int64_t{2});
  softcap.set("qkv_sizes", std::vector<int64_t>{8, 8, 8});
  softcap.set("softcap", 5.f);
  EXPECT_EQ(testing::error_kind_of([&] { testing::run_kernel("QkvAttention", {x}, softcap, o); }),
            ErrorKind::kInvalidModel);
  // sequence_first is 0 or 1; sequence first, a mask's batch is QKV's second dim (4, not 1).
  ir::Attributes order = softcap;
  order.erase("softcap");
  order.set("sequence_first", int64_t{2});
  EXPECT_EQ(testing::error_kind_of([&] { testing::run_kernel("QkvAttention", {x}, order, o); }),
            ErrorKind::kInvalidModel);
  order.set("sequence_first", int64_t{1});
  const Tensor batch_of_four_mask = random_f32({4, 1, 1, 1}, 7);
  EXPECT_EQ(testing::error_kind_of([&] { testing::run_kernel("QkvAttention", {x, random_f32({1, 2, 4, 4}, 8)}, order, o); }),
            ErrorKind::kInvalidArgument);
  EXPECT_NO_THROW(testing::run_kernel("QkvAttention", {x, batch_of_four_mask}, order, o));
}

// Rows with a NaN term (from the mask, or all of them, from Q) and rows with
// a +inf term give zeros, as the reference kernel; the other rows are
// untouched.
TEST(VecKernels, AttentionRowsWithoutAFiniteSoftmaxAreZeros) {
  const Tensor q = random_f32({1, 5, 8}, 21), k = random_f32({1, 6, 8}, 22), v = random_f32({1, 6, 8}, 23);
  Tensor poisoned = q, mask = float_mask({5, 6}, 24);
  mask.data<float>()[1 * 6 + 4] = NAN;      // query 1: one NaN term, a finite max
  mask.data<float>()[3 * 6 + 2] = kInf;     // query 3
  poisoned.data<float>()[4 * 8 + 3] = NAN;  // query 4: every term NaN
  ir::Attributes a;
  a.set("q_num_heads", int64_t{1});
  a.set("kv_num_heads", int64_t{1});
  const Tensor y = testing::run_kernel("Attention", {poisoned, k, v, mask}, a, vec_attention_options(2))[0];
  AttentionCase c{"", {1, 5, 8}, {1, 6, 8}, {1, 6, 8}, 1, 1, false, 0.f, mask, 2};
  const std::vector<double> want = attention_in_double(c, poisoned, k, v);
  for (int64_t i = 0; i < 5; ++i)
    for (int64_t e = 0; e < 8; ++e) {
      const float got = y.data<float>()[i * 8 + e];
      if (i == 1 || i == 3 || i == 4) EXPECT_EQ(got, 0.f) << "query " << i;
      else EXPECT_NEAR(got, want[static_cast<size_t>(i * 8 + e)], 2e-5) << "query " << i;
    }
}

TEST(VecKernels, AttentionDeclinesWhatItLacks) {
  const Tensor q = random_f32({1, 3, 8}, 1), k = random_f32({1, 3, 8}, 2), v = random_f32({1, 3, 8}, 3);
  ir::Attributes a;
  a.set("q_num_heads", int64_t{2});
  a.set("kv_num_heads", int64_t{2});
  const KernelOptions o = vec_attention_options(1);
  const Tensor past = random_f32({1, 2, 2, 4}, 4);
  EXPECT_EQ(testing::error_kind_of([&] { testing::run_kernel("Attention", {q, k, v, Tensor(), past, past}, a, o); }),
            ErrorKind::kUnsupported);
  ir::Attributes softcap = a;
  softcap.set("softcap", 5.f);
  EXPECT_EQ(testing::error_kind_of([&] { testing::run_kernel("Attention", {q, k, v}, softcap, o); }),
            ErrorKind::kUnsupported);
  const Tensor no_queries = random_f32({1, 0, 8}, 6);
  EXPECT_EQ(testing::error_kind_of([&] { testing::run_kernel("Attention", {no_queries, k, v}, a, o); }),
            ErrorKind::kUnsupported);
  // A mask shorter than the keys (the rest count as masked) is the reference kernel's.
  EXPECT_EQ(testing::error_kind_of([&] { testing::run_kernel("Attention", {q, k, v, random_f32({3, 2}, 5)}, a, o); }),
            ErrorKind::kUnsupported);
}

// One row: exps after the shift, their normalizer, zeros past n.
TEST(VecKernels, AttentionExpsMatchDoublePrecision) {
  for (VectorIsa isa : supported_vector_isas()) {
    SCOPED_TRACE(vector_isa_name(isa));
    const kernels::vec::VecKernels& vk = kernels::vec::vec_kernels_for(isa);
    for (int64_t n : {1, 3, 8, 16, 17, 45, 128}) {
      for (bool masked : {false, true}) {
        const int64_t len = n + 7;
        const Tensor scores = random_f32({len}, static_cast<uint32_t>(n));
        std::vector<float> s(scores.data<float>(), scores.data<float>() + len), mask(static_cast<size_t>(n));
        for (int64_t j = 0; j < n; ++j) {
          s[j] *= 60.f;  // terms down to e^-120 after the shift: past float's range
          mask[j] = j % 4 == 1 ? -kInf : 0.5f * static_cast<float>(j % 3);
        }
        if (masked) mask[0] = 0.f;  // keep one key
        const std::vector<float> in = s;
        const float scale = 0.7f;
        const float norm = vk.attention_exps(s.data(), n, len, scale, masked ? mask.data() : nullptr);
        std::vector<double> t(static_cast<size_t>(n));
        double m = -INFINITY, sum = 0;
        for (int64_t j = 0; j < n; ++j) m = std::max(m, t[j] = in[j] * double{scale} + (masked ? mask[j] : 0.0));
        for (int64_t j = 0; j < n; ++j) {
          const double e = std::exp(t[j] - m);
          sum += e;
          if (std::isinf(t[j])) {
            EXPECT_EQ(s[j], 0.f) << "a masked key at " << j;
            continue;
          }
          // The float terms (up to 60 here) carry their rounding, an ulp of |t| and of the max, into the
          // exp; below 2^-126, float's smallest normal, it may be 0.
          const double slack = e * 2e-7 * (2.0 + std::abs(t[j]) + std::abs(m)) + 1.2e-38;
          EXPECT_NEAR(s[j], e, slack) << "n " << n << " masked " << masked << " at " << j;
        }
        EXPECT_NEAR(norm, 1.0 / sum, 2e-7 * (2.0 + std::abs(m)) / sum) << "n " << n;
        for (int64_t j = n; j < len; ++j) EXPECT_EQ(s[j], 0.f) << "past n at " << j;
      }
    }
    // Every key masked: zeros, and 0 to scale the row's output by.
    std::vector<float> dead = {1.f, 2.f, 3.f, 4.f, 5.f}, all_masked(5, -kInf);
    EXPECT_EQ(vk.attention_exps(dead.data(), 5, 5, 1.f, all_masked.data()), 0.f);
    for (float x : dead) EXPECT_EQ(x, 0.f);
    // A NaN score, or a +inf term, leaves no finite softmax: zeros and 0, as the reference attention.
    std::vector<float> with_nan = {0.f, NAN, 1.f}, with_inf = {0.f, kInf, 1.f};
    EXPECT_EQ(vk.attention_exps(with_nan.data(), 3, 3, 1.f, nullptr), 0.f);
    EXPECT_EQ(vk.attention_exps(with_inf.data(), 3, 3, 1.f, nullptr), 0.f);
    for (size_t j = 0; j < 3; ++j) {
      EXPECT_EQ(with_nan[j], 0.f) << j;
      EXPECT_EQ(with_inf[j], 0.f) << j;
    }
  }
}

}  // namespace
}  // namespace anvil
