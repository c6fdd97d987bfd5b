// anvil::nn::Sequential: output shapes by hand, PyTorch's initialisation
// bounds, the same weights for the same seed, and the spec's errors.
#include <gtest/gtest.h>

#include <cmath>

#include "anvil/error.h"
#include "anvil/nn.h"
#include "ir/schema.h"
#include "onnx/importer.h"
#include "runtime/kernel_support.h"

namespace anvil {
namespace {

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "no anvil::Error thrown";
  return "";
}

TEST(Sequential, ShapesFollowTheLayers) {
  nn::Sequential net({3, 32, 32});
  net.conv2d(8, 5, 2, 2);  // (32 + 4 - 5) / 2 + 1 = 16
  EXPECT_EQ(net.output_shape(), (std::vector<int64_t>{8, 16, 16}));
  net.batch_norm().relu().max_pool2d(3, 2, 1);  // (16 + 2 - 3) / 2 + 1 = 8
  EXPECT_EQ(net.output_shape(), (std::vector<int64_t>{8, 8, 8}));
  net.avg_pool2d(2).global_avg_pool().flatten().dropout(0.2f).linear(5).gelu();
  EXPECT_EQ(net.output_shape(), (std::vector<int64_t>{5}));
  EXPECT_EQ(net.layers(), 10u);
}

TEST(Sequential, WeightsArePyTorchUniformAndSeeded) {
  nn::Sequential net({20});
  net.linear(30).relu().linear(4);
  const std::string bytes = net.to_onnx(5);
  EXPECT_EQ(bytes, net.to_onnx(5));
  EXPECT_NE(bytes, net.to_onnx(6));
  auto g = onnx_io::import_model_bytes(bytes, "", runtime::kernel_support);
  const Tensor& w0 = *g->find_value("0.weight")->constant;
  const Tensor& w2 = *g->find_value("2.weight")->constant;
  EXPECT_EQ(w0.shape(), (Shape{30, 20}));
  EXPECT_EQ(w2.shape(), (Shape{4, 30}));
  float max0 = 0, max2 = 0;
  for (int64_t i = 0; i < w0.numel(); ++i) max0 = std::max(max0, std::fabs(w0.data<float>()[i]));
  for (int64_t i = 0; i < w2.numel(); ++i) max2 = std::max(max2, std::fabs(w2.data<float>()[i]));
  EXPECT_LE(max0, 1 / std::sqrt(20.f));  // bound 1/sqrt(fan_in), and nearly reached
  EXPECT_GT(max0, 0.9f / std::sqrt(20.f));
  EXPECT_LE(max2, 1 / std::sqrt(30.f));
  EXPECT_GT(max2, 0.8f / std::sqrt(30.f));
  EXPECT_EQ(g->inputs()[0]->type.str(), "float32[batch,20]");
  EXPECT_EQ(g->outputs()[0]->type.str(), "float32[batch,4]");
}

TEST(Sequential, SpecErrorsNameTheLayer) {
  EXPECT_NE(error_of([] { nn::Sequential({2, 2, 2}).linear(3); }).find("layer 0 (linear) needs a flat input"),
            std::string::npos);
  EXPECT_NE(error_of([] { nn::Sequential({4}).relu().conv2d(2, 3); }).find("layer 1 (conv2d)"), std::string::npos);
  error_of([] { nn::Sequential({}); });
  error_of([] { nn::Sequential({4}).to_onnx(); });
  error_of([] { nn::Sequential({1, 3, 3}).max_pool2d(2, 1, 2); });  // padding >= kernel
  EXPECT_NE(error_of([] { nn::Sequential::from_json(R"({"input": [4], "layers": [{"type": "linear", "out": 2.5}]})"); })
                .find("'out' must be an integer"),
            std::string::npos);
  error_of([] { nn::Sequential::from_json(R"({"input": "4", "layers": []})"); });
  error_of([] { nn::Sequential::from_json(R"([1, 2])"); });
  error_of([] { nn::Sequential::from_json(R"({"input": [4], "layers": [{"out": 2}]})"); });
  error_of([] { nn::Sequential::from_json(R"({"input": [4], "layers": [{"type": "linear", "out": 2, "bias": 1}]})"); });
  error_of([] { nn::Sequential::from_json_file("/nonexistent/spec.json"); });
  const nn::Sequential ok = nn::Sequential::from_json(
      R"({"input": [1, 8, 8], "layers": [{"type": "conv2d", "out": 4, "kernel": 3, "padding": 1},
          {"type": "leaky_relu", "alpha": 0.2}, {"type": "flatten"}, {"type": "linear", "out": 3, "bias": false}]})");
  EXPECT_EQ(ok.output_shape(), (std::vector<int64_t>{3}));
}

}  // namespace
}  // namespace anvil
