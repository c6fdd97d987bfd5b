// The loops behind update_kernels.h, written for the compiler to vectorize at
// whatever ISA the including translation unit is built for. Included inside
// an anonymous namespace, so each ISA's copy stays private to its unit.
// PyTorch's formulas, operation for operation, so losses track its own.

// Sums in float lanes within the chunk (a fixed order for a given ISA, hence
// deterministic), in double across chunks.
inline double sum_squares_impl(const float* g, int64_t n) {
  float sum = 0;
#pragma omp simd reduction(+ : sum)
  for (int64_t i = 0; i < n; ++i) sum += g[i] * g[i];
  return sum;
}

inline double adam_impl(float* __restrict p, const float* __restrict g, float* __restrict m, float* __restrict v,
                        int64_t n, const AdamStep& s) {
  const float b1 = s.beta1, b2 = s.beta2, c1 = 1 - s.beta1, c2 = 1 - s.beta2;
  const float keep = 1 - s.decay;
  float sum = 0;
#pragma omp simd reduction(+ : sum)
  for (int64_t i = 0; i < n; ++i) {
    sum += g[i] * g[i];
    const float pi = p[i] * keep;
    const float gi = g[i] * s.clip + s.l2 * pi;
    const float mi = b1 * m[i] + c1 * gi;
    const float vi = b2 * v[i] + c2 * gi * gi;
    m[i] = mi;
    v[i] = vi;
    p[i] = pi - s.step_size * mi / (__builtin_sqrtf(vi) * s.inv_sqrt_bias2 + s.eps);
  }
  return sum;
}

inline double sgd_impl(float* __restrict p, const float* __restrict g, float* __restrict buf, int64_t n,
                       const SgdStep& s) {
  float sum = 0;
  if (!buf) {
#pragma omp simd reduction(+ : sum)
    for (int64_t i = 0; i < n; ++i) {
      sum += g[i] * g[i];
      p[i] -= s.lr * (g[i] * s.clip + s.l2 * p[i]);
    }
    return sum;
  }
  const float mu = s.momentum, first = s.first_step ? 0.f : 1.f;
  const float nesterov = s.nesterov ? 1.f : 0.f;
#pragma omp simd reduction(+ : sum)
  for (int64_t i = 0; i < n; ++i) {
    sum += g[i] * g[i];
    const float gi = g[i] * s.clip + s.l2 * p[i];
    const float bi = first * mu * buf[i] + gi;  // the first step: the buffer is the gradient
    buf[i] = bi;
    const float step = nesterov * (gi + mu * bi) + (1 - nesterov) * bi;
    p[i] -= s.lr * step;
  }
  return sum;
}
