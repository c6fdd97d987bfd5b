// Can a product whose left operand holds only 0 and 1 beat the float32 FMA
// rate by adding looked-up sums instead of multiplying? Issue 9's question.
//
// In the MLP of issue 9 (512 -> 1024 -> 1024 -> 2, ReLU, softmax
// cross-entropy) the head has two classes, so its gradient dZ3 has rows
// (u, -u) and the gradient reaching the last hidden layer is
// dZ2 = diag(u) G diag(w), with G = [H2 > 0] a 0/1 matrix and w the
// difference of the head's two weight columns. Two of the step's five large
// products then multiply a 0/1 matrix: the input gradient G (W2 diag(w))^T
// (25,000 x 1024 x 1024) and the weight gradient G^T (diag(u) H1)
// (1024 x 25,000 x 1024). About half of the step's arithmetic.
//
// Y = B T with B 0/1 [M x K] (bit-packed by rows) and T float [K x N]: the
// K axis is cut into chunks of `bits` rows of T; for each chunk a table holds
// all 2^bits sums of its rows, and each row of Y adds, per chunk, the table
// entry its bits select ("the method of four Russians"). One vector add and
// one load stand for `bits` FMAs. The sums are float32 sums of T's values,
// taken in another order than a GEMM's.
//
//   build/bin/anvil_binary_gemm_ab [M K N]   (default 25000 1024 1024)
//   build/bin/anvil_binary_gemm_ab_avx2 ...  (the same, built for AVX2 + FMA)
//
// Prints oneDNN's float32 matmul on the same 0/1 matrix (as floats), then
// each table variant: time, the float32 GFLOP/s it stands for, the speed-up,
// and the largest error against a double-precision product.
#include <dnnl.hpp>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "tool_common.h"

namespace {

using anvil::bench_tools::seconds_now;
using v16 = float __attribute__((vector_size(64)));  // 16 floats: one zmm, or two ymm on AVX2

struct Problem {
  int64_t m, k, n;
  std::vector<uint8_t> bits;  // [m x k/8], bit j of byte c: element k = 8c + j
  std::vector<float> t;       // [k x n]
};

// How Y's columns, rows and T's chunks are blocked.
struct Variant {
  int bits;          // rows of T per table (4 or 8)
  int cols;          // Y columns per table entry (16 or 32)
  int64_t rows;      // Y rows per block (the tables are rebuilt per block)
  int64_t chunks;    // chunks per table group (the tables' size)
};

// Tables of the chunks [c0, c0 + nc), columns [j0, j0 + V*16): entry s of
// chunk c at tab[((c - c0) << BITS | s) * V].
template <int BITS, int V>
void build_tables(const Problem& p, int64_t c0, int64_t nc, int64_t j0, v16* tab) {
  for (int64_t c = 0; c < nc; ++c) {
    v16* e = tab + (c << BITS) * V;
    for (int v = 0; v < V; ++v) e[v] = v16{};
    for (int b = 0; b < BITS; ++b) {
      const int64_t row = (c0 + c) * BITS + b;
      v16 r[V];
      for (int v = 0; v < V; ++v)
        std::memcpy(&r[v], &p.t[static_cast<size_t>(row * p.n + j0 + v * 16)], sizeof(v16));
      const int half = 1 << b;  // entries [half, 2 half) = entries [0, half) + row b
      for (int s = 0; s < half; ++s)
        for (int v = 0; v < V; ++v) e[(half + s) * V + v] = e[s * V + v] + r[v];
    }
  }
}

// Y[rows r0.., columns j0..] over the chunk group, from one byte of bits at a
// time (one chunk of 8, or two of 4): four partial sums per vector, so that
// the adds do not wait on each other.
template <int BITS, int V>
void lookup_rows(const Problem& p, int64_t r0, int64_t nr, int64_t c0, int64_t nc, int64_t j0, const v16* tab,
                 bool first, float* y) {
  constexpr int kPerByte = 8 / BITS;
  const int64_t row_bytes = p.k / 8, bytes = nc / kPerByte;
  for (int64_t r = r0; r < r0 + nr; ++r) {
    const uint8_t* rb = &p.bits[static_cast<size_t>(r * row_bytes + c0 / kPerByte)];
    v16 acc[4][V] = {};
    auto add = [&](v16* a, int64_t chunk, unsigned code) {
      const v16* e = tab + ((chunk << BITS) | code) * V;
      for (int v = 0; v < V; ++v) a[v] += e[v];
    };
    int64_t i = 0;
    for (; i + 4 <= bytes; i += 4)
      for (int a = 0; a < 4; ++a) {
        const unsigned byte = rb[i + a];
        if constexpr (BITS == 8) {
          add(acc[a], i + a, byte);
        } else {
          add(acc[a], 2 * (i + a), byte & 15u);
          add(acc[a], 2 * (i + a) + 1, byte >> 4);
        }
      }
    for (; i < bytes; ++i) {
      if constexpr (BITS == 8) {
        add(acc[0], i, rb[i]);
      } else {
        add(acc[0], 2 * i, rb[i] & 15u);
        add(acc[0], 2 * i + 1, rb[i] >> 4);
      }
    }
    float* out = y + r * p.n + j0;
    for (int v = 0; v < V; ++v) {
      v16 sum = (acc[0][v] + acc[1][v]) + (acc[2][v] + acc[3][v]);
      if (!first) {
        v16 old;
        std::memcpy(&old, out + v * 16, sizeof(v16));
        sum += old;
      }
      std::memcpy(out + v * 16, &sum, sizeof(v16));
    }
  }
}

template <int BITS, int V>
void table_product(const Problem& p, const Variant& var, float* y) {
  const int64_t col_blocks = p.n / (V * 16), row_blocks = (p.m + var.rows - 1) / var.rows;
  const int64_t chunks = p.k / BITS;
  const int64_t group = std::max<int64_t>(8 / BITS, std::min(var.chunks, chunks) / (8 / BITS) * (8 / BITS));
#pragma omp parallel
  {
    std::vector<v16> tab(static_cast<size_t>(group << BITS) * V);
#pragma omp for schedule(dynamic)
    for (int64_t task = 0; task < col_blocks * row_blocks; ++task) {
      const int64_t j0 = task % col_blocks * V * 16, r0 = task / col_blocks * var.rows;
      const int64_t nr = std::min(var.rows, p.m - r0);
      for (int64_t c0 = 0; c0 < chunks; c0 += group) {
        const int64_t nc = std::min(group, chunks - c0);
        build_tables<BITS, V>(p, c0, nc, j0, tab.data());
        lookup_rows<BITS, V>(p, r0, nr, c0, nc, j0, tab.data(), c0 == 0, y);
      }
    }
  }
}

void run_variant(const Problem& p, const Variant& var, float* y) {
  if (var.bits == 8 && var.cols == 16) table_product<8, 1>(p, var, y);
  else if (var.bits == 8 && var.cols == 32) table_product<8, 2>(p, var, y);
  else if (var.bits == 4 && var.cols == 16) table_product<4, 1>(p, var, y);
  else if (var.bits == 4 && var.cols == 32) table_product<4, 2>(p, var, y);
  else if (var.bits == 4 && var.cols == 64) table_product<4, 4>(p, var, y);
  else std::abort();  // a variant this switch does not build
}

double best_of(int runs, const auto& fn) {
  double best = 1e30;
  for (int i = 0; i <= runs; ++i) {  // the first is a warm-up
    const double t0 = seconds_now();
    fn();
    if (i > 0) best = std::min(best, seconds_now() - t0);
  }
  return best;
}

bool bit(const Problem& p, int64_t r, int64_t kk) { return p.bits[static_cast<size_t>(r * (p.k / 8) + kk / 8)] >> (kk % 8) & 1; }

// The largest |Y - exact| over the first and the last 32 rows (the first and
// the last row block), relative to the largest |exact|; infinite where Y
// holds a NaN (run_variant's output starts as NaN: a row left unwritten shows).
double largest_error(const Problem& p, const float* y) {
  double worst = 0, top = 0;
  for (int64_t r = 0; r < p.m; r = (r == 31 && p.m > 64) ? p.m - 32 : r + 1)
    for (int64_t j = 0; j < p.n; ++j) {
      double exact = 0;
      for (int64_t kk = 0; kk < p.k; ++kk)
        if (bit(p, r, kk)) exact += p.t[static_cast<size_t>(kk * p.n + j)];
      const double got = y[r * p.n + j];
      worst = std::isnan(got) ? INFINITY : std::max(worst, std::abs(exact - got));
      top = std::max(top, std::abs(exact));
    }
  return worst / top;
}

// The ISA this build was compiled for, checked before any of its code runs.
__attribute__((target("arch=x86-64"))) bool cpu_runs_this_build() {
#ifdef __AVX512F__
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
#else
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#endif
}

}  // namespace

int main(int argc, char** argv) {
  if (!cpu_runs_this_build()) {
    std::fprintf(stderr, "anvil_binary_gemm_ab: this CPU lacks the ISA of this build (the AVX-512 one: try "
                         "anvil_binary_gemm_ab_avx2)\n");
    return 1;
  }
  long m = 25000, k = 1024, n = 1024;
  if ((argc != 1 && argc != 4) || (argc == 4 && !(anvil::bench_tools::parse(argv[1], 1, 1 << 20, m) &&
                     anvil::bench_tools::parse(argv[2], 8, 1 << 20, k) &&
                     anvil::bench_tools::parse(argv[3], 64, 1 << 16, n) && k % 8 == 0 && n % 64 == 0))) {
    std::fprintf(stderr, "usage: anvil_binary_gemm_ab [M K N] (K a multiple of 8, N of 64)\n");
    return 1;
  }
  Problem p{m, k, n, std::vector<uint8_t>(static_cast<size_t>(m * k / 8)), std::vector<float>(static_cast<size_t>(k * n))};
  std::mt19937 rng(7);
  for (auto& b : p.bits) b = static_cast<uint8_t>(rng());  // each bit 1 with probability 1/2, as ReLU's gate
  std::normal_distribution<float> normal(0.f, 1.f);
  for (auto& v : p.t) v = normal(rng);
  const double flops = 2.0 * m * k * n;
  std::printf("%ld x %ld x %ld, 0/1 left operand, %d threads, best of 5 runs (%s)\n", m, k, n, omp_get_max_threads(),
#ifdef __AVX512F__
              "AVX-512 build"
#else
              "AVX2 build"
#endif
  );

  // oneDNN's float32 matmul on the same product: what an FMA GEMM gives.
  dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  dnnl::stream s(eng);
  using dnnl::memory;
  memory::desc a_md({m, k}, memory::data_type::f32, memory::format_tag::ab);
  memory::desc b_md({k, n}, memory::data_type::f32, memory::format_tag::ab);
  memory::desc c_md({m, n}, memory::data_type::f32, memory::format_tag::ab);
  dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_md, b_md, c_md), eng);
  memory a(a_md, eng), b(b_md, eng, p.t.data()), c(c_md, eng);
  float* af = static_cast<float*>(a.get_data_handle());
  for (int64_t r = 0; r < m; ++r)
    for (int64_t kk = 0; kk < k; ++kk) af[r * k + kk] = bit(p, r, kk) ? 1.f : 0.f;
  dnnl::matmul mm(pd);
  const double dnnl_s = best_of(5, [&] {
    mm.execute(s, {{DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, b}, {DNNL_ARG_DST, c}});
    s.wait();
  });
  std::printf("oneDNN float32 matmul (%s): %8.2f ms %6.0f GFLOP/s, largest error %.1e\n", pd.impl_info_str(),
              dnnl_s * 1e3, flops / dnnl_s / 1e9, largest_error(p, static_cast<float*>(c.get_data_handle())));

  std::vector<float> y(static_cast<size_t>(m * n));
  const Variant variants[] = {
      {4, 16, 4096, 256}, {4, 32, 4096, 256}, {4, 32, 4096, 128}, {4, 32, 2048, 256},
      {4, 64, 4096, 128}, {4, 64, 2048, 64},  {8, 16, 4096, 32},  {8, 32, 4096, 16},
      // Tables that fit L1 (48 KiB): Y's rows are added to once per group instead.
      {4, 16, 4096, 32},  {4, 16, 4096, 16},  {4, 32, 4096, 8},   {4, 64, 4096, 4},
  };
  for (const Variant& var : variants) {
    std::fill(y.begin(), y.end(), NAN);
    const double t = best_of(5, [&] { run_variant(p, var, y.data()); });
    std::printf("tables of %d rows, %2d columns, %4ld rows a block, %7ld chunks a group: %8.2f ms %6.0f GFLOP/s "
                "(%.2fx oneDNN), largest error %.1e\n",
                var.bits, var.cols, static_cast<long>(var.rows), static_cast<long>(std::min<int64_t>(var.chunks, k / var.bits)),
                t * 1e3, flops / t / 1e9, dnnl_s / t, largest_error(p, y.data()));
  }
  return 0;
}
