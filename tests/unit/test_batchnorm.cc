// Tests of the reference BatchNormalization kernel (src/kernels/ref/batchnorm.cc), inference mode.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>

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

// Parameters for C channels: scale and shift around 0, variances in [0.25, 2.25].
std::vector<Tensor> random_inputs(const Shape& x, uint32_t seed) {
  const int64_t c = x[1];
  Tensor var = testing::random_f32({c}, seed + 4);
  for (int64_t i = 0; i < c; ++i) var.data<float>()[i] = 1.25f + var.data<float>()[i];
  return {testing::random_f32(x, seed), testing::random_f32({c}, seed + 1), testing::random_f32({c}, seed + 2),
          testing::random_f32({c}, seed + 3), var};
}

// y = (x - mean) / sqrt(var + eps) * scale + B in double, then the activation
// (LeakyRelu's slope 0.1), for X [N, C, ...] in plain layout.
std::vector<double> by_hand(const std::vector<Tensor>& in, float eps, const std::string& activation) {
  const Tensor& x = in[0];
  const int64_t c = x.shape()[1], inner = x.numel() / (x.shape()[0] * c);
  std::vector<double> y(static_cast<size_t>(x.numel()));
  for (int64_t i = 0; i < x.numel(); ++i) {
    const int64_t ch = i / inner % c;
    const auto p = [&](int k) { return static_cast<double>(in[k].data<float>()[ch]); };
    double v = (x.data<float>()[i] - p(3)) / std::sqrt(p(4) + eps) * p(1) + p(2);
    if (activation == "Relu") v = std::max(v, 0.0);
    if (activation == "LeakyRelu" && v < 0) v *= 0.1;
    y[static_cast<size_t>(i)] = v;
  }
  return y;
}

void expect_close_to(const Tensor& y, const std::vector<double>& want, const std::string& what) {
  ASSERT_EQ(static_cast<size_t>(y.numel()), want.size()) << what;
  for (int64_t i = 0; i < y.numel(); ++i)
    ASSERT_NEAR(y.data<float>()[i], want[static_cast<size_t>(i)], 2e-6 * std::max(1.0, std::abs(want[i])))
        << what << " at " << i;
}

// The vectorized kernel (the session's) on plain data of every rank it
// takes ([N, C] as rows of channels, large enough for threads), with the parameters known when planning (folded once) and only at
// run time (folded per run), on tensors small and large enough for threads.
TEST(BatchNormalization, VectorizedKernelMatchesTheFormula) {
  for (const Shape& x : {Shape{3, 5}, Shape{300, 37}, Shape{2, 3, 7}, Shape{2, 5, 9, 11}, Shape{1, 3, 2, 2, 3},
                         Shape{2, 24, 40, 40}, Shape{1, 2, 150, 150}})
    for (bool constant : {true, false}) {
      const std::string what = shape_str(x) + (constant ? " constant" : " run-time");
      testing::KernelOptions o = options(15);
      o.backend = kernels::Backend::kDnnl;
      if (constant) o.constant_inputs = {false, true, true, true, true};
      const std::vector<Tensor> in = random_inputs(x, 7);
      const testing::KernelResult r = testing::run_kernel_full("BatchNormalization", in, attrs({{"epsilon", 1e-3f}}), o);
      EXPECT_NE(r.impl.find(":batchnorm"), std::string::npos) << r.impl;
      expect_close_to(r.outputs[0], by_hand(in, 1e-3f, ""), what);
    }
}

// anvil.FusedBatchNorm (passes/fuse_batchnorm_activation.cc): the vectorized
// kernel applies its ReLU; the reference kernel any activation, at any opset
// a file gives (the node means opset 15's inference normalization); the
// vectorized one leaves other activations to it.
TEST(BatchNormalization, FusedBatchNormAppliesItsActivation) {
  const std::vector<Tensor> in = random_inputs({2, 6, 5, 7}, 11);
  for (kernels::Backend backend : {kernels::Backend::kDnnl, kernels::Backend::kRef})
    for (const char* activation : {"Relu", "LeakyRelu"})
      for (int opset : {6, 17}) {
        testing::KernelOptions o = options(opset);
        o.backend = backend;
        o.domain = "anvil";
        ir::Attributes a = attrs({{"epsilon", 1e-3f}, {"activation", std::string(activation)}});
        if (std::string(activation) == "LeakyRelu") a.set("activation_alpha", 0.1f);
        const std::string what = std::string(activation) + (backend == kernels::Backend::kRef ? " ref" : " vec") +
                                 " opset " + std::to_string(opset);
        if (backend == kernels::Backend::kDnnl && std::string(activation) != "Relu") {
          try {
            run_kernel("FusedBatchNorm", in, a, o);
            ADD_FAILURE() << what << ": no error";
          } catch (const Error& e) {
            EXPECT_EQ(e.kind(), ErrorKind::kUnsupported) << what << ": " << e.what();
          }
          continue;
        }
        expect_close_to(run_kernel("FusedBatchNorm", in, a, o)[0], by_hand(in, 1e-3f, activation), what);
      }
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
