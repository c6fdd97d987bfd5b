// The loops behind vec_kernels.h, written for the compiler to vectorize at the
// ISA its including translation unit is built for (plus an 8x8 / 4x4 register
// transpose in intrinsics). Included inside an anonymous namespace, so each
// ISA's copy stays private to its unit; the unit includes <immintrin.h> and
// <cstring> first.
//
// No std:: templates or inline functions here: one the compiler did not
// inline would be emitted in every unit, each built for its ISA, and the
// linker would keep one of them for all callers (an AVX-512 copy called on a
// CPU without it). Builtins only.

// ---------------------------------------------------------------- Where

template <int kSx, int kSy>
void select_loop(const uint8_t* __restrict c, const uint32_t* __restrict x, const uint32_t* __restrict y,
                 uint32_t* __restrict o, int64_t n) {
  const uint32_t x0 = x[0], y0 = y[0];
#pragma omp simd
  for (int64_t j = 0; j < n; ++j) {
    const uint32_t xv = kSx ? x[j] : x0, yv = kSy ? y[j] : y0;
    o[j] = c[j] ? xv : yv;
  }
}

inline void select32_impl(const bool* cond, const uint32_t* x, const uint32_t* y, uint32_t* o, int64_t n, int sc,
                          int sx, int sy) {
  if (n <= 0) return;
  const auto* c = reinterpret_cast<const uint8_t*>(cond);
  if (sc == 0) {  // one condition for the whole row: a copy or a fill from the side it picks
    const uint32_t* src = c[0] ? x : y;
    if (c[0] ? sx : sy) {
      __builtin_memcpy(o, src, static_cast<size_t>(n) * sizeof(uint32_t));
    } else {
      const uint32_t v = src[0];
      for (int64_t j = 0; j < n; ++j) o[j] = v;
    }
    return;
  }
  if (sx && sy) select_loop<1, 1>(c, x, y, o, n);
  else if (sx) select_loop<1, 0>(c, x, y, o, n);
  else if (sy) select_loop<0, 1>(c, x, y, o, n);
  else select_loop<0, 0>(c, x, y, o, n);
}

// ---------------------------------------------------------------- Transpose

// dst[j * dst_ld + i] = src[i * src_ld + j] for one 4x4 block of floats (SSE
// on every ISA: the 4-row tiles of the GEMM's A panels, SSE4.1's Transpose).
inline void transpose_4x4(const float* src, int64_t src_ld, float* dst, int64_t dst_ld) {
  __m128 r0 = _mm_loadu_ps(src), r1 = _mm_loadu_ps(src + src_ld), r2 = _mm_loadu_ps(src + 2 * src_ld),
         r3 = _mm_loadu_ps(src + 3 * src_ld);
  _MM_TRANSPOSE4_PS(r0, r1, r2, r3);
  _mm_storeu_ps(dst, r0);
  _mm_storeu_ps(dst + dst_ld, r1);
  _mm_storeu_ps(dst + 2 * dst_ld, r2);
  _mm_storeu_ps(dst + 3 * dst_ld, r3);
}

#if defined(__AVX2__)
constexpr int64_t kTile = 8;
// dst[j][i] = src[i][j] for one 8x8 block of 4-byte values (bits moved as floats: no arithmetic).
inline void transpose_tile(const uint32_t* src, int64_t src_ld, uint32_t* dst, int64_t dst_ld) {
  __m256 r[8], t[8];
  for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(reinterpret_cast<const float*>(src + i * src_ld));
  for (int i = 0; i < 8; i += 2) {
    t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);      // a0 b0 a1 b1 | a4 b4 a5 b5
    t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);  // a2 b2 a3 b3 | a6 b6 a7 b7
  }
  for (int h = 0; h < 8; h += 4) {
    r[h] = _mm256_shuffle_ps(t[h], t[h + 2], _MM_SHUFFLE(1, 0, 1, 0));      // column 0 | 4 of four rows
    r[h + 1] = _mm256_shuffle_ps(t[h], t[h + 2], _MM_SHUFFLE(3, 2, 3, 2));  // column 1 | 5
    r[h + 2] = _mm256_shuffle_ps(t[h + 1], t[h + 3], _MM_SHUFFLE(1, 0, 1, 0));  // column 2 | 6
    r[h + 3] = _mm256_shuffle_ps(t[h + 1], t[h + 3], _MM_SHUFFLE(3, 2, 3, 2));  // column 3 | 7
  }
  for (int j = 0; j < 4; ++j) {
    _mm256_storeu_ps(reinterpret_cast<float*>(dst + j * dst_ld), _mm256_permute2f128_ps(r[j], r[j + 4], 0x20));
    _mm256_storeu_ps(reinterpret_cast<float*>(dst + (j + 4) * dst_ld),
                     _mm256_permute2f128_ps(r[j], r[j + 4], 0x31));
  }
}
#else
constexpr int64_t kTile = 4;
inline void transpose_tile(const uint32_t* src, int64_t src_ld, uint32_t* dst, int64_t dst_ld) {
  transpose_4x4(reinterpret_cast<const float*>(src), src_ld, reinterpret_cast<float*>(dst), dst_ld);
}
#endif

inline void transpose32_impl(const uint32_t* src, int64_t src_ld, uint32_t* dst, int64_t dst_ld, int64_t rows,
                             int64_t cols) {
  int64_t i = 0;
  for (; i + kTile <= rows; i += kTile) {
    int64_t j = 0;
    for (; j + kTile <= cols; j += kTile) transpose_tile(src + i * src_ld + j, src_ld, dst + j * dst_ld + i, dst_ld);
    for (; j < cols; ++j)
      for (int64_t k = 0; k < kTile; ++k) dst[j * dst_ld + i + k] = src[(i + k) * src_ld + j];
  }
  for (; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) dst[j * dst_ld + i] = src[i * src_ld + j];
}

// ---------------------------------------------------------------- vectors

constexpr float kInfinity = __builtin_inff();

// GCC vector types as wide as the unit's ISA: arithmetic, compares and ?:
// work lane-wise on them, so one source serves SSE4.1, AVX2 and AVX-512.
#if defined(__AVX512F__)
constexpr int kWidth = 16;
#elif defined(__AVX2__)
constexpr int kWidth = 8;
#else
constexpr int kWidth = 4;
#endif
typedef float VF __attribute__((vector_size(kWidth * sizeof(float))));
typedef int32_t VI __attribute__((vector_size(kWidth * sizeof(int32_t))));
// Doubles in one register, and the floats that widen into them.
constexpr int kHalf = kWidth / 2;
typedef double VD __attribute__((vector_size(kHalf * sizeof(double))));
typedef float VFh __attribute__((vector_size(kHalf * sizeof(float))));

inline VF splat(float v) { return VF{} + v; }
inline VF load(const float* p) {
  VF v;
  __builtin_memcpy(&v, p, sizeof v);
  return v;
}
inline void store(float* p, VF v) { __builtin_memcpy(p, &v, sizeof v); }
// The first n <= kWidth values of p, the other lanes `fill`; and the first n
// lanes of v stored. Masked loads and stores where the ISA has them (the
// lanes past n are neither read nor written, so a row's end may be a page's):
// a lane at a time through memory took 6x longer in NHWC max pooling over 24
// channels (ShuffleNet's, AVX-512: a vector and a part per tap).
#if defined(__AVX512F__)
inline __mmask16 first_lanes(int64_t n) { return static_cast<__mmask16>((1u << n) - 1); }
inline VF load_part(const float* p, int64_t n, float fill) {
  return (VF)_mm512_mask_loadu_ps(_mm512_set1_ps(fill), first_lanes(n), p);
}
inline void store_part(float* p, VF v, int64_t n) { _mm512_mask_storeu_ps(p, first_lanes(n), (__m512)v); }
#elif defined(__AVX2__)
inline __m256i first_lanes(int64_t n) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}
inline VF load_part(const float* p, int64_t n, float fill) {
  const __m256i mask = first_lanes(n);
  return (VF)_mm256_blendv_ps(_mm256_set1_ps(fill), _mm256_maskload_ps(p, mask), _mm256_castsi256_ps(mask));
}
inline void store_part(float* p, VF v, int64_t n) { _mm256_maskstore_ps(p, first_lanes(n), (__m256)v); }
#else
inline VF load_part(const float* p, int64_t n, float fill) {
  float lanes[kWidth];
  for (int l = 0; l < kWidth; ++l) lanes[l] = l < n ? p[l] : fill;
  return load(lanes);
}
inline void store_part(float* p, VF v, int64_t n) {
  for (int l = 0; l < n; ++l) p[l] = v[l];
}
#endif

// ---------------------------------------------------------------- exp

// e^r for x = k ln2 + r, |r| <= ln2 / 2 (x clamped, finite): its Taylor
// series to degree 7, about 1 ulp; k is returned through `k`.
inline VF exp_of_remainder(VF x, VF& k) {
  constexpr float kLog2e = 1.44269504088896341f, kLn2Hi = 0.693359375f, kLn2Lo = -2.12194440e-4f;
  constexpr float kRound = 12582912.f;  // 1.5 * 2^23: adding and subtracting it rounds to an integer
  k = (x * kLog2e + kRound) - kRound;
  const VF r = (x - k * kLn2Hi) - k * kLn2Lo;
  VF p = splat(1.f / 5040);
  p = p * r + 1.f / 720;
  p = p * r + 1.f / 120;
  p = p * r + 1.f / 24;
  p = p * r + 1.f / 6;
  p = p * r + 0.5f;
  p = p * r + 1.f;
  return p * r + 1.f;
}

// exp(x) to about 1 ulp over the whole float range, 2^k applied in two
// halves so that neither factor leaves the normal range. exp(-inf) = 0,
// exp(+inf) = inf, NaN stays NaN.
inline VF exp_approx(VF x) {
  // Clamped in the form of max/min instructions (NaN becomes -104 here and
  // leaves through the last line), so no NaN reaches the int conversion.
  VF xc = x > -104.f ? x : splat(-104.f);
  xc = xc < 89.f ? xc : splat(89.f);
  VF k;
  const VF p = exp_of_remainder(xc, k);
  const VI ki = __builtin_convertvector(k, VI), k1 = ki >> 1, k2 = ki - k1;
  // Above 88.72 the product overflows to inf by itself (x is clamped at 89).
  VF y = p * __builtin_bit_cast(VF, (k1 + 127) << 23) * __builtin_bit_cast(VF, (k2 + 127) << 23);
  // Below -103.97 the result is under half the smallest denormal: 0 directly,
  // not through a product that underflows (slow on some CPUs).
  y = x < -103.97208f ? splat(0.f) : y;
  return x == x ? y : x;
}

// exp(x) for x <= 0 (a softmax's shifted terms; small positive x, up to
// about 88, is as accurate), to exp_approx's accuracy
// with fewer steps: no upper clamp, and one power of two (2^k, k >= -126)
// instead of two. Below -87.33 (exp about 2^-126, float's smallest normal)
// it gives 0, not a denormal: next to the row's largest term, 1, such terms
// add nothing. NaN stays NaN.
inline VF exp_nonpositive(VF x) {
  constexpr float kLowest = -87.33f;
  VF k;
  const VF p = exp_of_remainder(x > kLowest ? x : splat(kLowest), k);
  const VF y = p * __builtin_bit_cast(VF, (__builtin_convertvector(k, VI) + 127) << 23);
  return x == x ? (x < kLowest ? splat(0.f) : y) : x;
}

// ---------------------------------------------------------------- reductions

// The lanes of v folded by op (a max or a sum) in log2(kWidth) shuffles:
// lane by lane, a short row's horizontal steps cost as much as its body.
template <typename Op>
inline float fold_lanes(VF v, Op op) {
#if defined(__AVX512F__)
  v = op(v, __builtin_shufflevector(v, v, 8, 9, 10, 11, 12, 13, 14, 15, 8, 9, 10, 11, 12, 13, 14, 15));
  v = op(v, __builtin_shufflevector(v, v, 4, 5, 6, 7, 4, 5, 6, 7, 4, 5, 6, 7, 4, 5, 6, 7));
  v = op(v, __builtin_shufflevector(v, v, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3));
  v = op(v, __builtin_shufflevector(v, v, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1));
#elif defined(__AVX2__)
  v = op(v, __builtin_shufflevector(v, v, 4, 5, 6, 7, 4, 5, 6, 7));
  v = op(v, __builtin_shufflevector(v, v, 2, 3, 2, 3, 2, 3, 2, 3));
  v = op(v, __builtin_shufflevector(v, v, 1, 1, 1, 1, 1, 1, 1, 1));
#else
  v = op(v, __builtin_shufflevector(v, v, 2, 3, 2, 3));
  v = op(v, __builtin_shufflevector(v, v, 1, 1, 1, 1));
#endif
  return v[0];
}


// Folds a row into four vector accumulators with step(acc, value) (four,
// for the adder's latency), then joins them and their lanes with
// join(acc, acc); both take floats and vectors alike. `pad` fills the lanes
// past the row's end, and must leave an accumulator as it is. The
// association is fixed for a given ISA, so results repeat run to run.
template <typename Step, typename Join>
float fold_row(const float* x, int64_t n, float init, float pad, Step step, Join join) {
  VF a0 = splat(init), a1 = a0, a2 = a0, a3 = a0;
  int64_t j = 0;
  for (; j + 4 * kWidth <= n; j += 4 * kWidth) {
    a0 = step(a0, load(x + j));
    a1 = step(a1, load(x + j + kWidth));
    a2 = step(a2, load(x + j + 2 * kWidth));
    a3 = step(a3, load(x + j + 3 * kWidth));
  }
  for (; j + kWidth <= n; j += kWidth) a0 = step(a0, load(x + j));
  if (j < n) a1 = step(a1, load_part(x + j, n - j, pad));
  return fold_lanes(join(join(a0, a1), join(a2, a3)), join);
}

// A fold whose step is its join (sums, max, min): the padding is the identity.
template <typename Op>
float fold_row(const float* x, int64_t n, float identity, Op op) {
  return fold_row(x, n, identity, identity, op, op);
}

const auto kAdd = [](auto a, auto v) { return a + v; };
const auto kMax = [](auto a, auto v) { return v > a ? v : a; };  // drops NaN: see extreme_row
const auto kMin = [](auto a, auto v) { return v < a ? v : a; };

inline VF exp_of(VF v) { return exp_approx(v); }
inline double exp_of(double v) { return __builtin_exp(v); }

// A sum's term (Sum: x; SumSquare: x * x; L1: |x|; LogSumExp: exp(x -
// shift)), on float vectors and on a double alike.
template <Reduction K, typename T>
T column_term(T v, T shift) {
  if constexpr (K == Reduction::kSumSquare) return v * v;
  else if constexpr (K == Reduction::kSquaredDeviation) return (v - shift) * (v - shift);
  else if constexpr (K == Reduction::kL1) return v < T{} ? -v : v;
  else if constexpr (K == Reduction::kLogSumExp) return exp_of(v - shift);
  else return v;
}

// Whether a sum of terms formed in float can be kept: finite, and for
// squares not so small that some may have underflowed (values under about
// 1e-19, whose squares the reference forms in double).
template <Reduction K>
bool float_sum_holds(float sum) {
  if (!__builtin_isfinite(sum)) return false;
  // (Squared deviations feed a variance that an epsilon follows: lost tiny
  // squares do not matter there, and a constant column sums to exactly 0.)
  return K != Reduction::kSumSquare || sum >= 0x1p-60f;
}

// The sum of a row's terms, in float over blocks of kSumBlock values (four
// vector accumulators, for the adder's latency) and the blocks in double, as
// close to the reference's double sums as float32 results need: a block
// whose float sum leaves float's range (large squares, sums near float's
// limits) or whose squares may have underflowed is added again in double.
constexpr int64_t kSumBlock = 64 * kWidth;

template <Reduction K>
double sum_row(const float* x, int64_t n) {
  const VF none{};
  double total = 0;
  for (int64_t b0 = 0; b0 < n; b0 += kSumBlock) {
    const int64_t b1 = b0 + kSumBlock < n ? b0 + kSumBlock : n;
    VF a0{}, a1{}, a2{}, a3{};
    int64_t j = b0;
    for (; j + 4 * kWidth <= b1; j += 4 * kWidth) {
      a0 += column_term<K>(load(x + j), none);
      a1 += column_term<K>(load(x + j + kWidth), none);
      a2 += column_term<K>(load(x + j + 2 * kWidth), none);
      a3 += column_term<K>(load(x + j + 3 * kWidth), none);
    }
    for (; j + kWidth <= b1; j += kWidth) a0 += column_term<K>(load(x + j), none);
    if (j < b1) a1 += column_term<K>(load_part(x + j, b1 - j, 0.f), none);  // every term of 0 is 0
    const float block = fold_lanes((a0 + a1) + (a2 + a3), kAdd);
    if (float_sum_holds<K>(block)) {
      total += block;
      continue;
    }
    for (int64_t i = b0; i < b1; ++i) total += column_term<K>(static_cast<double>(x[i]), 0.0);
  }
  return total;
}

// The max (or min) with plain compares, which drop NaN, in one pass that
// also sums the values times 0: that is NaN when a NaN (or an infinity, or
// an overflowing partial sum) passed, and only then is the row searched for
// a NaN to return, as the reference propagates it.
template <typename Op>
float extreme_row(const float* x, int64_t n, Op op, float init) {
  VF a0 = splat(init), a1 = a0, a2 = a0, a3 = a0, z{};
  int64_t j = 0;
  for (; j + 4 * kWidth <= n; j += 4 * kWidth) {
    const VF v0 = load(x + j), v1 = load(x + j + kWidth), v2 = load(x + j + 2 * kWidth), v3 = load(x + j + 3 * kWidth);
    a0 = op(a0, v0);
    a1 = op(a1, v1);
    a2 = op(a2, v2);
    a3 = op(a3, v3);
    z += ((v0 + v1) + (v2 + v3)) * 0.f;
  }
  for (; j < n; j += kWidth) {
    const int64_t left = n - j < kWidth ? n - j : kWidth;
    a0 = op(a0, load_part(x + j, left, init));
    z += load_part(x + j, left, 0.f) * 0.f;
  }
  const float r = fold_lanes(op(op(a0, a1), op(a2, a3)), op);
  if (fold_lanes(z, kAdd) == 0.f) return r;
  for (int64_t k = 0; k < n; ++k)
    if (x[k] != x[k]) return x[k];
  return r;
}

inline float row_max(const float* x, int64_t n) {
  return extreme_row(x, n, kMax, -kInfinity);
}

// The shift softmax and LogSumExp subtract, from the row's max m: m, or 0
// when m is infinite (all -inf, or +inf present), where no finite shift helps
// and IEEE gives the reference's answer.
inline float softmax_shift_of(float m) {
  return m == kInfinity || m == -kInfinity ? 0.f : m;
}

// sum of exp(x[j] - shift); with `y`, each exp is also stored there.
// Nonpositive: shift is the row's max, so every argument is <= 0 (or NaN)
// and exp_nonpositive's shorter form serves.
template <bool Nonpositive>
float sum_exp_of(const float* x, int64_t n, float shift, float* y) {
  const auto exp_term = [](VF v) { return Nonpositive ? exp_nonpositive(v) : exp_approx(v); };
  VF a0 = splat(0.f), a1 = a0;
  int64_t j = 0;
  for (; j + 2 * kWidth <= n; j += 2 * kWidth) {
    const VF e0 = exp_term(load(x + j) - shift), e1 = exp_term(load(x + j + kWidth) - shift);
    if (y) {
      store(y + j, e0);
      store(y + j + kWidth, e1);
    }
    a0 += e0;
    a1 += e1;
  }
  for (; j < n; j += kWidth) {
    const int64_t left = n - j < kWidth ? n - j : kWidth;
    const VF e = exp_term(load_part(x + j, left, -kInfinity) - shift);
    if (y) store_part(y + j, e, left);
    a0 += e;
  }
  return fold_lanes(a0 + a1, kAdd);
}

// sum_exp_of for a row whose max is m, shifted by softmax_shift_of(m).
inline float sum_exp(const float* x, int64_t n, float m, float* y) {
  const float shift = softmax_shift_of(m);
  return shift == m ? sum_exp_of<true>(x, n, shift, y) : sum_exp_of<false>(x, n, shift, y);
}

inline float reduce_row(Reduction kind, const float* x, int64_t n) {
  switch (kind) {
    case Reduction::kSum: return static_cast<float>(sum_row<Reduction::kSum>(x, n));
    case Reduction::kMean: return static_cast<float>(sum_row<Reduction::kSum>(x, n) / static_cast<double>(n));  // n = 0: NaN
    case Reduction::kMax: return row_max(x, n);
    case Reduction::kMin: return extreme_row(x, n, kMin, kInfinity);
    case Reduction::kSumSquare:
    case Reduction::kSquaredDeviation:  // from 0: a row has no shift
      return static_cast<float>(sum_row<Reduction::kSumSquare>(x, n));
    case Reduction::kL1: return static_cast<float>(sum_row<Reduction::kL1>(x, n));
    case Reduction::kL2: return static_cast<float>(__builtin_sqrt(sum_row<Reduction::kSumSquare>(x, n)));
    case Reduction::kLogSumExp: {
      const float m = row_max(x, n);
      return softmax_shift_of(m) + __builtin_logf(sum_exp(x, n, m, nullptr));
    }
  }
  return 0;
}

inline void reduce_rows_impl(Reduction kind, const float* x, int64_t rows, int64_t n, float* out) {
  for (int64_t r = 0; r < rows; ++r) out[r] = reduce_row(kind, x + r * n, n);
}

// ------------------------------------------- reductions over leading axes

// f(j, count) over a row of n floats, a vector at a time: count kWidth, and
// once the rest (under kWidth).
template <typename F>
void for_row_vectors(int64_t n, F f) {
  int64_t j = 0;
  for (; j + kWidth <= n; j += kWidth) f(j, kWidth);
  if (j < n) f(j, n - j);
}
inline VF load_n(const float* p, int64_t count) { return count == kWidth ? load(p) : load_part(p, count, 0.f); }
inline void store_n(float* p, VF v, int64_t count) {
  if (count == kWidth) store(p, v);
  else store_part(p, v, count);
}

// The larger (smaller) of a and v, or v where it is NaN: a NaN anywhere in
// a fold reaches its result.
const auto kMaxKeepNan = [](VF a, VF v) { return (v > a) | (v != v) ? v : a; };
const auto kMinKeepNan = [](VF a, VF v) { return (v < a) | (v != v) ? v : a; };

// Rows folded into ext, four at a time: one load and store of ext per four.
template <typename Op>
void extreme_columns_loop(const float* x, int64_t rows, int64_t ld, int64_t n, float* ext, Op op) {
  int64_t r = 0;
  for (; r + 4 <= rows; r += 4) {
    const float* p = x + r * ld;
    for_row_vectors(n, [&](int64_t j, int64_t c) {
      const VF m = op(op(load_n(p + j, c), load_n(p + ld + j, c)), op(load_n(p + 2 * ld + j, c), load_n(p + 3 * ld + j, c)));
      store_n(ext + j, op(load_n(ext + j, c), m), c);
    });
  }
  for (; r < rows; ++r)
    for_row_vectors(n, [&](int64_t j, int64_t c) { store_n(ext + j, op(load_n(ext + j, c), load_n(x + r * ld + j, c)), c); });
}

inline void extreme_columns_impl(Reduction kind, const float* x, int64_t rows, int64_t ld, int64_t n, float* ext) {
  if (kind == Reduction::kMin) extreme_columns_loop(x, rows, ld, n, ext, kMinKeepNan);
  else extreme_columns_loop(x, rows, ld, n, ext, kMaxKeepNan);
}

// Rows added in float before their sum joins the double accumulator: a
// double add per element held a column sum at half the memory's bandwidth.
constexpr int64_t kFoldRun = 64;

// The column sums whose terms take the column's shift.
template <Reduction K>
constexpr bool kShifted = K == Reduction::kLogSumExp || K == Reduction::kSquaredDeviation;

template <Reduction K>
void sum_columns_loop(const float* x, int64_t rows, int64_t ld, int64_t n, const float* shift, double* acc) {
  if (n < kWidth) {  // rows narrower than a vector: as partial vectors each cost 4x a loop in double
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = 0; j < n; ++j)
        acc[j] += column_term<K>(static_cast<double>(x[r * ld + j]), kShifted<K> ? static_cast<double>(shift[j]) : 0.0);
    return;
  }
  float run[kFoldColumns];
  const auto term = [&](const float* p, int64_t j, int64_t c) {
    return column_term<K>(load_n(p + j, c), kShifted<K> ? load_n(shift + j, c) : VF{});
  };
  for (int64_t r0 = 0; r0 < rows; r0 += kFoldRun) {
    const int64_t r1 = r0 + kFoldRun < rows ? r0 + kFoldRun : rows;
    for_row_vectors(n, [&](int64_t j, int64_t c) { store_n(run + j, term(x + r0 * ld, j, c), c); });
    int64_t r = r0 + 1;
    for (; r + 2 <= r1; r += 2) {
      const float* p = x + r * ld;
      for_row_vectors(n, [&](int64_t j, int64_t c) {
        store_n(run + j, load_n(run + j, c) + (term(p, j, c) + term(p + ld, j, c)), c);
      });
    }
    if (r < r1)
      for_row_vectors(n, [&](int64_t j, int64_t c) { store_n(run + j, load_n(run + j, c) + term(x + r * ld, j, c), c); });
    for (int64_t j = 0; j < n; ++j) {
      if (float_sum_holds<K>(run[j])) {
        acc[j] += static_cast<double>(run[j]);
        continue;
      }
      const double s = kShifted<K> ? static_cast<double>(shift[j]) : 0.0;
      for (int64_t i = r0; i < r1; ++i) acc[j] += column_term<K>(static_cast<double>(x[i * ld + j]), s);
    }
  }
}

inline void sum_columns_impl(Reduction kind, const float* x, int64_t rows, int64_t ld, int64_t n, const float* shift,
                             double* acc) {
  switch (kind) {
    case Reduction::kSumSquare: case Reduction::kL2:
      return sum_columns_loop<Reduction::kSumSquare>(x, rows, ld, n, shift, acc);
    case Reduction::kL1: return sum_columns_loop<Reduction::kL1>(x, rows, ld, n, shift, acc);
    case Reduction::kLogSumExp: return sum_columns_loop<Reduction::kLogSumExp>(x, rows, ld, n, shift, acc);
    case Reduction::kSquaredDeviation:
      return sum_columns_loop<Reduction::kSquaredDeviation>(x, rows, ld, n, shift, acc);
    default: return sum_columns_loop<Reduction::kSum>(x, rows, ld, n, shift, acc);  // Sum, Mean
  }
}

// ---------------------------------------------------------------- Softmax

// y = x + mask (mask_stride 1, or one value when 0); returns the max of y.
inline float add_mask_and_max(const float* x, const float* mask, int mask_stride, int64_t n, float* y) {
  VF m0 = splat(-kInfinity), m1 = m0;
  const VF broadcast = splat(mask[0]);
  int64_t j = 0;
  for (; j + 2 * kWidth <= n; j += 2 * kWidth) {
    const VF t0 = load(x + j) + (mask_stride ? load(mask + j) : broadcast);
    const VF t1 = load(x + j + kWidth) + (mask_stride ? load(mask + j + kWidth) : broadcast);
    store(y + j, t0);
    store(y + j + kWidth, t1);
    m0 = kMax(m0, t0);
    m1 = kMax(m1, t1);
  }
  float m = fold_lanes(kMax(m0, m1), kMax);
  for (; j < n; ++j) {
    y[j] = x[j] + mask[mask_stride ? j : 0];
    m = kMax(m, y[j]);
  }
  return m;
}

// y = softmax(x + mask) over one row; x and y may alias.
inline void softmax_row_impl(const float* x, const float* mask, int mask_stride, int64_t n, float* y, bool log) {
  if (n <= 0) return;
  const float* t = x;  // the row softmax normalizes: x, or x + mask stored in y
  float m;
  if (mask) {
    m = add_mask_and_max(x, mask, mask_stride, n, y);
    t = y;
  } else {  // plain compares: a NaN dropped here still reaches the sum through exp, as in the reference
    m = fold_row(x, n, -kInfinity, kMax);
  }
  const float shift = softmax_shift_of(m);
  if (log) {
    // (t - shift) - log(sum), not t - (shift + log(sum)), which loses log(sum) next to a large shift.
    const float log_sum = __builtin_logf(sum_exp(t, n, m, nullptr));
    for (int64_t j = 0; j < n; ++j) y[j] = (t[j] - shift) - log_sum;
    return;
  }
  const float inv = 1.f / sum_exp(t, n, m, y);
  for (int64_t j = 0; j < n; ++j) y[j] *= inv;
}

// y = x / sqrt(mean(x^2) + eps) * scale over one row; x and y may alias.
// The squares are summed in float lanes, the lanes and the tail in double.
inline void rms_norm_row_impl(const float* x, int64_t n, const float* scale, bool one_scale, float eps, float* y) {
  if (n <= 0) return;
  VF acc = splat(0.f);
  int64_t j = 0;
  for (; j + kWidth <= n; j += kWidth) {
    const VF v = load(x + j);
    acc += v * v;
  }
  float lanes[kWidth];
  store(lanes, acc);
  double sum = 0;
  for (float l : lanes) sum += static_cast<double>(l);
  for (int64_t k = j; k < n; ++k) sum += static_cast<double>(x[k]) * static_cast<double>(x[k]);
  const auto inv = static_cast<float>(1.0 / __builtin_sqrt(sum / static_cast<double>(n) + static_cast<double>(eps)));
  if (one_scale) {
    const float f = inv * scale[0];
    const VF fv = splat(f);
    for (j = 0; j + kWidth <= n; j += kWidth) store(y + j, load(x + j) * fv);
    for (; j < n; ++j) y[j] = x[j] * f;
    return;
  }
  const VF iv = splat(inv);
  for (j = 0; j + kWidth <= n; j += kWidth) store(y + j, load(x + j) * iv * load(scale + j));
  for (; j < n; ++j) y[j] = x[j] * inv * scale[j];
}

// sum over j < n of f(vector at j) in float lanes, a run of kMomentRun
// floats at a time, the runs added in double; plus tail(j) for the last
// elements past whole vectors.
constexpr int64_t kMomentRun = 4096;
template <typename F, typename Tail>
inline double sum_in_runs(int64_t n, F f, Tail tail) {
  double total = 0;
  int64_t j = 0;
  for (int64_t run_end = std::min(n, kMomentRun); j + kWidth <= n; run_end = std::min(n, run_end + kMomentRun)) {
    VF acc = splat(0.f);
    for (; j + kWidth <= run_end; j += kWidth) acc += f(j);
    float lanes[kWidth];
    store(lanes, acc);
    for (float l : lanes) total += static_cast<double>(l);
  }
  for (; j < n; ++j) total += tail(j);
  return total;
}

inline void moments_row_impl(const float* x, int64_t n, double* mean_out, double* variance_out) {
  const double mean = sum_in_runs(n, [&](int64_t j) { return load(x + j); },
                                  [&](int64_t j) { return static_cast<double>(x[j]); }) /
                      static_cast<double>(n);
  // Deviations from the mean rounded to float, m: sum (x - m)^2 = sum (x - mean)^2 + n (mean - m)^2.
  const auto m = static_cast<float>(mean);
  const VF mv = splat(m);
  const double squares = sum_in_runs(
      n,
      [&](int64_t j) {
        const VF d = load(x + j) - mv;
        return d * d;
      },
      [&](int64_t j) {
        const double d = static_cast<double>(x[j]) - static_cast<double>(m);
        return d * d;
      });
  const double shift = mean - static_cast<double>(m);
  *mean_out = mean;
  const double variance = squares / static_cast<double>(n) - shift * shift;
  *variance_out = variance < 0 ? 0.0 : variance;  // rounding below zero; a NaN (an infinity in x) stays
}

// The exps of one query's attention scores and the factor that normalizes
// them (kernels/vec/attention.cc), in place: s[j] = exp(t[j] - max t) with
// t = s * scale + mask (mask null: none) for j < n, zeros from n to len (the
// keys a causal row does not see); returns 1 / the sum of the exps, which
// the row's output takes after the product with V (a pass over its values,
// not over the keys). A row whose largest term is infinite (every key
// masked, or a score of +inf) or whose exps sum to NaN gives zeros and 0,
// as the reference kernel's (ref/attention.cc).
template <bool Masked>
inline float attention_exps(float* s, int64_t n, int64_t len, float scale, const float* mask) {
  const VF sv = splat(scale);
  const auto term = [&](int64_t j) {
    if constexpr (Masked) return load(s + j) * sv + load(mask + j);
    else return load(s + j) * sv;
  };
  VF mv = splat(-kInfinity);
  int64_t j = 0;
  for (; j + kWidth <= n; j += kWidth) mv = kMax(mv, term(j));
  const int64_t tail = j;
  float lanes[kWidth];  // the last, partial vector's terms; -inf past n (exp(-inf) = 0)
  for (int l = 0; l < kWidth; ++l)
    lanes[l] = tail + l < n ? s[tail + l] * scale + (Masked ? mask[tail + l] : 0.f) : -kInfinity;
  const VF last = load(lanes);
  const float m = fold_lanes(kMax(mv, last), kMax);  // NaN terms dropped, as the reference's max
  float sum = 0.f;
  if (m != -kInfinity && m != kInfinity) {
    const VF shift = splat(m);  // every term - shift <= 0
    VF sums = splat(0.f);
    for (j = 0; j + kWidth <= n; j += kWidth) {
      const VF e = exp_nonpositive(term(j) - shift);
      store(s + j, e);
      sums += e;
    }
    if (tail < n) {
      const VF e = exp_nonpositive(last - shift);
      store_part(s + tail, e, n - tail);
      sums += e;
    }
    sum = fold_lanes(sums, [](VF a, VF b) { return a + b; });
  }
  if (!(sum > 0.f)) {  // nothing to normalize: every key masked, an infinite max, or NaN
    for (j = 0; j < len; ++j) s[j] = 0.f;
    return 0.f;
  }
  for (j = n; j < len; ++j) s[j] = 0.f;
  return 1.f / sum;
}

inline float attention_exps_impl(float* s, int64_t n, int64_t len, float scale, const float* mask) {
  return mask ? attention_exps<true>(s, n, len, scale, mask) : attention_exps<false>(s, n, len, scale, mask);
}

// ---------------------------------------------------------------- element-wise chains

// y = f(a) and y = f(a, b) over a block, a vector at a time.
template <typename F>
void map_block(const float* a, float* y, int64_t n, F f) {
  int64_t j = 0;
  for (; j + kWidth <= n; j += kWidth) store(y + j, f(load(a + j)));
  if (j < n) store_part(y + j, f(load_part(a + j, n - j, 0.f)), n - j);
}
template <typename F>
void zip_block(const float* a, const float* b, float* y, int64_t n, F f) {
  int64_t j = 0;
  for (; j + kWidth <= n; j += kWidth) store(y + j, f(load(a + j), load(b + j)));
  if (j < n) store_part(y + j, f(load_part(a + j, n - j, 0.f), load_part(b + j, n - j, 1.f)), n - j);
}

// One binary step with its operand on either side.
template <typename F>
void binary_step(const ChainStep& step, const float* v, const float* operand, float* y, int64_t n, F f) {
  if (step.operand == ChainOperand::kScalar) {
    const VF s = splat(step.scalar);
    if (step.swapped) map_block(v, y, n, [&](VF a) { return f(s, a); });
    else map_block(v, y, n, [&](VF a) { return f(a, s); });
  } else if (step.swapped) {
    zip_block(v, operand, y, n, [&](VF a, VF b) { return f(b, a); });
  } else {
    zip_block(v, operand, y, n, f);
  }
}

inline VF sigmoid_vec(VF v) {  // as the reference: exp of a non-positive argument only
  const VF e = exp_approx(v > 0.f ? -v : v);
  return v > 0.f ? 1.f / (1.f + e) : e / (1.f + e);
}

// 1 / d for d in [1, 2] (or NaN): the hardware's estimate (14 bits on
// AVX-512, 12 below) and one Newton step, within a few ulp (the estimate's
// tables differ between Intel and AMD, so the last bits may too).
inline VF reciprocal_1_to_2(VF d) {
#if defined(__AVX512F__)
  // (the masked form: GCC 12 warns that _mm512_rcp14_ps's undefined pass-through may be used)
  const VF r = __builtin_bit_cast(VF, _mm512_maskz_rcp14_ps(0xffff, __builtin_bit_cast(__m512, d)));
#elif defined(__AVX2__)  // as kWidth
  const VF r = __builtin_bit_cast(VF, _mm256_rcp_ps(__builtin_bit_cast(__m256, d)));
#else
  const VF r = __builtin_bit_cast(VF, _mm_rcp_ps(__builtin_bit_cast(__m128, d)));
#endif
  return r * (2.f - d * r);
}

// exp(-|v|) for the logistic forms below: its argument is never positive
// (no overflow), and 1 + it lies in [1, 2] (reciprocal_1_to_2). Few
// instructions, since 512-bit ones issue on two ports only: -|v| as a sign
// bit set; below -87.33 (where 2^k would leave the normal range) 0. NaN
// gives NaN on AVX-512 only: the callers keep NaN themselves.
inline VF exp_of_minus_abs(VF v) {
  constexpr float kLowest = -87.33f;
  const VF t = __builtin_bit_cast(VF, __builtin_bit_cast(VI, v) | static_cast<int32_t>(0x80000000u));
  VF k;
#if defined(__AVX512F__)  // p * 2^k in one instruction, for any k (masked: see reciprocal_1_to_2)
  // Past kLowest (-inf too) the value is replaced below; scalef's denormal or
  // underflowing results there cost nothing extra (4096 values of -10, -95,
  // -100 or -200 ran at one speed on the AMX Xeon).
  const VF p = exp_of_remainder(t, k);
  const VF scaled = __builtin_bit_cast(
      VF, _mm512_maskz_scalef_ps(0xffff, __builtin_bit_cast(__m512, p), __builtin_bit_cast(__m512, k)));
#else  // k becomes an integer: clamped first, so that it fits
  const VF p = exp_of_remainder(t > kLowest ? t : splat(kLowest), k);
  const VF scaled = p * __builtin_bit_cast(VF, (__builtin_convertvector(k, VI) + 127) << 23);
#endif
  return t < kLowest ? splat(0.f) : scaled;
}

// x * sigmoid(a x) as (a x > 0 ? x : x e) / (1 + e), e = exp(-|a x|). A NaN
// a x (NaN x, or 0 * inf) gives NaN, and -inf gives NaN, as the reference's
// x / (1 + exp(-a x)).
inline VF swish_vec(VF x, VF alpha) {
  const VF ax = alpha * x;
  const VF e = exp_of_minus_abs(ax);
  const VF y = (ax > 0.f ? x : x * e) * reciprocal_1_to_2(1.f + e);
  return ax == ax ? y : ax;
}

// sigmoid(v) as (v > 0 ? 1 : e) / (1 + e), e = exp(-|v|); NaN stays NaN.
inline VF sigmoid_fast_vec(VF v) {
  const VF e = exp_of_minus_abs(v);
  const VF s = (v > 0.f ? splat(1.f) : e) * reciprocal_1_to_2(1.f + e);
  return v == v ? s : v;
}

// y = f(x) over n floats, four vectors a step: four independent chains of
// these long formulas ran 0.81x the time of one in L1.
template <typename F>
void map_block_wide(const float* x, float* y, int64_t n, F f) {
  int64_t j = 0;
  for (; j + 4 * kWidth <= n; j += 4 * kWidth) {
    VF v[4];
#pragma GCC unroll 4
    for (int u = 0; u < 4; ++u) v[u] = f(load(x + j + u * kWidth));
#pragma GCC unroll 4
    for (int u = 0; u < 4; ++u) store(y + j + u * kWidth, v[u]);
  }
  map_block(x + j, y + j, n - j, f);
}

inline void swish_impl(const float* x, float* y, int64_t n, float alpha) {
  const VF a = splat(alpha);
  map_block_wide(x, y, n, [&](VF v) { return swish_vec(v, a); });
}

inline void sigmoid_impl(const float* x, float* y, int64_t n) { map_block_wide(x, y, n, sigmoid_fast_vec); }

inline void chain_block_impl(const ChainStep* steps, int count, const float* x, const float* const* operands,
                             float* y, int64_t n) {
  const float* v = x;
  for (int s = 0; s < count; ++s, v = y) {
    const ChainStep& step = steps[s];
    switch (step.op) {
      case ChainOp::kRelu: map_block(v, y, n, [](VF a) { return a > 0.f ? a : splat(0.f); }); break;
      case ChainOp::kNeg: map_block(v, y, n, [](VF a) { return -a; }); break;
      case ChainOp::kAbs:  // the sign bit cleared: |-0| = +0, as fabs
        map_block(v, y, n, [](VF a) { return __builtin_bit_cast(VF, __builtin_bit_cast(VI, a) & 0x7fffffff); });
        break;
      case ChainOp::kSqrt:
        map_block(v, y, n, [](VF a) {
          VF r;
          for (int l = 0; l < kWidth; ++l) r[l] = __builtin_sqrtf(a[l]);
          return r;
        });
        break;
      case ChainOp::kExp: map_block(v, y, n, exp_approx); break;
      case ChainOp::kSigmoid: map_block(v, y, n, sigmoid_vec); break;
      case ChainOp::kAdd: binary_step(step, v, operands[s], y, n, [](VF a, VF b) { return a + b; }); break;
      case ChainOp::kSub: binary_step(step, v, operands[s], y, n, [](VF a, VF b) { return a - b; }); break;
      case ChainOp::kMul: binary_step(step, v, operands[s], y, n, [](VF a, VF b) { return a * b; }); break;
      case ChainOp::kDiv: binary_step(step, v, operands[s], y, n, [](VF a, VF b) { return a / b; }); break;
      case ChainOp::kCount: break;
    }
  }
}

// ---------------------------------------------------------------- batch normalization

template <bool Relu>
inline VF normalized(VF x, VF mean, VF scale, VF shift) {
  const VF y = (x - mean) * scale + shift;
  if constexpr (Relu) return y > 0.f ? y : splat(0.f);
  return y;
}

template <bool Relu>
void batch_norm_rows_of(const float* x, float* y, int64_t rows, int64_t n, const float* mean, const float* scale,
                        const float* shift, bool per_lane) {
  if (!per_lane) {
    const VF m = splat(*mean), s = splat(*scale), b = splat(*shift);
    map_block(x, y, rows * n, [&](VF v) { return normalized<Relu>(v, m, s, b); });
  } else if (n == kWidth) {  // a channel block of the ISA's width: its values stay in registers
    const VF m = load(mean), s = load(scale), b = load(shift);
    for (int64_t r = 0; r < rows; ++r) store(y + r * n, normalized<Relu>(load(x + r * n), m, s, b));
  } else {
    for (int64_t r = 0; r < rows; ++r)
      for_row_vectors(n, [&](int64_t j, int64_t count) {
        store_n(y + r * n + j,
                normalized<Relu>(load_n(x + r * n + j, count), load_n(mean + j, count), load_n(scale + j, count),
                                 load_n(shift + j, count)),
                count);
      });
  }
}

inline void batch_norm_rows_impl(const float* x, float* y, int64_t rows, int64_t n, const float* mean,
                                 const float* scale, const float* shift, bool per_lane, bool relu) {
  if (relu) batch_norm_rows_of<true>(x, y, rows, n, mean, scale, shift, per_lane);
  else batch_norm_rows_of<false>(x, y, rows, n, mean, scale, shift, per_lane);
}
