// Products by a 0/1 matrix by table lookups (vec_kernels.h, BitGemmBlock),
// and the row pass of a two-class head's gradient that makes those 0/1
// matrices. Included like vec_kernels_impl.h: inside an anonymous namespace,
// once per ISA, builtins only.
//
// The vectors are vec_kernels_impl.h's VF, the ISA's own width (GCC's
// generic vectors wider than that went through the stack on AVX2:
// bench/tools/binary_gemm_ab's portable build ran 0.68x oneDNN's AVX2 GEMM;
// at the ISA's width the input gradient of issue 9's MLP took 176 ms
// against 256 for Anvil's AVX2 GEMM on the same shape). Eight partial sums
// in flight: four rows of two zmm, two of four ymm, or one of eight xmm.
constexpr int kBitVectors = kBitColumns / kWidth;  // vectors a table entry spans
constexpr int kBitSums = 8 / kBitVectors;             // partial sums of a row (4, 2 or 1)

// The block's `cols` floats from p as its vectors, zeros past them; and stored back.
inline void bit_load_cols(const float* p, int64_t cols, VF* out) {
  for (int v = 0; v < kBitVectors; ++v) {
    const int64_t n = cols - v * kWidth;
    out[v] = n >= kWidth ? load(p + v * kWidth) : n > 0 ? load_part(p + v * kWidth, n, 0.f) : VF{};
  }
}

inline void bit_store_cols(const VF* in, int64_t cols, float* p) {
  for (int v = 0; v < kBitVectors; ++v) {
    const int64_t n = cols - v * kWidth;
    if (n >= kWidth) store(p + v * kWidth, in[v]);
    else if (n > 0) store_part(p + v * kWidth, in[v], n);
  }
}

// Row k of T, scaled by k_scale[k], over the block's columns (zeros past them).
inline void bit_scaled_row(const BitGemmBlock& b, int64_t k, VF* r) {
  const float* src = b.t + k * b.t_k_stride + b.j0 * b.t_j_stride;
  if (b.t_j_stride == 1) {
    bit_load_cols(src, b.cols, r);
  } else {  // T read transposed: a column of its storage
    float row[kBitColumns];
    for (int64_t j = 0; j < kBitColumns; ++j) row[j] = j < b.cols ? src[j * b.t_j_stride] : 0.f;
    bit_load_cols(row, kBitColumns, r);
  }
  for (int v = 0; v < kBitVectors; ++v) r[v] *= b.k_scale[k];
}

// The tables of chunks [c0, c0 + nc): entry s of chunk c0 + c at
// tab[((c << 4) | s) * kBitVectors], the sum of the rows whose bits s sets.
// Rows past k_size are zero (B's bits there are zero too).
inline void bit_gemm_tables(const BitGemmBlock& b, int64_t c0, int64_t nc, VF* tab) {
  for (int64_t c = 0; c < nc; ++c) {
    VF* e = tab + (c << 4) * kBitVectors;
    for (int v = 0; v < kBitVectors; ++v) e[v] = VF{};
    for (int bit = 0; bit < kBitChunk; ++bit) {
      const int64_t k = (c0 + c) * kBitChunk + bit;
      VF r[kBitVectors] = {};
      if (k < b.k_size) bit_scaled_row(b, k, r);
      const int half = 1 << bit;  // entries [half, 2 half) are entries [0, half) plus this row
      for (int s = 0; s < half; ++s)
        for (int v = 0; v < kBitVectors; ++v) e[(half + s) * kBitVectors + v] = e[s * kBitVectors + v] + r[v];
    }
  }
}

// Rows of the block over chunks [c0, c0 + nc) (nc even: two chunks a byte),
// added to what earlier groups stored unless `first`; the last group applies
// the row scale and the gate and adds the column sums.
inline void bit_gemm_rows(const BitGemmBlock& b, int64_t c0, int64_t nc, const VF* tab, bool first, bool last,
                          VF* column_sums) {
  const int64_t bytes = nc / 2;
  for (int64_t r = b.r0; r < b.r0 + b.rows; ++r) {
    const uint8_t* rb = b.bits + r * b.row_bytes + c0 / 2;
    VF acc[kBitSums][kBitVectors] = {};  // partial sums, so that the adds do not wait on each other
    auto add = [&](int sum, int64_t chunk, unsigned code) {
      const VF* e = tab + ((chunk << 4) | code) * kBitVectors;
      for (int v = 0; v < kBitVectors; ++v) acc[sum][v] += e[v];
    };
    int64_t i = 0;
    for (; i + 2 <= bytes; i += 2)  // chunk c of these four into partial sum c % kBitSums
      for (int a = 0; a < 2; ++a) {
        const unsigned byte = rb[i + a];
        add((2 * a) % kBitSums, (i + a) * 2, byte & 15u);
        add((2 * a + 1) % kBitSums, (i + a) * 2 + 1, byte >> 4);
      }
    for (; i < bytes; ++i) {
      add(0, i * 2, rb[i] & 15u);
      add(0, i * 2 + 1, rb[i] >> 4);
    }
    for (int a = 1; a < kBitSums; ++a)
      for (int v = 0; v < kBitVectors; ++v) acc[0][v] += acc[a][v];
    VF sum[kBitVectors];
    for (int v = 0; v < kBitVectors; ++v) sum[v] = acc[0][v];
    float* out = b.y + r * b.ldy + b.j0;
    if (!first) {
      VF old[kBitVectors];
      bit_load_cols(out, b.cols, old);
      for (int v = 0; v < kBitVectors; ++v) sum[v] += old[v];
    }
    if (last) {
      const float s = b.row_scale[r];
      for (int v = 0; v < kBitVectors; ++v) sum[v] *= s;
      if (b.gate) {
        VF g[kBitVectors];
        bit_load_cols(b.gate + r * b.gate_ld + b.j0, b.cols, g);
        for (int v = 0; v < kBitVectors; ++v) sum[v] = (VF)((VI)sum[v] & (g[v] > 0.f));  // NaN: 0
      }
      if (column_sums)
        for (int v = 0; v < kBitVectors; ++v) column_sums[v] += sum[v];
    }
    bit_store_cols(sum, b.cols, out);
  }
}

inline void bit_gemm_block_impl(const BitGemmBlock& b) {
  auto* tab = reinterpret_cast<VF*>(b.tables);
  const int64_t chunks = b.row_bytes * 2;
  VF column_sums[kBitVectors] = {};
  // Even and at most the scratch's kBitGroupChunks (c0 / 2 must start a byte).
  const int64_t group = b.group_chunks >= 2 && b.group_chunks <= kBitGroupChunks ? b.group_chunks & ~int64_t{1}
                                                                                  : kBitGroupChunks;
  for (int64_t c0 = 0; c0 < chunks; c0 += group) {
    const int64_t nc = chunks - c0 < group ? chunks - c0 : group;
    bit_gemm_tables(b, c0, nc, tab);
    bit_gemm_rows(b, c0, nc, tab, c0 == 0, c0 + nc == chunks, b.column_sums ? column_sums : nullptr);
  }
  if (chunks == 0) {  // K = 0: Y is zero
    for (int64_t r = b.r0; r < b.r0 + b.rows; ++r) __builtin_memset(b.y + r * b.ldy + b.j0, 0, b.cols * sizeof(float));
  }
  if (b.column_sums) bit_store_cols(column_sums, b.cols, b.column_sums);
}

// Eight bits of [h > 0], bit i from h[i].
inline unsigned bit_positive_byte(const float* h) {
#if defined(__AVX__)
  return static_cast<unsigned>(_mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(h), _mm256_setzero_ps(), _CMP_GT_OQ)));
#else
  const __m128 z = _mm_setzero_ps();
  return static_cast<unsigned>(_mm_movemask_ps(_mm_cmpgt_ps(_mm_loadu_ps(h), z)) |
                               _mm_movemask_ps(_mm_cmpgt_ps(_mm_loadu_ps(h + 4), z)) << 4);
#endif
}

inline void gate_row_impl(const float* h, int64_t n, float u, float a, float b, uint8_t* bits, float* gate_sums,
                          float* head) {
  int64_t j = 0;
#if defined(__AVX512F__)
  for (; j + 16 <= n; j += 16) {
    const __mmask16 m = _mm512_cmp_ps_mask(_mm512_loadu_ps(h + j), _mm512_setzero_ps(), _CMP_GT_OQ);
    __builtin_memcpy(bits + j / 8, &m, 2);
  }
#endif
  for (; j + 8 <= n; j += 8) bits[j / 8] = static_cast<uint8_t>(bit_positive_byte(h + j));
  if (j < n) {
    unsigned byte = 0;
    for (int64_t i = j; i < n; ++i) byte |= (h[i] > 0.f ? 1u : 0u) << (i - j);
    bits[j / 8] = static_cast<uint8_t>(byte);
  }
  if (gate_sums) {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) gate_sums[i] += h[i] > 0.f ? u : 0.f;
  }
  if (head) {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) {
      head[i] += a * h[i];
      head[n + i] += b * h[i];
    }
  }
}
