// Checked int64 arithmetic for element and byte counts.
//
// Every size that comes from a file (dims, pads, repeats, offsets) reaches
// allocation through these helpers, so an overflow becomes an anvil::Error
// instead of a wrapped count, a tiny allocation and a heap overrun.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>

#include "core/check.h"

namespace anvil {

// a * b, or nullopt when it overflows int64.
inline std::optional<int64_t> mul_overflow_free(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_mul_overflow(a, b, &r)) return std::nullopt;
  return r;
}

inline std::optional<int64_t> add_overflow_free(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_add_overflow(a, b, &r)) return std::nullopt;
  return r;
}

// a * b; throws kInvalidArgument naming `what` on overflow.
inline int64_t checked_mul(int64_t a, int64_t b, const char* what) {
  auto r = mul_overflow_free(a, b);
  ANVIL_CHECK(r.has_value(), ErrorKind::kInvalidArgument, "{} overflows int64 ({} x {})", what, a, b);
  return *r;
}

inline int64_t checked_add(int64_t a, int64_t b, const char* what) {
  auto r = add_overflow_free(a, b);
  ANVIL_CHECK(r.has_value(), ErrorKind::kInvalidArgument, "{} overflows int64 ({} + {})", what, a, b);
  return *r;
}

// The largest tensor or arena Anvil will try to allocate: the machine's
// physical memory. Anything larger fails at once with kOutOfMemory instead of
// being overcommitted and killed later (or memset for minutes).
size_t max_allocation_bytes();

// Throws kOutOfMemory when `bytes` exceeds max_allocation_bytes(); `what`
// names the allocation ("a tensor of shape [..]", "the activation arena").
void check_allocation(size_t bytes, const std::string& what);

}  // namespace anvil
