// ScopedFlushDenormals (core/denormals.h): inside the scope every thread of
// the team computes a denormal float as zero and reads one as zero; after
// it, as IEEE 754 has them again.
#include <gtest/gtest.h>
#include <omp.h>

#include <vector>

#include "core/denormals.h"

namespace anvil {
namespace {

// On each thread of a team of `threads`: whether half the smallest normal
// float came out as zero (FTZ), and whether a denormal input read as zero
// (DAZ). The volatile operands keep the compiler from folding the products.
struct Modes {
  std::vector<int> flushed, zeroed;
};
Modes modes_on_team(int threads) {
  Modes m{std::vector<int>(static_cast<size_t>(threads), -1), std::vector<int>(static_cast<size_t>(threads), -1)};
#pragma omp parallel num_threads(threads)
  {
    volatile float smallest = 1.17549435e-38f, half = 0.5f, denormal = 1e-40f, one = 1.f;
    const size_t t = static_cast<size_t>(omp_get_thread_num());
    m.flushed[t] = smallest * half == 0.f;
    m.zeroed[t] = denormal * one == 0.f;
  }
  return m;
}

TEST(Denormals, FlushedOnEveryThreadOfTheScopeOnly) {
#if !defined(__SSE__)
  GTEST_SKIP() << "no MXCSR on this target: the scope changes nothing";
#endif
  const int threads = 2;  // the worker thread too, also on one core
  if (omp_get_thread_limit() < threads) GTEST_SKIP() << "OMP_THREAD_LIMIT keeps the team to one thread";
  for (int v : modes_on_team(threads).flushed) EXPECT_EQ(v, 0) << "denormals flushed before the scope";
  {
    const ScopedFlushDenormals flush(true, threads);
    const Modes in = modes_on_team(threads);
    for (int t = 0; t < threads; ++t) {
      EXPECT_EQ(in.flushed[static_cast<size_t>(t)], 1) << "thread " << t;
      EXPECT_EQ(in.zeroed[static_cast<size_t>(t)], 1) << "thread " << t;
    }
  }
  const Modes after = modes_on_team(threads);
  for (int t = 0; t < threads; ++t) {
    EXPECT_EQ(after.flushed[static_cast<size_t>(t)], 0) << "thread " << t;
    EXPECT_EQ(after.zeroed[static_cast<size_t>(t)], 0) << "thread " << t;
  }
  {
    const ScopedFlushDenormals off(false, threads);
    for (int v : modes_on_team(threads).flushed) EXPECT_EQ(v, 0);
  }
}

}  // namespace
}  // namespace anvil
