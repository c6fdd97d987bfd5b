#include "kernels/vec/gemm.h"

#include <omp.h>

#include <algorithm>
#include <cstring>
#include <optional>
#include <vector>

#include "anvil/cpu.h"
#include "core/check.h"
#include "core/checked.h"
#include "kernels/thread_share.h"

namespace anvil::kernels::vec {

namespace {

// Rows of A per L2 block (products packed per run; prepacked ones may take
// more, prepacked_block_rows): 96 KiB of A at kc 256, and the block's C rows,
// re-read every k-block (192 KiB at a thread's 512 columns), stay beside it
// in a 512 KiB L2; at 144 rows C spilled to L3 (training's step ran about 2%
// slower, 8 of 10 alternating pairs, Zen 3). Tuned on Zen 3 only: a CPU
// with a larger L2 may want more rows.
constexpr int64_t kBlockRows = 96;
constexpr int64_t kMinParallelFlops = 1 << 17;  // below this a second thread costs more than it saves

// Calls f(i, j, offset) for every element (i < k, j < n_padded) of B's
// packed layout, offset being its place there; panels run in parallel.
template <typename F>
void for_each_packed(const GemmKernels& g, int64_t k, int64_t n, F f) {
  const int64_t panels = ceil_div(n, g.nr), n_padded = panels * g.nr;
  for (int64_t k0 = 0; k0 < k; k0 += g.kc) {
    const int64_t rows = std::min<int64_t>(g.kc, k - k0);
#pragma omp parallel for if (rows * n > 65536)
    for (int64_t panel = 0; panel < panels; ++panel) {
      int64_t offset = k0 * n_padded + panel * rows * g.nr;
      for (int64_t i = k0; i < k0 + rows; ++i)
        for (int64_t j = panel * g.nr; j < (panel + 1) * g.nr; ++j) f(i, j, offset++);
    }
  }
}

// The epilogue of C's part at row i, column j (c points there).
void tile_epilogue(const GemmKernels& g, float* c, int64_t ldc, int64_t i, int64_t j, int64_t rows, int64_t cols,
                   const float* bias, const GemmEpilogue& e) {
  g.epilogue(c, ldc, rows, cols, bias ? bias + j : nullptr, e.gate ? e.gate + i * e.gate_ld + j : nullptr, e);
}

// Asks for the gate's lines of the tile at (i, j) before its last k-block
// runs, so the epilogue does not wait for memory (the gate is an
// activation-sized tensor, read once).
void prefetch_gate(const GemmEpilogue& e, int64_t i, int64_t j, int rows, int nr) {
  if (!e.gate) return;
  for (int r = 0; r < rows; ++r) {
    const float* row = e.gate + (i + r) * e.gate_ld + j;
    __builtin_prefetch(row);
    __builtin_prefetch(row + nr - 1);
  }
}

// A block of B's panels: kc x g.nr floats per panel, back to back.
struct PanelBlock {
  const float* b = nullptr;
  int64_t kc = 0;
};

// What a thread's sweeps read after k-block k0 of the k-range [k_begin,
// k_end): the next k-block (block_at(k) is k-block k's first panel of the
// thread), or after the last, the first again for the thread's next row
// block (more_rows); nothing after that.
template <typename BlockAt>
PanelBlock next_panel_block(const GemmKernels& g, int64_t k0, int64_t k_begin, int64_t k_end, bool more_rows,
                            BlockAt block_at) {
  const int64_t next = k0 + g.kc < k_end ? k0 + g.kc : more_rows ? k_begin : k_end;
  if (next == k_end) return {};
  return {block_at(next), std::min<int64_t>(g.kc, k_end - next)};
}

// next_panel_block for a B prepacked whole (pack_gemm_b, n_padded columns)
// read by a thread's panels from p0 on; none when the caller does not
// prefetch.
std::optional<PanelBlock> prepacked_next_block(const GemmKernels& g, const float* b_packed, int64_t k, int64_t n_padded,
                                               int64_t p0, int64_t k0, bool more_rows, bool prefetch) {
  if (!prefetch) return std::nullopt;
  return next_panel_block(g, k0, 0, k, more_rows, [&](int64_t at) {
    return b_packed + at * n_padded + p0 * std::min<int64_t>(g.kc, k - at) * g.nr;
  });
}

// Where the row tiles of `panel` prefetch: the panel after it (the next in
// the block, or `after` past the block's last, p1), cut into one share of
// lines per row tile (gemm_prefetch_share).
struct PrefetchPlan {
  PanelBlock next;
  int64_t nr = 0, row_tiles = 1;
  GemmPrefetch for_tile(int64_t tile) const {
    return gemm_prefetch_share(next.b, next.kc * nr, tile, row_tiles);
  }
};
PrefetchPlan prefetch_plan(const GemmKernels& g, const float* b, int64_t kc, int64_t panel, int64_t p1,
                           PanelBlock after, int64_t row_tiles) {
  return {panel + 1 < p1 ? PanelBlock{b + kc * g.nr, kc} : after, g.nr, row_tiles};
}

// Adds rows [0, m) of C's columns [j, j + n) (c points at the first) into
// row `thread` of out.column_sums (n_total wide): 16 rows at a time in
// float, then in double.
void add_column_sums(const GemmOutput& out, int64_t n_total, int thread, const float* c, int64_t m, int64_t j,
                     int64_t n) {
  constexpr int64_t kBlock = 64, kRun = 16;  // columns summed at once (a panel is 32 on AVX-512), rows in float
  double* sums = out.column_sums + thread * n_total + j;
  for (int64_t j0 = 0; j0 < n; j0 += kBlock) {
    const int64_t width = std::min(kBlock, n - j0);
    for (int64_t r0 = 0; r0 < m; r0 += kRun) {
      float run[kBlock] = {};
      for (int64_t r = r0; r < std::min(m, r0 + kRun); ++r)
        for (int64_t q = 0; q < width; ++q) run[q] += c[r * out.ldc + j0 + q];
      for (int64_t q = 0; q < width; ++q) sums[j0 + q] += static_cast<double>(run[q]);
    }
  }
}

// Adds A^T x gate over C's rows [i, i + m) and columns [j, j + n) into row
// block `thread` of out.gate_products (gate_a_k x n_total): the tiles a
// micro-kernel could not finish in its registers, and split K's summed C.
void add_gate_products(const GemmOutput& out, int64_t n_total, int thread, int64_t i, int64_t m, int64_t j,
                       int64_t n) {
  const GemmEpilogue& e = out.epilogue;
  double* block = out.gate_products + thread * out.gate_a_k * n_total;
  for (int64_t q = 0; q < out.gate_a_k; ++q) {
    double* row = block + q * n_total + j;
    for (int64_t r = i; r < i + m; ++r) {
      const auto weight = static_cast<double>(out.gate_a[r * out.gate_a_ld + q]);
      const float* gate = e.gate + r * e.gate_ld + j;
      for (int64_t c = 0; c < n; ++c) row[c] += weight * static_cast<double>(gate[c]);
    }
  }
}

// Row tile i (m rows) of C at panel `panel` over k-block [k0, k0 + kc):
// tile_a(i, m, b, init, c, n, finish, prefetch) runs the micro-kernel (A
// read in place or from a packed block) on the panel's block b. After the
// last k-block, the epilogue: in the micro-kernel's registers where
// GemmTileFinish covers it, else a pass over the tile.
template <typename TileA>
void run_tile(const GemmKernels& g, const GemmOutput& out, int64_t n_total, int64_t k0, bool last, int64_t panel,
              const float* b, int64_t i, int m, GemmPrefetch prefetch, TileA& tile_a) {
  const GemmEpilogue& e = out.epilogue;
  const int64_t j = panel * g.nr, column = out.ldv ? j / g.width * out.ldv : j;
  const int n = static_cast<int>(std::min<int64_t>(g.nr, n_total - j));
  float* c = out.c + i * out.ldc + column;
  const float* init = k0 > 0 ? c : out.residual ? out.residual + i * out.ldc + column : nullptr;
  const bool epilogue = last && (out.bias || e.any());
  const bool in_registers = e.activation == GemmActivation::kNone || e.activation == GemmActivation::kRelu;
  if (last) prefetch_gate(e, i, j, m, n);
  const int thread = omp_get_thread_num();
  double* sums = last && out.column_sums ? out.column_sums + thread * n_total + j : nullptr;
  const bool products = last && out.gate_products;
  if ((epilogue || sums || products) && in_registers && n % g.width == 0) {
    GemmTileFinish finish{out.bias ? out.bias + j : nullptr, e.gate ? e.gate + i * e.gate_ld + j : nullptr,
                          e.gate_ld, e.activation == GemmActivation::kRelu, nullptr, sums};
    if (products) {
      finish.gate_a = out.gate_a + i * out.gate_a_ld;
      finish.gate_a_ld = out.gate_a_ld;
      finish.gate_a_k = static_cast<int>(out.gate_a_k);
      finish.gate_products = out.gate_products + thread * out.gate_a_k * n_total + j;
      finish.gate_products_ld = n_total;
    }
    tile_a(i, m, b, init, c, n, &finish, prefetch);
    return;
  }
  tile_a(i, m, b, init, c, n, nullptr, prefetch);
  if (epilogue) tile_epilogue(g, c, out.ldc, i, j, m, n, out.bias, e);
  if (sums) add_column_sums(out, n_total, thread, c, m, j, n);
  if (products) add_gate_products(out, n_total, thread, i, m, j, n);
}

// One k-block [k0, k0 + kc) of C's rows [i0, i1) and panels [p0, p1), a
// panel at a time across the row tiles: b_block holds the block's panels
// from first_panel on, kc x g.nr floats each. With `after` (what the thread
// reads next: next_panel_block), the row tiles of each panel prefetch the
// next panel's lines (GemmPrefetch); without, nothing is prefetched.
template <typename TileA>
void sweep_k_block(const GemmKernels& g, const GemmOutput& out, int64_t n_total, int64_t k0, int64_t kc, bool last,
                   const float* b_block, int64_t first_panel, std::optional<PanelBlock> after, int64_t i0,
                   int64_t i1, int64_t p0, int64_t p1, TileA tile_a) {
  const int64_t row_tiles = ceil_div(i1 - i0, g.mr);
  for (int64_t panel = p0; panel < p1; ++panel) {
    const float* b = b_block + (panel - first_panel) * kc * g.nr;
    const PrefetchPlan plan = after ? prefetch_plan(g, b, kc, panel, p1, *after, row_tiles) : PrefetchPlan{};
    for (int64_t i = i0; i < i1; i += g.mr)
      run_tile(g, out, n_total, k0, last, panel, b, i, static_cast<int>(std::min<int64_t>(g.mr, i1 - i)),
               plan.for_tile((i - i0) / g.mr), tile_a);
  }
}

// Rows of A per block against a prepacked B when the thread's part of C is
// `columns` wide: kBlockRows, or more where A's block (kc floats a row) and
// the block's C rows fit the L2 beside two of B's panel blocks, so that a
// product of that many rows reads
// B, which may stream from memory, once instead of once per block (BERT-base
// at sequence 128 on a 2 MiB L2: 128 rows, one block instead of 96 + 32:
// 0.975 of the time; with AVX-512's 768-long k-blocks that took the whole L2
// rather than half, another 0.9875, 6 of 6 alternating pairs; level with
// ANVIL_MAX_ISA=avx2). With Zen 3's 512 KiB L2 it stays kBlockRows for the
// transformer's wide parts of C.
int64_t prepacked_block_rows(const GemmKernels& g, int64_t columns) {
  // Room left for B's current and prefetched panel blocks.
  const int64_t room = static_cast<int64_t>(cpu_info().l2_bytes) - 2 * int64_t{g.kc} * g.nr * int64_t{sizeof(float)};
  const int64_t fit = std::max<int64_t>(room, 0) / ((g.kc + columns) * static_cast<int64_t>(sizeof(float)));
  return std::max(kBlockRows, fit) / g.mr * g.mr;
}

// A thread's packing buffers, kept across runs (OpenMP's threads persist).
struct PackBuffers {
  std::vector<float> b, a, c;  // c: a thread's partial C when threads split K
};
PackBuffers& pack_buffers() {
  thread_local PackBuffers buffers;
  return buffers;
}

void pack_a_block(const GemmKernels& g, const GemmMatrix& a, int64_t i0, int64_t i1, int64_t k0, int64_t kc,
                  float* out);

// C's rows [r0, r1) and panels [p0, p1) against the prepacked B, a k-block at a time.
void gemm_part(const GemmKernels& g, const GemmArgs& p, int64_t r0, int64_t r1, int64_t p0, int64_t p1) {
  if (r0 == r1 || p0 == p1) return;  // more threads than row tiles or panels
  const int64_t n_padded = ceil_div(p.n, g.nr) * g.nr, block_rows = prepacked_block_rows(g, (p1 - p0) * g.nr);
  // A's block packed per k-block where the ISA asks for it and the copy
  // serves several panels (the rule of gemm_part_packing).
  const bool pack_a = g.pack_contiguous_a && p1 - p0 >= 4;
  std::vector<float>& a_block = pack_buffers().a;
  if (pack_a) a_block.resize(static_cast<size_t>(ceil_div(std::min(block_rows, r1 - r0), int64_t{g.mr}) * g.mr * g.kc));
  for (int64_t i0 = r0; i0 < r1; i0 += block_rows) {
    const int64_t i1 = std::min(r1, i0 + block_rows);
    for (int64_t k0 = 0; k0 < p.k; k0 += g.kc) {
      const int64_t kc = std::min<int64_t>(g.kc, p.k - k0);
      const std::optional<PanelBlock> after =
          prepacked_next_block(g, p.b_packed, p.k, n_padded, p0, k0, i1 < r1, p.prefetch_b);
      if (pack_a) pack_a_block(g, GemmMatrix{p.a, p.lda, 1}, i0, i1, k0, kc, a_block.data());
      sweep_k_block(g, p, p.n, k0, kc, k0 + kc == p.k, p.b_packed + k0 * n_padded, 0, after, i0, i1, p0, p1,
                    [&](int64_t i, int m, const float* b, const float* init, float* c, int n,
                        const GemmTileFinish* finish, GemmPrefetch prefetch) {
                      if (pack_a)
                        g.tile_packed_a(a_block.data() + (i - i0) * kc, b, kc, init, c, p.ldc, g.width, m, n, finish,
                                        prefetch);
                      else
                        g.tile(p.a + i * p.lda + k0, p.lda, b, kc, init, c, p.ldc, m, n, finish, prefetch);
                    });
    }
  }
}

// K = 0: C is the bias, the residual and the activation alone.
void empty_product(const GemmKernels& g, float* c, int64_t ldc, int64_t m, int64_t n, const float* bias,
                   const float* residual, const GemmEpilogue& epilogue) {
  for (int64_t i = 0; i < m; ++i) {
    float* row = c + i * ldc;
    if (!residual) std::memset(row, 0, static_cast<size_t>(n) * sizeof(float));
    else if (residual != c) std::memcpy(row, residual + i * ldc, static_cast<size_t>(n) * sizeof(float));
  }
  g.epilogue(c, ldc, m, n, bias, epilogue.gate, epilogue);
}

// Calls part(r0, r1, p0, p1) on each thread of the team with its share of C:
// rows [r0, r1) and panels [p0, p1).
template <typename Part>
void in_thread_parts(const GemmKernels& g, int64_t m, int64_t k, int64_t n, Part part) {
  const int64_t panels = ceil_div(n, g.nr), row_tiles = ceil_div(m, g.mr);
  const bool parallel = m * n * k >= kMinParallelFlops && panels * row_tiles > 1;
#pragma omp parallel if (parallel)
  {
    const int t = omp_get_thread_num(), threads = omp_get_num_threads();
    // Split the panels while every thread gets a few: each then reads only its
    // part of B, and A (small next to B in inference) is shared in L3.
    if (panels >= 4 * threads || panels >= row_tiles) {
      const auto [p0, p1] = share(panels, t, threads);
      part(0, m, p0, p1);
    } else {
      const auto [t0, t1] = share(row_tiles, t, threads);
      part(t0 * g.mr, std::min(m, t1 * g.mr), 0, panels);
    }
  }
}

// ------------------------------------------------ both operands packed per run

constexpr int64_t kGemmPackBudget = 512 * 1024;  // floats of B a thread aims to pack at a time (2 MiB; one k-block at least)

// `rows` rows of Nr floats, src's ld apart, to dst back to back: one
// fixed-size copy per row (a call to memcpy per 96 bytes cost more than the
// copy), source rows asked for kAhead rows early (rows a page apart or more:
// the hardware prefetcher stops at each page's end).
template <int Nr>
void copy_rows(const float* src, int64_t ld, int64_t rows, float* dst) {
  constexpr int64_t kAhead = 8;
  for (int64_t i = 0; i < rows; ++i, dst += Nr) {
    if (i + kAhead < rows) {
      __builtin_prefetch(src + (i + kAhead) * ld);
      __builtin_prefetch(src + (i + kAhead) * ld + Nr - 1);
    }
    std::memcpy(dst, src + i * ld, Nr * sizeof(float));
  }
}

// copy_rows for the ISAs' panel widths; false for another width.
bool copy_full_rows(int nr, const float* src, int64_t ld, int64_t rows, float* dst) {
  switch (nr) {
    case 8: copy_rows<8>(src, ld, rows, dst); return true;
    case 24: copy_rows<24>(src, ld, rows, dst); return true;
    case 32: copy_rows<32>(src, ld, rows, dst); return true;
    default: return false;
  }
}

// B's rows [k0, k0 + rows) and panels [p0, p1) in the packed layout: per
// panel, `rows` rows of g.nr floats, columns past n zero.
void pack_b_rows(const GemmKernels& g, const GemmMatrix& b, int64_t n, int64_t k0, int64_t rows, int64_t p0, int64_t p1,
                 float* out) {
  for (int64_t panel = p0; panel < p1; ++panel, out += rows * g.nr) {
    const int64_t j0 = panel * g.nr, cols = std::min<int64_t>(g.nr, n - j0);
    const float* src = b.data + k0 * b.row_stride + j0 * b.col_stride;
    if (b.col_stride == 1) {  // rows of the panel are contiguous in B
      if (cols == g.nr && copy_full_rows(g.nr, src, b.row_stride, rows, out)) continue;
      for (int64_t i = 0; i < rows; ++i) {
        std::memcpy(out + i * g.nr, src + i * b.row_stride, static_cast<size_t>(cols) * sizeof(float));
        std::fill(out + i * g.nr + cols, out + (i + 1) * g.nr, 0.f);
      }
      continue;
    }
    if (b.row_stride == 1) {  // B transposed: the panel's columns are rows of the source
      g.transpose32(reinterpret_cast<const uint32_t*>(src), b.col_stride, reinterpret_cast<uint32_t*>(out), g.nr, cols,
                    rows);
      for (int64_t i = 0; i < rows; ++i) std::fill(out + i * g.nr + cols, out + (i + 1) * g.nr, 0.f);
      continue;
    }
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < g.nr; ++j) out[i * g.nr + j] = j < cols ? src[i * b.row_stride + j * b.col_stride] : 0.f;
  }
}

// Up to kSteps consecutive k of a transposed A's block: rows src, src + ld,
// ... (each the block's floats [i0, i1), contiguous) into the row tiles'
// slots at those k (tiles kc * Mr floats apart). A tile's slots for four k
// are one run of 4 * Mr floats, written in one visit: a k at a time, each
// of the tiles' lines (a page apart, so in one L1 set) was fetched again
// for each of its four k. Mr is the ISA's tile height as a constant, so a
// tile's row is one fixed-size copy.
constexpr int kSteps = 4;
template <int Mr>
void pack_transposed_a_steps(const float* src, int64_t ld, int steps, int64_t i0, int64_t i1, int64_t kc,
                             float* dst) {
  int64_t i = i0;
  for (; i + Mr <= i1; i += Mr, dst += kc * Mr)
    for (int q = 0; q < steps; ++q) std::memcpy(dst + q * Mr, src + q * ld + i, Mr * sizeof(float));
  for (int q = 0; q < steps; ++q)
    for (int64_t r = 0; i + r < i1; ++r) dst[q * Mr + r] = src[q * ld + i + r];
}

// A's rows [i0, i1) and columns [k0, k0 + kc) as row tiles of g.mr rows:
// per tile, kc steps of g.mr floats (rows past i1 left unset: never read).
void pack_a_block(const GemmKernels& g, const GemmMatrix& a, int64_t i0, int64_t i1, int64_t k0, int64_t kc,
                  float* out) {
  if (a.row_stride == 1) {  // A transposed: the block's rows at one k are contiguous; read them kSteps k at a time
    constexpr int64_t kAhead = 8;  // rows a page apart or more: the hardware prefetcher stops at each page's end
    const auto pack_steps = g.mr == 4    ? pack_transposed_a_steps<4>
                            : g.mr == 6  ? pack_transposed_a_steps<6>
                            : g.mr == 12 ? pack_transposed_a_steps<12>
                                         : nullptr;
    for (int64_t kk = 0; kk < kc; kk += kSteps) {
      const int steps = static_cast<int>(std::min<int64_t>(kSteps, kc - kk));
      const float* src = a.data + (k0 + kk) * a.col_stride;
      for (int64_t ahead = kAhead; ahead < kAhead + steps && kk + ahead < kc; ++ahead)
        for (int64_t i = i0; i < i1; i += 16) __builtin_prefetch(src + ahead * a.col_stride + i);
      if (pack_steps) {
        pack_steps(src, a.col_stride, steps, i0, i1, kc, out + kk * g.mr);
        continue;
      }
      for (int q = 0; q < steps; ++q)
        for (int64_t i = i0, tile = 0; i < i1; i += g.mr, ++tile) {
          float* dst = out + tile * kc * g.mr + (kk + q) * g.mr;
          for (int64_t r = 0; r < std::min<int64_t>(g.mr, i1 - i); ++r) dst[r] = src[q * a.col_stride + i + r];
        }
    }
    return;
  }
  for (int64_t i = i0; i < i1; i += g.mr, out += kc * g.mr) {
    const int64_t rows = std::min<int64_t>(g.mr, i1 - i);
    const float* src = a.data + i * a.row_stride + k0 * a.col_stride;
    if (a.col_stride == 1) {
      g.pack_a(src, a.row_stride, static_cast<int>(rows), kc, out);
      continue;
    }
    for (int64_t kk = 0; kk < kc; ++kk)
      for (int64_t r = 0; r < rows; ++r) out[kk * g.mr + r] = src[kk * a.col_stride + r * a.row_stride];
  }
}

// C's rows [r0, r1) and panels [p0, p1): B packed a k-range at a time, then
// every A block of the rows against it, a k-block at a time.
void gemm_part_packing(const GemmKernels& g, const GemmProduct& p, int64_t r0, int64_t r1, int64_t p0, int64_t p1) {
  if (r0 == r1 || p0 == p1) return;  // more threads than row tiles or panels
  const int64_t width = (p1 - p0) * g.nr;
  const int64_t block_rows = kBlockRows / g.mr * g.mr;
  const int64_t k_range = p.k * width <= kGemmPackBudget ? p.k : std::max<int64_t>(1, kGemmPackBudget / width / g.kc) * g.kc;
  // A's blocks are packed where its rows are not contiguous, and where each
  // serves several panels: then a tile reads its A contiguously, off B's L1
  // sets (GemmKernels::pack_a), and the copy is shared by the panels.
  const bool pack_a = p.a.col_stride != 1 || p1 - p0 >= 4;
  PackBuffers& buffers = pack_buffers();
  buffers.b.resize(static_cast<size_t>(std::min(k_range, p.k) * width));
  if (pack_a) buffers.a.resize(static_cast<size_t>(block_rows * g.kc));
  for (int64_t kr = 0; kr < p.k; kr += k_range) {
    const int64_t kr_end = std::min(p.k, kr + k_range);
    for (int64_t k0 = kr; k0 < kr_end; k0 += g.kc)
      pack_b_rows(g, p.b, p.n, k0, std::min<int64_t>(g.kc, kr_end - k0), p0, p1, buffers.b.data() + (k0 - kr) * width);
    for (int64_t i0 = r0; i0 < r1; i0 += block_rows) {
      const int64_t i1 = std::min(r1, i0 + block_rows);
      for (int64_t k0 = kr; k0 < kr_end; k0 += g.kc) {
        const int64_t kc = std::min<int64_t>(g.kc, kr_end - k0);
        if (pack_a) pack_a_block(g, p.a, i0, i1, k0, kc, buffers.a.data());
        // No prefetching: B was just packed into a buffer sized for the L2,
        // where asking for its lines again cost training's large products
        // about 1% with AVX2 (Intel Xeon, `anvil train` alternating).
        sweep_k_block(g, p, p.n, k0, kc, k0 + kc == p.k, buffers.b.data() + (k0 - kr) * width, p0, std::nullopt, i0, i1, p0, p1,
                      [&](int64_t i, int m, const float* b, const float* init, float* c, int n,
                          const GemmTileFinish* finish, GemmPrefetch prefetch) {
                        if (pack_a)
                          g.tile_packed_a(buffers.a.data() + (i - i0) * kc, b, kc, init, c, p.ldc, g.width, m, n,
                                          finish, prefetch);
                        else
                          g.tile(p.a.data + i * p.a.row_stride + k0, p.a.row_stride, b, kc, init, c, p.ldc, m, n,
                                 finish, prefetch);
                      });
      }
    }
  }
}

// ------------------------------------------- many rows: a row tile across the panels

// The row sweep's panels per group: a k-block of them takes half the L2
// (what the sweep reads for every row tile; the rest holds A's tile, the C
// lines in flight and the next group's packing).
int64_t row_sweep_group(const GemmKernels& g) {
  const size_t l2 = cpu_info().l2_bytes > 0 ? cpu_info().l2_bytes : size_t{1} << 20;  // unknown: 1 MiB
  const int64_t half_l2 = static_cast<int64_t>(l2 / 2);
  return std::max<int64_t>(1, half_l2 / (int64_t{g.row_sweep_kc} * g.nr * static_cast<int64_t>(sizeof(float))));
}

// Whether the row sweep takes C's rows [r0, r1): many rows read in place
// (training's products at large batches), on an ISA that has it.
bool row_sweep_pays(const GemmKernels& g, const GemmProduct& p, int64_t r0, int64_t r1) {
  return g.row_sweep_kc > 0 && p.a.col_stride == 1 && r1 - r0 >= 16 * kBlockRows;
}

// C's rows [r0, r1) and panels [p0, p1), per k-block a row tile at a time
// across the panels: the tile's packed A (g.row_sweep_kc x mr floats) stays
// in L1 and the panels' k-block of B in L2, where the per-panel sweep
// (gemm_part_packing) kept B's panel in L1 and read A's block from L2. Each
// panel's call also packs a slice of the next row tile's A, so its rows
// arrive from memory while the micro-kernel runs instead of before it
// (training's input-gradient product at batch 25,000 on an Intel Xeon with
// a 2 MiB L2: 1.08-1.11 the GFLOP/s of the per-panel sweep, a throwaway
// probe, alternating in one process). Panels are taken in groups whose
// k-block fits half the L2 (row_sweep_group).
void gemm_part_row_sweep(const GemmKernels& g, const GemmProduct& p, int64_t r0, int64_t r1, int64_t p0, int64_t p1) {
  const int64_t kc_max = g.row_sweep_kc;
  const int64_t group = row_sweep_group(g);
  PackBuffers& buffers = pack_buffers();
  buffers.b.resize(static_cast<size_t>(kc_max * std::min(group, p1 - p0) * g.nr));
  buffers.a.resize(static_cast<size_t>(2 * kc_max * g.mr));
  const float* a_tile = nullptr;  // the current row tile's packed A
  int64_t kc = 0;
  auto tile = [&](int64_t, int m, const float* b, const float* init, float* c, int n, const GemmTileFinish* finish,
                  GemmPrefetch) { g.tile_packed_a(a_tile, b, kc, init, c, p.ldc, g.width, m, n, finish, {}); };
  for (int64_t g0 = p0; g0 < p1; g0 += group) {
    const int64_t g1 = std::min(p1, g0 + group), panels = g1 - g0;
    for (int64_t k0 = 0; k0 < p.k; k0 += kc_max) {
      kc = std::min(kc_max, p.k - k0);
      const bool last = k0 + kc == p.k;
      pack_b_rows(g, p.b, p.n, k0, kc, g0, g1, buffers.b.data());
      // A's slices, a multiple of 4 k each (the packer transposes 4 x 4).
      const int64_t slice = ceil_div(ceil_div(kc, panels), int64_t{4}) * 4;
      float* current = buffers.a.data();
      float* next = current + kc_max * g.mr;
      auto rows_at = [&](int64_t i) { return static_cast<int>(std::min<int64_t>(g.mr, r1 - i)); };
      g.pack_a(p.a.data + r0 * p.a.row_stride + k0, p.a.row_stride, rows_at(r0), kc, current);
      for (int64_t i = r0; i < r1; i += g.mr) {
        const int64_t i_next = i + g.mr;
        for (int64_t panel = g0; panel < g1; ++panel) {
          const int64_t q0 = (panel - g0) * slice, q1 = std::min(kc, q0 + slice);
          if (i_next < r1 && q0 < q1)
            g.pack_a(p.a.data + i_next * p.a.row_stride + k0 + q0, p.a.row_stride, rows_at(i_next), q1 - q0,
                     next + q0 * g.mr);
          a_tile = current;
          run_tile(g, p, p.n, k0, last, panel, buffers.b.data() + (panel - g0) * kc * g.nr, i, rows_at(i),
                   GemmPrefetch{}, tile);
        }
        std::swap(current, next);
      }
    }
  }
}

// K much larger than M and N (training's weight gradients, K the batch):
// each thread takes a k-range, so each packs only its own parts of A and B,
// into C (thread 0) or a buffer of its own; then the rows are summed, and the
// epilogue applied, in parallel.
void gemm_split_k(const GemmKernels& g, const GemmProduct& p) {
  std::vector<float*> partials(static_cast<size_t>(omp_get_max_threads()));
  const int64_t k_blocks = ceil_div(p.k, g.kc), panels = ceil_div(p.n, g.nr);
#pragma omp parallel
  {
    const int t = omp_get_thread_num(), threads = omp_get_num_threads();
    const auto [b0, b1] = share(k_blocks, t, threads);
    GemmProduct part = p;
    part.k = std::min(p.k, b1 * g.kc) - b0 * g.kc;
    part.a.data += b0 * g.kc * p.a.col_stride;
    part.b.data += b0 * g.kc * p.b.row_stride;
    part.bias = nullptr;
    part.epilogue = GemmEpilogue{};
    part.column_sums = nullptr;  // of the summed C, below
    part.gate_products = nullptr;
    if (t > 0) {
      std::vector<float>& buffer = pack_buffers().c;
      buffer.resize(static_cast<size_t>(p.m * p.n));
      part.c = partials[static_cast<size_t>(t)] = buffer.data();
      part.ldc = p.n;
      part.residual = nullptr;
    }
    if (part.k > 0) gemm_part_packing(g, part, 0, p.m, 0, panels);
    else empty_product(g, part.c, part.ldc, p.m, p.n, nullptr, part.residual, part.epilogue);
#pragma omp barrier
    const auto [r0, r1] = share(p.m, t, threads);
    for (int64_t i = r0; i < r1; ++i) {
      float* row = p.c + i * p.ldc;
      for (int u = 1; u < threads; ++u) {
        const float* other = partials[static_cast<size_t>(u)] + i * p.n;
        for (int64_t j = 0; j < p.n; ++j) row[j] += other[j];
      }
    }
    if (p.bias || p.epilogue.any()) tile_epilogue(g, p.c + r0 * p.ldc, p.ldc, r0, 0, r1 - r0, p.n, p.bias, p.epilogue);
    if (p.column_sums) add_column_sums(p, p.n, t, p.c + r0 * p.ldc, r1 - r0, 0, p.n);
    if (p.gate_products) add_gate_products(p, p.n, t, r0, r1 - r0, 0, p.n);
  }
}

// ------------------------------------------------------- convolution

// Output pixels [r0, r1) and panels [p0, p1) of one batch item: A's row
// blocks gathered from the image a k-block at a time, against the packed B.
void conv_part(const GemmKernels& g, const ConvGemmArgs& p, const ConvGather& input, const GemmOutput& out,
               int64_t r0, int64_t r1, int64_t p0, int64_t p1) {
  if (r0 == r1 || p0 == p1) return;
  const int64_t n_padded = ceil_div(p.n, g.nr) * g.nr, block_rows = kBlockRows / g.mr * g.mr;
  std::vector<float>& a_block = pack_buffers().a;
  a_block.resize(static_cast<size_t>(block_rows * g.kc));
  for (int64_t i0 = r0; i0 < r1; i0 += block_rows) {
    const int64_t i1 = std::min(r1, i0 + block_rows);
    for (int64_t k0 = 0; k0 < p.k; k0 += g.kc) {
      const int64_t kc = std::min<int64_t>(g.kc, p.k - k0);
      float* a = a_block.data();
      for (int64_t i = i0; i < i1; i += g.mr)
        g.gather_conv_a(input, i, static_cast<int>(std::min<int64_t>(g.mr, i1 - i)), k0, kc, a + (i - i0) * kc);
      const std::optional<PanelBlock> after =
          prepacked_next_block(g, p.b_packed, p.k, n_padded, p0, k0, i1 < r1, p.prefetch_b);
      sweep_k_block(g, out, p.n, k0, kc, k0 + kc == p.k, p.b_packed + k0 * n_padded, 0, after, i0, i1, p0, p1,
                    [&](int64_t i, int m, const float* b, const float* init, float* c, int n,
                        const GemmTileFinish* finish, GemmPrefetch prefetch) {
                      g.tile_packed_a(a + (i - i0) * kc, b, kc, init, c, out.ldc, out.ldv, m, n, finish, prefetch);
                    });
    }
  }
}

}  // namespace

GemmPrefetch gemm_prefetch_share(const float* block, int64_t floats, int64_t tile, int64_t row_tiles) {
  if (!block) return {};
  // From the line the block starts in (with an odd kc, AVX2's and SSE4.1's
  // panels start mid-line) to the one it ends in. The packed buffers are
  // 64-byte aligned, so that first line is still theirs.
  const auto start = reinterpret_cast<uintptr_t>(block);
  const auto end = start + static_cast<uintptr_t>(floats) * sizeof(float);
  const uintptr_t first_line = start / 64 * 64;
  const auto lines = static_cast<int64_t>((end - first_line + 63) / 64);
  const int64_t per_tile = ceil_div(lines, row_tiles);
  const int64_t l0 = std::min(lines, tile * per_tile), l1 = std::min(lines, l0 + per_tile);
  if (l0 == l1) return {};
  return {reinterpret_cast<const float*>(first_line) + l0 * 64 / static_cast<int64_t>(sizeof(float)), l1 - l0};
}

std::optional<GemmActivation> gemm_activation(const std::string& name) {
  using A = GemmActivation;
  static const std::pair<const char*, A> kNames[] = {
      {"", A::kNone},          {"Relu", A::kRelu},       {"LeakyRelu", A::kLeakyRelu},     {"Clip", A::kClip},
      {"Sigmoid", A::kSigmoid}, {"Swish", A::kSwish},    {"HardSigmoid", A::kHardSigmoid}, {"HardSwish", A::kHardSwish},
      {"Gelu", A::kGelu},      {"GeluTanh", A::kGeluTanh}};
  for (const auto& [n, a] : kNames)
    if (name == n) return a;
  return std::nullopt;
}

Tensor pack_gemm_b(const GemmKernels& g, const float* b, int64_t k, int64_t n, int64_t stride_k, int64_t stride_n,
                   float scale) {
  const int64_t n_padded = ceil_div(n, g.nr) * g.nr;
  Tensor packed = Tensor::uninitialized(DType::kFloat32, {checked_mul(k, n_padded, "packed GEMM weights")});
  float* out = packed.data<float>();
  for_each_packed(g, k, n, [&](int64_t i, int64_t j, int64_t at) {
    out[at] = j < n ? b[i * stride_k + j * stride_n] * scale : 0.f;
  });
  return packed;
}

void unpack_gemm_b(const GemmKernels& g, const float* packed, int64_t k, int64_t n, float* b, int64_t stride_k,
                   int64_t stride_n) {
  for_each_packed(g, k, n, [&](int64_t i, int64_t j, int64_t at) {
    if (j < n) b[i * stride_k + j * stride_n] = packed[at];
  });
}

std::string gemm_layout_key(const GemmKernels& g, int64_t k, int64_t n, int64_t stride_k, int64_t stride_n) {
  return "anvil-gemm nr=" + std::to_string(g.nr) + " kc=" + std::to_string(g.kc) + " b=" + std::to_string(k) + "x" +
         std::to_string(n) + " strides=" + std::to_string(stride_k) + "," + std::to_string(stride_n);
}

void packed_gemm(const GemmKernels& g, const GemmArgs& p) {
  ANVIL_CHECK(!p.column_sums, ErrorKind::kInternal, "packed_gemm: no column sums (gemm() has them)");
  ANVIL_CHECK(p.ldv == 0, ErrorKind::kInternal, "packed_gemm: C's rows are contiguous (conv_gemm takes blocked ones)");
  if (p.m == 0 || p.n == 0) return;
  if (p.k == 0) return empty_product(g, p.c, p.ldc, p.m, p.n, p.bias, p.residual, p.epilogue);
  in_thread_parts(g, p.m, p.k, p.n,
                  [&](int64_t r0, int64_t r1, int64_t p0, int64_t p1) { gemm_part(g, p, r0, r1, p0, p1); });
}

void packed_gemm_on_this_thread(const GemmKernels& g, const GemmArgs& p) {
  if (p.m == 0 || p.n == 0) return;
  if (p.k == 0) return empty_product(g, p.c, p.ldc, p.m, p.n, p.bias, p.residual, p.epilogue);
  packed_gemm_panels_on_this_thread(g, p, 0, ceil_div(p.n, g.nr));
}

void packed_gemm_panels_on_this_thread(const GemmKernels& g, const GemmArgs& p, int64_t p0, int64_t p1) {
  ANVIL_CHECK(!p.column_sums && p.ldv == 0 && p.k > 0 && 0 <= p0 && p0 <= p1 && p1 <= ceil_div(p.n, g.nr),
              ErrorKind::kInternal, "packed_gemm_panels_on_this_thread: plain C, K > 0, panels in range");
  gemm_part(g, p, 0, p.m, p0, p1);
}

// Products packed per run keep k-blocks of at most this many rows: their
// packing budget, the split of K between threads and B's buffer sized for
// the L2 were tuned with them. Only prepacked products take the longer
// k-blocks (AVX-512's, and AVX2's where a logical CPU's L2 share is 1 MiB or
// more: gemm_impl.h).
constexpr int kPerRunKc = 256;

void gemm(const GemmKernels& isa_kernels, const GemmProduct& product) {
  GemmKernels g = isa_kernels;
  g.kc = std::min(g.kc, kPerRunKc);
  ANVIL_CHECK(!product.column_sums || product.ldv == 0, ErrorKind::kInternal, "gemm: column sums of a blocked C");
  ANVIL_CHECK(!product.gate_products || (product.ldv == 0 && product.epilogue.gate && product.a.col_stride == 1),
              ErrorKind::kInternal, "gemm: A^T x gate needs a gate, a plain C and A's columns contiguous");
  if (product.m == 0 || product.n == 0) return;
  GemmProduct p = product;
  p.gate_a = p.a.data;
  p.gate_a_ld = p.a.row_stride;
  p.gate_a_k = p.k;
  if (p.k == 0) {
    empty_product(g, p.c, p.ldc, p.m, p.n, p.bias, p.residual, p.epilogue);
    if (p.column_sums) add_column_sums(p, p.n, 0, p.c, p.m, 0, p.n);  // the caller's row: no team here
    return;  // A^T x gate: k rows, none here
  }
  const int threads = omp_get_max_threads();
  if (threads > 1 && p.k >= 4 * std::max(p.m, p.n) && p.k >= 2 * threads * g.kc) return gemm_split_k(g, p);
  in_thread_parts(g, p.m, p.k, p.n, [&](int64_t r0, int64_t r1, int64_t p0, int64_t p1) {
    if (row_sweep_pays(isa_kernels, p, r0, r1)) return gemm_part_row_sweep(isa_kernels, p, r0, r1, p0, p1);
    gemm_part_packing(g, p, r0, r1, p0, p1);
  });
}

void conv_gemm(const GemmKernels& g, const ConvGemmArgs& p) {
  // The micro-kernel stores whole vectors a plane apart and the gather reads a tap's channels a vector at a time.
  ANVIL_CHECK(p.n % g.width == 0 && p.input.channels % g.width == 0 && p.input.channels > 0 &&
                  p.k == p.input.kh * p.input.kw * p.input.channels,
              ErrorKind::kInternal, "conv_gemm: channels {} -> {} are not whole vectors of {} or K {} is not the window",
              p.input.channels, p.n, g.width, p.k);
  if (p.pixels == 0 || p.n == 0) return;
  for (int64_t item = 0; item < p.batch; ++item) {
    ConvGather input = p.input;
    input.x += item * p.x_item;
    GemmOutput out;
    out.bias = p.bias;
    out.residual = p.residual ? p.residual + item * p.y_item : nullptr;
    out.c = p.y + item * p.y_item;
    out.ldc = g.width;
    out.ldv = p.pixels * g.width;
    out.epilogue.activation = p.relu ? GemmActivation::kRelu : GemmActivation::kNone;
    in_thread_parts(g, p.pixels, p.k, p.n, [&](int64_t r0, int64_t r1, int64_t p0, int64_t p1) {
      conv_part(g, p, input, out, r0, r1, p0, p1);
    });
  }
}

namespace {

// Output positions [lo, hi) of a 1-D convolution read no padding: their
// windows lie within the input.
std::pair<int64_t, int64_t> conv1d_inner_rows(const Conv1dGemmArgs& p) {
  const int64_t lo = std::min(p.out_length, ceil_div(p.pad_begin, p.stride));
  const int64_t last_start = p.length - p.taps + p.pad_begin;  // the last window within the input, in padded positions
  const int64_t hi = last_start < 0 ? lo : std::clamp(last_start / p.stride + 1, lo, p.out_length);
  return {lo, hi};
}

// Rows [r0, r1)'s windows as rows of taps * C_in floats, zeros for the padding.
void gather_conv1d_rows(const Conv1dGemmArgs& p, const float* x, int64_t r0, int64_t r1, float* out) {
  const size_t row_bytes = static_cast<size_t>(p.channels) * sizeof(float);
  for (int64_t r = r0; r < r1; ++r)
    for (int64_t t = 0; t < p.taps; ++t, out += p.channels) {
      const int64_t at = r * p.stride - p.pad_begin + t;
      if (at < 0 || at >= p.length) std::memset(out, 0, row_bytes);
      else std::memcpy(out, x + at * p.channels, row_bytes);
    }
}

}  // namespace

int64_t conv1d_gemm_edge_floats(const Conv1dGemmArgs& p) {
  const auto [lo, hi] = conv1d_inner_rows(p);
  return checked_mul(std::max(lo, p.out_length - hi), checked_mul(p.taps, p.channels, "a window"), "edge rows");
}

void conv1d_gemm(const GemmKernels& g, const Conv1dGemmArgs& p, float* edge_rows) {
  ANVIL_CHECK(p.stride > 0 && p.pad_begin >= 0 && p.taps > 0 && p.channels > 0, ErrorKind::kInternal,
              "conv1d_gemm: stride {}, padding {}, taps {}, channels {}", p.stride, p.pad_begin, p.taps, p.channels);
  const auto [lo, hi] = conv1d_inner_rows(p);
  const int64_t k = p.taps * p.channels;
  for (int64_t item = 0; item < p.batch; ++item) {
    const float* x = p.x + item * p.x_item;
    // Output rows [r0, r0 + rows) from A's rows, lda apart.
    auto rows_of = [&](const float* a, int64_t lda, int64_t r0, int64_t rows) {
      if (rows == 0) return;
      GemmArgs args;
      args.a = a;
      args.lda = lda;
      args.m = rows;
      args.k = k;
      args.n = p.n;
      args.b_packed = p.b_packed;
      args.prefetch_b = p.prefetch_b;
      args.bias = p.bias;
      args.residual = p.residual ? p.residual + item * p.y_item + r0 * p.n : nullptr;
      args.c = p.y + item * p.y_item + r0 * p.n;
      args.ldc = p.n;
      args.epilogue = p.epilogue;
      packed_gemm(g, args);
    };
    if (hi > lo) rows_of(x + (lo * p.stride - p.pad_begin) * p.channels, p.stride * p.channels, lo, hi - lo);
    gather_conv1d_rows(p, x, 0, lo, edge_rows);
    rows_of(edge_rows, k, 0, lo);
    gather_conv1d_rows(p, x, hi, p.out_length, edge_rows);
    rows_of(edge_rows, k, hi, p.out_length - hi);
  }
}

}  // namespace anvil::kernels::vec
