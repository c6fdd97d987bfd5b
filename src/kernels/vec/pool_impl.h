// The per-ISA max pooling over pixels that hold their channels contiguously
// (nChw8c / nChw16c blocks, NHWC rows). Included after vec_kernels_impl.h,
// inside the same anonymous namespace.

// The taps [lo, hi) of a window starting at `start` (stride `step`, `taps` of
// them) that fall inside [0, size).
inline void taps_inside(int64_t start, int64_t taps, int64_t step, int64_t size, int64_t* lo, int64_t* hi) {
  int64_t l = 0, h = taps;
  while (l < h && start + l * step < 0) ++l;
  while (h > l && start + (h - 1) * step >= size) --h;
  *lo = l;
  *hi = h;
}

inline void max_pool_rows_impl(const float* src, int64_t ih, int64_t iw, int64_t src_pixel, float* dst, int64_t ow,
                               int64_t dst_pixel, int64_t channels, const PoolWindow& w, int64_t oh_begin,
                               int64_t oh_end) {
  constexpr float kLowest = -3.40282347e38f;  // the reference's start when a window has no tap
  for (int64_t oh = oh_begin; oh < oh_end; ++oh) {
    const int64_t h0 = oh * w.sh - w.ph;
    int64_t h_lo, h_hi;
    taps_inside(h0, w.kh, w.dh, ih, &h_lo, &h_hi);
    for (int64_t ox = 0; ox < ow; ++ox) {
      const int64_t w0 = ox * w.sw - w.pw;
      int64_t w_lo, w_hi;
      taps_inside(w0, w.kw, w.dw, iw, &w_lo, &w_hi);
      float* out = dst + (oh * ow + ox) * dst_pixel;
      if (h_lo == h_hi || w_lo == w_hi) {
        for (int64_t c = 0; c < channels; ++c) out[c] = kLowest;
        continue;
      }
      for (int64_t c = 0; c < channels; c += kWidth) {
        const int64_t n = channels - c < kWidth ? channels - c : kWidth;
        const float* first = src + ((h0 + h_lo * w.dh) * iw + w0 + w_lo * w.dw) * src_pixel + c;
        // As the reference: the first tap, then any tap greater (a NaN first stays, a later one is passed over).
        VF m = n == kWidth ? load(first) : load_part(first, n, 0.f);
        for (int64_t i = h_lo; i < h_hi; ++i) {
          const float* row = src + (h0 + i * w.dh) * iw * src_pixel + c;
          for (int64_t j = w_lo; j < w_hi; ++j) {
            const float* p = row + (w0 + j * w.dw) * src_pixel;
            const VF v = n == kWidth ? load(p) : load_part(p, n, 0.f);
            m = v > m ? v : m;
          }
        }
        if (n == kWidth) store(out + c, m);
        else store_part(out + c, m, n);
      }
    }
  }
}
