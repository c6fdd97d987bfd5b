// The per-ISA half of Anvil's packed GEMM (gemm.h): the register-blocked
// micro-kernel and the epilogue. Included after vec_kernels_impl.h, inside the
// same anonymous namespace (VF, load, store, exp_approx, sigmoid_vec).
//
// The micro-kernel keeps a kGemmMr x kGemmNr tile of C in registers
// (kGemmMr x kGemmNv vectors: 12 x 2 on AVX-512, 4 x 3 on AVX2, 6 x 2 on
// SSE4.1, leaving registers for the B row and the A broadcast), reads A
// straight from its rows (the A block stays in L2 across a sweep over B's
// panels) or from a packed panel of kGemmMr floats per k (gemm_pack_a_impl,
// the transposed packing in gemm.cc, the convolution's gather), and B from a
// packed panel, kGemmNr floats per k; while it runs, it can prefetch its
// share of the next panel into L2 (GemmPrefetch).
// AVX2 takes 4 x 24 rather than 6 x 16: 7 loads per 12 FMAs instead of 8,
// the shape oneDNN's AVX2 sgemm uses; on Zen 3 it ran training's products
// about 2% faster (alternating runs, docs/benchmarks.md).

#if defined(__AVX512F__)
constexpr int kGemmMr = 12;
constexpr int kGemmNv = 2;
#elif defined(__AVX2__)
constexpr int kGemmMr = 4;
constexpr int kGemmNv = 3;
#else
constexpr int kGemmMr = 6;
constexpr int kGemmNv = 2;
#endif
constexpr int kGemmNr = kGemmNv * kWidth;
// A B panel's k-block: kGemmKc x kGemmNr floats. Below AVX-512 it stays in
// L1 (24 KiB on AVX2; tuned on Zen 3, whose L2 is 512 KiB). Where a logical
// CPU's share of the L2 (l2_bytes / l2_shared_by) is 1 MiB or more, AVX2's
// prepacked products take kGemmKcLargeL2 instead (vec_kernels.cc): on Zen 4
// (a KVM guest, 1 MiB L2 per vCPU) with ANVIL_MAX_ISA=avx2, 768 ran BERT's products at sequence 32
// in 0.93-0.97 of the time (the fastest of 40 rounds, 4 alternating pairs of
// `anvil_stream_gemm_ab`) and at 128 in 0.97-0.98: the panel blocks come
// from L2 either way, and the next one, prefetched, is three times as far
// ahead of the one being read. On AVX-512 (Intel Xeon, 2 MiB L2) a
// longer block paid more than keeping it in L1: fewer loads and stores of
// C's tiles, and a product with K = 768 in one block. BERT-base, alternating
// pairs against 256: 0.97 of the time at sequence 128 and 32 with 768; 1.10
// with 128, 0.985 with 384, 1.00 with 512 (K = 768 in two uneven blocks),
// 0.99 with 1024; training's MLP level (1.01 the samples/s).
#if defined(__AVX512F__)
constexpr int kGemmKc = 768;
constexpr int kGemmKcLargeL2 = 768;
#elif defined(__AVX2__)
constexpr int kGemmKc = 256;
constexpr int kGemmKcLargeL2 = 768;
#else
constexpr int kGemmKc = 256;
constexpr int kGemmKcLargeL2 = 256;
#endif
// The row sweep's k-block (gemm.cc, gemm_part_row_sweep): the tile's A
// (12 x 512 floats, 24 KiB) in L1 beside the B lines streaming through it;
// 384 and 768 ran 2-6% slower on the Intel Xeon's input-gradient product
// at batch 25,000. Not taken below AVX-512 (0).
#if defined(__AVX512F__)
constexpr int kGemmRowSweepKc = 512;
#else
constexpr int kGemmRowSweepKc = 0;
#endif
// Whether products against a prepacked B pack A's blocks even where A's
// rows are contiguous (GemmKernels::pack_contiguous_a). Read in place, the
// AVX-512 tile's 12 row pointers outnumber the free general registers, and
// GCC reloads them from the stack and moves them through vector registers,
// on the FMA ports, every k step; packed, BERT-base's products ran 1-6%
// faster (`anvil_stream_gemm_ab 128 768 3072 24 10` and its other shapes,
// alternating), a 512 x 768 x 768 one 9%.
// AVX2's 4-row tile does not spill; packing there ran level.
#if defined(__AVX512F__)
constexpr bool kGemmPackContiguousA = true;
#else
constexpr bool kGemmPackContiguousA = false;
#endif

inline VF fmadd(VF a, VF b, VF c) {
#if defined(__AVX512F__)
  return __builtin_bit_cast(VF, _mm512_fmadd_ps(__builtin_bit_cast(__m512, a), __builtin_bit_cast(__m512, b),
                                                __builtin_bit_cast(__m512, c)));
#elif defined(__FMA__)
  return __builtin_bit_cast(VF, _mm256_fmadd_ps(__builtin_bit_cast(__m256, a), __builtin_bit_cast(__m256, b),
                                                __builtin_bit_cast(__m256, c)));
#else
  return a * b + c;
#endif
}

// A broadcast and a B load as the memory operands of one instruction each
// (vbroadcastss m32, vmovups): through splat() and load() GCC emits an
// add, a register broadcast and integer-domain moves, which halved the
// micro-kernel's rate on Zen 3.
typedef float VFu __attribute__((vector_size(kWidth * sizeof(float)), aligned(4)));
inline VF broadcast_from(const float* p) {
#if defined(__AVX512F__)
  return __builtin_bit_cast(VF, _mm512_set1_ps(*p));
#elif defined(__AVX__)
  return __builtin_bit_cast(VF, _mm256_broadcast_ss(p));
#else
  return __builtin_bit_cast(VF, _mm_load1_ps(p));
#endif
}
inline VF load_b(const float* p) { return *reinterpret_cast<const VFu*>(p); }

// to[0, kWidth) += v's lanes, widened to double a half vector at a time.
inline void add_to_doubles(double* to, VF v) {
  float lanes[kWidth];
  store(lanes, v);
  for (int h = 0; h < kWidth; h += kHalf) {
    VFh part;
    __builtin_memcpy(&part, lanes + h, sizeof part);
    VD total;
    __builtin_memcpy(&total, to + h, sizeof total);
    total += __builtin_convertvector(part, VD);
    __builtin_memcpy(to + h, &total, sizeof total);
  }
}

// GemmTileFinish on a tile's accumulators.
template <int M, int Nv>
inline void finish_tile(VF (&acc)[M][Nv], const GemmTileFinish& f) {
  if (f.row_scale)
#pragma GCC unroll 16
    for (int r = 0; r < M; ++r) {
      const VF scale = broadcast_from(f.row_scale + r);
#pragma GCC unroll 4
      for (int v = 0; v < Nv; ++v) acc[r][v] *= scale;
    }
  if (f.bias) {
    VF bias[Nv];
#pragma GCC unroll 4
    for (int v = 0; v < Nv; ++v) bias[v] = load(f.bias + v * kWidth);
#pragma GCC unroll 16
    for (int r = 0; r < M; ++r)
#pragma GCC unroll 4
      for (int v = 0; v < Nv; ++v) acc[r][v] += bias[v];
  }
  if (f.relu)
#pragma GCC unroll 16
    for (int r = 0; r < M; ++r)
#pragma GCC unroll 4
      for (int v = 0; v < Nv; ++v) acc[r][v] = acc[r][v] > 0.f ? acc[r][v] : splat(0.f);
  if (f.gate)
#pragma GCC unroll 16
    for (int r = 0; r < M; ++r)
#pragma GCC unroll 4
      for (int v = 0; v < Nv; ++v) acc[r][v] = load(f.gate + r * f.gate_ld + v * kWidth) > 0.f ? acc[r][v] : splat(0.f);
  if (f.column_sums)
#pragma GCC unroll 4
    for (int v = 0; v < Nv; ++v) {
      VF sum = acc[0][v];
#pragma GCC unroll 16
      for (int r = 1; r < M; ++r) sum += acc[r][v];
      add_to_doubles(f.column_sums + v * kWidth, sum);
    }
  // The gate's own values (not the mask) weighted by A's columns: a
  // classifier head's weight gradient, dW = dZ^T H, from the H this tile
  // just read for its mask; summed in float over the tile's rows, then
  // added in double.
  if (f.gate_products)
    for (int q = 0; q < f.gate_a_k; ++q)
#pragma GCC unroll 4
      for (int v = 0; v < Nv; ++v) {
        VF sum = splat(0.f);
#pragma GCC unroll 16
        for (int r = 0; r < M; ++r)
          sum = fmadd(broadcast_from(f.gate_a + r * f.gate_a_ld + q), load(f.gate + r * f.gate_ld + v * kWidth), sum);
        add_to_doubles(f.gate_products + q * f.gate_products_ld + v * kWidth, sum);
      }
}

// Copies of a tile's accumulators its k loop alternates between, so that
// the tile has kGemmChains independent FMA chains: one row of Nv vectors
// alone waits on each FMA's latency (4 cycles) at every k step, which held a
// one-row product (a decoding step, a classifier) to 2 FMAs per 4 cycles
// with its weights in the caches. The copies are summed before the finish.
constexpr int kGemmChains = 8;
template <int M, int Nv>
constexpr int gemm_k_split() {
  int split = 1;
  while (M * Nv * split < kGemmChains) split *= 2;
  return split;
}

// c[M x Nv vectors] = init + a[M x kc] * b[kc x Nv vectors]: a's rows `lda`
// apart (PackedA: a packed panel, kGemmMr floats per k, lda unused), b packed
// (kGemmNr floats per k, of which the first Nv vectors are read), c and init
// rows `ldc` apart and their vectors `ldv` apart (kWidth: a row's columns
// are contiguous; a blocked activation layout has them a plane apart; init
// null: zero; init may be c). prefetch_next: c is in a matrix, not a tile on
// the stack. finish: applied before the store (null: none). prefetch: B's
// lines to bring into L2, an even share per k step (Prefetch: next is set;
// without, the loop has no test per k step, which cost AVX2's 4-row tiles
// about 2% of training's large products).
template <int M, int Nv, bool PackedA, bool Prefetch>
void gemm_tile_rows(const float* __restrict a, int64_t lda, const float* __restrict b, int64_t kc, const float* init,
                    float* c, int64_t ldc, int64_t ldv, bool prefetch_next, const GemmTileFinish* finish,
                    GemmPrefetch prefetch) {
  constexpr int S = gemm_k_split<M, Nv>();
  VF acc[M][Nv];
  VF part[S][M][Nv];
#pragma GCC unroll 16
  for (int r = 0; r < M; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < Nv; ++v) {
      acc[r][v] = init ? load(init + r * ldc + v * ldv) : splat(0.f);
#pragma GCC unroll 8
      for (int s = 1; s < S; ++s) part[s][r][v] = splat(0.f);
    }
  // The drivers' next tile is mostly the one below this (same panel): its C
  // lines arrive during this tile's kc steps instead of stalling its start
  // (from L3 or memory once the row block outgrows L2). After a block's last
  // row tile the lines are not used; a prefetch past C's end does not fault.
  if (prefetch_next) {
    if (ldv == kWidth) {
#pragma GCC unroll 16
      for (int r = 0; r < M; ++r) {
        __builtin_prefetch(c + (M + r) * ldc);
        __builtin_prefetch(c + (M + r) * ldc + Nv * kWidth - 1);
      }
    } else {  // per vector column, the next tile's rows are contiguous (M * ldc floats)
#pragma GCC unroll 4
      for (int v = 0; v < Nv; ++v)
        for (int64_t at = 0; at < M * ldc; at += 64 / sizeof(float)) __builtin_prefetch(c + M * ldc + v * ldv + at);
    }
  }
  // One prefetch per line, `lines` per kc steps: asking again for a line in
  // flight, once per k step, made AVX2's 4-row tiles 20% slower.
  const char* ahead = reinterpret_cast<const char*>(prefetch.next);
  int64_t due = 0, line = 0;
  // k step k into copy `into` of the accumulators (copy 0 is acc).
  const auto step = [&](int64_t k, VF (&into)[M][Nv]) __attribute__((always_inline)) {
    if constexpr (Prefetch)
      for (due += prefetch.lines; due >= kc; due -= kc) __builtin_prefetch(ahead + 64 * line++, 0, 2);
    const float* bk = b + k * kGemmNr;
    VF bv[Nv];
#pragma GCC unroll 4
    for (int v = 0; v < Nv; ++v) bv[v] = load_b(bk + v * kWidth);
#pragma GCC unroll 16
    for (int r = 0; r < M; ++r) {
      const VF av = broadcast_from(PackedA ? a + k * kGemmMr + r : a + r * lda + k);
#pragma GCC unroll 4
      for (int v = 0; v < Nv; ++v) into[r][v] = fmadd(av, bv[v], into[r][v]);
    }
  };
  int64_t k = 0;
  if constexpr (S > 1) {
    for (; k + S <= kc; k += S) {
      step(k, acc);
#pragma GCC unroll 8
      for (int s = 1; s < S; ++s) step(k + s, part[s]);
    }
  }
#pragma GCC unroll 4
  for (; k < kc; ++k) step(k, acc);
#pragma GCC unroll 8
  for (int s = 1; s < S; ++s)
#pragma GCC unroll 16
    for (int r = 0; r < M; ++r)
#pragma GCC unroll 4
      for (int v = 0; v < Nv; ++v) acc[r][v] += part[s][r][v];
  if (finish) finish_tile<M, Nv>(acc, *finish);
#pragma GCC unroll 16
  for (int r = 0; r < M; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < Nv; ++v) store(c + r * ldc + v * ldv, acc[r][v]);
}

template <int M, int Nv, bool PackedA>
void gemm_tile_dispatch(int m, const float* a, int64_t lda, const float* b, int64_t kc, const float* init, float* c,
                        int64_t ldc, int64_t ldv, bool prefetch_next, const GemmTileFinish* finish,
                        GemmPrefetch prefetch) {
  if constexpr (M > 1) {
    if (m < M)
      return gemm_tile_dispatch<M - 1, Nv, PackedA>(m, a, lda, b, kc, init, c, ldc, ldv, prefetch_next, finish,
                                                    prefetch);
  }
  if (prefetch.next)
    return gemm_tile_rows<M, Nv, PackedA, true>(a, lda, b, kc, init, c, ldc, ldv, prefetch_next, finish, prefetch);
  gemm_tile_rows<M, Nv, PackedA, false>(a, lda, b, kc, init, c, ldc, ldv, prefetch_next, finish, prefetch);
}

// A tile of m <= kGemmMr rows and n <= Nv * kWidth columns on the Nv-vector
// kernel: in place when n fills the vectors, else (only with ldv == kWidth)
// through a tile on the stack, without `finish`.
template <int Nv, bool PackedA>
void gemm_tile_width(const float* a, int64_t lda, const float* b, int64_t kc, const float* init, float* c, int64_t ldc,
                     int64_t ldv, int m, int n, const GemmTileFinish* finish, GemmPrefetch prefetch) {
  if (n == Nv * kWidth)
    return gemm_tile_dispatch<kGemmMr, Nv, PackedA>(m, a, lda, b, kc, init, c, ldc, ldv, true, finish, prefetch);
  constexpr int kTileLd = Nv * kWidth;
  float tile[kGemmMr * kTileLd] = {};  // zeroed: GCC cannot see that only init rows are read
  if (init)
    for (int r = 0; r < m; ++r) __builtin_memcpy(tile + r * kTileLd, init + r * ldc, static_cast<size_t>(n) * 4);
  gemm_tile_dispatch<kGemmMr, Nv, PackedA>(m, a, lda, b, kc, init ? tile : nullptr, tile, kTileLd, kWidth, false,
                                           nullptr, prefetch);
  for (int r = 0; r < m; ++r) __builtin_memcpy(c + r * ldc, tile + r * kTileLd, static_cast<size_t>(n) * 4);
}

// One tile of m <= kGemmMr rows and n <= kGemmNr columns (init null, c, or
// another matrix laid out as c; finish only with n a multiple of kWidth). A
// partial panel (N's last) runs on as few vectors as cover it.
template <bool PackedA, int Nv = kGemmNv>
void gemm_tile_any(const float* a, int64_t lda, const float* b, int64_t kc, const float* init, float* c, int64_t ldc,
                   int64_t ldv, int m, int n, const GemmTileFinish* finish, GemmPrefetch prefetch) {
  if constexpr (Nv > 1) {
    if (n <= (Nv - 1) * kWidth)
      return gemm_tile_any<PackedA, Nv - 1>(a, lda, b, kc, init, c, ldc, ldv, m, n, finish, prefetch);
  }
  gemm_tile_width<Nv, PackedA>(a, lda, b, kc, init, c, ldc, ldv, m, n, finish, prefetch);
}

inline void gemm_tile_impl(const float* a, int64_t lda, const float* b, int64_t kc, const float* init, float* c,
                           int64_t ldc, int m, int n, const GemmTileFinish* finish, GemmPrefetch prefetch) {
  gemm_tile_any<false>(a, lda, b, kc, init, c, ldc, kWidth, m, n, finish, prefetch);
}

inline void gemm_tile_packed_a_impl(const float* a, const float* b, int64_t kc, const float* init, float* c,
                                    int64_t ldc, int64_t ldv, int m, int n, const GemmTileFinish* finish,
                                    GemmPrefetch prefetch) {
  gemm_tile_any<true>(a, 0, b, kc, init, c, ldc, ldv, m, n, finish, prefetch);
}

// A row tile (m <= kGemmMr rows, lda apart, columns contiguous) as the
// micro-kernel's packed panel: kc steps of kGemmMr floats (rows past m left
// unset), four rows at a time through 4 x 4 transposes. Read in place, a
// tile's rows, a power of two floats apart in training's products, fell in
// the same L1 sets as B's panel and evicted it: packed, the large products
// ran 1.5-3% faster on Zen 3 (bench/tools/gemm_ab.cc, alternating).
inline void gemm_pack_a_impl(const float* a, int64_t lda, int m, int64_t kc, float* out) {
  int r0 = 0;
  for (; r0 + 4 <= m; r0 += 4) {
    const float* s = a + r0 * lda;
    int64_t k = 0;
    for (; k + 4 <= kc; k += 4) transpose_4x4(s + k, lda, out + k * kGemmMr + r0, kGemmMr);
    for (; k < kc; ++k)
      for (int r = 0; r < 4; ++r) out[k * kGemmMr + r0 + r] = s[r * lda + k];
  }
  for (; r0 < m; ++r0)
    for (int64_t k = 0; k < kc; ++k) out[k * kGemmMr + r0] = a[r0 * lda + k];
}

// ------------------------------------------------------------- convolution

// Pixel r's kWidth channels [c, c + kWidth) at tap (kh, kw) of the window of
// output pixel (oh, ow): a pointer into the image, null in the padding.
inline const float* conv_source(const ConvGather& cv, int64_t oh, int64_t ow, int64_t kh, int64_t kw, int64_t c) {
  const int64_t ih = oh * cv.sh - cv.ph + kh * cv.dh, iw = ow * cv.sw - cv.pw + kw * cv.dw;
  if (ih < 0 || ih >= cv.ih || iw < 0 || iw >= cv.iw) return nullptr;
  return cv.x + (c / kWidth * cv.ih * cv.iw + ih * cv.iw + iw) * kWidth;
}

#if defined(__AVX2__) && !defined(__AVX512F__)
static_assert(kGemmMr == 4 && kWidth == 8, "store_transposed_4x8 fills AVX2's 4-row tiles");
// Four pixels' kWidth (8) channels as 8 k-steps of 4 floats (32 in a row).
inline void store_transposed_4x8(const float* const (&src)[4], float* out) {
  __m256 r[4];
  for (int i = 0; i < 4; ++i) r[i] = src[i] ? _mm256_loadu_ps(src[i]) : _mm256_setzero_ps();
  const __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
  const __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
  const __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE);
  const __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE);
  _mm256_storeu_ps(out, _mm256_permute2f128_ps(u0, u1, 0x20));
  _mm256_storeu_ps(out + 8, _mm256_permute2f128_ps(u2, u3, 0x20));
  _mm256_storeu_ps(out + 16, _mm256_permute2f128_ps(u0, u1, 0x31));
  _mm256_storeu_ps(out + 24, _mm256_permute2f128_ps(u2, u3, 0x31));
}
#endif

// Rows [p0, p0 + m) (m <= kGemmMr output pixels) and columns [k0, k0 + kc)
// of a convolution's implicit A (ConvGather; k0 and kc multiples of
// kWidth) as tile_packed_a's panel: kc steps of kGemmMr floats, rows past m
// zero. A tap's block of kWidth channels is one load per pixel.
inline void gemm_gather_conv_a_impl(const ConvGather& cv, int64_t p0, int m, int64_t k0, int64_t kc, float* out) {
  int64_t oh[kGemmMr], ow[kGemmMr];
  for (int r = 0; r < m; ++r) {
    oh[r] = (p0 + r) / cv.ow;
    ow[r] = (p0 + r) % cv.ow;
  }
  // The pixels' sources at the current tap, moved a channel block (a plane)
  // at a time within it: the window arithmetic once per tap, not per block.
  const int64_t plane = cv.ih * cv.iw * kWidth;
  int64_t tap = k0 / cv.channels, c = k0 % cv.channels;
  const float* src[kGemmMr];
  const auto at_tap = [&] {
    for (int r = 0; r < kGemmMr; ++r) src[r] = r < m ? conv_source(cv, oh[r], ow[r], tap / cv.kw, tap % cv.kw, c) : nullptr;
  };
  at_tap();
  for (int64_t k = 0; k < kc; k += kWidth, out += kWidth * kGemmMr) {
#if defined(__AVX2__) && !defined(__AVX512F__)
    store_transposed_4x8(src, out);
#else
    for (int q = 0; q < kWidth; ++q)
      for (int r = 0; r < kGemmMr; ++r) out[q * kGemmMr + r] = src[r] ? src[r][q] : 0.f;
#endif
    if ((c += kWidth) == cv.channels) {
      c = 0;
      ++tap;
      if (k + kWidth < kc) at_tap();
    } else {
      for (int r = 0; r < kGemmMr; ++r)
        if (src[r]) src[r] += plane;
    }
  }
}

// ---------------------------------------------------------------- epilogue

// erfc(z) for z >= 0 from the Chebyshev fit of Numerical Recipes' erfcc
// (relative error under 1.2e-7 in exact arithmetic), so that Gelu keeps a
// relative precision in the far negative tail, where x * Phi(x) is tiny; in
// float, rounding z * z bounds it there (about 1e-5 at x = -12). The
// degree-9 polynomial is summed by Estrin's scheme (4 steps deep, not 9) and
// the exponent (at most 3e-8, at z = 0) takes exp_nonpositive: the
// epilogue's pass over a tile waited on the chain (14.3 -> 10.8-11.3 ns a
// 16-float vector on the AMX Xeon; the same largest errors against double).
// Past z = 9.29 (x < -13.13) it gives 0, where x * Phi(x) is under 1.5e-38,
// at float's smallest normals. Tried: a reciprocal estimate for t (slower),
// the exponent's series by Estrin too (level).
inline VF erfc_nonneg(VF z) {
  const VF t = 1.f / (1.f + 0.5f * z);
  const VF t2 = t * t, t4 = t2 * t2, t8 = t4 * t4;
  const VF c01 = fmadd(t, splat(1.00002368f), splat(-1.26551223f));
  const VF c23 = fmadd(t, splat(0.09678418f), splat(0.37409196f));
  const VF c45 = fmadd(t, splat(0.27886807f), splat(-0.18628806f));
  const VF c67 = fmadd(t, splat(1.48851587f), splat(-1.13520398f));
  const VF c89 = fmadd(t, splat(0.17087277f), splat(-0.82215223f));
  const VF low = fmadd(t2, c23, c01), high = fmadd(t2, c67, c45);
  const VF p = fmadd(t8, c89, fmadd(t4, high, low));
  return t * exp_nonpositive(p - z * z);
}

inline VF gelu_vec(VF x) {  // x * Phi(x), Phi(x) = erfc(-x / sqrt 2) / 2
  const VF z = (x < 0.f ? -x : x) * 0.70710678f;
  const VF half_tail = 0.5f * erfc_nonneg(z);
  return x * (x < 0.f ? half_tail : 1.f - half_tail);
}

inline VF gelu_tanh_vec(VF x) {  // 0.5 x (1 + tanh(u)) = x * sigmoid(2u)
  return x * sigmoid_vec(1.5957691f * (x + 0.044715f * x * x * x));
}

inline VF clamp_vec(VF x, float lo, float hi) {
  x = x < lo ? splat(lo) : x;
  return x > hi ? splat(hi) : x;
}

inline VF activate(VF x, GemmActivation act, float alpha, float beta) {
  switch (act) {
    case GemmActivation::kNone: return x;
    case GemmActivation::kRelu: return x > 0.f ? x : splat(0.f);
    case GemmActivation::kLeakyRelu: return x >= 0.f ? x : alpha * x;
    case GemmActivation::kClip: return clamp_vec(x, alpha, beta);
    case GemmActivation::kSigmoid: return sigmoid_vec(x);
    case GemmActivation::kSwish: return x * sigmoid_vec(alpha * x);
    case GemmActivation::kHardSigmoid: return clamp_vec(alpha * x + beta, 0.f, 1.f);
    case GemmActivation::kHardSwish: return x * clamp_vec(x * (1.f / 6) + 0.5f, 0.f, 1.f);
    case GemmActivation::kGelu: return gelu_vec(x);
    case GemmActivation::kGeluTanh: return gelu_tanh_vec(x);
  }
  return x;
}

// c[r][j] = act(c[r][j] + bias[j]) for r < rows, j < cols (bias may be
// null), zeroed where gate (rows e.gate_ld apart; null: none) is not positive.
// Act is a constant so that the activation's switch folds away: taken per
// vector it cost an indirect jump per 8 floats.
template <GemmActivation Act>
void gemm_epilogue_rows(float* c, int64_t ldc, int64_t rows, int64_t cols, const float* bias, const float* gate,
                        const GemmEpilogue& e) {
  for (int64_t r = 0; r < rows; ++r) {
    float* row = c + r * ldc;
    const float* gate_row = gate ? gate + r * e.gate_ld : nullptr;
    int64_t j = 0;
    for (; j + kWidth <= cols; j += kWidth) {
      VF x = activate(load(row + j) + (bias ? load(bias + j) : splat(0.f)), Act, e.alpha, e.beta);
      if (gate_row) x = load(gate_row + j) > 0.f ? x : splat(0.f);
      store(row + j, x);
    }
    if (j < cols) {
      const int64_t n = cols - j;
      VF x = activate(load_part(row + j, n, 0.f) + (bias ? load_part(bias + j, n, 0.f) : splat(0.f)), Act, e.alpha,
                      e.beta);
      if (gate_row) x = load_part(gate_row + j, n, 0.f) > 0.f ? x : splat(0.f);
      store_part(row + j, x, n);
    }
  }
}

inline void gemm_epilogue_impl(float* c, int64_t ldc, int64_t rows, int64_t cols, const float* bias,
                               const float* gate, const GemmEpilogue& e) {
  using A = GemmActivation;
  switch (e.activation) {
    case A::kNone: return gemm_epilogue_rows<A::kNone>(c, ldc, rows, cols, bias, gate, e);
    case A::kRelu: return gemm_epilogue_rows<A::kRelu>(c, ldc, rows, cols, bias, gate, e);
    case A::kLeakyRelu: return gemm_epilogue_rows<A::kLeakyRelu>(c, ldc, rows, cols, bias, gate, e);
    case A::kClip: return gemm_epilogue_rows<A::kClip>(c, ldc, rows, cols, bias, gate, e);
    case A::kSigmoid: return gemm_epilogue_rows<A::kSigmoid>(c, ldc, rows, cols, bias, gate, e);
    case A::kSwish: return gemm_epilogue_rows<A::kSwish>(c, ldc, rows, cols, bias, gate, e);
    case A::kHardSigmoid: return gemm_epilogue_rows<A::kHardSigmoid>(c, ldc, rows, cols, bias, gate, e);
    case A::kHardSwish: return gemm_epilogue_rows<A::kHardSwish>(c, ldc, rows, cols, bias, gate, e);
    case A::kGelu: return gemm_epilogue_rows<A::kGelu>(c, ldc, rows, cols, bias, gate, e);
    case A::kGeluTanh: return gemm_epilogue_rows<A::kGeluTanh>(c, ldc, rows, cols, bias, gate, e);
  }
}

// ---------------------------------------------------------------- one row

// out[r] = w[r, :] . x over rows of n floats: the product of a single row
// (a squeeze-and-excitation block's reduction), where the micro-kernel's
// tile, one row tall, would wait on each FMA's latency. Four accumulators.
inline void dot_rows_impl(const float* w, const float* x, int64_t rows, int64_t n, float* out) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = w + r * n;
    VF a0 = splat(0.f), a1 = a0, a2 = a0, a3 = a0;
    int64_t j = 0;
    for (; j + 4 * kWidth <= n; j += 4 * kWidth) {
      a0 = fmadd(load(row + j), load(x + j), a0);
      a1 = fmadd(load(row + j + kWidth), load(x + j + kWidth), a1);
      a2 = fmadd(load(row + j + 2 * kWidth), load(x + j + 2 * kWidth), a2);
      a3 = fmadd(load(row + j + 3 * kWidth), load(x + j + 3 * kWidth), a3);
    }
    for (; j < n; j += kWidth) {
      const int64_t count = n - j < kWidth ? n - j : kWidth;
      a0 = fmadd(load_n(row + j, count), load_n(x + j, count), a0);
    }
    out[r] = fold_lanes((a0 + a1) + (a2 + a3), kAdd);
  }
}

// out[j] += sum_r h[r] w[r * ld + j] for j < n (the block's expansion):
// runs of 8 vectors of out stay in registers across the rows, so the FMAs
// of a run are independent.
inline void add_scaled_rows_impl(const float* w, int64_t ld, const float* h, int64_t rows, int64_t n, float* out) {
  constexpr int kRun = 8;
  int64_t j = 0;
  for (; j + kRun * kWidth <= n; j += kRun * kWidth) {
    VF acc[kRun];
    for (int v = 0; v < kRun; ++v) acc[v] = load(out + j + v * kWidth);
    for (int64_t r = 0; r < rows; ++r) {
      const VF hr = splat(h[r]);
      for (int v = 0; v < kRun; ++v) acc[v] = fmadd(hr, load(w + r * ld + j + v * kWidth), acc[v]);
    }
    for (int v = 0; v < kRun; ++v) store(out + j + v * kWidth, acc[v]);
  }
  for (; j < n; j += kWidth) {
    const int64_t count = n - j < kWidth ? n - j : kWidth;
    VF acc = load_n(out + j, count);
    for (int64_t r = 0; r < rows; ++r) acc = fmadd(splat(h[r]), load_n(w + r * ld + j, count), acc);
    store_n(out + j, acc, count);
  }
}

