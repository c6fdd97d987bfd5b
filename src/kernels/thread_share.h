// Splitting `count` items between the threads of an OpenMP team, and into blocks.
#pragma once

#include <cstdint>
#include <utility>

namespace anvil::kernels {

// The half-open range of `count` items that thread t of `threads` takes:
// contiguous, in thread order, sizes differing by at most one.
inline std::pair<int64_t, int64_t> share(int64_t count, int t, int threads) {
  return {count * t / threads, count * (t + 1) / threads};
}

// The blocks of `b` items that `a` >= 0 items fill, the last maybe partial.
inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace anvil::kernels
