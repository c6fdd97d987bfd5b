// Tests of the reference BatchNormalization kernel (src/kernels/ref/batchnorm.cc), inference mode.
#include <gtest/gtest.h>

#include <cmath>

#include "anvil/error.h"
#include "kernel_tester.h"

namespace anvil {
namespace {

using testing::f32;
using testing::values;
using testing::attrs;
using testing::make_tensor;
using testing::run_kernel;

testing::KernelOptions options(int opset, int num_outputs = 1) {
  testing::KernelOptions o;
  o.opset = opset;
  o.num_outputs = num_outputs;
  return o;
}

// The kind of anvil::Error that running BatchNormalization throws (its message goes to *message).
ErrorKind error_of(const std::vector<Tensor>& inputs, const ir::Attributes& a, const testing::KernelOptions& o,
                   std::string* message = nullptr) {
  try {
    run_kernel("BatchNormalization", inputs, a, o);
  } catch (const Error& e) {
    if (message) *message = e.what();
    return e.kind();
  }
  ADD_FAILURE() << "no anvil::Error thrown";
  return ErrorKind::kInternal;
}

void expect_near(const std::vector<float>& got, const std::vector<float>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-5f) << "at " << i;
}

// X [1, 2, 1, 2] = channel 0 [1 2], channel 1 [3 4]; mean [1.5 3.5], var [0.25 0.25] (std 0.5), scale [1 2],
// B [0 1], epsilon 0:
//   channel 0: (x - 1.5) / 0.5           = [-1 1]
//   channel 1: (x - 3.5) / 0.5 * 2 + 1   = [-1 3]
std::vector<Tensor> example_inputs() {
  return {f32({1, 2, 1, 2}, {1, 2, 3, 4}), f32({2}, {1, 2}), f32({2}, {0, 1}), f32({2}, {1.5f, 3.5f}),
          f32({2}, {0.25f, 0.25f})};
}

TEST(BatchNormalization, PerChannel) {
  Tensor y = run_kernel("BatchNormalization", example_inputs(), attrs({{"epsilon", 0.f}}))[0];
  EXPECT_EQ(y.shape(), (Shape{1, 2, 1, 2}));
  expect_near(values<float>(y), {-1, 1, -1, 3});
}

TEST(BatchNormalization, EpsilonDefaultsToOneEMinus5) {
  // var 0.25 + 1e-5: std sqrt(0.25001).
  Tensor y = run_kernel("BatchNormalization", example_inputs())[0];
  const float s = std::sqrt(0.25f + 1e-5f);
  expect_near(values<float>(y), {-0.5f / s, 0.5f / s, -1.f / s + 1, 1.f / s + 1});
}

TEST(BatchNormalization, AnyRankFromTwo) {
  // [N=2, C=2]: every element is its own plane.
  std::vector<Tensor> in = example_inputs();
  in[0] = f32({2, 2}, {1, 3, 2, 4});
  expect_near(values<float>(run_kernel("BatchNormalization", in, attrs({{"epsilon", 0.f}}))[0]), {-1, -1, 1, 3});
  // [1, 2, 1, 1, 2]: the same numbers over three spatial axes; and [1, 2, 2] with one.
  in[0] = f32({1, 2, 1, 1, 2}, {1, 2, 3, 4});
  expect_near(values<float>(run_kernel("BatchNormalization", in, attrs({{"epsilon", 0.f}}))[0]), {-1, 1, -1, 3});
  in[0] = f32({1, 2, 2}, {1, 2, 3, 4});
  expect_near(values<float>(run_kernel("BatchNormalization", in, attrs({{"epsilon", 0.f}}))[0]), {-1, 1, -1, 3});
}

TEST(BatchNormalization, OlderOpsetsAndMomentum) {
  // Opset 7 with spatial = 1 and momentum is plain inference.
  Tensor y = run_kernel("BatchNormalization", example_inputs(),
                        attrs({{"epsilon", 0.f}, {"spatial", int64_t{1}}, {"momentum", 0.5f}}), options(7))[0];
  expect_near(values<float>(y), {-1, 1, -1, 3});
  y = run_kernel("BatchNormalization", example_inputs(), attrs({{"epsilon", 0.f}}), options(9))[0];
  expect_near(values<float>(y), {-1, 1, -1, 3});
}

TEST(BatchNormalization, NonSpatialNormalizesEachActivation) {
  // Opset 7 spatial = 0: the statistics have X's shape without N, [2, 1, 2]; each of the 4 activations has its own.
  Tensor x = f32({1, 2, 1, 2}, {1, 2, 3, 4});
  Tensor scale = f32({2, 1, 2}, {1, 1, 2, 2}), bias = f32({2, 1, 2}, {0, 0, 0, 1});
  Tensor mean = f32({2, 1, 2}, {0, 1, 2, 3}), var = f32({2, 1, 2}, {1, 4, 1, 0.25f});
  // (1-0)/1*1, (2-1)/2*1, (3-2)/1*2, (4-3)/0.5*2 + 1.
  Tensor y = run_kernel("BatchNormalization", {x, scale, bias, mean, var},
                        attrs({{"epsilon", 0.f}, {"spatial", int64_t{0}}}), options(7))[0];
  expect_near(values<float>(y), {1, 0.5f, 2, 5});
}

TEST(BatchNormalization, MixedParameterDtypesFromOpset15) {
  std::vector<Tensor> in = example_inputs();
  in[3] = make_tensor<double>(DType::kFloat64, {2}, {1.5, 3.5});
  in[4] = make_tensor<double>(DType::kFloat64, {2}, {0.25, 0.25});
  Tensor y = run_kernel("BatchNormalization", in, attrs({{"epsilon", 0.f}}), options(15))[0];
  EXPECT_EQ(y.dtype(), DType::kFloat32);
  expect_near(values<float>(y), {-1, 1, -1, 3});
}

TEST(BatchNormalization, Float64) {
  std::vector<Tensor> in;
  for (const Tensor& t : example_inputs()) {
    Tensor d(DType::kFloat64, t.shape());
    for (int64_t i = 0; i < t.numel(); ++i) d.data<double>()[i] = t.data<float>()[i];
    in.push_back(d);
  }
  Tensor y = run_kernel("BatchNormalization", in, attrs({{"epsilon", 0.f}}))[0];
  EXPECT_EQ(values<double>(y), (std::vector<double>{-1, 1, -1, 3}));
}

// Training mode: the batch's statistics (channel 0: mean 1.5, variance 0.25; channel 1: 3.5, 0.25)
// normalize, whatever the mean and var inputs say; those are blended into the running statistics.
TEST(BatchNormalization, TrainingModeUsesBatchStatistics) {
  std::vector<Tensor> in = example_inputs();
  in[3] = f32({2}, {0, 0});
  in[4] = f32({2}, {1, 1});
  ir::Attributes training = attrs({{"training_mode", int64_t{1}}, {"epsilon", 0.f}, {"momentum", 0.5f}});
  std::vector<Tensor> out = run_kernel("BatchNormalization", in, training, options(15, 3));
  expect_near(values<float>(out[0]), {-1, 1, -1, 3});
  expect_near(values<float>(out[1]), {0.75f, 1.75f});   // 0 * 0.5 + mean * 0.5
  expect_near(values<float>(out[2]), {0.625f, 0.625f});  // 1 * 0.5 + 0.25 * 0.5
  // Opsets before 14 ask for training by requesting the statistics outputs: not supported.
  std::string msg;
  EXPECT_EQ(error_of(example_inputs(), {}, options(9, 5), &msg), ErrorKind::kUnsupported);
  EXPECT_NE(msg.find("training"), std::string::npos) << msg;
  // From 14, those outputs without training_mode contradict the model.
  EXPECT_EQ(error_of(example_inputs(), {}, options(15, 3)), ErrorKind::kInvalidModel);
}

TEST(BatchNormalization, ShapeAndDtypeErrors) {
  std::vector<Tensor> in = example_inputs();
  in[1] = f32({3}, {1, 2, 3});
  std::string msg;
  EXPECT_EQ(error_of(in, {}, options(15), &msg), ErrorKind::kInvalidArgument);
  EXPECT_NE(msg.find("scale"), std::string::npos) << msg;
  in = example_inputs();
  in[0] = f32({2}, {1, 2});
  EXPECT_EQ(error_of(in, {}, options(15)), ErrorKind::kInvalidArgument);
  in = example_inputs();
  in.pop_back();
  EXPECT_EQ(error_of(in, {}, options(15)), ErrorKind::kInvalidModel);
  in = example_inputs();
  in[0] = make_tensor<int32_t>(DType::kInt32, {1, 2, 1, 2}, {1, 2, 3, 4});
  EXPECT_EQ(error_of(in, {}, options(15)), ErrorKind::kUnsupported);
}

}  // namespace
}  // namespace anvil
