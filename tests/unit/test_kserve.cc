// KServe v2 codec: JSON and binary tensors in, responses out, and every
// malformed request refused with an invalid-argument error; and the dynamic
// batcher's rule (serving/model_runner.h).
#include <gtest/gtest.h>

#include <cstring>

#include "anvil/error.h"
#include "serving/kserve.h"
#include "serving/model_runner.h"

namespace anvil::serving {
namespace {

std::string refusal(const std::string& body, std::optional<size_t> header_length = std::nullopt,
                    const RequestLimits& limits = {}) {
  try {
    parse_infer_request(body, header_length, limits);
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "accepted: " << body.substr(0, 200);
  return "";
}

TEST(KServe, JsonTensorsFlatAndNested) {
  InferRequest r = parse_infer_request(
      R"({"id":"7","inputs":[{"name":"x","datatype":"FP32","shape":[2,2],"data":[[1,2],[3.5,-4]]},
          {"name":"n","datatype":"INT64","shape":[3],"data":[1,-2,9007199254740993]},
          {"name":"b","datatype":"BOOL","shape":[2],"data":[true,false]},
          {"name":"s","datatype":"BYTES","shape":[1],"data":["héllo"]}],
          "outputs":[{"name":"y","parameters":{"binary_data":true}}]})",
      std::nullopt);
  EXPECT_EQ(r.id, "7");
  ASSERT_EQ(r.inputs.size(), 4u);
  const Tensor& x = r.inputs[0].tensor;
  EXPECT_EQ(x.shape(), (Shape{2, 2}));
  EXPECT_EQ(x.data<float>()[2], 3.5f);
  EXPECT_EQ(x.data<float>()[3], -4.f);
  EXPECT_EQ(r.inputs[1].tensor.data<int64_t>()[2], 9007199254740993);  // exact beyond 2^53
  EXPECT_TRUE(r.inputs[2].tensor.data<bool>()[0]);
  EXPECT_EQ(r.inputs[3].tensor.data<std::string>()[0], "héllo");
  ASSERT_EQ(r.outputs.size(), 1u);
  EXPECT_TRUE(r.outputs[0].binary);
}

TEST(KServe, BinaryTensorsFollowTheJsonHeader) {
  const std::string header =
      R"({"inputs":[{"name":"x","datatype":"FP32","shape":[2],"parameters":{"binary_data_size":8}},)"
      R"({"name":"s","datatype":"BYTES","shape":[2],"parameters":{"binary_data_size":11}}]})";
  std::string body = header;
  const float values[2] = {1.5f, -2.f};
  body.append(reinterpret_cast<const char*>(values), 8);
  const uint32_t three = 3, zero = 0;
  body.append(reinterpret_cast<const char*>(&three), 4);
  body += "abc";
  body.append(reinterpret_cast<const char*>(&zero), 4);
  InferRequest r = parse_infer_request(body, header.size());
  EXPECT_EQ(r.inputs[0].tensor.data<float>()[1], -2.f);
  EXPECT_EQ(r.inputs[1].tensor.data<std::string>()[0], "abc");
  EXPECT_EQ(r.inputs[1].tensor.data<std::string>()[1], "");
  EXPECT_NE(refusal(body.substr(0, body.size() - 1), header.size()).find("remain"), std::string::npos);
  EXPECT_NE(refusal(body + "x", header.size()).find("no input claims"), std::string::npos);
  EXPECT_NE(refusal(body, body.size() + 1).find("Inference-Header-Content-Length"), std::string::npos);
}

TEST(KServe, MalformedRequestsAreRefused) {
  EXPECT_NE(refusal("{bad").find("not valid JSON"), std::string::npos);
  EXPECT_NE(refusal("[1]").find("JSON object"), std::string::npos);
  EXPECT_NE(refusal("{}").find("\"inputs\""), std::string::npos);
  EXPECT_NE(refusal(R"({"inputs":[{"name":"x","datatype":"FP33","shape":[1],"data":[1]}]})").find("unknown datatype"),
            std::string::npos);
  EXPECT_NE(refusal(R"({"inputs":[{"name":"x","datatype":"FP32","shape":[3],"data":[1,2]}]})").find("needs 3"),
            std::string::npos);
  EXPECT_NE(refusal(R"({"inputs":[{"name":"x","datatype":"FP32","shape":[1],"data":[1,2]}]})").find("more elements"),
            std::string::npos);
  EXPECT_NE(refusal(R"({"inputs":[{"name":"x","datatype":"INT8","shape":[1],"data":[300]}]})").find("out of range"),
            std::string::npos);
  EXPECT_NE(refusal(R"({"inputs":[{"name":"x","datatype":"INT32","shape":[1],"data":[1.5]}]})").find("integer"),
            std::string::npos);
  EXPECT_NE(refusal(R"({"inputs":[{"name":"x","datatype":"FP32","shape":[1],"data":["a"]}]})").find("number"),
            std::string::npos);
  EXPECT_NE(refusal(R"({"inputs":[{"name":"x","datatype":"FP32","shape":[-1],"data":[]}]})").find("non-negative"),
            std::string::npos);
  EXPECT_NE(refusal(R"({"inputs":[{"name":"x","datatype":"FP32","shape":[1073741824,1073741824,1073741824],"data":[]}]})")
                .find("overflows"),
            std::string::npos);
  // A zero among the dimensions does not let the others grow without bound.
  EXPECT_NE(refusal(R"({"inputs":[{"name":"x","datatype":"FP32","shape":[0,4611686018427387904],"data":[]}]})")
                .find("dimension of"),
            std::string::npos);
  // 2^29 floats claimed by two values: refused by counting, before 2 GiB are allocated.
  EXPECT_NE(refusal(R"({"inputs":[{"name":"x","datatype":"FP32","shape":[536870912],"data":[1,2]}]})").find("needs"),
            std::string::npos);
  EXPECT_NE(refusal(R"({"inputs":[{"name":"x","datatype":"FP32","shape":[1],"data":[1e300]}]})").find("out of range"),
            std::string::npos);
  // 2^29 strings claimed by 8 bytes: too few for their lengths, refused before allocating.
  const std::string strings = R"({"inputs":[{"name":"s","datatype":"BYTES","shape":[536870912],)"
                              R"("parameters":{"binary_data_size":8}}]})";
  EXPECT_NE(refusal(strings + std::string(8, '\0'), strings.size()).find("too few"), std::string::npos);
  RequestLimits small;
  small.max_elements = 100;
  EXPECT_NE(refusal(R"({"inputs":[{"name":"x","datatype":"FP32","shape":[1000],"data":[]}]})", std::nullopt, small)
                .find("allowed"),
            std::string::npos);
  EXPECT_NE(refusal(std::string(100000, '[') + std::string(100000, ']')).find("deeper"), std::string::npos);
}

TEST(KServe, ResponsesInJsonAndBinary) {
  std::vector<ValueInfo> outputs(2);
  outputs[0].name = "y";
  outputs[1].name = "n";
  Tensor y(DType::kFloat32, {2});
  y.data<float>()[0] = 0.5f;
  y.data<float>()[1] = -1.f;
  Tensor n(DType::kInt64, {1});
  n.data<int64_t>()[0] = 42;
  InferRequest all;
  EncodedResponse json = encode_infer_response("m", "id1", outputs, {y, n}, all);
  EXPECT_FALSE(json.header_length);
  EXPECT_EQ(json.body,
            R"({"id":"id1","model_name":"m","model_version":"1","outputs":[{"data":[0.5,-1.0],"datatype":"FP32",)"
            R"("name":"y","shape":[2]},{"data":[42],"datatype":"INT64","name":"n","shape":[1]}]})");

  InferRequest binary;
  binary.outputs = {{"y", true}};
  EncodedResponse bin = encode_infer_response("m", "", outputs, {y, n}, binary);
  ASSERT_TRUE(bin.header_length);
  EXPECT_EQ(bin.body.size(), *bin.header_length + 8);
  float back[2];
  std::memcpy(back, bin.body.data() + *bin.header_length, 8);
  EXPECT_EQ(back[1], -1.f);
  EXPECT_NE(bin.body.find(R"("binary_data_size":8)"), std::string::npos);
}

TEST(KServe, MetadataHasKServeTypesAndSymbolicDims) {
  ValueInfo in;
  in.name = "input_ids";
  in.dtype = DType::kInt64;
  in.shape = {-1, 128};
  ValueInfo out;
  out.name = "logits";
  out.dtype = DType::kFloat32;
  out.shape = {-1, 2};
  EXPECT_EQ(model_metadata_json("bert", {in}, {out}),
            R"({"inputs":[{"datatype":"INT64","name":"input_ids","shape":[-1,128]}],"name":"bert",)"
            R"("outputs":[{"datatype":"FP32","name":"logits","shape":[-1,2]}],"platform":"onnx","versions":["1"]})");
}

}  // namespace
}  // namespace anvil::serving

namespace anvil {
namespace {

TEST(Batching, ABatchTakesAFairShareOfTheWaitingRows) {
  EXPECT_EQ(serving::fair_share(1, 2, 8), 1);
  EXPECT_EQ(serving::fair_share(7, 2, 8), 4);   // rounded up: the last rows do not wait for a third stream
  EXPECT_EQ(serving::fair_share(40, 2, 8), 8);  // never past max_batch
  EXPECT_EQ(serving::fair_share(5, 1, 8), 5);   // one stream takes everything
}

TEST(Batching, ABatchWaitsOnlyForRowsNotYetQueued) {
  // Requests left in the queue (the rest of the share's rows, a request too
  // wide to fit it, another shape): the next stream's; this batch runs now.
  EXPECT_TRUE(serving::batch_ready(2, /*left_waiting=*/true, 8));
  // The queue empty: more rows may come, so it waits (until the deadline).
  EXPECT_FALSE(serving::batch_ready(2, /*left_waiting=*/false, 8));
  // Full: it runs.
  EXPECT_TRUE(serving::batch_ready(8, /*left_waiting=*/false, 8));
}

}  // namespace
}  // namespace anvil
