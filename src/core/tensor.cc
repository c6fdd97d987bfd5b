#include "anvil/tensor.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>

#include <unistd.h>

#include "core/check.h"
#include "core/checked.h"
#include "core/half.h"
#include "core/low_precision.h"

namespace anvil {

size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: case DType::kInt32: case DType::kUInt32: return 4;
    case DType::kFloat64: case DType::kInt64: case DType::kUInt64: return 8;
    case DType::kFloat16: case DType::kBFloat16: case DType::kInt16: case DType::kUInt16: return 2;
    case DType::kInt8: case DType::kUInt8: case DType::kBool: return 1;
    case DType::kFloat8E4M3FN: case DType::kFloat8E4M3FNUZ: case DType::kFloat8E5M2: case DType::kFloat8E5M2FNUZ:
    case DType::kFloat8E8M0: case DType::kFloat4E2M1: case DType::kInt4: case DType::kUInt4: case DType::kInt2:
    case DType::kUInt2: return 1;
    case DType::kString: return sizeof(std::string);
    case DType::kUndefined: return 0;
  }
  return 0;
}

const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return "float32";
    case DType::kFloat64: return "float64";
    case DType::kFloat16: return "float16";
    case DType::kBFloat16: return "bfloat16";
    case DType::kInt8: return "int8";
    case DType::kUInt8: return "uint8";
    case DType::kInt16: return "int16";
    case DType::kUInt16: return "uint16";
    case DType::kInt32: return "int32";
    case DType::kUInt32: return "uint32";
    case DType::kInt64: return "int64";
    case DType::kUInt64: return "uint64";
    case DType::kBool: return "bool";
    case DType::kFloat8E4M3FN: return "float8e4m3fn";
    case DType::kFloat8E4M3FNUZ: return "float8e4m3fnuz";
    case DType::kFloat8E5M2: return "float8e5m2";
    case DType::kFloat8E5M2FNUZ: return "float8e5m2fnuz";
    case DType::kFloat8E8M0: return "float8e8m0";
    case DType::kFloat4E2M1: return "float4e2m1";
    case DType::kInt4: return "int4";
    case DType::kUInt4: return "uint4";
    case DType::kInt2: return "int2";
    case DType::kUInt2: return "uint2";
    case DType::kString: return "string";
    case DType::kUndefined: return "undefined";
  }
  return "undefined";
}

bool dtype_is_float(DType dtype) {
  return dtype == DType::kFloat32 || dtype == DType::kFloat64 || dtype == DType::kFloat16 ||
         dtype == DType::kBFloat16;
}

const char* value_kind_name(ValueKind kind) {
  switch (kind) {
    case ValueKind::kTensor: return "tensor";
    case ValueKind::kSequence: return "sequence";
    case ValueKind::kOptionalTensor: return "optional tensor";
    case ValueKind::kOptionalSequence: return "optional sequence";
  }
  return "value";
}

double element_as_double(const Tensor& t, int64_t i) {
  const void* p = t.raw();
  switch (t.dtype()) {
    case DType::kFloat32: return static_cast<const float*>(p)[i];
    case DType::kFloat64: return static_cast<const double*>(p)[i];
    case DType::kFloat16: return static_cast<float>(static_cast<const Half*>(p)[i]);
    case DType::kBFloat16: return static_cast<float>(static_cast<const BFloat16*>(p)[i]);
    case DType::kInt8: case DType::kInt4: case DType::kInt2: return static_cast<const int8_t*>(p)[i];
    case DType::kUInt8: case DType::kUInt4: case DType::kUInt2: return static_cast<const uint8_t*>(p)[i];
    case DType::kInt16: return static_cast<const int16_t*>(p)[i];
    case DType::kUInt16: return static_cast<const uint16_t*>(p)[i];
    case DType::kInt32: return static_cast<const int32_t*>(p)[i];
    case DType::kUInt32: return static_cast<const uint32_t*>(p)[i];
    case DType::kInt64: return static_cast<double>(static_cast<const int64_t*>(p)[i]);
    case DType::kUInt64: return static_cast<double>(static_cast<const uint64_t*>(p)[i]);
    case DType::kBool: return static_cast<const bool*>(p)[i] ? 1 : 0;
    case DType::kFloat8E4M3FN: case DType::kFloat8E4M3FNUZ: case DType::kFloat8E5M2: case DType::kFloat8E5M2FNUZ:
    case DType::kFloat8E8M0: case DType::kFloat4E2M1:
      return minifloat_to_double(t.dtype(), static_cast<const uint8_t*>(p)[i]);
    case DType::kString: fail(ErrorKind::kInvalidArgument, "string elements are not numbers");
    case DType::kUndefined: break;
  }
  fail(ErrorKind::kInvalidArgument, "an undefined tensor has no elements");
}

int64_t shape_numel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    auto r = mul_overflow_free(n, d);
    ANVIL_CHECK(r.has_value(), ErrorKind::kInvalidArgument, "the element count of shape {} overflows int64",
                shape_str(shape));
    n = *r;
  }
  return n;
}

size_t shape_nbytes(const Shape& shape, DType dtype) {
  int64_t n = shape_numel(shape);
  auto bytes = mul_overflow_free(n, static_cast<int64_t>(dtype_size(dtype)));
  ANVIL_CHECK(bytes.has_value(), ErrorKind::kInvalidArgument, "the byte size of a {} tensor of shape {} overflows int64",
              dtype_name(dtype), shape_str(shape));
  return static_cast<size_t>(*bytes);
}

namespace {

// "512M", "2G", "1048576" -> bytes; 0 when malformed.
size_t parse_byte_count(const char* s) {
  char* end = nullptr;
  unsigned long long v = std::strtoull(s, &end, 10);
  if (end == s) return 0;
  int shift = 0;
  switch (*end) {
    case 'K': case 'k': shift = 10; ++end; break;
    case 'M': case 'm': shift = 20; ++end; break;
    case 'G': case 'g': shift = 30; ++end; break;
    default: break;
  }
  if (*end != '\0' || v > (~0ull >> shift)) return 0;
  return static_cast<size_t>(v << shift);
}

}  // namespace

size_t max_allocation_bytes() {
  static const size_t limit = [] {
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
    size_t physical = pages > 0 && page > 0 ? static_cast<size_t>(pages) * static_cast<size_t>(page) : size_t{1} << 40;
    // ANVIL_MEMORY_LIMIT lowers the cap (containers, fuzzing); it never raises it.
    const char* env = std::getenv("ANVIL_MEMORY_LIMIT");
    size_t requested = env ? parse_byte_count(env) : 0;
    return requested ? std::min(requested, physical) : physical;
  }();
  return limit;
}

void check_allocation(size_t bytes, const std::string& what) {
  ANVIL_CHECK(bytes <= max_allocation_bytes(), ErrorKind::kOutOfMemory,
              "{} needs {} bytes, more than this machine's {} bytes of memory", what, bytes, max_allocation_bytes());
}

std::string shape_str(const Shape& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ",";
    s += shape[i] < 0 ? std::string("?") : std::to_string(shape[i]);
  }
  return s + "]";
}

Tensor::Tensor(DType dtype, Shape shape) : Tensor(dtype, std::move(shape), true) {}

Tensor Tensor::uninitialized(DType dtype, Shape shape) { return Tensor(dtype, std::move(shape), false); }

Tensor::Tensor(DType dtype, Shape shape, bool zeroed) : dtype_(dtype), shape_(std::move(shape)) {
  for (int64_t d : shape_)
    ANVIL_CHECK(d >= 0, ErrorKind::kInvalidArgument, "tensor shape {} has a negative dimension",
                shape_str(shape_));
  size_t bytes = shape_nbytes(shape_, dtype_);
  check_allocation(bytes, "a " + std::string(dtype_name(dtype_)) + " tensor of shape " + shape_str(shape_));
  if (dtype_ == DType::kString) {  // constructed empty strings, destroyed with the tensor
    auto* strings = new std::string[static_cast<size_t>(std::max<int64_t>(1, shape_numel(shape_)))];
    owner_ = std::shared_ptr<void>(strings, [](void* q) { delete[] static_cast<std::string*>(q); });
    data_ = strings;
    return;
  }
  size_t padded = (bytes + 63) / 64 * 64;
  if (padded == 0) padded = 64;
  void* p = std::aligned_alloc(64, padded);
  if (!p) fail(ErrorKind::kOutOfMemory, "cannot allocate {} bytes for a tensor of shape {}", bytes,
               shape_str(shape_));
  if (zeroed) std::memset(p, 0, padded);
  owner_ = std::shared_ptr<void>(p, [](void* q) { std::free(q); });
  data_ = p;
}

Tensor Tensor::view(DType dtype, Shape shape, void* data) {
  Tensor t;
  t.dtype_ = dtype;
  t.shape_ = std::move(shape);
  t.data_ = data;
  return t;
}

Tensor Tensor::adopt(DType dtype, Shape shape, std::shared_ptr<void> owner, void* data) {
  Tensor t = view(dtype, std::move(shape), data);
  t.owner_ = std::move(owner);
  return t;
}

Tensor Tensor::sequence(DType elem, std::vector<Tensor> items) {
  Tensor t;
  t.dtype_ = elem;
  t.shape_ = {0};
  t.items_ = std::make_shared<const std::vector<Tensor>>(std::move(items));
  return t;
}

const std::vector<Tensor>& Tensor::items() const {
  static const std::vector<Tensor> none;
  return items_ ? *items_ : none;
}

Tensor Tensor::clone() const {
  if (is_sequence()) return *this;
  Tensor t(dtype_, shape_);
  if (dtype_ == DType::kString) std::copy(data<std::string>(), data<std::string>() + numel(), t.data<std::string>());
  else if (nbytes()) std::memcpy(t.data_, data_, nbytes());
  return t;
}

void Tensor::element_size_mismatch(size_t read_as) const {
  std::fprintf(stderr, "anvil: internal error: a %s tensor of shape %s read as elements of %zu bytes\n",
               dtype_name(dtype_), shape_str(shape_).c_str(), read_as);
  std::abort();
}

Tensor Tensor::reshaped(Shape shape) const {
  ANVIL_CHECK(shape_numel(shape) == numel(), ErrorKind::kInvalidArgument,
              "cannot reshape {} to {}", shape_str(shape_), shape_str(shape));
  Tensor t = *this;
  t.shape_ = std::move(shape);
  return t;
}

}  // namespace anvil
