#include "core/denormals.h"

#include <omp.h>

#include <algorithm>

#if defined(__SSE__)
#include <xmmintrin.h>
#endif

namespace anvil {

#if defined(__SSE__)
namespace {

constexpr unsigned kFlushBits = 0x8040;  // FTZ (bit 15) and DAZ (bit 6)

unsigned flush_bits() { return _mm_getcsr() & kFlushBits; }
void set_flush_bits(unsigned bits) { _mm_setcsr((_mm_getcsr() & ~kFlushBits) | bits); }

}  // namespace
#endif

ScopedFlushDenormals::ScopedFlushDenormals(bool on, int threads) {
#if defined(__SSE__)
  if (!on) return;
  int team = std::max({threads, omp_get_max_threads(), 1});
  if (threads <= 0) team = std::max(team, omp_get_num_procs());
  previous_.assign(static_cast<size_t>(team), kFlushBits);
  const unsigned caller = flush_bits();
  set_flush_bits(kFlushBits);  // first on the caller: threads the team creates inherit its mode
#pragma omp parallel num_threads(team)
  {
    const size_t t = static_cast<size_t>(omp_get_thread_num());
    previous_[t] = t == 0 ? caller : flush_bits();
    set_flush_bits(kFlushBits);
  }
#else
  (void)on;
  (void)threads;
#endif
}

ScopedFlushDenormals::~ScopedFlushDenormals() {
#if defined(__SSE__)
  if (previous_.empty()) return;
  // Each thread of a team of the same size takes back its own mode; the
  // caller is thread 0.
#pragma omp parallel num_threads(static_cast<int>(previous_.size()))
  set_flush_bits(previous_[static_cast<size_t>(omp_get_thread_num())]);
  set_flush_bits(previous_[0]);
#endif
}

}  // namespace anvil
