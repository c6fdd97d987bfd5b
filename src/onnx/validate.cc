#include "onnx/validate.h"

#include <onnx/onnx_pb.h>

#include <set>

#include "core/check.h"
#include "core/checked.h"
#include "core/low_precision.h"
#include "onnx/tensor_proto.h"

namespace anvil::onnx_io {

namespace {

using onnx::AttributeProto;
using onnx::TensorProto;

std::string node_label(const onnx::NodeProto& n) {
  std::string s = n.domain().empty() ? n.op_type() : n.domain() + "." + n.op_type();
  if (!n.name().empty()) s += " '" + n.name() + "'";
  return s;
}

// The codes of ONNX 1.23 (to FLOAT6E3M2 = 28); Debian's generated protobuf
// enum stops at BFLOAT16, so its DataType_IsValid cannot tell.
constexpr int kLastOnnxTypeCode = 28;
bool is_onnx_type_code(int t) { return t > TensorProto::UNDEFINED && t <= kLastOnnxTypeCode; }

// Number of entries in the typed field that holds `data_type`'s values.
int64_t typed_field_size(const TensorProto& t) {
  switch (t.data_type()) {
    case TensorProto::FLOAT: case TensorProto::COMPLEX64: return t.float_data_size();
    case TensorProto::DOUBLE: case TensorProto::COMPLEX128: return t.double_data_size();
    case TensorProto::INT64: return t.int64_data_size();
    case TensorProto::UINT64: case TensorProto::UINT32: return t.uint64_data_size();
    case TensorProto::STRING: return t.string_data_size();
    default: return t.int32_data_size();  // int8..int32, uint8, uint16, bool, float16, bfloat16, float8
  }
}

// Complex types store two numbers per element.
int64_t values_per_element(int data_type) {
  return data_type == TensorProto::COMPLEX64 || data_type == TensorProto::COMPLEX128 ? 2 : 1;
}

// A non-negative decimal integer, or nullopt.
std::optional<int64_t> parse_count(const std::string& s) {
  if (s.empty() || s.size() > 19) return std::nullopt;
  int64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return std::nullopt;
    auto r = add_overflow_free(v * 10, c - '0');  // 19 digits cannot overflow the multiply
    if (!r) return std::nullopt;
    v = *r;
  }
  return v;
}

void validate_external_fields(const TensorProto& t, int64_t nbytes) {
  const std::string& name = t.name();
  ANVIL_CHECK(!t.has_raw_data(), ErrorKind::kInvalidModel, "tensor '{}' has both external and raw data", name);
  std::string location;
  std::optional<int64_t> offset = 0, length;
  for (const auto& kv : t.external_data()) {
    if (kv.key() == "location") {
      location = kv.value();
    } else if (kv.key() == "offset") {
      offset = parse_count(kv.value());
      ANVIL_CHECK(offset, ErrorKind::kInvalidModel, "tensor '{}': external data offset '{}' is not a byte count", name,
                  kv.value());
    } else if (kv.key() == "length") {
      length = parse_count(kv.value());
      ANVIL_CHECK(length, ErrorKind::kInvalidModel, "tensor '{}': external data length '{}' is not a byte count", name,
                  kv.value());
    }
  }
  ANVIL_CHECK(!location.empty(), ErrorKind::kInvalidModel, "tensor '{}' has external data without a location", name);
  ANVIL_CHECK(location.find('\0') == std::string::npos, ErrorKind::kInvalidModel,
              "tensor '{}': external data location contains a NUL byte", name);
  ANVIL_CHECK(!length || *length == nbytes, ErrorKind::kInvalidModel,
              "tensor '{}': external data length {} does not match its shape ({} bytes)", name, *length, nbytes);
  ANVIL_CHECK(add_overflow_free(*offset, nbytes).has_value(), ErrorKind::kInvalidModel,
              "tensor '{}': external data offset {} + {} bytes overflows", name, *offset, nbytes);
}

}  // namespace

void validate_tensor(const TensorProto& t) {
  const std::string& name = t.name();
  int type = t.data_type();
  ANVIL_CHECK(is_onnx_type_code(type), ErrorKind::kInvalidModel, "tensor '{}' has an invalid data type code {}", name,
              type);
  ANVIL_CHECK(!t.has_segment(), ErrorKind::kUnsupported, "tensor '{}' is segmented, which Anvil does not support",
              name);
  int64_t numel = 1;
  for (int64_t d : t.dims()) {
    ANVIL_CHECK(d >= 0, ErrorKind::kInvalidModel, "tensor '{}' has a negative dimension {}", name, d);
    auto n = mul_overflow_free(numel, d);
    ANVIL_CHECK(n, ErrorKind::kInvalidModel, "tensor '{}': the element count of its dims overflows int64", name);
    numel = *n;
  }
  DType dtype = dtype_from_onnx(type);
  if (dtype == DType::kUndefined) return;  // complex, float6: refused as unsupported where they are used
  if (dtype == DType::kString) {
    ANVIL_CHECK(t.data_location() != TensorProto::EXTERNAL && !t.has_raw_data(), ErrorKind::kInvalidModel,
                "string tensor '{}' must keep its strings in string_data", name);
    ANVIL_CHECK(t.string_data_size() == numel, ErrorKind::kInvalidModel,
                "string tensor '{}' holds {} strings but its dims need {}", name, t.string_data_size(), numel);
    return;
  }
  auto nbytes = mul_overflow_free(numel, static_cast<int64_t>(dtype_size(dtype)));
  ANVIL_CHECK(nbytes, ErrorKind::kInvalidModel, "tensor '{}': its byte size overflows int64", name);
  *nbytes = static_cast<int64_t>(file_nbytes(dtype, numel));  // packed 4- and 2-bit types take fewer

  if (t.data_location() == TensorProto::EXTERNAL) {
    validate_external_fields(t, *nbytes);
    return;
  }
  if (t.has_raw_data()) {
    ANVIL_CHECK(static_cast<int64_t>(t.raw_data().size()) == *nbytes, ErrorKind::kInvalidModel,
                "tensor '{}' has {} bytes of raw data but its dims need {}", name, t.raw_data().size(), *nbytes);
    return;
  }
  int64_t have = typed_field_size(t);
  const int64_t need = dtype_is_low_precision(dtype) ? *nbytes : numel * values_per_element(type);
  ANVIL_CHECK(have == need, ErrorKind::kInvalidModel, "tensor '{}' holds {} values but its dims need {}", name, have,
              need);
}

namespace {

void validate_graph(const onnx::GraphProto& g, int depth);

void validate_value_info(const onnx::ValueInfoProto& vi) {
  if (!vi.has_type() || !vi.type().has_tensor_type()) return;
  const auto& tt = vi.type().tensor_type();
  if (!tt.has_shape()) return;
  for (const auto& dim : tt.shape().dim())
    ANVIL_CHECK(!dim.has_dim_value() || dim.dim_value() >= 0, ErrorKind::kInvalidModel,
                "value '{}' is declared with a negative dimension {}", vi.name(), dim.dim_value());
}

// Integer attributes that size loops or divide: a 0 or negative value is an
// invalid model, caught here rather than as SIGFPE in shape inference.
struct IntRule {
  const char* attr;
  int64_t min;
  int64_t max;
};

const std::vector<IntRule>* rules_for(const std::string& op) {
  static const std::vector<IntRule> kWindow = {{"strides", 1, INT32_MAX},     {"dilations", 1, INT32_MAX},
                                               {"kernel_shape", 1, INT32_MAX}, {"pads", 0, INT32_MAX},
                                               {"group", 1, INT32_MAX},        {"output_padding", 0, INT32_MAX},
                                               {"output_shape", 0, INT64_MAX}, {"p", 1, INT32_MAX}};
  // blocksize^2 must not overflow a 32-bit product either.
  static const std::vector<IntRule> kBlock = {{"blocksize", 1, 46340}};
  static const std::vector<IntRule> kLrn = {{"size", 1, INT32_MAX}};
  static const std::vector<IntRule> kRecurrent = {{"hidden_size", 1, INT32_MAX}};
  static const std::vector<IntRule> kSplit = {{"split", 0, INT64_MAX}, {"num_outputs", 1, INT32_MAX}};
  static const std::map<std::string, const std::vector<IntRule>*> kByOp = {
      {"Conv", &kWindow},          {"ConvTranspose", &kWindow}, {"ConvInteger", &kWindow},
      {"QLinearConv", &kWindow},   {"MaxPool", &kWindow},       {"AveragePool", &kWindow},
      {"LpPool", &kWindow},        {"MaxUnpool", &kWindow},     {"Col2Im", &kWindow},
      {"DeformConv", &kWindow},    {"MaxRoiPool", &kWindow},    {"DepthToSpace", &kBlock},
      {"SpaceToDepth", &kBlock},   {"LRN", &kLrn},              {"RNN", &kRecurrent},
      {"GRU", &kRecurrent},        {"LSTM", &kRecurrent},       {"Split", &kSplit}};
  auto it = kByOp.find(op);
  return it == kByOp.end() ? nullptr : it->second;
}

void check_int_rules(const onnx::NodeProto& n, const AttributeProto& a) {
  if (!n.domain().empty() && n.domain() != "ai.onnx") return;
  const auto* rules = rules_for(n.op_type());
  if (!rules) return;
  for (const IntRule& r : *rules) {
    if (a.name() != r.attr) continue;
    auto check = [&](int64_t v) {
      ANVIL_CHECK(v >= r.min && v <= r.max, ErrorKind::kInvalidModel,
                  "node {}: attribute '{}' = {} is out of range [{}, {}]", node_label(n), a.name(), v, r.min, r.max);
    };
    if (a.type() == AttributeProto::INT) check(a.i());
    for (int64_t v : a.ints()) check(v);
  }
}

void validate_attribute(const onnx::NodeProto& n, const AttributeProto& a, int depth) {
  ANVIL_CHECK(!a.name().empty(), ErrorKind::kInvalidModel, "node {} has an attribute without a name", node_label(n));
  switch (a.type()) {
    case AttributeProto::TENSOR:
      validate_tensor(a.t());
      break;
    case AttributeProto::TENSORS:
      for (const auto& t : a.tensors()) validate_tensor(t);
      break;
    case AttributeProto::GRAPH:
      validate_graph(a.g(), depth + 1);
      break;
    case AttributeProto::GRAPHS:
      for (const auto& g : a.graphs()) validate_graph(g, depth + 1);
      break;
    case AttributeProto::FLOAT: case AttributeProto::INT: case AttributeProto::STRING:
    case AttributeProto::FLOATS: case AttributeProto::INTS: case AttributeProto::STRINGS:
    case AttributeProto::SPARSE_TENSOR: case AttributeProto::SPARSE_TENSORS:
    case AttributeProto::TYPE_PROTO: case AttributeProto::TYPE_PROTOS:
      break;
    default:
      ANVIL_CHECK(!a.ref_attr_name().empty(), ErrorKind::kInvalidModel,
                  "node {}: attribute '{}' has no valid type ({})", node_label(n), a.name(),
                  static_cast<int>(a.type()));
  }
  check_int_rules(n, a);
}

void validate_graph(const onnx::GraphProto& g, int depth) {
  ANVIL_CHECK(depth <= kMaxGraphDepth, ErrorKind::kInvalidModel, "subgraphs are nested more than {} deep",
              kMaxGraphDepth);
  ANVIL_CHECK(g.sparse_initializer_size() == 0, ErrorKind::kUnsupported,
              "graph '{}' has sparse initializers, which Anvil does not support", g.name());
  for (const auto& t : g.initializer()) validate_tensor(t);
  for (const auto& vi : g.input()) validate_value_info(vi);
  for (const auto& vi : g.output()) validate_value_info(vi);
  for (const auto& vi : g.value_info()) validate_value_info(vi);
  for (const auto& n : g.node()) {
    ANVIL_CHECK(!n.op_type().empty(), ErrorKind::kInvalidModel, "a node{} has no op_type",
                n.name().empty() ? "" : " '" + n.name() + "'");
    std::set<std::string> seen;
    for (const auto& a : n.attribute()) {
      ANVIL_CHECK(seen.insert(a.name()).second, ErrorKind::kInvalidModel, "node {} has attribute '{}' twice",
                  node_label(n), a.name());
      validate_attribute(n, a, depth);
    }
  }
}

}  // namespace

void validate_model(const onnx::ModelProto& model) {
  ANVIL_CHECK(model.has_graph(), ErrorKind::kInvalidModel, "not an ONNX model: it has no graph");
  for (const auto& op : model.opset_import())
    ANVIL_CHECK(op.version() >= 1 && op.version() <= 10000, ErrorKind::kInvalidModel,
                "the model imports opset {} of domain '{}', which does not exist", op.version(), op.domain());
  validate_graph(model.graph(), 0);
}

}  // namespace anvil::onnx_io
