#include "onnx/tensor_proto.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <memory>
#include <fstream>
#include <optional>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <onnx/onnx_pb.h>

#include "core/check.h"
#include "core/checked.h"
#include "core/dtype_set.h"
#include "core/half.h"
#include "core/low_precision.h"
#include "core/pages.h"
#include "onnx/validate.h"

namespace anvil::onnx_io {

namespace fs = std::filesystem;
using onnx::TensorProto;

DType dtype_from_onnx(int t) { return dtype_from_onnx_code(t); }

int dtype_to_onnx(DType d) {
  switch (d) {
    case DType::kFloat32: return TensorProto::FLOAT;
    case DType::kUInt8: return TensorProto::UINT8;
    case DType::kInt8: return TensorProto::INT8;
    case DType::kUInt16: return TensorProto::UINT16;
    case DType::kInt16: return TensorProto::INT16;
    case DType::kInt32: return TensorProto::INT32;
    case DType::kInt64: return TensorProto::INT64;
    case DType::kBool: return TensorProto::BOOL;
    case DType::kFloat16: return TensorProto::FLOAT16;
    case DType::kFloat64: return TensorProto::DOUBLE;
    case DType::kUInt32: return TensorProto::UINT32;
    case DType::kUInt64: return TensorProto::UINT64;
    case DType::kBFloat16: return TensorProto::BFLOAT16;
    // Codes newer than the protobuf headers Debian ships.
    case DType::kFloat8E4M3FN: return 17;
    case DType::kFloat8E4M3FNUZ: return 18;
    case DType::kFloat8E5M2: return 19;
    case DType::kFloat8E5M2FNUZ: return 20;
    case DType::kUInt4: return 21;
    case DType::kInt4: return 22;
    case DType::kFloat4E2M1: return 23;
    case DType::kFloat8E8M0: return 24;
    case DType::kUInt2: return 25;
    case DType::kInt2: return 26;
    case DType::kString: return TensorProto::STRING;
    case DType::kUndefined: break;
  }
  return TensorProto::UNDEFINED;
}

const char* onnx_type_name(int t) {
  if (t == TensorProto::COMPLEX64) return "complex64";
  if (t == TensorProto::COMPLEX128) return "complex128";
  if (t == 27) return "float6e2m3";
  if (t == 28) return "float6e3m2";
  DType d = dtype_from_onnx(t);
  return d == DType::kUndefined ? "undefined" : dtype_name(d);
}

namespace {

// Typed repeated fields: copy them element by element into the tensor.
template <typename Dst, typename Field>
void copy_field(const Field& field, Tensor& t, const std::string& name) {
  ANVIL_CHECK(field.size() == t.numel(), ErrorKind::kInvalidModel,
              "tensor '{}' holds {} values but its shape {} needs {}", name, field.size(), shape_str(t.shape()),
              t.numel());
  Dst* out = t.data<Dst>();
  for (int i = 0; i < field.size(); ++i) out[i] = static_cast<Dst>(field.Get(i));
}

// Half types and small ints are stored in int32_data as their bit patterns / values.
template <typename Dst>
void copy_bits_field(const google::protobuf::RepeatedField<int32_t>& field, Tensor& t, const std::string& name) {
  ANVIL_CHECK(field.size() == t.numel(), ErrorKind::kInvalidModel,
              "tensor '{}' holds {} values but its shape {} needs {}", name, field.size(), shape_str(t.shape()),
              t.numel());
  Dst* out = t.data<Dst>();
  for (int i = 0; i < field.size(); ++i) {
    uint16_t bits = static_cast<uint16_t>(field.Get(i));
    std::memcpy(static_cast<void*>(&out[i]), &bits, sizeof(Dst));  // Half, BFloat16: just their 16 bits
  }
}

// An external data file, opened and checked: the path stays inside the
// model's folder (a model is untrusted input), names a regular file (a FIFO or
// device would block or never end), and holds the `expected` bytes at `offset`.
struct ExternalData {
  int fd = -1;
  int64_t offset = 0;
  std::string location;
  ~ExternalData() {
    if (fd >= 0) ::close(fd);
  }
};

void open_external(const TensorProto& p, const std::string& base_dir, size_t expected, ExternalData& ext) {
  for (const auto& kv : p.external_data()) {
    if (kv.key() == "location") ext.location = kv.value();
    else if (kv.key() == "offset") ext.offset = std::stoll(kv.value());  // validated digits
  }
  ANVIL_CHECK(!base_dir.empty(), ErrorKind::kInvalidModel,
              "tensor '{}' refers to external data, which needs the model to be loaded from a file", p.name());
  fs::path base = fs::weakly_canonical(fs::path(base_dir));
  std::error_code ec;
  fs::path file = fs::weakly_canonical(base / ext.location, ec);
  auto [b, f] = std::mismatch(base.begin(), base.end(), file.begin(), file.end());
  ANVIL_CHECK(!ec && b == base.end() && fs::path(ext.location).is_relative(), ErrorKind::kInvalidModel,
              "tensor '{}': external data path '{}' leaves the model's folder", p.name(), ext.location);
  ext.fd = ::open(file.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  ANVIL_CHECK(ext.fd >= 0, ErrorKind::kInvalidModel, "tensor '{}': cannot open external data file '{}'", p.name(),
              file.string());
  struct stat st {};
  ANVIL_CHECK(::fstat(ext.fd, &st) == 0 && S_ISREG(st.st_mode), ErrorKind::kInvalidModel,
              "tensor '{}': external data '{}' is not a regular file", p.name(), ext.location);
  const int64_t size = st.st_size, length = static_cast<int64_t>(expected);
  ANVIL_CHECK(ext.offset <= size && length <= size - ext.offset, ErrorKind::kInvalidModel,
              "tensor '{}': external data '{}' (offset {}, {} bytes) does not fit the file ({} bytes)", p.name(),
              ext.location, ext.offset, length, size);
}

// The `expected` bytes of external data into `out`.
void read_external_into(const TensorProto& p, const ExternalData& ext, size_t expected, void* out) {
  auto* data = static_cast<char*>(out);
  size_t done = 0;
  while (done < expected) {
    ssize_t r = ::pread(ext.fd, data + done, expected - done, ext.offset + static_cast<int64_t>(done));
    ANVIL_CHECK(r > 0, ErrorKind::kInvalidModel, "tensor '{}': cannot read external data '{}'", p.name(),
                ext.location);
    done += static_cast<size_t>(r);
  }
}

std::string read_external(const TensorProto& p, const ExternalData& ext, size_t expected) {
  std::string data(expected, '\0');
  read_external_into(p, ext, expected, data.data());
  return data;
}

// Initializers at least this large are mapped from their file, not copied.
constexpr size_t kMapThreshold = size_t{64} << 10;

// Types whose file bytes are their memory bytes (no unpacking, no normalising).
bool stored_as_is(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: case DType::kFloat64: case DType::kFloat16: case DType::kBFloat16:
    case DType::kInt8: case DType::kUInt8: case DType::kInt16: case DType::kUInt16:
    case DType::kInt32: case DType::kUInt32: case DType::kInt64: case DType::kUInt64: return true;
    default: return false;
  }
}

// The tensor over a private, writable mapping of its bytes in the file: pages
// are read on first touch and shared with the page cache, nothing is copied,
// and WeightCache::release() can drop them (they read back from the file).
// Only for data 64-byte aligned in the file, so kernels see aligned memory.
std::optional<Tensor> map_external(const ExternalData& ext, DType dtype, const Shape& shape, size_t bytes) {
  if (bytes < kMapThreshold || !stored_as_is(dtype) || ext.offset % 64 != 0) return std::nullopt;
  static const int64_t page = ::sysconf(_SC_PAGESIZE);
  const int64_t start = ext.offset / page * page;
  const size_t length = static_cast<size_t>(ext.offset - start) + bytes;
  void* base = ::mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_PRIVATE, ext.fd, start);
  if (base == MAP_FAILED) return std::nullopt;  // read it instead
  std::shared_ptr<void> mapping(base, [length](void* m) { ::munmap(m, length); });
  return Tensor::adopt(dtype, shape, std::move(mapping), static_cast<char*>(base) + (ext.offset - start));
}

}  // namespace

namespace {

// What a consuming read copies at a time before dropping the pages it read.
constexpr size_t kConsumeChunk = size_t{8} << 20;

// `bytes` of raw data into `out` a chunk at a time, each chunk's whole pages
// dropped once copied: the raw data and the tensor are never both whole in
// memory (VGG-16's 411 MB classifier weight would otherwise be twice there).
void copy_consuming(const std::string& raw, size_t bytes, uint8_t* out) {
  PageDropper pages(raw.data(), bytes);
  for (size_t at = 0; at < bytes; at += kConsumeChunk) {
    const size_t n = std::min(kConsumeChunk, bytes - at);
    std::memcpy(out + at, raw.data() + at, n);
    pages.drop_through(at + n);
  }
}

Tensor from_proto(const TensorProto& p, const std::string& base_dir, bool consume_raw) {
  validate_tensor(p);
  DType dtype = dtype_from_onnx(p.data_type());
  ANVIL_CHECK(dtype != DType::kUndefined, ErrorKind::kUnsupported, "tensor '{}' has data type {}, which Anvil does not support",
              p.name(), onnx_type_name(p.data_type()));
  Shape shape(p.dims().begin(), p.dims().end());
  for (int64_t d : shape)
    ANVIL_CHECK(d >= 0, ErrorKind::kInvalidModel, "tensor '{}' has a negative dimension", p.name());
  const std::string& name = p.name();
  if (p.data_location() == TensorProto::EXTERNAL && dtype != DType::kString) {
    const int64_t count = shape_numel(shape);
    const size_t file_bytes = file_nbytes(dtype, count);
    ExternalData ext;
    open_external(p, base_dir, file_bytes, ext);
    if (std::optional<Tensor> mapped = map_external(ext, dtype, shape, file_bytes)) return *mapped;
    if (stored_as_is(dtype)) {  // read into the tensor itself: no zeroing, no second copy
      Tensor t = Tensor::uninitialized(dtype, shape);
      read_external_into(p, ext, file_bytes, t.raw());
      return t;
    }
    Tensor t(dtype, shape);
    std::string bytes = read_external(p, ext, file_bytes);
    unpack_elements(dtype, reinterpret_cast<const uint8_t*>(bytes.data()), t.numel(), static_cast<uint8_t*>(t.raw()));
    return t;
  }
  // Raw data of the types stored as they are overwrites every byte: no zeroing first.
  const bool copied_whole = p.has_raw_data() && stored_as_is(dtype);
  Tensor t = copied_whole ? Tensor::uninitialized(dtype, shape) : Tensor(dtype, shape);

  if (dtype == DType::kString) {  // validate_tensor() checked string_data holds one per element
    auto* out = t.data<std::string>();
    for (int i = 0; i < p.string_data_size(); ++i) out[i] = p.string_data(i);
    return t;
  }
  const size_t file_bytes = file_nbytes(dtype, t.numel());  // packed for the 4- and 2-bit types
  auto* elements = static_cast<uint8_t*>(t.raw());
  if (p.has_raw_data()) {
    ANVIL_CHECK(p.raw_data().size() == file_bytes, ErrorKind::kInvalidModel,
                "tensor '{}' has {} bytes of raw data but its shape {} needs {}", name, p.raw_data().size(),
                shape_str(shape), file_bytes);
    if (consume_raw && copied_whole) copy_consuming(p.raw_data(), file_bytes, elements);
    else unpack_elements(dtype, reinterpret_cast<const uint8_t*>(p.raw_data().data()), t.numel(), elements);
    return t;
  }
  if (t.numel() == 0) return t;
  if (dtype_is_low_precision(dtype)) {
    // int32_data holds one file byte per entry: one 8-bit element, two 4-bit or four 2-bit ones.
    ANVIL_CHECK(static_cast<size_t>(p.int32_data_size()) == file_bytes, ErrorKind::kInvalidModel,
                "tensor '{}' holds {} values but its shape {} needs {}", name, p.int32_data_size(), shape_str(shape),
                file_bytes);
    std::vector<uint8_t> bytes(file_bytes);
    for (size_t i = 0; i < file_bytes; ++i) bytes[i] = static_cast<uint8_t>(p.int32_data(static_cast<int>(i)));
    unpack_elements(dtype, bytes.data(), t.numel(), elements);
    return t;
  }
  switch (dtype) {
    case DType::kFloat32: copy_field<float>(p.float_data(), t, name); break;
    case DType::kFloat64: copy_field<double>(p.double_data(), t, name); break;
    case DType::kInt64: copy_field<int64_t>(p.int64_data(), t, name); break;
    case DType::kUInt64: copy_field<uint64_t>(p.uint64_data(), t, name); break;
    case DType::kUInt32: copy_field<uint32_t>(p.uint64_data(), t, name); break;
    case DType::kInt32: copy_field<int32_t>(p.int32_data(), t, name); break;
    case DType::kInt16: copy_field<int16_t>(p.int32_data(), t, name); break;
    case DType::kUInt16: copy_field<uint16_t>(p.int32_data(), t, name); break;
    case DType::kInt8: copy_field<int8_t>(p.int32_data(), t, name); break;
    case DType::kUInt8: copy_field<uint8_t>(p.int32_data(), t, name); break;
    case DType::kBool: copy_field<bool>(p.int32_data(), t, name); break;
    case DType::kFloat16: copy_bits_field<Half>(p.int32_data(), t, name); break;
    case DType::kBFloat16: copy_bits_field<BFloat16>(p.int32_data(), t, name); break;
    default: break;  // undefined; the low-precision types were read above
  }
  return t;
}

}  // namespace

Tensor tensor_from_proto(const TensorProto& proto, const std::string& base_dir) {
  return from_proto(proto, base_dir, false);
}

Tensor tensor_from_proto_consuming(const TensorProto& proto, const std::string& base_dir) {
  return from_proto(proto, base_dir, true);
}

void tensor_to_proto(const Tensor& t, const std::string& name, TensorProto* p) {
  p->Clear();
  p->set_name(name);
  p->set_data_type(dtype_to_onnx(t.dtype()));
  for (int64_t d : t.shape()) p->add_dims(d);
  if (t.dtype() == DType::kString) {
    for (int64_t i = 0; i < t.numel(); ++i) p->add_string_data(t.data<std::string>()[i]);
    return;
  }
  std::string bytes(file_nbytes(t.dtype(), t.numel()), '\0');
  pack_elements(t.dtype(), static_cast<const uint8_t*>(t.raw()), t.numel(), reinterpret_cast<uint8_t*>(bytes.data()));
  p->set_raw_data(std::move(bytes));
}

}  // namespace anvil::onnx_io
