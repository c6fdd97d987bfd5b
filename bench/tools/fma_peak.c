/* The CPU's fp32 peak, measured: each OpenMP thread runs independent chains
 * of fused multiply-adds on the widest vectors the compiler targets
 * (-march=native: 16 lanes with AVX-512, 8 with AVX2), enough chains to hide
 * the FMA latency. Prints GFLOP/s (2 flops per lane per FMA) for the threads
 * OMP_NUM_THREADS gives. Built and run by bench/train_compare --peak.
 *
 *   fma_peak            the best of three bursts of about 50 ms, after
 *                       0.3 s of them unmeasured (idle cores take that
 *                       long to reach their clock: on the Intel Xeon with
 *                       AMX, cold bursts read 330-343 GFLOP/s where the
 *                       cores then sustained 471): the peak
 *   fma_peak SECONDS    bursts back to back for SECONDS, their mean rate:
 *                       what the cores gave over that time (on a shared
 *                       virtual machine it dips for seconds at a time) */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>

#if defined(__AVX512F__)
#define LANES 16
#else
#define LANES 8
#endif
typedef float vec __attribute__((vector_size(LANES * 4)));
#define CHAINS 12 /* the chains below */

static const long kIters = 200000000L / LANES;

/* One burst on every thread; returns its seconds. */
static double burst(void) {
  double start = omp_get_wtime();
  float sink = 0;
#pragma omp parallel reduction(+ : sink)
  {
    vec a, b;
    for (int i = 0; i < LANES; ++i) a[i] = 1.0000001f, b[i] = 0.9999999f;
    /* Twelve named chains, so they stay in registers. */
    vec c0 = a, c1 = a * 2, c2 = a * 3, c3 = a * 4, c4 = a * 5, c5 = a * 6;
    vec c6 = a * 7, c7 = a * 8, c8 = a * 9, c9 = a * 10, c10 = a * 11, c11 = a * 12;
    for (long i = 0; i < kIters; ++i) {
      c0 = c0 * a + b, c1 = c1 * a + b, c2 = c2 * a + b, c3 = c3 * a + b;
      c4 = c4 * a + b, c5 = c5 * a + b, c6 = c6 * a + b, c7 = c7 * a + b;
      c8 = c8 * a + b, c9 = c9 * a + b, c10 = c10 * a + b, c11 = c11 * a + b;
      __asm__ volatile("" : "+x"(c0), "+x"(c1), "+x"(c2), "+x"(c3));  /* no algebra across iterations */
    }
    vec all = c0 + c1 + c2 + c3 + c4 + c5 + c6 + c7 + c8 + c9 + c10 + c11;
    for (int i = 0; i < LANES; ++i) sink += all[i];
  }
  if (sink == 1234.5f) printf("-");  /* keeps the chains alive */
  return omp_get_wtime() - start;
}

int main(int argc, char** argv) {
  const double flops_per_burst = 2.0 * LANES * CHAINS * (double)kIters * omp_get_max_threads();
  if (argc > 1) {
    const double seconds = atof(argv[1]);
    if (!(seconds > 0 && seconds <= 3600)) {
      fprintf(stderr, "fma_peak: SECONDS must be in (0, 3600], not '%s'\n", argv[1]);
      return 1;
    }
    double spent = 0, flops = 0;
    while (spent < seconds) spent += burst(), flops += flops_per_burst;
    printf("%.1f\n", flops / spent / 1e9);
    return 0;
  }
  for (double warm = 0; warm < 0.3;) warm += burst();
  double best = 0;
  for (int trial = 0; trial < 3; ++trial) {
    const double gflops = flops_per_burst / burst() / 1e9;
    if (gflops > best) best = gflops;
  }
  printf("%.1f\n", best);
  return 0;
}
