// Helpers the bench tools share: a clock and a checked integer argument.
#pragma once

#include <chrono>
#include <cstdlib>

namespace anvil::bench_tools {

inline double seconds_now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// `text` as a whole decimal number within [lo, hi].
inline bool parse(const char* text, long lo, long hi, long& out) {
  char* end = nullptr;
  out = std::strtol(text, &end, 10);
  return end && *end == '\0' && out >= lo && out <= hi;
}

}  // namespace anvil::bench_tools
