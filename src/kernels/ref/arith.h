// Scalar arithmetic shared by the elementwise reference kernels: integer
// overflow that wraps (as the hardware does) instead of being undefined.
#pragma once

#include <type_traits>

namespace anvil::kernels {

// The C++ types the kernels here instantiate for (no bool, no 16-bit floats).
template <typename T>
constexpr bool kPlainNumber = std::is_arithmetic_v<T> && !std::is_same_v<T, bool>;

// Integer overflow wraps (as the hardware does) instead of being undefined:
// the operation runs on unsigned operands no narrower than int, which never
// promote back to signed int.
template <typename T>
using WrapType = std::make_unsigned_t<decltype(T() + 0)>;

template <typename T, typename F>
T wrapping(T x, T y, F f) {
  if constexpr (std::is_integral_v<T>) {
    using U = WrapType<T>;
    return static_cast<T>(f(static_cast<U>(x), static_cast<U>(y)));
  } else {
    return static_cast<T>(f(x, y));
  }
}

}  // namespace anvil::kernels
