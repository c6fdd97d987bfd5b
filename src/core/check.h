// Helpers to throw anvil::Error with a formatted message.
#pragma once

#include <fmt/format.h>

#include "anvil/error.h"

namespace anvil {

template <typename... Args>
[[noreturn]] void fail(ErrorKind kind, fmt::format_string<Args...> f, Args&&... args) {
  throw Error(kind, fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace anvil

// ANVIL_CHECK(cond, kind, fmt, args...): throws Error(kind, message) when cond is false.
#define ANVIL_CHECK(cond, kind, ...)                 \
  do {                                               \
    if (!(cond)) ::anvil::fail(kind, __VA_ARGS__);   \
  } while (0)

#define ANVIL_INTERNAL_CHECK(cond)                                                              \
  do {                                                                                          \
    if (!(cond)) ::anvil::fail(::anvil::ErrorKind::kInternal, "check failed: {} ({}:{})", #cond, \
                               __FILE__, __LINE__);                                             \
  } while (0)
