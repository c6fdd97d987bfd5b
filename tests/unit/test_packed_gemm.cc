// Anvil's packed GEMM (src/kernels/vec/gemm.h): every ISA path the CPU has
// against products and activations computed here in double, and MatMul,
// FusedMatMul and Gemm with a constant B (which take it where oneDNN's choice
// is gemm:jit) against the reference kernels. Named VecKernels.* so that
// ctest also runs them capped at sse41 and avx2 (ANVIL_MAX_ISA), which puts
// the oneDNN matmul on gemm:jit, and so the op kernels on the packed GEMM, on
// AVX-512 machines too.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>

#include "anvil/cpu.h"
#include "kernels/dnnl/common.h"
#include "core/vector_isa.h"
#include "kernel_tester.h"
#include "kernels/vec/gemm.h"

namespace anvil {
namespace {

using kernels::Backend;
using kernels::vec::GemmActivation;
using kernels::vec::GemmArgs;
using kernels::vec::GemmKernels;
using testing::attrs;
using testing::KernelOptions;
using testing::values;

std::vector<float> uniform_values(size_t n, uint32_t seed, float lo = -1.f, float hi = 1.f) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(gen);
  return v;
}

double activate(double x, GemmActivation act, double alpha, double beta) {
  const double sigmoid = 1 / (1 + std::exp(-x));
  switch (act) {
    case GemmActivation::kNone: return x;
    case GemmActivation::kRelu: return x > 0 ? x : 0;
    case GemmActivation::kLeakyRelu: return x >= 0 ? x : alpha * x;
    case GemmActivation::kClip: return std::min(std::max(x, alpha), beta);
    case GemmActivation::kSigmoid: return sigmoid;
    case GemmActivation::kSwish: return x / (1 + std::exp(-alpha * x));
    case GemmActivation::kHardSigmoid: return std::min(1.0, std::max(0.0, alpha * x + beta));
    case GemmActivation::kHardSwish: return x * std::min(1.0, std::max(0.0, x / 6 + 0.5));
    case GemmActivation::kGelu: return 0.5 * x * std::erfc(-x / std::sqrt(2.0));
    case GemmActivation::kGeluTanh:
      return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
  }
  return x;
}

struct Product {
  int64_t m, k, n;
  bool bias = false, residual = false, in_place = false;
  GemmActivation act = GemmActivation::kNone;
  float alpha = 0, beta = 0;
  // kernels::vec::gemm (both operands packed per run) instead of packed_gemm,
  // with A stored as [k, m] and B as [n, k] when transposed.
  bool unpacked = false, trans_a = false, trans_b = false;
  bool gate = false;  // C zeroed where a gate matrix (rows ldc apart) is not positive, after the activation
  bool sums = false;  // unpacked: C's column sums too (GemmOutput::column_sums)
};

// `logical` [rows, cols] as stored: itself, or its transpose.
std::vector<float> stored(const std::vector<float>& logical, int64_t rows, int64_t cols, bool transposed) {
  if (!transposed) return logical;
  std::vector<float> t(logical.size());
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) t[j * rows + i] = logical[i * cols + j];
  return t;
}

void run_packed(const GemmKernels& g, const Product& p, const std::vector<float>& a, const std::vector<float>& b,
                const std::vector<float>& bias, const std::vector<float>& residual, const float* gate,
                std::vector<float>& c, int64_t ldc);
void expect_product(const Product& p, const std::vector<float>& a, const std::vector<float>& b,
                    const std::vector<float>& bias, const std::vector<float>& residual, const float* gate,
                    const std::vector<float>& c, int64_t ldc);
void expect_column_sums(const Product& p, const std::vector<float>& a, const std::vector<float>& b,
                        const std::vector<float>& bias, const std::vector<float>& residual, const float* gate,
                        const std::vector<double>& sums, int64_t ldc);

// Runs one product on `g` and checks every element against double precision:
// the error bound scales with the sum of |a * b| terms (float accumulation).
void check_product(const GemmKernels& g, const Product& p, uint32_t seed) {
  SCOPED_TRACE(::testing::Message() << p.m << "x" << p.k << "x" << p.n << " act " << static_cast<int>(p.act)
                                    << (p.bias ? " bias" : "") << (p.residual ? " residual" : "")
                                    << (p.in_place ? " in place" : "") << (p.unpacked ? " unpacked" : "")
                                    << (p.trans_a ? " A^T" : "") << (p.trans_b ? " B^T" : ""));
  const int64_t ldc = p.n + 3;  // rows of C apart by more than N, as a view would be
  const std::vector<float> a = uniform_values(static_cast<size_t>(p.m * p.k), seed);
  const std::vector<float> b = uniform_values(static_cast<size_t>(p.k * p.n), seed + 1);
  const std::vector<float> bias = uniform_values(static_cast<size_t>(p.n), seed + 2, -2.f, 2.f);
  const std::vector<float> residual = uniform_values(static_cast<size_t>(p.m * ldc), seed + 3, -2.f, 2.f);
  const std::vector<float> gate_values = uniform_values(static_cast<size_t>(p.m * ldc), seed + 4);
  const float* gate = p.gate ? gate_values.data() : nullptr;
  std::vector<float> c(static_cast<size_t>(p.m * ldc), std::nanf(""));
  if (p.in_place) c = residual;
  if (p.unpacked) {
    const std::vector<float> a_stored = stored(a, p.m, p.k, p.trans_a), b_stored = stored(b, p.k, p.n, p.trans_b);
    kernels::vec::GemmProduct product;
    product.a = {a_stored.data(), p.trans_a ? 1 : p.k, p.trans_a ? p.m : 1};
    product.b = {b_stored.data(), p.trans_b ? 1 : p.n, p.trans_b ? p.k : 1};
    product.m = p.m;
    product.k = p.k;
    product.n = p.n;
    product.bias = p.bias ? bias.data() : nullptr;
    product.residual = p.in_place ? c.data() : p.residual ? residual.data() : nullptr;
    product.c = c.data();
    product.ldc = ldc;
    product.epilogue = {p.act, p.alpha, p.beta, gate, ldc};
    const int threads = omp_get_max_threads();
    std::vector<double> partial(static_cast<size_t>(threads * p.n), 0.0);
    if (p.sums) product.column_sums = partial.data();
    kernels::vec::gemm(g, product);
    if (p.sums) {
      std::vector<double> sums(static_cast<size_t>(p.n), 0.0);
      for (int t = 0; t < threads; ++t)
        for (int64_t j = 0; j < p.n; ++j) sums[static_cast<size_t>(j)] += partial[static_cast<size_t>(t * p.n + j)];
      expect_column_sums(p, a, b, bias, residual, gate, sums, ldc);
    }
  } else {
    run_packed(g, p, a, b, bias, residual, gate, c, ldc);
  }
  expect_product(p, a, b, bias, residual, gate, c, ldc);
}

void run_packed(const GemmKernels& g, const Product& p, const std::vector<float>& a, const std::vector<float>& b,
                const std::vector<float>& bias, const std::vector<float>& residual, const float* gate,
                std::vector<float>& c, int64_t ldc) {
  const Tensor packed = kernels::vec::pack_gemm_b(g, b.data(), p.k, p.n, p.n, 1);
  GemmArgs args;
  args.a = a.data();
  args.lda = p.k;
  args.m = p.m;
  args.k = p.k;
  args.n = p.n;
  args.b_packed = packed.data<float>();
  args.bias = p.bias ? bias.data() : nullptr;
  args.residual = p.in_place ? c.data() : p.residual ? residual.data() : nullptr;
  args.c = c.data();
  args.ldc = ldc;
  args.epilogue = {p.act, p.alpha, p.beta, gate, ldc};
  kernels::vec::packed_gemm(g, args);
}

// C[i][j] in double, and the error its float computation may carry: the
// bound scales with the sum of |a * b| terms (float accumulation).
double expected(const Product& p, const std::vector<float>& a, const std::vector<float>& b,
                const std::vector<float>& bias, const std::vector<float>& residual, const float* gate, int64_t ldc,
                int64_t i, int64_t j, double* tolerance) {
  double sum = 0, magnitude = 0;
  for (int64_t q = 0; q < p.k; ++q) {
    const double term = static_cast<double>(a[i * p.k + q]) * b[q * p.n + j];
    sum += term;
    magnitude += std::abs(term);
  }
  if (p.bias) sum += bias[j];
  if (p.residual || p.in_place) sum += residual[i * ldc + j];
  const double activated = activate(sum, p.act, p.alpha, p.beta);
  const double want = gate && !(gate[i * ldc + j] > 0) ? 0.0 : activated;
  *tolerance = 2e-6 * (magnitude + 4) + 2e-6 * std::abs(want);
  return want;
}

// Each column's sum against the sum of the product's values in double.
void expect_column_sums(const Product& p, const std::vector<float>& a, const std::vector<float>& b,
                        const std::vector<float>& bias, const std::vector<float>& residual, const float* gate,
                        const std::vector<double>& sums, int64_t ldc) {
  int failures = 0;
  for (int64_t j = 0; j < p.n && failures < 5; ++j) {
    double want = 0, tolerance = 0;
    for (int64_t i = 0; i < p.m; ++i) {
      double t;
      want += expected(p, a, b, bias, residual, gate, ldc, i, j, &t);
      tolerance += t;
    }
    if (!(std::abs(sums[static_cast<size_t>(j)] - want) <= tolerance + 1e-9)) {
      ADD_FAILURE() << "column " << j << " sums to " << sums[static_cast<size_t>(j)] << ", want " << want;
      ++failures;
    }
  }
}

// C against the product in double.
void expect_product(const Product& p, const std::vector<float>& a, const std::vector<float>& b,
                    const std::vector<float>& bias, const std::vector<float>& residual, const float* gate,
                    const std::vector<float>& c, int64_t ldc) {
  int failures = 0;
  for (int64_t i = 0; i < p.m && failures < 5; ++i)
    for (int64_t j = 0; j < p.n && failures < 5; ++j) {
      double tolerance;
      const double want = expected(p, a, b, bias, residual, gate, ldc, i, j, &tolerance);
      const float got = c[i * ldc + j];
      if (!(std::abs(got - want) <= tolerance)) {
        ADD_FAILURE() << "C[" << i << "][" << j << "] = " << got << ", want " << want;
        ++failures;
      }
    }
}

TEST(VecKernels, PackedGemmShapesAndTails) {
  for (VectorIsa isa : supported_vector_isas()) {
    SCOPED_TRACE(vector_isa_name(isa));
    const GemmKernels& g = kernels::vec::vec_kernels_for(isa).gemm;
    // Tiles cut at every edge: rows and columns short of a tile, k past a k-block, a single element;
    // rows past one row block (5,000: more than a thread's block holds beside A's block and C's rows on an
    // L2 of 2 MiB or less, at 1 or 2 threads).
    const Product shapes[] = {{1, 1, 1},     {5, 3, 17},     {g.mr, g.kc, g.nr}, {13, 300, 33},
                              {2, 513, 47},  {37, 64, 200},  {130, 700, 96},     {1, 1000, 64},
                              {200, 16, 3},  {5000, 300, 40}};
    uint32_t seed = 1;
    for (const Product& p : shapes) check_product(g, p, seed += 10);
  }
}

// Each ISA's k-block follows the L2 a thread has (1 MiB or more: the long
// one), and products run at both, whichever this CPU takes: with the short
// and long k-blocks of every ISA, K over one block, at one and two blocks.
TEST(VecKernels, PackedGemmKBlockFollowsTheL2) {
  for (VectorIsa isa : supported_vector_isas()) {
    SCOPED_TRACE(vector_isa_name(isa));
    GemmKernels g = kernels::vec::vec_kernels_for(isa).gemm;
    const int short_kc = g.kc_small_l2;
    EXPECT_EQ(kernels::vec::gemm_kc_for_l2(g, 0), short_kc);
    EXPECT_EQ(kernels::vec::gemm_kc_for_l2(g, (size_t{1} << 20) - 1), short_kc);
    EXPECT_EQ(kernels::vec::gemm_kc_for_l2(g, size_t{1} << 20), g.kc_large_l2);
    EXPECT_GE(g.kc_large_l2, short_kc);
    // This CPU's table takes the k-block of the L2 share a logical CPU has.
    const CpuInfo& cpu = cpu_info();
    EXPECT_EQ(g.kc, kernels::vec::gemm_kc_for_l2(g, cpu.l2_bytes / static_cast<size_t>(std::max(1, cpu.l2_shared_by))));
    if (isa == vector_isa()) EXPECT_EQ(kernels::vec::vec_kernels().gemm.kc, g.kc);
    if (isa == VectorIsa::kAvx2) {
      EXPECT_EQ(short_kc, 256);
      EXPECT_EQ(g.kc_large_l2, 768);
    }
    uint32_t seed = 3000;
    for (int kc : {short_kc, g.kc_large_l2}) {
      if (kc == g.kc_large_l2 && kc == short_kc) break;
      g.kc = kc;
      SCOPED_TRACE(::testing::Message() << "kc " << kc);
      for (const Product& p : {Product{37, kc + 5, 70}, Product{130, 2 * kc, 2 * g.nr + 3}}) check_product(g, p, seed += 10);
    }
  }
}

// A's blocks packed per k-block (GemmKernels::pack_contiguous_a, taken with 4+ panels a thread) and read
// in place, on every ISA whatever its default: several k-blocks with a short last one, a last row tile of
// a few rows, K = 1, and (on an L2 of up to about 3 MiB) two row blocks at 700 rows.
TEST(VecKernels, PackedGemmWithAPackedOrInPlace) {
  const int saved_threads = omp_get_max_threads();
  for (VectorIsa isa : supported_vector_isas()) {
    SCOPED_TRACE(vector_isa_name(isa));
    GemmKernels g = kernels::vec::vec_kernels_for(isa).gemm;
    uint32_t seed = 1000;
    for (bool pack : {true, false}) {
      g.pack_contiguous_a = pack;
      for (int threads : {1, 2}) {
        omp_set_num_threads(threads);
        SCOPED_TRACE(::testing::Message() << "packed A " << pack << ", threads " << threads);
        for (const Product& p : {Product{40, 1700, 300}, Product{700, 800, 256}, Product{30, 1, 300}})
          check_product(g, p, seed += 10);
      }
    }
  }
  omp_set_num_threads(saved_threads);
}

// Both operands packed per run (training's products): every transposition,
// tails, the k-ranges a large B is packed in, and K split between threads.
TEST(VecKernels, UnpackedGemmLayoutsAndPaths) {
  const int saved_threads = omp_get_max_threads();
  omp_set_num_threads(2);  // the split-K path needs a team of two, also on one core
  EXPECT_EQ(omp_get_max_threads(), 2) << "OMP_THREAD_LIMIT or the like keeps the split-K path from running";
  for (VectorIsa isa : supported_vector_isas()) {
    SCOPED_TRACE(vector_isa_name(isa));
    const GemmKernels& g = kernels::vec::vec_kernels_for(isa).gemm;
    uint32_t seed = 500;
    for (bool ta : {false, true})
      for (bool tb : {false, true}) {
        for (Product p : {Product{1, 1, 1}, Product{13, 300, 33}, Product{130, 70, 200}, Product{7, 2, 129}}) {
          p.unpacked = true;
          p.trans_a = ta;
          p.trans_b = tb;
          check_product(g, p, seed += 10);
        }
        // K far larger than M and N: threads split K and sum their parts (with the epilogue after, gated or not).
        check_product(g, {14, 1100, 19, true, true, false, GemmActivation::kRelu, 0, 0, true, ta, tb}, seed += 10);
        check_product(g, {14, 1100, 19, true, false, false, GemmActivation::kNone, 0, 0, true, ta, tb, true},
                      seed += 10);
        // A gated product of several tiles (training's ReLU gradient), gate rows ldc apart; N = 40 ends
        // in a panel of whole vectors on every ISA, gated in the micro-kernel's registers.
        check_product(g, {25, 70, 40, false, false, false, GemmActivation::kNone, 0, 0, true, ta, tb, true},
                      seed += 10);
        check_product(g, {25, 70, 48, true, false, false, GemmActivation::kRelu, 0, 0, true, ta, tb, true},
                      seed += 10);
        // B wider than one thread's packing budget: packed a k-range at a time.
        check_product(g, {20, 1100, 1040, false, false, true, GemmActivation::kNone, 0, 0, true, ta, tb}, seed += 10);
        // Bias, residual, ReLU and gate together, over several k-blocks and k-ranges: applied in the
        // micro-kernel's registers on whole panels, by the epilogue pass on the last, partial one.
        check_product(g, {3 * g.mr + 1, 300, 2 * g.nr + 5, true, true, false, GemmActivation::kRelu, 0, 0, true, ta,
                          tb, true},
                      seed += 10);
        check_product(g, {20, 1100, 1040, true, false, false, GemmActivation::kRelu, 0, 0, true, ta, tb, true},
                      seed += 10);
      }
    check_product(g, {6, 0, 9, true, true, false, GemmActivation::kRelu, 0, 0, true}, seed += 10);  // K = 0
  }
  omp_set_num_threads(saved_threads);
}

// Products of many rows (training's at large batches), which ISAs with a
// row sweep (GemmKernels::row_sweep_kc) run a row tile at a time across the
// panels: ragged rows, panels and k-blocks, and the epilogue in registers
// and after, at 1 and 2 threads (18 panels: in two groups on one thread
// where half the L2 holds fewer than 18 of a k-block's panels, 2 MiB or
// less).
TEST(VecKernels, UnpackedGemmRowSweep) {
  const int saved_threads = omp_get_max_threads();
  bool swept = false;
  for (VectorIsa isa : supported_vector_isas()) {
    const GemmKernels& g = kernels::vec::vec_kernels_for(isa).gemm;
    if (g.row_sweep_kc == 0) continue;
    SCOPED_TRACE(vector_isa_name(isa));
    swept = true;
    uint32_t seed = 900;
    for (int threads : {1, 2}) {
      omp_set_num_threads(threads);
      SCOPED_TRACE(threads);
      // 1,543 rows: a thread's share of panels covers them all (past the sweep's 1,536-row threshold).
      check_product(g, {1543, g.row_sweep_kc + 301, 545, true, true, false, GemmActivation::kRelu, 0, 0, true, false,
                        true, true},
                    seed += 10);
      // Few panels, so one thread's rows (two threads split them by row tiles: 1,560 and 1,540).
      check_product(g, {3100, 70, 2 * g.nr + 5, false, false, true, GemmActivation::kNone, 0, 0, true, false, false,
                        true},
                    seed += 10);
    }
  }
  omp_set_num_threads(saved_threads);
  if (!swept) GTEST_SKIP() << "no ISA here sweeps rows";
}

// C's column sums beside the product (a ReLU layer's bias gradient,
// GemmReluGrad's second output): in the micro-kernel's registers on whole
// panels, after the store on partial ones and after another epilogue, over
// every path: a thread's panels, the row sweep, K split between threads, K =
// 0; at 1 and 2 threads.
TEST(VecKernels, UnpackedGemmColumnSums) {
  const int saved_threads = omp_get_max_threads();
  for (VectorIsa isa : supported_vector_isas()) {
    SCOPED_TRACE(vector_isa_name(isa));
    const GemmKernels& g = kernels::vec::vec_kernels_for(isa).gemm;
    uint32_t seed = 1300;
    for (int threads : {1, 2}) {
      omp_set_num_threads(threads);
      SCOPED_TRACE(threads);
      const Product products[] = {
          {3 * g.mr + 1, 300, 2 * g.nr + 5, false, false, false, GemmActivation::kNone, 0, 0, true, false, true, true},
          {25, 70, 48, true, false, false, GemmActivation::kRelu, 0, 0, true, true, false, true},
          {9, 40, g.nr + 3, true, false, false, GemmActivation::kGelu, 0, 0, true, false, false, true},
          {14, 1100, 19, true, false, false, GemmActivation::kNone, 0, 0, true, false, false, true},  // split K
          {1543, g.row_sweep_kc + 30, 70, false, false, false, GemmActivation::kNone, 0, 0, true, false, true, true},
          {6, 0, 9, true, false, false, GemmActivation::kRelu, 0, 0, true, false, false, true},  // K = 0
      };
      for (Product p : products) {
        p.sums = true;
        check_product(g, p, seed += 10);
      }
    }
  }
  omp_set_num_threads(saved_threads);
}

TEST(VecKernels, PackedGemmEpilogues) {
  for (VectorIsa isa : supported_vector_isas()) {
    SCOPED_TRACE(vector_isa_name(isa));
    const GemmKernels& g = kernels::vec::vec_kernels_for(isa).gemm;
    uint32_t seed = 100;
    for (bool bias : {false, true})
      for (int residual = 0; residual < 3; ++residual)  // none, another buffer, C itself
        check_product(g, {19, 40, 37, bias, residual == 1, residual == 2}, seed += 10);
    const std::pair<GemmActivation, std::pair<float, float>> acts[] = {
        {GemmActivation::kRelu, {0, 0}},         {GemmActivation::kLeakyRelu, {0.1f, 0}},
        {GemmActivation::kClip, {-0.5f, 0.7f}},  {GemmActivation::kSigmoid, {0, 0}},
        {GemmActivation::kSwish, {1.5f, 0}},     {GemmActivation::kHardSigmoid, {0.2f, 0.5f}},
        {GemmActivation::kHardSwish, {0, 0}},    {GemmActivation::kGelu, {0, 0}},
        {GemmActivation::kGeluTanh, {0, 0}}};
    // k = 300 spreads the sums over about +-10 (and spans two k-blocks below AVX-512, whose are 768 long);
    // n = one whole panel (whose epilogue runs in the micro-kernel's registers where it can) and a part of
    // one (a pass after the store).
    for (const auto& [act, ab] : acts)
      check_product(g, {9, 300, g.nr + 5, true, true, false, act, ab.first, ab.second}, seed += 10);
    check_product(g, {4, 0, 9, true, true, false, GemmActivation::kRelu}, seed += 10);  // K = 0: the epilogue alone
  }
}

TEST(VecKernels, PackedGemmGeluKeepsItsTail) {
  // Far in the negative tail x * Phi(x) is tiny: the relative error must stay
  // small there too (bounded by x * x / 2 rounded to float, the exponent).
  for (VectorIsa isa : supported_vector_isas()) {
    const GemmKernels& g = kernels::vec::vec_kernels_for(isa).gemm;
    for (float x : {-12.f, -9.f, -6.f, -3.f, -1.f, -0.01f, 0.f, 0.5f, 3.f, 8.f}) {
      float c[1] = {x};
      g.epilogue(c, 1, 1, 1, nullptr, nullptr, {GemmActivation::kGelu, 0, 0});
      const double want = 0.5 * x * std::erfc(-x / std::sqrt(2.0));
      EXPECT_LE(std::abs(c[0] - want), 1e-5 * std::abs(want) + 1e-30)
          << vector_isa_name(isa) << ": gelu(" << x << ") = " << c[0];
    }
    // Past x = -13.13, x * Phi(x) (under 1.5e-38) is given as 0.
    float tail[1] = {-13.5f};
    g.epilogue(tail, 1, 1, 1, nullptr, nullptr, {GemmActivation::kGelu, 0, 0});
    EXPECT_LE(std::abs(tail[0]), 1e-38f) << vector_isa_name(isa);
    // Infinity stays infinite, NaN stays NaN.
    float c[2] = {std::numeric_limits<float>::infinity(), std::nanf("")};
    g.epilogue(c, 2, 1, 2, nullptr, nullptr, {GemmActivation::kGelu, 0, 0});
    EXPECT_EQ(c[0], std::numeric_limits<float>::infinity()) << vector_isa_name(isa);
    EXPECT_TRUE(std::isnan(c[1])) << vector_isa_name(isa);
  }
}

TEST(VecKernels, PackedGemmPackingRoundTrips) {
  for (VectorIsa isa : supported_vector_isas()) {
    const GemmKernels& g = kernels::vec::vec_kernels_for(isa).gemm;
    const int64_t k = 300, n = 37;
    const std::vector<float> bt = uniform_values(static_cast<size_t>(k * n), 7);  // stored as [n, k]: Gemm's transB
    const Tensor packed = kernels::vec::pack_gemm_b(g, bt.data(), k, n, 1, k);
    std::vector<float> back(bt.size(), std::nanf(""));
    kernels::vec::unpack_gemm_b(g, packed.data<float>(), k, n, back.data(), 1, k);
    EXPECT_EQ(back, bt) << vector_isa_name(isa);
  }
}

// A row tile packed for tile_packed_a: k steps of mr floats, row r of the
// tile at slot r; rows short of a tile and k past a multiple of four included.
TEST(VecKernels, GemmPackATransposesARowTile) {
  for (VectorIsa isa : supported_vector_isas()) {
    SCOPED_TRACE(vector_isa_name(isa));
    const GemmKernels& g = kernels::vec::vec_kernels_for(isa).gemm;
    const int64_t lda = 301;
    const std::vector<float> a = uniform_values(static_cast<size_t>(g.mr * lda), 9);
    for (int m = 1; m <= g.mr; ++m)
      for (int64_t kc : {1, 4, 7, 256}) {
        std::vector<float> out(static_cast<size_t>(kc * g.mr), std::nanf(""));
        g.pack_a(a.data() + 3, lda, m, kc, out.data());
        for (int64_t k = 0; k < kc; ++k)
          for (int r = 0; r < m; ++r)
            ASSERT_EQ(out[k * g.mr + r], a[r * lda + 3 + k]) << "m " << m << " kc " << kc << " at k " << k << " row " << r;
      }
  }
}

// The op kernels on oneDNN's backend (which hands the product to the packed
// GEMM where its own would be gemm:jit) against the reference kernels, B and
// the bias constant.
// `packed`: the product fits the packed GEMM, which then runs it wherever
// oneDNN's choice would not be brgemm (below AVX-512, or capped by ANVIL_MAX_ISA).
void expect_matches_reference(const std::string& op, const std::vector<Tensor>& inputs, const ir::Attributes& a,
                              bool packed, std::string domain = "") {
  KernelOptions fast, ref;
  fast.backend = Backend::kDnnl;
  ref.backend = Backend::kRef;
  fast.domain = ref.domain = std::move(domain);
  for (size_t i = 0; i < inputs.size(); ++i) fast.constant_inputs.push_back(i == 1 || i == 2);  // B and the bias
  ref.constant_inputs = fast.constant_inputs;
  const testing::KernelResult got = testing::run_kernel_full(op, inputs, a, fast);
  const std::vector<float> want = values<float>(testing::run_kernel(op, inputs, a, ref)[0]);
  const std::vector<float> have = values<float>(got.outputs[0]);
  if (vector_isa() != VectorIsa::kAvx512) {
    EXPECT_EQ(got.impl.find(":packed_gemm") != std::string::npos, packed) << op << ": " << got.impl;
  }
  ASSERT_EQ(have.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i)
    ASSERT_NEAR(have[i], want[i], 1e-4 * (1 + std::abs(want[i]))) << op << " [" << got.impl << "] at " << i;
}

Tensor random_tensor(Shape shape, uint32_t seed) {
  Tensor t(DType::kFloat32, shape);
  const std::vector<float> v = uniform_values(static_cast<size_t>(t.numel()), seed);
  std::copy(v.begin(), v.end(), t.data<float>());
  return t;
}

TEST(VecKernels, MatMulWithConstantWeightsMatchesTheReference) {
  expect_matches_reference("MatMul", {random_tensor({2, 7, 50}, 1), random_tensor({50, 33}, 2)}, {}, true);
  expect_matches_reference("FusedMatMul",
                           {random_tensor({20, 64}, 3), random_tensor({64, 40}, 4), random_tensor({40}, 5),
                            random_tensor({20, 40}, 6)},
                           attrs({{"activation", std::string("Gelu")}}), true, "anvil");
  expect_matches_reference("FusedMatMul", {random_tensor({9, 16}, 7), random_tensor({16, 24}, 8), random_tensor({24}, 9)},
                           attrs({{"activation", std::string("Tanh")}}), false, "anvil");  // no epilogue for it
  expect_matches_reference("Gemm", {random_tensor({6, 30}, 10), random_tensor({17, 30}, 11), random_tensor({17}, 12)},
                           attrs({{"transB", int64_t{1}}, {"alpha", 0.5f}, {"beta", 2.f}}), true);
  expect_matches_reference("Gemm", {random_tensor({6, 30}, 13), random_tensor({30, 17}, 14), random_tensor({6, 17}, 15)},
                           {}, true);  // C of the output's shape: the residual
  expect_matches_reference("Gemm", {random_tensor({6, 30}, 16), random_tensor({30, 17}, 17), random_tensor({6, 1}, 18)},
                           {}, false);  // C broadcast along N: oneDNN's
}

// Where oneDNN's choice is brgemm (AVX-512), products of 1 to 128 rows
// with constant weights take the packed GEMM when the model's weights
// pass half the last-level cache's bound (the cost of a wrong choice is the
// smaller that way: matmul.cc); with fewer weights, or other row counts,
// the rule's choice is what it is without the model's size.
TEST(VecKernels, ProductsOfFewRowsTakeThePackedGemmWhenWeightsStream) {
  const size_t threshold = kernels::dnnl_util::few_rows_streaming_weight_bytes();
  if (threshold == 0) GTEST_SKIP() << "the CPU's last-level cache size is not known";
  ASSERT_EQ(threshold, kernels::dnnl_util::streaming_weight_bytes() / 2);
  const auto check = [&](int64_t m, size_t model_bytes, bool rule_applies) {
    const std::vector<Tensor> inputs = {random_tensor({m, 96}, 60 + static_cast<uint32_t>(m)), random_tensor({96, 80}, 61),
                                        random_tensor({80}, 62)};
    const ir::Attributes a = attrs({{"activation", std::string("Gelu")}});
    KernelOptions fast, ref;
    fast.backend = Backend::kDnnl;
    fast.domain = ref.domain = "anvil";
    fast.constant_inputs = ref.constant_inputs = {false, true, true};
    const std::string unsized = testing::run_kernel_full("FusedMatMul", inputs, a, fast).impl;
    fast.model_weight_bytes = model_bytes;
    const testing::KernelResult got = testing::run_kernel_full("FusedMatMul", inputs, a, fast);
    const std::vector<float> want = values<float>(testing::run_kernel("FusedMatMul", inputs, a, ref)[0]);
    const std::vector<float> have = values<float>(got.outputs[0]);
    const bool brgemm = unsized.rfind("dnnl:brg", 0) == 0;
    const bool packed = brgemm ? rule_applies : unsized.find(":packed_gemm") != std::string::npos;
    EXPECT_EQ(got.impl.find(":packed_gemm") != std::string::npos, packed)
        << "M " << m << ", model weights " << model_bytes << " bytes: " << got.impl << " (unsized: " << unsized << ")";
    ASSERT_EQ(have.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i)
      ASSERT_NEAR(have[i], want[i], 1e-4 * (1 + std::abs(want[i]))) << "M " << m << " [" << got.impl << "] at " << i;
  };
  const size_t streamed = 2 * threshold, resident = threshold / 2;
  for (int64_t m : {1, 2, 7, 32, 128}) {
    check(m, streamed, true);
    check(m, resident, false);
  }
  check(129, streamed, false);
}

// Gemm and MatMul with both operands known only at run time (as in
// training): Anvil's GEMM, packing per run, from M of one row tile up where
// K is short (<= 128), and from 256 rows up otherwise (matmul.cc,
// packing_per_run_pays).
TEST(VecKernels, GemmOfRunTimeOperandsMatchesTheReference) {
  const int mr = kernels::vec::vec_kernels().gemm.mr;
  auto check = [&](const std::string& op, const std::vector<Tensor>& inputs, const ir::Attributes& a, bool anvil) {
    KernelOptions fast, ref;
    fast.backend = Backend::kDnnl;
    ref.backend = Backend::kRef;
    if (op == "GemmReluGrad" || op == "FusedGemm") fast.domain = ref.domain = "anvil";
    const testing::KernelResult got = testing::run_kernel_full(op, inputs, a, fast);
    const std::vector<float> want = values<float>(testing::run_kernel(op, inputs, a, ref)[0]);
    const std::vector<float> have = values<float>(got.outputs[0]);
    // On AVX-512 oneDNN's brgemm keeps the products, but a gated one, whose gate only the GEMM fuses.
    if (vector_isa() != VectorIsa::kAvx512 || op == "GemmReluGrad") {
      const bool ran_anvil = got.impl.rfind("vec:", 0) == 0 && got.impl.find(":gemm") != std::string::npos;
      EXPECT_EQ(ran_anvil, anvil) << op << ": " << got.impl;
    }
    ASSERT_EQ(have.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i)
      ASSERT_NEAR(have[i], want[i], 1e-4 * (1 + std::abs(want[i]))) << op << " [" << got.impl << "] at " << i;
  };
  // A weight gradient (A transposed, K the batch), an input gradient and a forward product with its bias.
  check("Gemm", {random_tensor({300, 260}, 20), random_tensor({300, 33}, 21)}, attrs({{"transA", int64_t{1}}}), true);
  check("Gemm", {random_tensor({40, 17}, 22), random_tensor({17, 50}, 23)}, {}, true);
  check("Gemm", {random_tensor({25, 30}, 24), random_tensor({17, 30}, 25), random_tensor({17}, 26)},
        attrs({{"transB", int64_t{1}}}), true);
  check("MatMul", {random_tensor({31, 64}, 27), random_tensor({64, 9}, 28)}, {}, true);
  // Fewer rows than one tile: oneDNN's.
  check("Gemm", {random_tensor({300, mr - 1}, 29), random_tensor({300, 40}, 30)}, attrs({{"transA", int64_t{1}}}),
        false);
  // The rule's edges: one tile of rows at K = 128; K = 129 needs 256 rows.
  check("MatMul", {random_tensor({mr, 128}, 42), random_tensor({128, 20}, 43)}, {}, true);
  check("MatMul", {random_tensor({mr, 129}, 44), random_tensor({129, 20}, 45)}, {}, false);
  check("MatMul", {random_tensor({255, 129}, 46), random_tensor({129, 20}, 47)}, {}, false);
  check("MatMul", {random_tensor({256, 129}, 48), random_tensor({129, 20}, 49)}, {}, true);
  // The product masked by a ReLU's output (half of the uniform values are negative): the GEMM's epilogue, and
  // below one row tile a pass after oneDNN's product.
  check("GemmReluGrad", {random_tensor({40, 17}, 31), random_tensor({50, 17}, 32), random_tensor({40, 50}, 33)},
        attrs({{"transB", int64_t{1}}}), true);
  check("GemmReluGrad", {random_tensor({mr - 1, 17}, 34), random_tensor({17, 50}, 35), random_tensor({mr - 1, 50}, 36)},
        {}, false);
  // Operands that do not multiply, or a gate of another shape: one clear error from either backend (the
  // schema types GemmReluGrad's output as its gate and checks nothing else).
  for (Backend backend : {Backend::kDnnl, Backend::kRef}) {
    KernelOptions o;
    o.backend = backend;
    o.domain = "anvil";
    auto message = [&](const std::vector<Tensor>& inputs) {
      try {
        testing::run_kernel("GemmReluGrad", inputs, {}, o);
      } catch (const Error& e) {
        return std::string(e.what());
      }
      return std::string("no error");
    };
    EXPECT_NE(message({random_tensor({8, 17}, 50), random_tensor({16, 5}, 51), random_tensor({8, 5}, 52)})
                  .find("do not multiply"),
              std::string::npos);
    EXPECT_NE(message({random_tensor({8, 17}, 53), random_tensor({17, 5}, 54), random_tensor({8, 6}, 55)})
                  .find("shape"),
              std::string::npos);
  }
  // A Linear and its activation (training's forward products): the bias and the activation in the epilogue.
  check("FusedGemm", {random_tensor({30, 17}, 37), random_tensor({50, 17}, 38), random_tensor({50}, 39)},
        attrs({{"transB", int64_t{1}}, {"activation", std::string("Relu")}}), true);
  check("FusedGemm", {random_tensor({30, 17}, 40), random_tensor({17, 50}, 41)},
        attrs({{"activation", std::string("Gelu")}}), true);
}

// B known only at run time, of a product with rows enough (training's
// forward products at large batches): brgemm reads it staged per run in its
// own blocked layout. Values against the reference either side of the rule's
// 2048 rows, B plain and transposed (transB, as PyTorch exports Linear).
TEST(DnnlGemm, RunTimeWeightsOfManyRowsAreStagedForBrgemm) {
  for (int64_t m : {2047, 2048})
    for (int64_t trans_b : {0, 1}) {
      const Tensor a = random_tensor({m, 64}, 60), bias = random_tensor({96}, 62);
      const Tensor b = trans_b ? random_tensor({96, 64}, 61) : random_tensor({64, 96}, 61);
      const ir::Attributes at = attrs({{"transB", trans_b}, {"activation", std::string("Relu")}});
      KernelOptions fast, ref;
      fast.backend = Backend::kDnnl;
      ref.backend = Backend::kRef;
      fast.domain = ref.domain = "anvil";
      const testing::KernelResult got = testing::run_kernel_full("FusedGemm", {a, b, bias}, at, fast);
      const std::vector<float> want = values<float>(testing::run_kernel("FusedGemm", {a, b, bias}, at, ref)[0]);
      const std::vector<float> have = values<float>(got.outputs[0]);
      if (got.impl.rfind("dnnl:brg", 0) == 0) {
        EXPECT_EQ(got.impl.find(":b_staged") != std::string::npos, m >= 2048) << got.impl;
      }
      ASSERT_EQ(have.size(), want.size());
      for (size_t i = 0; i < want.size(); ++i)
        ASSERT_NEAR(have[i], want[i], 1e-4 * (1 + std::abs(want[i]))) << got.impl << " at " << i;
    }
}

}  // namespace
}  // namespace anvil
