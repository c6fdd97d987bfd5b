// The per-ISA half of Anvil's packed GEMM (gemm.h): the register-blocked
// micro-kernel and the epilogue. Included after vec_kernels_impl.h, inside the
// same anonymous namespace (VF, load, store, exp_approx, sigmoid_vec).
//
// The micro-kernel keeps a kGemmMr x kGemmNr tile of C in registers
// (kGemmMr x kGemmNv vectors: 6 x 2 on AVX2 and SSE4.1, i.e. 6x16 and 6x8 floats; 12 x 2 on AVX-512,
// leaving registers for the B row and the A broadcast), reads A straight from
// its rows (no packing: the A block stays in L2 across a sweep over B's
// panels) or, where A's rows are not contiguous, from a packed panel of
// kGemmMr floats per k, and B from a packed panel, kGemmNr floats per k.

#if defined(__AVX512F__)
constexpr int kGemmMr = 12;
#else
constexpr int kGemmMr = 6;
#endif
constexpr int kGemmNv = 2;
constexpr int kGemmNr = kGemmNv * kWidth;
constexpr int kGemmKc = 256;  // a B panel's k-block (kGemmKc x kGemmNr floats) stays in L1

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

// c[M x kGemmNr] = init + a[M x kc] * b[kc x kGemmNr]: a's rows `lda` apart
// (PackedA: a packed panel, kGemmMr floats per k, lda unused), b packed
// (kGemmNr floats per k), c and init `ldc` apart (init null: zero; init may
// be c).
template <int M, bool PackedA>
void gemm_tile_rows(const float* __restrict a, int64_t lda, const float* __restrict b, int64_t kc, const float* init,
                    float* c, int64_t ldc) {
  VF acc[M][kGemmNv];
#pragma GCC unroll 16
  for (int r = 0; r < M; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < kGemmNv; ++v) acc[r][v] = init ? load(init + r * ldc + v * kWidth) : splat(0.f);
  // The drivers' next tile is mostly the one below this (same panel): its C
  // lines arrive during this tile's kc steps instead of stalling its start
  // (from L3 or memory once the row block outgrows L2). After a block's last
  // row tile the lines are not used; a prefetch past C's end does not fault.
#pragma GCC unroll 16
  for (int r = 0; r < M; ++r) {
    __builtin_prefetch(c + (M + r) * ldc);
    __builtin_prefetch(c + (M + r) * ldc + kGemmNr - 1);
  }
#pragma GCC unroll 4
  for (int64_t k = 0; k < kc; ++k, b += kGemmNr) {
    VF bv[kGemmNv];
#pragma GCC unroll 4
    for (int v = 0; v < kGemmNv; ++v) bv[v] = load_b(b + v * kWidth);
#pragma GCC unroll 16
    for (int r = 0; r < M; ++r) {
      const VF av = broadcast_from(PackedA ? a + k * kGemmMr + r : a + r * lda + k);
#pragma GCC unroll 4
      for (int v = 0; v < kGemmNv; ++v) acc[r][v] = fmadd(av, bv[v], acc[r][v]);
    }
  }
#pragma GCC unroll 16
  for (int r = 0; r < M; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < kGemmNv; ++v) store(c + r * ldc + v * kWidth, acc[r][v]);
}

template <int M, bool PackedA>
void gemm_tile_dispatch(int m, const float* a, int64_t lda, const float* b, int64_t kc, const float* init, float* c,
                        int64_t ldc) {
  if constexpr (M > 1) {
    if (m < M) return gemm_tile_dispatch<M - 1, PackedA>(m, a, lda, b, kc, init, c, ldc);
  }
  gemm_tile_rows<M, PackedA>(a, lda, b, kc, init, c, ldc);
}

// One tile of m <= kGemmMr rows and n <= kGemmNr columns (init null, c, or
// another matrix `ldc` apart); a partial width goes through a full-width tile
// on the stack.
template <bool PackedA>
void gemm_tile_any(const float* a, int64_t lda, const float* b, int64_t kc, const float* init, float* c, int64_t ldc,
                   int m, int n) {
  if (n == kGemmNr) return gemm_tile_dispatch<kGemmMr, PackedA>(m, a, lda, b, kc, init, c, ldc);
  float tile[kGemmMr * kGemmNr] = {};  // zeroed: GCC cannot see that only init rows are read
  if (init)
    for (int r = 0; r < m; ++r) __builtin_memcpy(tile + r * kGemmNr, init + r * ldc, static_cast<size_t>(n) * 4);
  gemm_tile_dispatch<kGemmMr, PackedA>(m, a, lda, b, kc, init ? tile : nullptr, tile, kGemmNr);
  for (int r = 0; r < m; ++r) __builtin_memcpy(c + r * ldc, tile + r * kGemmNr, static_cast<size_t>(n) * 4);
}

inline void gemm_tile_impl(const float* a, int64_t lda, const float* b, int64_t kc, const float* init, float* c,
                           int64_t ldc, int m, int n) {
  gemm_tile_any<false>(a, lda, b, kc, init, c, ldc, m, n);
}

inline void gemm_tile_packed_a_impl(const float* a, const float* b, int64_t kc, const float* init, float* c,
                                    int64_t ldc, int m, int n) {
  gemm_tile_any<true>(a, 0, b, kc, init, c, ldc, m, n);
}

// ---------------------------------------------------------------- epilogue

// erfc(z) for z >= 0 from the Chebyshev fit of Numerical Recipes' erfcc
// (relative error under 1.2e-7 in exact arithmetic), so that Gelu keeps a
// relative precision in the far negative tail, where x * Phi(x) is tiny; in
// float, rounding z * z bounds it there (about 1e-5 at x = -12).
inline VF erfc_nonneg(VF z) {
  const VF t = 1.f / (1.f + 0.5f * z);
  VF p = splat(0.17087277f);
  p = p * t - 0.82215223f;
  p = p * t + 1.48851587f;
  p = p * t - 1.13520398f;
  p = p * t + 0.27886807f;
  p = p * t - 0.18628806f;
  p = p * t + 0.09678418f;
  p = p * t + 0.37409196f;
  p = p * t + 1.00002368f;
  p = p * t - 1.26551223f;
  return t * exp_approx(p - z * z);
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
inline void gemm_epilogue_impl(float* c, int64_t ldc, int64_t rows, int64_t cols, const float* bias,
                               const float* gate, const GemmEpilogue& e) {
  for (int64_t r = 0; r < rows; ++r) {
    float* row = c + r * ldc;
    const float* gate_row = gate ? gate + r * e.gate_ld : nullptr;
    int64_t j = 0;
    for (; j + kWidth <= cols; j += kWidth) {
      VF x = activate(load(row + j) + (bias ? load(bias + j) : splat(0.f)), e.activation, e.alpha, e.beta);
      if (gate_row) x = load(gate_row + j) > 0.f ? x : splat(0.f);
      store(row + j, x);
    }
    if (j < cols) {
      const int64_t n = cols - j;
      VF x = activate(load_part(row + j, n, 0.f) + (bias ? load_part(bias + j, n, 0.f) : splat(0.f)), e.activation,
                      e.alpha, e.beta);
      if (gate_row) x = load_part(gate_row + j, n, 0.f) > 0.f ? x : splat(0.f);
      store_part(row + j, x, n);
    }
  }
}
