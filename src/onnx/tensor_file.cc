// anvil/tensor_io.h: tensors in .pb (TensorProto) and .npy files.
#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>

#include <onnx/onnx-data_pb.h>
#include <onnx/onnx_pb.h>

#include "anvil/tensor_io.h"
#include "core/check.h"
#include "onnx/tensor_proto.h"

namespace anvil {

namespace {

// The file opened for reading, and its size where it is a regular file
// (nullopt for a pipe, /dev/stdin or a FIFO: read to their end instead).
std::ifstream open_file(const std::string& path, std::optional<size_t>& size) {
  std::error_code ec;
  ANVIL_CHECK(std::filesystem::exists(path, ec), ErrorKind::kInvalidArgument, "tensor file '{}' does not exist", path);
  std::ifstream in(path, std::ios::binary);
  ANVIL_CHECK(in.good() && !std::filesystem::is_directory(path, ec), ErrorKind::kInvalidArgument,
              "cannot read tensor file '{}'", path);
  size.reset();
  if (std::filesystem::is_regular_file(path, ec)) {
    const auto bytes = std::filesystem::file_size(path, ec);
    if (!ec) size = static_cast<size_t>(bytes);
  }
  return in;
}

// n bytes from `in` into out, or the error that the file ended or failed.
void read_exactly(std::ifstream& in, char* out, size_t n, const std::string& path) {
  in.read(out, static_cast<std::streamsize>(n));
  ANVIL_CHECK(in.gcount() == static_cast<std::streamsize>(n), ErrorKind::kInvalidArgument,
              "cannot read tensor file '{}': it ended or failed after {} of {} bytes", path, in.gcount(), n);
}

// The rest of a stream whose size is not known.
std::string read_to_end(std::ifstream& in, const std::string& path) {
  std::ostringstream ss;
  ss << in.rdbuf();
  ANVIL_CHECK(!in.bad(), ErrorKind::kInvalidArgument, "cannot read tensor file '{}'", path);
  return ss.str();
}

// The whole file: a regular file in one string of its size (a stream's copy
// grew by doubling, up to three times the file in memory at once).
std::string read_file(const std::string& path) {
  std::optional<size_t> size;
  std::ifstream in = open_file(path, size);
  if (!size) return read_to_end(in, path);
  std::string bytes(*size, '\0');
  read_exactly(in, bytes.data(), *size, path);
  return bytes;
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// numpy dtype string ("<f4", "|b1", ...) -> DType.
DType npy_dtype(const std::string& descr, const std::string& path) {
  static const std::pair<const char*, DType> table[] = {
      {"f4", DType::kFloat32}, {"f8", DType::kFloat64}, {"f2", DType::kFloat16}, {"i1", DType::kInt8},
      {"u1", DType::kUInt8},   {"i2", DType::kInt16},   {"u2", DType::kUInt16},  {"i4", DType::kInt32},
      {"u4", DType::kUInt32},  {"i8", DType::kInt64},   {"u8", DType::kUInt64},  {"b1", DType::kBool}};
  ANVIL_CHECK(descr.size() == 3 && descr[0] != '>', ErrorKind::kInvalidArgument,
              "'{}': numpy dtype '{}' is not supported (little-endian numeric types only)", path, descr);
  for (const auto& [code, dtype] : table)
    if (descr.substr(1) == code) return dtype;
  fail(ErrorKind::kInvalidArgument, "'{}': numpy dtype '{}' is not supported", path, descr);
}

std::string npy_descr(DType d) {
  switch (d) {
    case DType::kFloat32: return "<f4";
    case DType::kFloat64: return "<f8";
    case DType::kFloat16: return "<f2";
    case DType::kInt8: return "|i1";
    case DType::kUInt8: return "|u1";
    case DType::kInt16: return "<i2";
    case DType::kUInt16: return "<u2";
    case DType::kInt32: return "<i4";
    case DType::kUInt32: return "<u4";
    case DType::kInt64: return "<i8";
    case DType::kUInt64: return "<u8";
    case DType::kBool: return "|b1";
    default: fail(ErrorKind::kUnsupported, "dtype {} cannot be written as .npy", dtype_name(d));
  }
}

// Value of 'key' in the header dict, e.g. "'descr': '<f4'".
std::string header_field(const std::string& header, const std::string& key, const std::string& path) {
  size_t k = header.find("'" + key + "'");
  ANVIL_CHECK(k != std::string::npos, ErrorKind::kInvalidArgument, "'{}': .npy header has no '{}'", path, key);
  size_t colon = header.find(':', k);
  ANVIL_CHECK(colon != std::string::npos, ErrorKind::kInvalidArgument, "'{}': malformed .npy header", path);
  size_t start = header.find_first_not_of(' ', colon + 1);
  ANVIL_CHECK(start != std::string::npos, ErrorKind::kInvalidArgument, "'{}': malformed .npy header", path);
  char open = header[start];
  char close = open == '(' ? ')' : open == '\'' ? '\'' : ',';
  size_t end = header.find(close, start + 1);
  ANVIL_CHECK(end != std::string::npos, ErrorKind::kInvalidArgument, "'{}': malformed .npy header", path);
  return open == '\'' || open == '(' ? header.substr(start + 1, end - start - 1) : header.substr(start, end - start);
}

}  // namespace

Tensor parse_tensor_pb(const std::string& bytes, const std::string& label, const std::string& base_dir,
                       std::string* name) {
  onnx::TensorProto proto;
  ANVIL_CHECK(proto.ParseFromString(bytes), ErrorKind::kInvalidArgument, "'{}' is not a TensorProto (.pb) file", label);
  if (name) *name = proto.name();
  try {
    return onnx_io::tensor_from_proto(proto, base_dir);
  } catch (const Error& e) {
    throw Error(e.kind() == ErrorKind::kOutOfMemory ? e.kind() : ErrorKind::kInvalidArgument, label + ": " + e.what());
  }
}

Tensor read_tensor_pb(const std::string& path, std::string* name) {
  std::string dir = std::filesystem::absolute(path).parent_path().string();
  return parse_tensor_pb(read_file(path), path, dir, name);
}

namespace {

// Where a .npy file's header ends (its data starts), from the file's first
// `prefix` bytes (at least the 12 of the longest preamble, where the file
// has them) and its size.
size_t npy_data_start(const char* prefix, size_t prefix_size, size_t file_size, const std::string& path) {
  ANVIL_CHECK(prefix_size >= 10 && std::memcmp(prefix, "\x93NUMPY", 6) == 0, ErrorKind::kInvalidArgument,
              "'{}' is not a .npy file", path);
  const auto byte = [&](int i) { return static_cast<size_t>(static_cast<unsigned char>(prefix[i])); };
  size_t header_len, header_start;
  if (byte(6) == 1) {
    header_len = byte(8) | byte(9) << 8;
    header_start = 10;
  } else {
    ANVIL_CHECK(prefix_size >= 12, ErrorKind::kInvalidArgument, "'{}' is a truncated .npy file", path);
    header_len = 0;
    for (int i = 3; i >= 0; --i) header_len = header_len << 8 | byte(8 + i);
    header_start = 12;
  }
  ANVIL_CHECK(header_start + header_len <= file_size, ErrorKind::kInvalidArgument, "'{}' is a truncated .npy file",
              path);
  return header_start + header_len;
}

// The dtype and shape a .npy header declares (its dictionary, read from the
// file's first bytes up to the data), after checking that the file's
// data_bytes hold exactly that.
std::pair<DType, Shape> npy_array(const std::string& header, size_t data_bytes, const std::string& path) {
  DType dtype = npy_dtype(header_field(header, "descr", path), path);
  ANVIL_CHECK(header_field(header, "fortran_order", path).find("False") != std::string::npos,
              ErrorKind::kInvalidArgument, "'{}': Fortran-ordered .npy arrays are not supported", path);
  Shape shape;
  std::stringstream dims(header_field(header, "shape", path));
  for (std::string item; std::getline(dims, item, ',');) {
    if (item.find_first_not_of(' ') == std::string::npos) continue;
    try {
      shape.push_back(std::stoll(item));
    } catch (const std::exception&) {
      fail(ErrorKind::kInvalidArgument, "'{}': malformed shape in .npy header", path);
    }
  }
  for (int64_t d : shape)
    ANVIL_CHECK(d >= 0, ErrorKind::kInvalidArgument, "'{}': negative dimension in .npy shape", path);
  size_t need = shape_nbytes(shape, dtype);  // checked before allocating: the header is untrusted
  ANVIL_CHECK(data_bytes == need, ErrorKind::kInvalidArgument, "'{}' holds {} bytes of data but its shape {} needs {}",
              path, data_bytes, shape_str(shape), need);
  return {dtype, std::move(shape)};
}

// Bools read as bytes become 0 or 1 (another byte in a bool is undefined behaviour).
void normalize_bools(Tensor& t) {
  if (t.dtype() != DType::kBool) return;
  auto* b = static_cast<uint8_t*>(t.raw());
  for (int64_t i = 0; i < t.numel(); ++i) b[i] = b[i] != 0;
}

}  // namespace

// The data is read straight into the tensor: one copy of the array in
// memory, where reading the whole file first held two (a training set of
// 200,000 x 512 bytes: 102 MB more at its peak). A pipe is read whole.
Tensor read_tensor_npy(const std::string& path) {
  std::optional<size_t> size;
  std::ifstream in = open_file(path, size);
  if (!size) return parse_tensor_npy(read_to_end(in, path), path);
  // The preamble: magic, version and the header's length (2 bytes in
  // version 1, 4 after), so that the header starts where it ends.
  char preamble[12];
  size_t preamble_size = std::min<size_t>(*size, 10);
  read_exactly(in, preamble, preamble_size, path);
  if (preamble_size == 10 && static_cast<unsigned char>(preamble[6]) != 1 && *size >= 12) {
    read_exactly(in, preamble + 10, 2, path);
    preamble_size = 12;
  }
  const size_t data_start = npy_data_start(preamble, preamble_size, *size, path);
  std::string header(preamble, preamble_size);
  header.resize(data_start);  // data_start >= the preamble: npy_data_start checked it against the file's size
  read_exactly(in, header.data() + preamble_size, data_start - preamble_size, path);
  const auto [dtype, shape] = npy_array(header, *size - data_start, path);
  Tensor t = Tensor::uninitialized(dtype, shape);
  read_exactly(in, static_cast<char*>(t.raw()), *size - data_start, path);
  normalize_bools(t);
  return t;
}

Tensor parse_tensor_npy(const std::string& bytes, const std::string& path) {
  const size_t data_start = npy_data_start(bytes.data(), bytes.size(), bytes.size(), path);
  const auto [dtype, shape] = npy_array(bytes.substr(0, data_start), bytes.size() - data_start, path);
  Tensor t = Tensor::uninitialized(dtype, shape);
  if (t.nbytes() > 0) std::memcpy(t.raw(), bytes.data() + data_start, t.nbytes());
  normalize_bools(t);
  return t;
}

Tensor read_tensor_file(const std::string& path) {
  if (ends_with(path, ".npy")) return read_tensor_npy(path);
  return read_tensor_pb(path);
}

namespace {
void check_writable(const Tensor& tensor, const std::string& path) {
  ANVIL_CHECK(!tensor.is_sequence(), ErrorKind::kUnsupported,
              "'{}': the value is a sequence of {} tensors; Anvil writes tensors only (SequenceProto files are not "
              "supported yet)", path, tensor.items().size());
  ANVIL_CHECK(!tensor.empty(), ErrorKind::kUnsupported, "'{}': the value is an optional without a value", path);
}
}  // namespace

void write_tensor_pb(const std::string& path, const Tensor& tensor, const std::string& name) {
  check_writable(tensor, path);
  onnx::TensorProto proto;
  onnx_io::tensor_to_proto(tensor, name, &proto);
  std::ofstream out(path, std::ios::binary);
  ANVIL_CHECK(out.good(), ErrorKind::kInvalidArgument, "cannot write '{}'", path);
  ANVIL_CHECK(proto.SerializeToOstream(&out), ErrorKind::kInvalidArgument, "cannot write '{}'", path);
}

namespace {

// SequenceProto / OptionalProto element kinds.
constexpr int kElemTensor = 1, kElemSequence = 3;

Tensor tensor_in(const onnx::TensorProto& p, const std::string& label, const std::string& dir) {
  try {
    return onnx_io::tensor_from_proto(p, dir);
  } catch (const Error& e) {
    throw Error(e.kind() == ErrorKind::kOutOfMemory ? e.kind() : ErrorKind::kInvalidArgument, label + ": " + e.what());
  }
}

Tensor sequence_in(const onnx::SequenceProto& p, DType elem, const std::string& label, const std::string& dir) {
  ANVIL_CHECK(p.elem_type() == kElemTensor || (p.elem_type() == 0 && p.tensor_values_size() == 0),
              ErrorKind::kUnsupported, "'{}': a sequence of element kind {}; Anvil reads sequences of tensors", label,
              p.elem_type());
  std::vector<Tensor> items;
  for (const auto& t : p.tensor_values()) items.push_back(tensor_in(t, label, dir));
  for (const Tensor& t : items)
    ANVIL_CHECK(t.dtype() == items[0].dtype(), ErrorKind::kInvalidArgument, "'{}': the sequence mixes {} and {}",
                label, dtype_name(items[0].dtype()), dtype_name(t.dtype()));
  return Tensor::sequence(items.empty() ? elem : items[0].dtype(), std::move(items));
}

void save(const google::protobuf::MessageLite& m, const std::string& path) {
  std::ofstream out(path, std::ios::binary);
  ANVIL_CHECK(out.good(), ErrorKind::kInvalidArgument, "cannot write '{}'", path);
  ANVIL_CHECK(m.SerializeToOstream(&out), ErrorKind::kInvalidArgument, "cannot write '{}'", path);
}

void sequence_out(const Tensor& value, const std::string& name, onnx::SequenceProto* p) {
  p->set_name(name);
  p->set_elem_type(kElemTensor);
  for (const Tensor& t : value.items()) onnx_io::tensor_to_proto(t, "", p->add_tensor_values());
}

}  // namespace

Tensor read_value_pb(const std::string& path, ValueKind kind, DType elem, std::string* name) {
  if (kind == ValueKind::kTensor) return read_tensor_pb(path, name);
  return parse_value_pb(read_file(path), path, kind, elem, std::filesystem::absolute(path).parent_path().string(), name);
}

Tensor parse_value_pb(const std::string& bytes, const std::string& path, ValueKind kind, DType elem,
                      const std::string& dir, std::string* name) {
  if (kind == ValueKind::kTensor) return parse_tensor_pb(bytes, path, dir, name);
  if (kind == ValueKind::kSequence) {
    onnx::SequenceProto p;
    ANVIL_CHECK(p.ParseFromString(bytes), ErrorKind::kInvalidArgument, "'{}' is not a SequenceProto (.pb) file", path);
    if (name) *name = p.name();
    return sequence_in(p, elem, path, dir);
  }
  onnx::OptionalProto p;
  ANVIL_CHECK(p.ParseFromString(bytes), ErrorKind::kInvalidArgument, "'{}' is not an OptionalProto (.pb) file", path);
  if (name) *name = p.name();
  if (p.has_tensor_value()) return tensor_in(p.tensor_value(), path, dir);
  if (p.has_sequence_value()) return sequence_in(p.sequence_value(), elem, path, dir);
  return Tensor();  // no value
}

void write_value_pb(const std::string& path, const Tensor& value, const std::string& name, ValueKind kind) {
  if (kind == ValueKind::kTensor) return write_tensor_pb(path, value, name);
  if (kind == ValueKind::kSequence) {
    ANVIL_CHECK(value.is_sequence(), ErrorKind::kInternal, "'{}': a sequence output holds a tensor", path);
    onnx::SequenceProto p;
    sequence_out(value, name, &p);
    return save(p, path);
  }
  onnx::OptionalProto p;
  p.set_name(name);
  p.set_elem_type(kind == ValueKind::kOptionalSequence ? kElemSequence : kElemTensor);
  if (value.is_sequence()) sequence_out(value, "", p.mutable_sequence_value());
  else if (!value.empty()) onnx_io::tensor_to_proto(value, "", p.mutable_tensor_value());
  save(p, path);
}

void write_tensor_npy(const std::string& path, const Tensor& tensor) {
  check_writable(tensor, path);
  std::string shape;
  for (int64_t d : tensor.shape()) shape += std::to_string(d) + ",";
  if (tensor.rank() > 1) shape.pop_back();
  std::string header = "{'descr': '" + npy_descr(tensor.dtype()) + "', 'fortran_order': False, 'shape': (" + shape +
                       "), }";
  size_t total = 10 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header += '\n';
  std::ofstream out(path, std::ios::binary);
  ANVIL_CHECK(out.good(), ErrorKind::kInvalidArgument, "cannot write '{}'", path);
  out.write("\x93NUMPY\x01\x00", 8);
  uint16_t len = static_cast<uint16_t>(header.size());
  out.put(static_cast<char>(len & 0xff));
  out.put(static_cast<char>(len >> 8));
  out << header;
  out.write(static_cast<const char*>(tensor.raw()), static_cast<std::streamsize>(tensor.nbytes()));
}

}  // namespace anvil
