// Tests of the reference elementwise kernels (src/kernels/ref/elementwise.cc) against hand-computed values:
// broadcasting binary ops, Pow with mixed types, variadic ops, unary math and activations, PRelu and Clip.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "anvil/error.h"
#include "core/half.h"
#include "kernel_tester.h"

namespace anvil {
namespace {

using testing::f32;
using testing::values;
using testing::attrs;
using testing::i64;
using testing::i32;
using testing::make_tensor;
using testing::run_kernel;

testing::KernelOptions opset(int version) {
  testing::KernelOptions o;
  o.opset = version;
  return o;
}

Tensor f64(Shape shape, const std::vector<double>& v) {
  return make_tensor<double>(DType::kFloat64, std::move(shape), v);
}

// Element-by-element comparison with an absolute tolerance.
void expect_near(const Tensor& t, const std::vector<float>& expected, float tol = 1e-6f) {
  ASSERT_EQ(t.dtype(), DType::kFloat32);
  ASSERT_EQ(t.numel(), static_cast<int64_t>(expected.size()));
  for (size_t i = 0; i < expected.size(); ++i) EXPECT_NEAR(t.data<float>()[i], expected[i], tol) << "element " << i;
}

// The kind of anvil::Error that running `op` throws.
ErrorKind error_of(const std::string& op, const std::vector<Tensor>& inputs, const ir::Attributes& a = {},
                   const testing::KernelOptions& o = {}) {
  try {
    run_kernel(op, inputs, a, o);
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("test_" + op), std::string::npos) << "message does not name the node";
    return e.kind();
  }
  ADD_FAILURE() << "no anvil::Error thrown";
  return ErrorKind::kInternal;
}

// --- binary ops ----------------------------------------------------------------------------------------------------

TEST(Elementwise, AddSameShape) {
  auto out = run_kernel("Add", {f32({2, 2}, {1, 2, 3, 4}), f32({2, 2}, {10, 20, 30, 40})});
  EXPECT_EQ(out[0].shape(), (Shape{2, 2}));
  EXPECT_EQ(values<float>(out[0]), (std::vector<float>{11, 22, 33, 44}));
}

TEST(Elementwise, AddBroadcastsTrailingVector) {
  // [2,3] + [3]: the vector is added to each row.
  auto out = run_kernel("Add", {f32({2, 3}, {0, 1, 2, 3, 4, 5}), f32({3}, {10, 20, 30})});
  EXPECT_EQ(out[0].shape(), (Shape{2, 3}));
  EXPECT_EQ(values<float>(out[0]), (std::vector<float>{10, 21, 32, 13, 24, 35}));
}

TEST(Elementwise, SubBroadcastsBothWays) {
  // [2,1] - [1,3] -> [2,3]: out[i][j] = a[i] - b[j].
  auto out = run_kernel("Sub", {f32({2, 1}, {10, 20}), f32({1, 3}, {1, 2, 3})});
  EXPECT_EQ(out[0].shape(), (Shape{2, 3}));
  EXPECT_EQ(values<float>(out[0]), (std::vector<float>{9, 8, 7, 19, 18, 17}));
}

TEST(Elementwise, SubScalarOnEitherSide) {
  auto left = run_kernel("Sub", {f32({}, {10}), f32({3}, {1, 2, 3})});
  EXPECT_EQ(left[0].shape(), (Shape{3}));
  EXPECT_EQ(values<float>(left[0]), (std::vector<float>{9, 8, 7}));
  auto right = run_kernel("Sub", {f32({3}, {1, 2, 3}), f32({1}, {10})});
  EXPECT_EQ(values<float>(right[0]), (std::vector<float>{-9, -8, -7}));
}

TEST(Elementwise, MulPerChannel) {
  // NCHW [1,2,2,2] times a per-channel [2,1,1]: channel 0 x2, channel 1 x-1.
  auto out = run_kernel("Mul", {f32({1, 2, 2, 2}, {1, 2, 3, 4, 5, 6, 7, 8}), f32({2, 1, 1}, {2, -1})});
  EXPECT_EQ(out[0].shape(), (Shape{1, 2, 2, 2}));
  EXPECT_EQ(values<float>(out[0]), (std::vector<float>{2, 4, 6, 8, -5, -6, -7, -8}));
}

TEST(Elementwise, MulMiddleBroadcast) {
  // [2,1,2] * [3,1] -> [2,3,2]: a varies along axes 0 and 2, b along axis 1.
  auto out = run_kernel("Mul", {f32({2, 1, 2}, {1, 2, 3, 4}), f32({3, 1}, {1, 10, 100})});
  EXPECT_EQ(out[0].shape(), (Shape{2, 3, 2}));
  EXPECT_EQ(values<float>(out[0]), (std::vector<float>{1, 2, 10, 20, 100, 200, 3, 4, 30, 40, 300, 400}));
}

TEST(Elementwise, DivFloat64) {
  auto out = run_kernel("Div", {f64({3}, {1, 3, -9}), f64({3}, {4, 2, 3})});
  EXPECT_EQ(out[0].dtype(), DType::kFloat64);
  EXPECT_EQ(values<double>(out[0]), (std::vector<double>{0.25, 1.5, -3}));
}

TEST(Elementwise, IntegerDivTruncatesAndDefinesDivisionByZero) {
  // Truncation toward zero; x / 0 is 0; INT_MIN / -1 wraps to INT_MIN instead of trapping.
  const int32_t kMin = std::numeric_limits<int32_t>::min();
  auto out = run_kernel("Div", {i32({6}, {7, -7, 7, -7, 5, kMin}), i32({6}, {2, 2, -2, -2, 0, -1})});
  EXPECT_EQ(out[0].dtype(), DType::kInt32);
  EXPECT_EQ(values<int32_t>(out[0]), (std::vector<int32_t>{3, -3, -3, 3, 0, kMin}));
}

TEST(Elementwise, AddUInt8Wraps) {
  Tensor a = make_tensor<uint8_t>(DType::kUInt8, {3}, {1, 200, 250});
  Tensor b = make_tensor<uint8_t>(DType::kUInt8, {3}, {2, 50, 10});
  auto out = run_kernel("Add", {a, b});
  EXPECT_EQ(out[0].dtype(), DType::kUInt8);
  EXPECT_EQ(values<uint8_t>(out[0]), (std::vector<uint8_t>{3, 250, 4}));
}

TEST(Elementwise, MulInt64) {
  auto out = run_kernel("Mul", {i64({3}, {3, -4, 5}), i64({1}, {-2})});
  EXPECT_EQ(values<int64_t>(out[0]), (std::vector<int64_t>{-6, 8, -10}));
}

TEST(Elementwise, LargeTensorTakesTheParallelPaths) {
  // 3 x 40000 elements: one flat run (same shape) and a row-wise broadcast, both above the parallel threshold.
  const int64_t n = 3 * 40000;
  std::vector<float> a(static_cast<size_t>(n)), b(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    a[i] = static_cast<float>(i % 1000);
    b[i] = 1.0f;
  }
  auto same = run_kernel("Add", {f32({3, 40000}, a), f32({3, 40000}, b)});
  auto row = run_kernel("Mul", {f32({3, 40000}, a), f32({3, 1}, {1, 2, 3})});
  for (int64_t i : {int64_t{0}, int64_t{39999}, int64_t{40000}, int64_t{119999}}) {
    EXPECT_EQ(same[0].data<float>()[i], a[i] + 1.0f) << i;
    EXPECT_EQ(row[0].data<float>()[i], a[i] * static_cast<float>(i / 40000 + 1)) << i;
  }
}

TEST(Elementwise, EmptyTensor) {
  auto out = run_kernel("Add", {f32({0, 3}, {}), f32({3}, {1, 2, 3})});
  EXPECT_EQ(out[0].shape(), (Shape{0, 3}));
}

TEST(Elementwise, NonBroadcastableShapesAreInvalidArgument) {
  EXPECT_EQ(error_of("Add", {f32({2, 3}, {0, 0, 0, 0, 0, 0}), f32({2}, {0, 0})}), ErrorKind::kInvalidArgument);
  EXPECT_EQ(error_of("Max", {f32({2}, {0, 0}), f32({3}, {0, 0, 0})}), ErrorKind::kInvalidArgument);
}

TEST(Elementwise, UnsupportedDTypes) {
  Tensor b = make_tensor<bool>(DType::kBool, {2}, {true, false});
  EXPECT_EQ(error_of("Add", {b, b}), ErrorKind::kUnsupported);
  EXPECT_EQ(error_of("Sqrt", {i32({1}, {4})}), ErrorKind::kUnsupported);
  EXPECT_EQ(error_of("Sigmoid", {i64({1}, {1})}), ErrorKind::kUnsupported);
  Tensor u = make_tensor<uint8_t>(DType::kUInt8, {1}, {1});
  EXPECT_EQ(error_of("Neg", {u}), ErrorKind::kUnsupported);
  EXPECT_EQ(error_of("Sum", {i32({1}, {1}), i32({1}, {2})}), ErrorKind::kUnsupported);
}

TEST(Elementwise, MixedOperandTypesAreInvalidModel) {
  EXPECT_EQ(error_of("Mul", {f32({1}, {1}), f64({1}, {1})}), ErrorKind::kInvalidModel);
}

// The planner may give output 0 the buffer of inplace_input(); run() must then still be right.
TEST(Elementwise, InPlaceOverTheNonBroadcastOperand) {
  ir::Node node;
  node.op_type = "Sub";
  node.name = "sub";
  node.opset = 17;
  ir::Value out;
  node.outputs = {&out};
  std::unique_ptr<kernels::Kernel> kernel;
  for (const auto* e : kernels::Registry::global().find("", "Sub"))
    if (e->backend == kernels::Backend::kRef) kernel = e->factory(node);
  ASSERT_TRUE(kernel);
  Tensor a = f32({2, 1}, {1, 2});
  Tensor b = f32({2, 3}, {10, 20, 30, 40, 50, 60});
  kernels::PrepareContext pctx(node, {{a.dtype(), a.shape()}, {b.dtype(), b.shape()}}, {nullptr, nullptr}, 1);
  kernel->prepare(pctx);
  ASSERT_EQ(kernel->inplace_input(), 1);  // b has the output's shape; a is broadcast
  kernels::RunContext rctx;
  rctx.inputs = {&a, &b};
  rctx.outputs = {&b};
  kernel->run(rctx);
  EXPECT_EQ(values<float>(b), (std::vector<float>{-9, -19, -29, -38, -48, -58}));
}

// Opset 6: B broadcasts from `axis` of A with broadcast=1. Found by the model-loader fuzzer: an axis
// past A's rank (or one given with broadcast=0) made the kernel compute a negative padding.
TEST(Binary, Opset6AxisBroadcastAndBadAxes) {
  testing::KernelOptions o;
  o.opset = 6;
  Tensor a = f32({2, 3}, {1, 2, 3, 4, 5, 6}), b = f32({2}, {10, 20});
  EXPECT_EQ(values<float>(run_kernel("Add", {a, b}, attrs({{"broadcast", int64_t{1}}, {"axis", int64_t{0}}}), o)[0]),
            (std::vector<float>{11, 12, 13, 24, 25, 26}));
  EXPECT_EQ(error_of("Add", {a, b}, attrs({{"broadcast", int64_t{1}}, {"axis", int64_t{5}}}), o),
            ErrorKind::kInvalidArgument);
  EXPECT_EQ(error_of("Add", {a, b}, attrs({{"axis", int64_t{5}}}), o), ErrorKind::kInvalidArgument);
}

// --- Pow -----------------------------------------------------------------------------------------------------------

TEST(Pow, FloatBaseFloatExponentBroadcast) {
  auto out = run_kernel("Pow", {f32({2, 2}, {1, 2, 3, 4}), f32({2}, {2, 0.5f})});
  expect_near(out[0], {1, std::sqrt(2.0f), 9, 2});
}

TEST(Pow, FloatBaseIntExponentKeepsBaseType) {
  auto out = run_kernel("Pow", {f32({3}, {2, 3, -2}), i64({3}, {2, 3, 3})});
  EXPECT_EQ(out[0].dtype(), DType::kFloat32);
  EXPECT_EQ(values<float>(out[0]), (std::vector<float>{4, 27, -8}));
}

TEST(Pow, IntegerBase) {
  // int64 ^ int64 is exact (3^39 does not fit a double's mantissa); negative exponents truncate 1/b^e.
  auto ints = run_kernel("Pow", {i64({4}, {3, 2, 1, -1}), i64({4}, {39, -1, -5, -3})});
  EXPECT_EQ(values<int64_t>(ints[0]), (std::vector<int64_t>{4052555153018976267LL, 0, 1, -1}));
  // int32 ^ float32 computes in floating point and truncates back to int32.
  auto mixed = run_kernel("Pow", {i32({3}, {2, 4, 10}), f32({3}, {0.5f, 0.5f, 2})});
  EXPECT_EQ(mixed[0].dtype(), DType::kInt32);
  EXPECT_EQ(values<int32_t>(mixed[0]), (std::vector<int32_t>{1, 2, 100}));
}

// --- variadic ops --------------------------------------------------------------------------------------------------

TEST(Variadic, SumOfThreeWithBroadcasting) {
  // [3] + [2,1] + scalar -> [2,3].
  auto out = run_kernel("Sum", {f32({3}, {1, 2, 3}), f32({2, 1}, {10, 20}), f32({}, {100})});
  EXPECT_EQ(out[0].shape(), (Shape{2, 3}));
  EXPECT_EQ(values<float>(out[0]), (std::vector<float>{111, 112, 113, 121, 122, 123}));
}

TEST(Variadic, OneInputIsACopy) {
  auto out = run_kernel("Sum", {f32({2}, {1.5f, -2})});
  EXPECT_EQ(values<float>(out[0]), (std::vector<float>{1.5f, -2}));
}

TEST(Variadic, MaxMinInt32) {
  auto max = run_kernel("Max", {i32({3}, {1, 5, -3}), i32({3}, {4, 2, -1}), i32({1}, {3})});
  EXPECT_EQ(values<int32_t>(max[0]), (std::vector<int32_t>{4, 5, 3}));
  auto min = run_kernel("Min", {i32({3}, {1, 5, -3}), i32({3}, {4, 2, -1}), i32({1}, {3})});
  EXPECT_EQ(values<int32_t>(min[0]), (std::vector<int32_t>{1, 2, -3}));
}

TEST(Variadic, MaxPropagatesNaN) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  auto out = run_kernel("Max", {f32({3}, {nan, 1, 2}), f32({3}, {1, nan, 3})});
  EXPECT_TRUE(std::isnan(out[0].data<float>()[0]));
  EXPECT_TRUE(std::isnan(out[0].data<float>()[1]));
  EXPECT_EQ(out[0].data<float>()[2], 3.0f);
}

TEST(Variadic, MaxMinFloat16) {
  Tensor a = make_tensor<Half>(DType::kFloat16, {3}, {Half(1.5f), Half(-2.0f), Half(0.25f)});
  Tensor b = make_tensor<Half>(DType::kFloat16, {1}, {Half(0.5f)});
  auto max = run_kernel("Max", {a, b});
  auto min = run_kernel("Min", {a, b});
  ASSERT_EQ(max[0].dtype(), DType::kFloat16);
  std::vector<float> maxf, minf;
  for (int i = 0; i < 3; ++i) {
    maxf.push_back(static_cast<float>(max[0].data<Half>()[i]));
    minf.push_back(static_cast<float>(min[0].data<Half>()[i]));
  }
  EXPECT_EQ(maxf, (std::vector<float>{1.5f, 0.5f, 0.5f}));
  EXPECT_EQ(minf, (std::vector<float>{0.5f, -2.0f, 0.25f}));
}

// 16-bit floats compute in float and round once to the nearest float16 (2049 has none: it rounds to even).
TEST(Binary, Float16ComputesInFloatAndRoundsOnce) {
  Tensor a = make_tensor<Half>(DType::kFloat16, {3}, {Half(1.5f), Half(-2.25f), Half(2048.f)});
  Tensor b = make_tensor<Half>(DType::kFloat16, {3}, {Half(1.5f), Half(0.5f), Half(1.f)});
  auto sum = run_kernel("Add", {a, b});
  auto quot = run_kernel("Div", {a, b});
  ASSERT_EQ(sum[0].dtype(), DType::kFloat16);
  std::vector<float> s, q;
  for (int i = 0; i < 3; ++i) {
    s.push_back(static_cast<float>(sum[0].data<Half>()[i]));
    q.push_back(static_cast<float>(quot[0].data<Half>()[i]));
  }
  EXPECT_EQ(s, (std::vector<float>{3.f, -1.75f, 2048.f}));  // 2049 rounds to the even 2048
  EXPECT_EQ(q, (std::vector<float>{1.f, -4.5f, 2048.f}));
}

TEST(Variadic, Mean) {
  auto out = run_kernel("Mean", {f32({2}, {1, 2}), f32({2}, {3, 6}), f32({1}, {2})});
  expect_near(out[0], {2, 10.0f / 3});
}

// --- unary ops -----------------------------------------------------------------------------------------------------

TEST(Unary, Math) {
  Tensor x = f32({3}, {0.25f, 1, 4});
  expect_near(run_kernel("Sqrt", {x})[0], {0.5f, 1, 2});
  expect_near(run_kernel("Exp", {x})[0], {1.2840254f, 2.7182818f, 54.598150f}, 1e-4f);
  expect_near(run_kernel("Log", {x})[0], {-1.3862944f, 0, 1.3862944f});
  expect_near(run_kernel("Neg", {x})[0], {-0.25f, -1, -4});
  expect_near(run_kernel("Abs", {f32({3}, {-1.5f, 0, 2})})[0], {1.5f, 0, 2});
  expect_near(run_kernel("Erf", {f32({3}, {-1, 0, 0.5f})})[0], {-0.8427008f, 0, 0.5204999f});
  auto d = run_kernel("Sqrt", {f64({2}, {2, 9})});
  EXPECT_EQ(values<double>(d[0]), (std::vector<double>{std::sqrt(2.0), 3}));
}

TEST(Unary, IntegerNegAbsRelu) {
  Tensor x = make_tensor<int8_t>(DType::kInt8, {4}, {-128, -3, 0, 7});
  // -(-128) wraps to -128 in int8, as numpy does.
  EXPECT_EQ(values<int8_t>(run_kernel("Neg", {x})[0]), (std::vector<int8_t>{-128, 3, 0, -7}));
  EXPECT_EQ(values<int8_t>(run_kernel("Abs", {x})[0]), (std::vector<int8_t>{-128, 3, 0, 7}));
  EXPECT_EQ(values<int8_t>(run_kernel("Relu", {x})[0]), (std::vector<int8_t>{0, 0, 0, 7}));
  Tensor u = make_tensor<uint8_t>(DType::kUInt8, {2}, {0, 255});
  EXPECT_EQ(values<uint8_t>(run_kernel("Abs", {u})[0]), (std::vector<uint8_t>{0, 255}));
}

TEST(Activation, ReluLeakyReluElu) {
  Tensor x = f32({4}, {-2, -0.5f, 0, 3});
  expect_near(run_kernel("Relu", {x})[0], {0, 0, 0, 3});
  expect_near(run_kernel("LeakyRelu", {x})[0], {-0.02f, -0.005f, 0, 3});  // default alpha 0.01
  expect_near(run_kernel("LeakyRelu", {x}, attrs({{"alpha", 0.5f}}))[0], {-1, -0.25f, 0, 3});
  // Elu: alpha * (exp(x) - 1) below 0; exp(-2) - 1 = -0.8646647, exp(-0.5) - 1 = -0.3934693.
  expect_near(run_kernel("Elu", {x})[0], {-0.8646647f, -0.3934693f, 0, 3});
  expect_near(run_kernel("Elu", {x}, attrs({{"alpha", 2.0f}}))[0], {-1.7293294f, -0.7869387f, 0, 3});
}

TEST(Activation, SigmoidTanhStayFiniteForLargeInputs) {
  Tensor x = f32({5}, {-100, -1, 0, 1, 100});
  expect_near(run_kernel("Sigmoid", {x})[0], {0, 0.26894142f, 0.5f, 0.73105858f, 1});
  expect_near(run_kernel("Tanh", {x})[0], {-1, -0.76159416f, 0, 0.76159416f, 1});
}

TEST(Activation, HardSigmoidHardSwish) {
  Tensor x = f32({5}, {-4, -1, 0, 1, 4});
  // Default alpha 0.2, beta 0.5: clamp(0.2x + 0.5, 0, 1).
  expect_near(run_kernel("HardSigmoid", {x})[0], {0, 0.3f, 0.5f, 0.7f, 1});
  expect_near(run_kernel("HardSigmoid", {x}, attrs({{"alpha", 0.5f}, {"beta", 0.0f}}))[0], {0, 0, 0, 0.5f, 1});
  // HardSwish: x * clamp(x/6 + 0.5, 0, 1).
  expect_near(run_kernel("HardSwish", {x})[0], {0, -1.0f / 3, 0, 2.0f / 3, 4});
}

TEST(Activation, SeluDefaults) {
  // gamma * x above 0, gamma * alpha * (exp(x) - 1) below: 1.0507010 * 1.6732632 * (exp(-1) - 1) = -1.1113307.
  expect_near(run_kernel("Selu", {f32({3}, {-1, 0, 2})})[0], {-1.1113307f, 0, 2.1014020f});
}

TEST(Activation, FloatingPointDouble) {
  auto out = run_kernel("HardSigmoid", {f64({2}, {-1, 1})});
  EXPECT_EQ(out[0].dtype(), DType::kFloat64);
  EXPECT_NEAR(out[0].data<double>()[0], 0.3, 1e-7);
  EXPECT_NEAR(out[0].data<double>()[1], 0.7, 1e-7);
}

// --- PRelu ---------------------------------------------------------------------------------------------------------

TEST(PRelu, PerChannelSlope) {
  // X [1,2,2,2], slope [2,1,1]: channel 0 uses 0.1, channel 1 uses 2.
  auto out = run_kernel("PRelu", {f32({1, 2, 2, 2}, {-1, 2, -3, 4, -1, 2, -3, 4}), f32({2, 1, 1}, {0.1f, 2})});
  EXPECT_EQ(out[0].shape(), (Shape{1, 2, 2, 2}));
  expect_near(out[0], {-0.1f, 2, -0.3f, 4, -2, 2, -6, 4});
}

TEST(PRelu, ScalarSlope) {
  expect_near(run_kernel("PRelu", {f32({3}, {-2, 0, 2}), f32({1}, {0.25f})})[0], {-0.5f, 0, 2});
}

TEST(PRelu, SlopeMustBroadcastToX) {
  // Unidirectional: a slope that would enlarge X is an error, though the shapes broadcast multidirectionally.
  EXPECT_EQ(error_of("PRelu", {f32({3}, {1, 2, 3}), f32({2, 3}, {1, 1, 1, 1, 1, 1})}), ErrorKind::kInvalidArgument);
  EXPECT_EQ(error_of("PRelu", {f32({2, 3}, {1, 1, 1, 1, 1, 1}), f32({2}, {1, 1})}), ErrorKind::kInvalidArgument);
}

// --- Clip ----------------------------------------------------------------------------------------------------------

TEST(Clip, AttributesBeforeOpset11) {
  Tensor x = f32({4}, {-3, -1, 1, 3});
  expect_near(run_kernel("Clip", {x}, attrs({{"min", -2.0f}, {"max", 2.0f}}), opset(6))[0], {-2, -1, 1, 2});
  expect_near(run_kernel("Clip", {x}, attrs({{"max", 0.0f}}), opset(6))[0], {-3, -1, 0, 0});
  expect_near(run_kernel("Clip", {x}, {}, opset(6))[0], {-3, -1, 1, 3});
}

TEST(Clip, OptionalInputsFromOpset11) {
  Tensor x = f32({4}, {-3, -1, 1, 3});
  expect_near(run_kernel("Clip", {x, f32({}, {-2}), f32({}, {2})}, {}, opset(11))[0], {-2, -1, 1, 2});
  // min omitted (an empty input), max given.
  expect_near(run_kernel("Clip", {x, Tensor(), f32({}, {0})}, {}, opset(13))[0], {-3, -1, 0, 0});
  // Only min given.
  expect_near(run_kernel("Clip", {x, f32({}, {0})}, {}, opset(13))[0], {0, 0, 1, 3});
  // Neither: the identity.
  expect_near(run_kernel("Clip", {x}, {}, opset(13))[0], {-3, -1, 1, 3});
}

TEST(Clip, MinAboveMaxGivesMax) {
  expect_near(run_kernel("Clip", {f32({3}, {-5, 0, 5}), f32({}, {2}), f32({}, {1})})[0], {1, 1, 1});
}

TEST(Clip, Int8) {
  Tensor x = make_tensor<int8_t>(DType::kInt8, {4}, {-128, -5, 5, 127});
  Tensor lo = make_tensor<int8_t>(DType::kInt8, {}, {-10});
  auto out = run_kernel("Clip", {x, lo}, {}, opset(13));
  EXPECT_EQ(values<int8_t>(out[0]), (std::vector<int8_t>{-10, -5, 5, 127}));
}

TEST(Clip, BoundsMustBeScalarsOfTheInputType) {
  Tensor x = f32({2}, {1, 2});
  EXPECT_EQ(error_of("Clip", {x, f32({2}, {0, 0})}), ErrorKind::kInvalidArgument);
  EXPECT_EQ(error_of("Clip", {x, f64({}, {0})}), ErrorKind::kInvalidModel);
  Tensor b = make_tensor<bool>(DType::kBool, {1}, {true});
  EXPECT_EQ(error_of("Clip", {b}), ErrorKind::kUnsupported);
}

// anvil.ReluGrad(dY, Y): dY where Y > 0, else 0 (Y at 0, negative, -0 or
// NaN), on one thread below 65,537 elements and split across the team above;
// a NaN gradient where Y <= 0 gives 0 too.
TEST(ReluGrad, KeepsTheGradientWhereTheActivationIsPositive) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (const int64_t n : {int64_t{37}, int64_t{70001}}) {
    std::vector<float> dy(static_cast<size_t>(n)), y(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      const int64_t kind = (i * 7) % 5;  // positive, zero, negative, -0, NaN
      y[static_cast<size_t>(i)] = kind == 0 ? 0.5f : kind == 1 ? 0.f : kind == 2 ? -2.f : kind == 3 ? -0.f : nan;
      dy[static_cast<size_t>(i)] = kind == 2 ? nan : static_cast<float>(i + 1);
    }
    testing::KernelOptions o;
    o.domain = "anvil";
    const auto out = run_kernel("ReluGrad", {f32({n}, dy), f32({n}, y)}, {}, o);
    const std::vector<float> dx = values<float>(out[0]);
    for (int64_t i = 0; i < n; ++i)
      ASSERT_EQ(dx[static_cast<size_t>(i)], (i * 7) % 5 == 0 ? static_cast<float>(i + 1) : 0.f) << n << " " << i;
  }
}

}  // namespace
}  // namespace anvil
