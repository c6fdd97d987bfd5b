// The KServe v2 inference protocol (REST): request parsing, response
// encoding, model metadata. JSON tensors and the binary-tensor extension
// (Triton's: a JSON header of Inference-Header-Content-Length bytes, then the
// raw tensors in order). Everything here reads untrusted bytes: sizes are
// checked before allocation and every problem is an anvil::Error
// (kInvalidArgument) whose message the server returns with a 400.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "anvil/session.h"
#include "anvil/tensor.h"

namespace anvil::serving {

// "FP32", "INT64", "BYTES", ... (KServe's names); nullptr for types it lacks.
const char* kserve_datatype(DType dtype);
// The dtype of a KServe datatype name; throws for an unknown one.
DType dtype_from_kserve(const std::string& datatype);

struct InferInput {
  std::string name;
  Tensor tensor;
};

struct RequestedOutput {
  std::string name;
  bool binary = false;
};

struct InferRequest {
  std::string id;
  std::vector<InferInput> inputs;
  std::vector<RequestedOutput> outputs;  // empty: every output of the model
  bool binary_outputs = false;           // the request's binary_data_output parameter
};

// Limits on what one request may ask the server to allocate.
struct RequestLimits {
  int max_rank = 16;
  int64_t max_elements = int64_t{1} << 30;
};

// `body` is the HTTP body; `header_length` the Inference-Header-Content-Length
// header (the JSON part's size) when the request carries binary tensors.
InferRequest parse_infer_request(const std::string& body, std::optional<size_t> header_length,
                                 const RequestLimits& limits = {});

struct EncodedResponse {
  std::string body;
  std::optional<size_t> header_length;  // set when binary tensors follow the JSON
};

// The outputs named in `request` (or all), in the model's output order when
// the request names none. Binary when the request asks for it per output or
// for every output.
EncodedResponse encode_infer_response(const std::string& model_name, const std::string& request_id,
                                      const std::vector<ValueInfo>& outputs, const std::vector<Tensor>& values,
                                      const InferRequest& request);

// GET /v2/models/{name}: name, versions, platform, inputs and outputs with
// KServe datatypes and shapes (-1 for a dimension the model leaves symbolic).
std::string model_metadata_json(const std::string& model_name, const std::vector<ValueInfo>& inputs,
                                const std::vector<ValueInfo>& outputs);

// {"error": message}
std::string error_json(const std::string& message);

}  // namespace anvil::serving
