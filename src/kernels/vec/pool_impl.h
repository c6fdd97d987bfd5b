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

// The windows of output rows [oh_begin, oh_end), ow pixels each, over an
// ih x iw plane: f(o, h0, h_lo, h_hi, w0, w_lo, w_hi) with o the output
// pixel's number in the plane, (h0, w0) the window's first tap and [lo, hi)
// its taps inside the plane along each axis.
template <typename F>
inline void for_each_window(int64_t ih, int64_t iw, int64_t ow, const PoolWindow& w, int64_t oh_begin, int64_t oh_end,
                            F f) {
  for (int64_t oh = oh_begin; oh < oh_end; ++oh) {
    const int64_t h0 = oh * w.sh - w.ph;
    int64_t h_lo, h_hi;
    taps_inside(h0, w.kh, w.dh, ih, &h_lo, &h_hi);
    for (int64_t ox = 0; ox < ow; ++ox) {
      const int64_t w0 = ox * w.sw - w.pw;
      int64_t w_lo, w_hi;
      taps_inside(w0, w.kw, w.dw, iw, &w_lo, &w_hi);
      f(oh * ow + ox, h0, h_lo, h_hi, w0, w_lo, w_hi);
    }
  }
}

inline void max_pool_rows_impl(const float* src, int64_t ih, int64_t iw, int64_t src_pixel, float* dst, int64_t ow,
                               int64_t dst_pixel, int64_t channels, const PoolWindow& w, int64_t oh_begin,
                               int64_t oh_end) {
  constexpr float kLowest = -3.40282347e38f;  // the reference's start when a window has no tap
  for_each_window(ih, iw, ow, w, oh_begin, oh_end,
                  [&](int64_t o, int64_t h0, int64_t h_lo, int64_t h_hi, int64_t w0, int64_t w_lo, int64_t w_hi) {
      float* out = dst + o * dst_pixel;
      if (h_lo == h_hi || w_lo == w_hi) {
        for (int64_t c = 0; c < channels; ++c) out[c] = kLowest;
        return;
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
  });
}

// The gradient of max_pool_rows over the same pixel layouts, for output rows
// [oh_begin, oh_end): each window's dy goes to the tap holding its maximum
// (the first of equals, as max_pool_rows and the reference), added into dx
// (laid out as x), which the caller zeroed; with relu_gate only where that
// maximum is positive; a window of padding alone sends nothing. A lane keeps
// its maximum's tap number, then each tap adds dy where it is that tap, so
// the loop runs on whole vectors of channels, without a scatter. Windows
// that overlap add in output order, as the reference does.
inline void max_pool_grad_rows_impl(const float* dy, int64_t ow, int64_t dy_pixel, const float* x, int64_t ih,
                                    int64_t iw, int64_t x_pixel, float* dx, int64_t channels, const PoolWindow& w,
                                    bool relu_gate, int64_t oh_begin, int64_t oh_end) {
  for_each_window(ih, iw, ow, w, oh_begin, oh_end,
                  [&](int64_t o, int64_t h0, int64_t h_lo, int64_t h_hi, int64_t w0, int64_t w_lo, int64_t w_hi) {
      if (h_lo == h_hi || w_lo == w_hi) return;
      const float* g = dy + o * dy_pixel;
      for (int64_t c = 0; c < channels; c += kWidth) {
        const int64_t n = channels - c < kWidth ? channels - c : kWidth;
        auto at = [&](int64_t i, int64_t j) { return ((h0 + i * w.dh) * iw + w0 + j * w.dw) * x_pixel + c; };
        VF best = n == kWidth ? load(x + at(h_lo, w_lo)) : load_part(x + at(h_lo, w_lo), n, 0.f);
        VF tap = splat(0.f), next = splat(0.f);
        for (int64_t i = h_lo; i < h_hi; ++i)
          for (int64_t j = w_lo; j < w_hi; ++j, next += 1.f) {
            const VF v = n == kWidth ? load(x + at(i, j)) : load_part(x + at(i, j), n, 0.f);
            tap = v > best ? next : tap;
            best = v > best ? v : best;
          }
        VF grad = n == kWidth ? load(g + c) : load_part(g + c, n, 0.f);
        if (relu_gate) grad = best > 0.f ? grad : splat(0.f);
        next = splat(0.f);
        for (int64_t i = h_lo; i < h_hi; ++i)
          for (int64_t j = w_lo; j < w_hi; ++j, next += 1.f) {
            float* d = dx + at(i, j);
            const VF add = tap == next ? grad : splat(0.f);
            if (n == kWidth) store(d, load(d) + add);
            else store_part(d, load_part(d, n, 0.f) + add, n);
          }
      }
  });
}
