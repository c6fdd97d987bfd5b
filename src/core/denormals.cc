#include "core/denormals.h"

#include <omp.h>

#include <algorithm>

#if defined(__SSE__)
#include <xmmintrin.h>
#endif

namespace anvil {

namespace {

#if defined(__SSE__)
constexpr unsigned kFlushBits = 0x8040;  // FTZ (bit 15) and DAZ (bit 6)

// Sets the FTZ and DAZ bits to `bits` on the calling thread and each thread of a team of `threads`.
void set_flush_bits(unsigned bits, int threads) {
  auto set = [bits] { _mm_setcsr((_mm_getcsr() & ~kFlushBits) | bits); };
  set();  // first on the caller: threads the team creates inherit its mode
#pragma omp parallel num_threads(threads)
  set();
}
#endif

}  // namespace

ScopedFlushDenormals::ScopedFlushDenormals(bool on, int threads) {
#if defined(__SSE__)
  if (!on) return;
  threads_ = std::max({threads, omp_get_max_threads(), 1});
  if (threads <= 0) threads_ = std::max(threads_, omp_get_num_procs());
  previous_ = _mm_getcsr() & kFlushBits;
  set_flush_bits(kFlushBits, threads_);
#else
  (void)on;
  (void)threads;
#endif
}

ScopedFlushDenormals::~ScopedFlushDenormals() {
#if defined(__SSE__)
  if (threads_ > 0 && previous_ != kFlushBits) set_flush_bits(previous_, threads_);
#endif
}

}  // namespace anvil
