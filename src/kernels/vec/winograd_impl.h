// The per-ISA half of Anvil's Winograd convolution (winograd.h): F(4x4, 3x3)
// input and output transforms of one tile, kWidth channels per vector (a
// channel block of the blocked activation layout). Included after
// vec_kernels_impl.h, inside the same anonymous namespace.
//
// Lavin and Gray's matrices (interpolation points 0, +-1, +-2):
//   V = B^T d B  (d: the 6x6 input patch)
//   Y = A^T M A  (M: the 6x6 products, Y: the 4x4 output tile)
// with
//   B^T = [4 0 -5 0 1 0; 0 -4 -4 1 1 0; 0 4 -4 -1 1 0;
//          0 -2 -1 2 1 0; 0 2 -1 -2 1 0; 0 4 0 -5 0 1]
//   A^T = [1 1 1 1 1 0; 0 1 -1 2 -2 0; 0 1 1 4 4 0; 0 1 -1 8 -8 1]

// B^T applied to six vectors d[0..5], s apart in `in` and `out`.
inline void winograd_bt6(const VF* in, int s, VF* out) {
  const VF d0 = in[0], d1 = in[s], d2 = in[2 * s], d3 = in[3 * s], d4 = in[4 * s], d5 = in[5 * s];
  const VF t4 = d4 - 4.f * d2, t3 = d3 - 4.f * d1;  // rows 1 and 2 share them
  const VF u4 = d4 - d2, u3 = 2.f * (d3 - d1);      // rows 3 and 4
  out[0] = 4.f * d0 - 5.f * d2 + d4;
  out[s] = t4 + t3;
  out[2 * s] = t4 - t3;
  out[3 * s] = u4 + u3;
  out[4 * s] = u4 - u3;
  out[5 * s] = 4.f * d1 - 5.f * d3 + d5;
}

// A^T applied to six vectors m[0..5], s apart in `in`, into four, so apart in `out`.
inline void winograd_at6(const VF* in, int s, VF* out, int so) {
  const VF m0 = in[0], m1 = in[s], m2 = in[2 * s], m3 = in[3 * s], m4 = in[4 * s], m5 = in[5 * s];
  const VF a = m1 + m2, b = m1 - m2, c = m3 + m4, d = m3 - m4;
  out[0] = m0 + a + c;
  out[so] = b + 2.f * d;
  out[2 * so] = a + 4.f * c;
  out[3 * so] = b + 8.f * d + m5;
}

// The tile whose 6x6 input patch starts at (row0, col0) of a channel block's
// plane x (ih x iw pixels, kWidth floats each; zero outside it) as its 36
// transformed vectors: element (i, j) at v + (6 i + j) * v_stride.
inline void winograd_input_tile_impl(const float* x, int64_t ih, int64_t iw, int64_t row0, int64_t col0, float* v,
                                     int64_t v_stride) {
  VF d[36];
  if (row0 >= 0 && row0 + 6 <= ih && col0 >= 0 && col0 + 6 <= iw) {  // inside the image: no checks per pixel
    const float* patch = x + (row0 * iw + col0) * kWidth;
    // The four new pixels of each row three tiles on: 24 streams (6 rows x 4
    // channel blocks at 64 channels) that the caches' own prefetchers miss.
    // The super-resolution net's 224x224 planes: 2-4% faster per node.
    if (col0 + 18 <= iw)
      for (int i = 0; i < 6; ++i)
        for (int b = 0; b < 4 * kWidth * 4; b += 64)
          __builtin_prefetch(reinterpret_cast<const char*>(patch + (i * iw + 14) * kWidth) + b);
    for (int i = 0; i < 6; ++i)
      for (int j = 0; j < 6; ++j) d[i * 6 + j] = load(patch + (i * iw + j) * kWidth);
  } else {
    for (int i = 0; i < 6; ++i) {
      const int64_t r = row0 + i;
      for (int j = 0; j < 6; ++j) {
        const int64_t c = col0 + j;
        d[i * 6 + j] = r >= 0 && r < ih && c >= 0 && c < iw ? load(x + (r * iw + c) * kWidth) : splat(0.f);
      }
    }
  }
  VF t[36];
  for (int j = 0; j < 6; ++j) winograd_bt6(d + j, 6, t + j);      // columns: B^T d
  for (int i = 0; i < 6; ++i) winograd_bt6(t + i * 6, 1, d + i * 6);  // rows: (B^T d) B
  for (int e = 0; e < 36; ++e) store(v + e * v_stride, d[e]);
}

// The 4x4 output tile (rows x cols of it inside the output) from the tile's
// 36 products, element (i, j) at m + (6 i + j) * m_stride: plus bias (a
// vector, or null) and the residual (laid out as y, or null; may be y), then
// ReLU when asked; y is the tile's first pixel, rows ow pixels apart.
inline void winograd_output_tile_impl(const float* m, int64_t m_stride, const float* bias, const float* residual,
                                      float* y, int64_t ow, int rows, int cols, bool relu) {
  VF p[36];
  for (int e = 0; e < 36; ++e) p[e] = load(m + e * m_stride);
  VF t[24];  // 4 x 6: A^T M
  for (int j = 0; j < 6; ++j) winograd_at6(p + j, 6, t + j, 6);
  VF o[16];
  for (int i = 0; i < 4; ++i) winograd_at6(t + i * 6, 1, o + i * 4, 1);
  const VF b = bias ? load(bias) : splat(0.f);
  for (int i = 0; i < rows; ++i)
    for (int j = 0; j < cols; ++j) {
      const int64_t at = (i * ow + j) * kWidth;
      VF r = o[i * 4 + j] + b;
      if (residual) r += load(residual + at);
      if (relu) r = r > 0.f ? r : splat(0.f);
      store(y + at, r);
    }
}
