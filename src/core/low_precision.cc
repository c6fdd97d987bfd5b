#include "core/low_precision.h"

#include <cmath>
#include <cstring>

#include "core/check.h"

namespace anvil {

namespace {

// How a minifloat spends its top codes.
enum class Specials {
  kIeee,  // E5M2: all-ones exponent is infinity (mantissa 0) or NaN
  kFn,    // E4M3FN: only S.1111.111 is NaN, no infinity
  kFnuz,  // E4M3FNUZ, E5M2FNUZ: 0x80 (negative zero) is the only NaN
  kNone,  // E2M1: every code is a finite number
};

struct Minifloat {
  int exp_bits, man_bits, bias;
  Specials specials;
  int sign_shift() const { return exp_bits + man_bits; }
  unsigned sign_bit() const { return 1u << sign_shift(); }
  // The largest finite magnitude's code.
  unsigned max_code() const {
    const unsigned all = sign_bit() - 1;
    switch (specials) {
      case Specials::kIeee: return all - (1u << man_bits);  // exponent all-ones minus one, mantissa all ones
      case Specials::kFn: return all - 1;
      case Specials::kFnuz: case Specials::kNone: return all;
    }
    return all;
  }
  // The value of a magnitude code (sign bit clear) that is a finite number.
  double magnitude(unsigned code) const {
    const unsigned e = code >> man_bits, f = code & ((1u << man_bits) - 1);
    if (e == 0) return std::ldexp(static_cast<double>(f), 1 - bias - man_bits);
    return std::ldexp(static_cast<double>(f + (1u << man_bits)), static_cast<int>(e) - bias - man_bits);
  }
  uint8_t nan_code(bool negative) const {
    switch (specials) {
      case Specials::kIeee:  // the quiet NaN: infinity's code with the top mantissa bit
        return static_cast<uint8_t>((negative ? sign_bit() : 0) | (max_code() + 1) | (1u << (man_bits - 1)));
      case Specials::kFn: return static_cast<uint8_t>((negative ? sign_bit() : 0) | (sign_bit() - 1));
      case Specials::kFnuz: return static_cast<uint8_t>(sign_bit());
      case Specials::kNone: return static_cast<uint8_t>(sign_bit());  // ml_dtypes' result: negative zero
    }
    return 0;
  }
};

const Minifloat& minifloat(DType d) {
  static const Minifloat e4m3fn{4, 3, 7, Specials::kFn}, e4m3fnuz{4, 3, 8, Specials::kFnuz},
      e5m2{5, 2, 15, Specials::kIeee}, e5m2fnuz{5, 2, 16, Specials::kFnuz}, e2m1{2, 1, 1, Specials::kNone};
  switch (d) {
    case DType::kFloat8E4M3FN: return e4m3fn;
    case DType::kFloat8E4M3FNUZ: return e4m3fnuz;
    case DType::kFloat8E5M2: return e5m2;
    case DType::kFloat8E5M2FNUZ: return e5m2fnuz;
    case DType::kFloat4E2M1: return e2m1;
    default: break;
  }
  fail(ErrorKind::kInternal, "{} is not a sign-exponent-mantissa minifloat", dtype_name(d));
}

uint8_t overflow_code(const Minifloat& f, bool negative, bool saturate) {
  const unsigned sign = negative ? f.sign_bit() : 0;
  if (saturate || f.specials == Specials::kNone) return static_cast<uint8_t>(sign | f.max_code());
  if (f.specials == Specials::kIeee) return static_cast<uint8_t>(sign | (f.max_code() + 1));  // infinity
  return f.nan_code(negative);
}

uint8_t encode(const Minifloat& f, double v, bool saturate) {
  const bool negative = std::signbit(v);
  if (std::isnan(v)) return f.nan_code(negative);
  const double a = std::fabs(v);
  const unsigned max = f.max_code();
  if (std::isinf(a)) return overflow_code(f, negative, saturate);
  // Largest code not above a (codes grow with magnitude), by binary search.
  unsigned lo = 0, hi = max;
  if (a >= f.magnitude(max)) {
    lo = max;
  } else {
    while (hi - lo > 1) {
      const unsigned mid = (lo + hi) / 2;
      (f.magnitude(mid) <= a ? lo : hi) = mid;
    }
  }
  unsigned code = lo;
  const double below = f.magnitude(lo);
  if (a != below) {
    // The next magnitude; past the largest finite one it is where the next code would be.
    const double above = lo < max ? f.magnitude(lo + 1) : below + (below - f.magnitude(lo - 1));
    const double d_lo = a - below, d_hi = above - a;
    if (d_hi < d_lo || (d_hi == d_lo && (lo & 1))) code = lo + 1;
    if (a > above) code = max + 1;
  }
  if (code > max) return overflow_code(f, negative, saturate);
  if (code == 0 && f.specials == Specials::kFnuz) return 0;  // no negative zero
  return static_cast<uint8_t>((negative ? f.sign_bit() : 0) | code);
}

// E8M0 as onnx.numpy_helper.to_float8e8m0 computes it from the float32 bits.
uint8_t encode_e8m0(double v, bool saturate, RoundMode mode) {
  const float x = static_cast<float>(v);
  uint32_t bits;
  std::memcpy(&bits, &x, 4);
  unsigned exponent = (bits >> 23) & 0xff;
  if (exponent == 0xff) return 0xff;
  bool up = false;
  if (mode == RoundMode::kNearestEven) {
    const bool g = bits & 0x400000u, r = bits & 0x200000u, s = bits & 0x1fffffu, lsb = exponent > 0;
    up = g && (r || s || lsb);
  } else if (mode == RoundMode::kUp) {
    up = (bits & 0x7fffffu) != 0;
  }
  if (up && !(saturate && exponent == 0xfe)) ++exponent;
  return static_cast<uint8_t>(exponent);
}

}  // namespace

bool dtype_is_float8_or_4(DType d) {
  switch (d) {
    case DType::kFloat8E4M3FN: case DType::kFloat8E4M3FNUZ: case DType::kFloat8E5M2: case DType::kFloat8E5M2FNUZ:
    case DType::kFloat8E8M0: case DType::kFloat4E2M1: return true;
    default: return false;
  }
}

bool dtype_is_narrow_int(DType d) {
  return d == DType::kInt4 || d == DType::kUInt4 || d == DType::kInt2 || d == DType::kUInt2;
}

int dtype_file_bits(DType d) {
  switch (d) {
    case DType::kInt4: case DType::kUInt4: case DType::kFloat4E2M1: return 4;
    case DType::kInt2: case DType::kUInt2: return 2;
    default: return static_cast<int>(8 * dtype_size(d));
  }
}

size_t file_nbytes(DType d, int64_t numel) {
  const int bits = dtype_file_bits(d);
  if (bits >= 8) return shape_nbytes({numel}, d);
  const int per_byte = 8 / bits;
  return static_cast<size_t>(numel / per_byte + (numel % per_byte != 0));
}

void unpack_elements(DType d, const uint8_t* packed, int64_t n, uint8_t* out) {
  const int bits = dtype_file_bits(d);
  if (d == DType::kBool) {  // any nonzero byte is true; a bool holding another byte is undefined behaviour
    for (int64_t i = 0; i < n; ++i) out[i] = packed[i] != 0;
    return;
  }
  if (bits >= 8) {
    if (n) std::memcpy(out, packed, static_cast<size_t>(n) * dtype_size(d));
    return;
  }
  const int per_byte = 8 / bits;
  const unsigned mask = (1u << bits) - 1, sign = 1u << (bits - 1);
  const bool is_signed = d == DType::kInt4 || d == DType::kInt2;
  for (int64_t i = 0; i < n; ++i) {
    const unsigned v = (packed[i / per_byte] >> (bits * (i % per_byte))) & mask;
    out[i] = is_signed ? static_cast<uint8_t>(static_cast<int8_t>(static_cast<int>(v ^ sign) - static_cast<int>(sign)))
                       : static_cast<uint8_t>(v);
  }
}

void pack_elements(DType d, const uint8_t* elements, int64_t n, uint8_t* packed) {
  const int bits = dtype_file_bits(d);
  if (bits >= 8) {
    if (n) std::memcpy(packed, elements, static_cast<size_t>(n) * dtype_size(d));
    return;
  }
  const int per_byte = 8 / bits;
  const unsigned mask = (1u << bits) - 1;
  std::memset(packed, 0, file_nbytes(d, n));
  for (int64_t i = 0; i < n; ++i)
    packed[i / per_byte] = static_cast<uint8_t>(packed[i / per_byte] | ((elements[i] & mask) << (bits * (i % per_byte))));
}

double minifloat_to_double(DType d, uint8_t bits) {
  if (d == DType::kFloat8E8M0) return bits == 0xff ? std::nan("") : std::ldexp(1.0, static_cast<int>(bits) - 127);
  const Minifloat& f = minifloat(d);
  const unsigned sign = f.sign_bit(), code = bits & (sign - 1);
  const bool negative = (bits & sign) != 0;
  switch (f.specials) {
    case Specials::kFnuz: if (bits == sign) return std::nan(""); break;
    case Specials::kFn: if (code == sign - 1) return std::nan(""); break;
    case Specials::kIeee:
      if (code > f.max_code()) return code == f.max_code() + 1 ? (negative ? -INFINITY : INFINITY) : std::nan("");
      break;
    case Specials::kNone: break;
  }
  const double m = f.magnitude(code);
  return negative ? -m : m;
}

uint8_t double_to_minifloat(DType d, double v, bool saturate, RoundMode e8m0_round) {
  if (d == DType::kFloat8E8M0) return encode_e8m0(v, saturate, e8m0_round);
  return encode(minifloat(d), v, saturate);
}

int64_t narrow_int_min(DType d) {
  return d == DType::kInt4 ? -8 : d == DType::kInt2 ? -2 : 0;
}

int64_t narrow_int_max(DType d) {
  switch (d) {
    case DType::kInt4: return 7;
    case DType::kUInt4: return 15;
    case DType::kInt2: return 1;
    case DType::kUInt2: return 3;
    default: fail(ErrorKind::kInternal, "{} is not a narrow integer type", dtype_name(d));
  }
}

int8_t narrow_int_from_double(DType d, double v) {
  if (std::isnan(v)) return 0;
  const double t = std::trunc(v);
  if (t < static_cast<double>(narrow_int_min(d)) || t > static_cast<double>(narrow_int_max(d))) return 0;
  return static_cast<int8_t>(t);
}

int8_t narrow_int_wrap(DType d, int64_t v) {
  const int bits = dtype_file_bits(d);
  const auto low = static_cast<unsigned>(static_cast<uint64_t>(v) & ((1u << bits) - 1));
  if (d == DType::kInt4 || d == DType::kInt2) {
    const unsigned sign = 1u << (bits - 1);
    return static_cast<int8_t>(static_cast<int>(low ^ sign) - static_cast<int>(sign));
  }
  return static_cast<int8_t>(low);
}

}  // namespace anvil
