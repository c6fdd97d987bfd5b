// The 8-, 4- and 2-bit element types of ONNX: float8 (E4M3FN, E4M3FNUZ, E5M2,
// E5M2FNUZ, E8M0), float4 (E2M1) and int4/uint4/int2/uint2.
//
// In memory every such element takes one byte: float formats keep their bit
// pattern in the low bits, the integers hold their value (int4 -3 is the int8
// -3). ONNX files pack 4-bit elements two to a byte and 2-bit elements four to
// a byte (first element in the low bits); pack_elements / unpack_elements
// convert at the file boundary, so kernels never see packed data.
//
// Conversions follow the ONNX Cast rules (round to nearest even, saturation
// as the `saturate` attribute says) and agree bit for bit with the reference
// implementation's ml_dtypes conversions, which the backend tests encode.
#pragma once

#include <cstddef>
#include <cstdint>

#include "anvil/tensor.h"

namespace anvil {

bool dtype_is_float8_or_4(DType d);      // the minifloats: E4M3FN ... E8M0, E2M1
bool dtype_is_narrow_int(DType d);       // int4, uint4, int2, uint2
inline bool dtype_is_low_precision(DType d) { return dtype_is_float8_or_4(d) || dtype_is_narrow_int(d); }
// Bits per element in an ONNX file: 4 or 2 for the packed types, else 8 * dtype_size.
int dtype_file_bits(DType d);
// Bytes `numel` elements take in an ONNX file's raw data.
size_t file_nbytes(DType d, int64_t numel);

// `n` elements from packed file bytes (file_nbytes(d, n) of them) into one byte
// each, sign-extending int4/int2; bools become 0 or 1 (any nonzero byte is
// true); other types are copied.
void unpack_elements(DType d, const uint8_t* packed, int64_t n, uint8_t* out);
void pack_elements(DType d, const uint8_t* elements, int64_t n, uint8_t* packed);

// The value of a minifloat bit pattern (NaN where the format has one).
double minifloat_to_double(DType d, uint8_t bits);

enum class RoundMode { kNearestEven, kUp, kDown };
// The bit pattern nearest `v` (ties to even). With `saturate`, values beyond
// the largest finite one (infinities included) become it; without, they
// become infinity where the format has one and NaN otherwise. E8M0 rounds as
// `e8m0_round` says (Cast's round_mode). E2M1 has neither NaN nor infinity
// and always saturates (as ml_dtypes does).
uint8_t double_to_minifloat(DType d, double v, bool saturate = true, RoundMode e8m0_round = RoundMode::kUp);

// Range of the narrow integer types.
int64_t narrow_int_min(DType d);
int64_t narrow_int_max(DType d);
// Float to int4/uint4/int2/uint2: truncated toward zero; NaN and values out of
// range give 0 (ONNX leaves them undefined; this is the reference's result).
int8_t narrow_int_from_double(DType d, double v);
// Integer to a narrow integer: the low bits, sign-extended for int4/int2 (as
// for the other integer casts).
int8_t narrow_int_wrap(DType d, int64_t v);

}  // namespace anvil
