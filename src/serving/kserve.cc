#include "serving/kserve.h"

#include <cmath>
#include <cstring>
#include <limits>

#include <nlohmann/json.hpp>

#include "core/check.h"
#include "core/checked.h"
#include "core/half.h"

namespace anvil::serving {

namespace {

using json = nlohmann::json;

struct DatatypeName {
  DType dtype;
  const char* name;
};
constexpr DatatypeName kDatatypes[] = {
    {DType::kBool, "BOOL"},     {DType::kUInt8, "UINT8"},   {DType::kUInt16, "UINT16"}, {DType::kUInt32, "UINT32"},
    {DType::kUInt64, "UINT64"}, {DType::kInt8, "INT8"},     {DType::kInt16, "INT16"},   {DType::kInt32, "INT32"},
    {DType::kInt64, "INT64"},   {DType::kFloat16, "FP16"},  {DType::kFloat32, "FP32"},  {DType::kFloat64, "FP64"},
    {DType::kString, "BYTES"},  {DType::kBFloat16, "BF16"},
};

// Nesting deeper than any tensor (or a hostile document) is refused while parsing.
constexpr int kMaxJsonDepth = 64;

json parse_json(const char* begin, const char* end) {
  json::parser_callback_t limit_depth = [](int depth, json::parse_event_t, json&) {
    ANVIL_CHECK(depth <= kMaxJsonDepth, ErrorKind::kInvalidArgument, "the JSON nests deeper than {} levels",
                kMaxJsonDepth);
    return true;
  };
  try {
    return json::parse(begin, end, limit_depth);
  } catch (const json::exception& e) {
    fail(ErrorKind::kInvalidArgument, "the request is not valid JSON: {}", e.what());
  }
}

const json& member(const json& object, const char* key, const std::string& where) {
  auto it = object.find(key);
  ANVIL_CHECK(it != object.end(), ErrorKind::kInvalidArgument, "{} has no \"{}\"", where, key);
  return *it;
}

std::string string_member(const json& object, const char* key, const std::string& where) {
  const json& v = member(object, key, where);
  ANVIL_CHECK(v.is_string(), ErrorKind::kInvalidArgument, "\"{}\" of {} must be a string", key, where);
  return v.get<std::string>();
}

// parameters.<key> when present.
const json* parameter(const json& object, const char* key) {
  auto params = object.find("parameters");
  if (params == object.end() || !params->is_object()) return nullptr;
  auto it = params->find(key);
  return it == params->end() ? nullptr : &*it;
}

bool bool_parameter(const json& object, const char* key) {
  const json* p = parameter(object, key);
  return p && p->is_boolean() && p->get<bool>();
}

Shape parse_shape(const json& input, const std::string& where, const RequestLimits& limits) {
  const json& shape = member(input, "shape", where);
  ANVIL_CHECK(shape.is_array(), ErrorKind::kInvalidArgument, "\"shape\" of {} must be an array", where);
  ANVIL_CHECK(static_cast<int>(shape.size()) <= limits.max_rank, ErrorKind::kInvalidArgument,
              "{} has rank {}, more than the {} allowed", where, shape.size(), limits.max_rank);
  Shape dims;
  int64_t count = 1;
  for (const json& d : shape) {
    ANVIL_CHECK(d.is_number_integer() && d.get<int64_t>() >= 0, ErrorKind::kInvalidArgument,
                "\"shape\" of {} must hold non-negative integers, got {}", where, d.dump());
    dims.push_back(d.get<int64_t>());
    // Each dimension bounded too: with a 0 among them, the product says nothing about the others.
    ANVIL_CHECK(dims.back() <= limits.max_elements, ErrorKind::kInvalidArgument,
                "\"shape\" of {} has a dimension of {}, more than the {} elements allowed", where, dims.back(),
                limits.max_elements);
    count = checked_mul(count, dims.back(), "the element count");
  }
  ANVIL_CHECK(count <= limits.max_elements, ErrorKind::kInvalidArgument,
              "{} has {} elements, more than the {} allowed", where, count, limits.max_elements);
  return dims;
}

// The JSON values of `data`, nested or flat, in row-major order.
void flatten(const json& data, std::vector<const json*>& out, int64_t limit, const std::string& where) {
  std::vector<const json*> stack{&data};
  while (!stack.empty()) {
    const json* v = stack.back();
    stack.pop_back();
    if (v->is_array()) {
      for (auto it = v->rbegin(); it != v->rend(); ++it) stack.push_back(&*it);
    } else {
      ANVIL_CHECK(static_cast<int64_t>(out.size()) < limit, ErrorKind::kInvalidArgument,
                  "\"data\" of {} has more elements than its shape", where);
      out.push_back(v);
    }
  }
}

template <typename T>
T integer_value(const json& v, const std::string& where) {
  ANVIL_CHECK(v.is_number_integer(), ErrorKind::kInvalidArgument, "{} holds {} where an integer was expected", where,
              v.dump());
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    ANVIL_CHECK(u <= static_cast<uint64_t>(std::numeric_limits<T>::max()), ErrorKind::kInvalidArgument,
                "{} holds {}, out of range for its datatype", where, u);
    return static_cast<T>(u);
  }
  const int64_t i = v.get<int64_t>();
  ANVIL_CHECK(i >= static_cast<int64_t>(std::numeric_limits<T>::min()) &&
                  (i < 0 || static_cast<uint64_t>(i) <= static_cast<uint64_t>(std::numeric_limits<T>::max())),
              ErrorKind::kInvalidArgument, "{} holds {}, out of range for its datatype", where, i);
  return static_cast<T>(i);
}

double float_value(const json& v, const std::string& where) {
  ANVIL_CHECK(v.is_number(), ErrorKind::kInvalidArgument, "{} holds {} where a number was expected", where, v.dump());
  return v.get<double>();
}

// A JSON number as a float; out of float's range is an error (the conversion would be undefined).
float float32_value(const json& v, const std::string& where) {
  const double d = float_value(v, where);
  ANVIL_CHECK(std::fabs(d) <= std::numeric_limits<float>::max(), ErrorKind::kInvalidArgument,
              "{} holds {}, out of range for its datatype", where, d);
  return static_cast<float>(d);
}

void store_json_element(Tensor& t, int64_t i, const json& v, const std::string& where) {
  switch (t.dtype()) {
    case DType::kFloat32: t.data<float>()[i] = float32_value(v, where); return;
    case DType::kFloat64: t.data<double>()[i] = float_value(v, where); return;
    case DType::kFloat16: t.data<uint16_t>()[i] = Half::from_float(float32_value(v, where)); return;
    case DType::kBFloat16: t.data<BFloat16>()[i] = BFloat16(float32_value(v, where)); return;
    case DType::kInt8: t.data<int8_t>()[i] = integer_value<int8_t>(v, where); return;
    case DType::kInt16: t.data<int16_t>()[i] = integer_value<int16_t>(v, where); return;
    case DType::kInt32: t.data<int32_t>()[i] = integer_value<int32_t>(v, where); return;
    case DType::kInt64: t.data<int64_t>()[i] = integer_value<int64_t>(v, where); return;
    case DType::kUInt8: t.data<uint8_t>()[i] = integer_value<uint8_t>(v, where); return;
    case DType::kUInt16: t.data<uint16_t>()[i] = integer_value<uint16_t>(v, where); return;
    case DType::kUInt32: t.data<uint32_t>()[i] = integer_value<uint32_t>(v, where); return;
    case DType::kUInt64: t.data<uint64_t>()[i] = integer_value<uint64_t>(v, where); return;
    case DType::kBool:
      ANVIL_CHECK(v.is_boolean(), ErrorKind::kInvalidArgument, "{} holds {} where a boolean was expected", where,
                  v.dump());
      t.data<bool>()[i] = v.get<bool>();
      return;
    case DType::kString:
      ANVIL_CHECK(v.is_string(), ErrorKind::kInvalidArgument, "{} holds {} where a string was expected", where,
                  v.dump());
      t.data<std::string>()[i] = v.get<std::string>();
      return;
    default: fail(ErrorKind::kInvalidArgument, "{}: datatype not supported in JSON", where);
  }
}

Tensor tensor_from_json(DType dtype, const Shape& shape, const json& data, const std::string& where) {
  // The values first (their count is bounded by the body's size), the tensor once they match its shape.
  const int64_t count = shape_numel(shape);
  std::vector<const json*> values;
  flatten(data, values, count, where);
  ANVIL_CHECK(static_cast<int64_t>(values.size()) == count, ErrorKind::kInvalidArgument,
              "\"data\" of {} has {} elements, its shape {} needs {}", where, values.size(), shape_str(shape), count);
  Tensor t(dtype, shape);
  for (int64_t i = 0; i < t.numel(); ++i) store_json_element(t, i, *values[static_cast<size_t>(i)], where);
  return t;
}

// BYTES in the binary extension: each element a 4-byte little-endian length, then its bytes.
Tensor strings_from_binary(const Shape& shape, const char* p, size_t size, const std::string& where) {
  // Every element takes at least its 4-byte length: check before allocating the strings.
  const int64_t count = shape_numel(shape);
  ANVIL_CHECK(static_cast<uint64_t>(count) <= size / 4, ErrorKind::kInvalidArgument,
              "binary data of {} has {} bytes, too few for {} strings", where, size, count);
  Tensor t(DType::kString, shape);
  size_t pos = 0;
  for (int64_t i = 0; i < t.numel(); ++i) {
    ANVIL_CHECK(size - pos >= 4, ErrorKind::kInvalidArgument, "binary data of {} ends inside element {}", where, i);
    uint32_t length;
    std::memcpy(&length, p + pos, 4);
    pos += 4;
    ANVIL_CHECK(size - pos >= length, ErrorKind::kInvalidArgument, "binary data of {} ends inside element {}", where,
                i);
    t.data<std::string>()[i].assign(p + pos, length);
    pos += length;
  }
  ANVIL_CHECK(pos == size, ErrorKind::kInvalidArgument, "binary data of {} has {} bytes after its last element", where,
              size - pos);
  return t;
}

Tensor tensor_from_binary(DType dtype, const Shape& shape, const char* p, size_t size, const std::string& where) {
  if (dtype == DType::kString) return strings_from_binary(shape, p, size, where);
  const size_t expected = shape_nbytes(shape, dtype);
  ANVIL_CHECK(size == expected, ErrorKind::kInvalidArgument,
              "binary data of {} has {} bytes, its shape {} and datatype need {}", where, size, shape_str(shape),
              expected);
  Tensor t(dtype, shape);
  if (size) std::memcpy(t.raw(), p, size);
  if (dtype == DType::kBool)
    for (int64_t i = 0; i < t.numel(); ++i) t.data<uint8_t>()[i] = t.data<uint8_t>()[i] != 0;
  return t;
}

json shape_json(const ValueInfo& info) {
  json dims = json::array();
  for (int64_t d : info.shape) dims.push_back(d);
  return dims;
}

const char* datatype_or_unknown(DType dtype) {
  const char* name = kserve_datatype(dtype);
  return name ? name : "UNKNOWN";
}

json tensor_data_json(const Tensor& t) {
  json data = json::array();
  for (int64_t i = 0; i < t.numel(); ++i) {
    switch (t.dtype()) {
      case DType::kString: data.push_back(t.data<std::string>()[i]); break;
      case DType::kBool: data.push_back(t.data<bool>()[i]); break;
      case DType::kInt64: data.push_back(t.data<int64_t>()[i]); break;
      case DType::kUInt64: data.push_back(t.data<uint64_t>()[i]); break;
      case DType::kFloat32: data.push_back(t.data<float>()[i]); break;
      case DType::kFloat64: data.push_back(t.data<double>()[i]); break;
      default: data.push_back(element_as_double(t, i)); break;
    }
  }
  return data;
}

void append_binary(const Tensor& t, std::string& out) {
  if (t.dtype() != DType::kString) {
    out.append(static_cast<const char*>(t.raw()), t.nbytes());
    return;
  }
  for (int64_t i = 0; i < t.numel(); ++i) {
    const std::string& s = t.data<std::string>()[i];
    const uint32_t length = static_cast<uint32_t>(s.size());
    out.append(reinterpret_cast<const char*>(&length), 4);
    out.append(s);
  }
}

}  // namespace

const char* kserve_datatype(DType dtype) {
  for (const DatatypeName& d : kDatatypes)
    if (d.dtype == dtype) return d.name;
  return nullptr;
}

DType dtype_from_kserve(const std::string& datatype) {
  for (const DatatypeName& d : kDatatypes)
    if (datatype == d.name) return d.dtype;
  fail(ErrorKind::kInvalidArgument, "unknown datatype \"{}\" (KServe's: BOOL, UINT8..UINT64, INT8..INT64, FP16, FP32, "
       "FP64, BF16, BYTES)", datatype);
}

InferRequest parse_infer_request(const std::string& body, std::optional<size_t> header_length,
                                 const RequestLimits& limits) {
  const size_t json_size = header_length.value_or(body.size());
  ANVIL_CHECK(json_size <= body.size(), ErrorKind::kInvalidArgument,
              "Inference-Header-Content-Length is {} but the body has only {} bytes", json_size, body.size());
  const json doc = parse_json(body.data(), body.data() + json_size);
  ANVIL_CHECK(doc.is_object(), ErrorKind::kInvalidArgument, "the request must be a JSON object");
  InferRequest request;
  if (auto id = doc.find("id"); id != doc.end()) {
    ANVIL_CHECK(id->is_string(), ErrorKind::kInvalidArgument, "\"id\" must be a string");
    request.id = id->get<std::string>();
  }
  request.binary_outputs = bool_parameter(doc, "binary_data_output");

  const json& inputs = member(doc, "inputs", "the request");
  ANVIL_CHECK(inputs.is_array(), ErrorKind::kInvalidArgument, "\"inputs\" must be an array");
  size_t binary_pos = json_size;
  for (const json& input : inputs) {
    ANVIL_CHECK(input.is_object(), ErrorKind::kInvalidArgument, "each of \"inputs\" must be an object");
    const std::string name = string_member(input, "name", "an input");
    const std::string where = "input '" + name + "'";
    const DType dtype = dtype_from_kserve(string_member(input, "datatype", where));
    const Shape shape = parse_shape(input, where, limits);
    if (const json* size = parameter(input, "binary_data_size")) {
      ANVIL_CHECK(size->is_number_unsigned(), ErrorKind::kInvalidArgument,
                  "binary_data_size of {} must be a non-negative integer", where);
      const uint64_t bytes = size->get<uint64_t>();
      ANVIL_CHECK(bytes <= body.size() - binary_pos, ErrorKind::kInvalidArgument,
                  "binary data of {} needs {} bytes but only {} remain in the body", where, bytes,
                  body.size() - binary_pos);
      request.inputs.push_back({name, tensor_from_binary(dtype, shape, body.data() + binary_pos, bytes, where)});
      binary_pos += bytes;
    } else {
      request.inputs.push_back({name, tensor_from_json(dtype, shape, member(input, "data", where), where)});
    }
  }
  ANVIL_CHECK(binary_pos == body.size(), ErrorKind::kInvalidArgument,
              "the body has {} bytes of binary data that no input claims", body.size() - binary_pos);

  if (auto outputs = doc.find("outputs"); outputs != doc.end()) {
    ANVIL_CHECK(outputs->is_array(), ErrorKind::kInvalidArgument, "\"outputs\" must be an array");
    for (const json& output : *outputs) {
      ANVIL_CHECK(output.is_object(), ErrorKind::kInvalidArgument, "each of \"outputs\" must be an object");
      request.outputs.push_back({string_member(output, "name", "an output"), bool_parameter(output, "binary_data")});
    }
  }
  return request;
}

EncodedResponse encode_infer_response(const std::string& model_name, const std::string& request_id,
                                      const std::vector<ValueInfo>& outputs, const std::vector<Tensor>& values,
                                      const InferRequest& request) {
  std::vector<RequestedOutput> wanted = request.outputs;
  if (wanted.empty())
    for (const ValueInfo& o : outputs) wanted.push_back({o.name, false});
  json doc = {{"model_name", model_name}, {"model_version", "1"}, {"outputs", json::array()}};
  if (!request_id.empty()) doc["id"] = request_id;
  std::string binary;
  for (const RequestedOutput& want : wanted) {
    size_t k = 0;
    while (k < outputs.size() && outputs[k].name != want.name) ++k;
    ANVIL_CHECK(k < outputs.size(), ErrorKind::kInvalidArgument, "the model has no output named '{}'", want.name);
    const Tensor& t = values[k];
    ANVIL_CHECK(!t.empty() && !t.is_sequence() && kserve_datatype(t.dtype()), ErrorKind::kUnsupported,
                "output '{}' is not a tensor of a KServe datatype", want.name);
    json out = {{"name", want.name}, {"datatype", kserve_datatype(t.dtype())}, {"shape", t.shape()}};
    if (want.binary || request.binary_outputs) {
      const size_t before = binary.size();
      append_binary(t, binary);
      out["parameters"] = {{"binary_data_size", binary.size() - before}};
    } else {
      out["data"] = tensor_data_json(t);
    }
    doc["outputs"].push_back(std::move(out));
  }
  EncodedResponse response;
  response.body = doc.dump(-1, ' ', false, json::error_handler_t::replace);
  if (!binary.empty() || request.binary_outputs) {
    response.header_length = response.body.size();
    response.body += binary;
  }
  return response;
}

std::string model_metadata_json(const std::string& model_name, const std::vector<ValueInfo>& inputs,
                                const std::vector<ValueInfo>& outputs) {
  auto list = [](const std::vector<ValueInfo>& infos) {
    json out = json::array();
    for (const ValueInfo& i : infos)
      out.push_back({{"name", i.name}, {"datatype", datatype_or_unknown(i.dtype)}, {"shape", shape_json(i)}});
    return out;
  };
  json doc = {{"name", model_name}, {"versions", {"1"}}, {"platform", "onnx"}, {"inputs", list(inputs)},
              {"outputs", list(outputs)}};
  return doc.dump();
}

std::string error_json(const std::string& message) {
  return json{{"error", message}}.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace anvil::serving
