// Tests of the reference kernels added for conformance breadth: unary math
// (src/kernels/ref/unary.cc), Mod and BitShift (elementwise.cc), Size,
// ArgMax/ArgMin/TopK (arg_reduce.cc), Hardmax (softmax.cc), the losses
// (loss.cc) and GatherND / ScatterND / ScatterElements (scatter_gather.cc).
// Expected values are computed by hand (or, for transcendental functions,
// written to 7+ digits from their definitions).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "anvil/error.h"
#include "kernel_tester.h"

namespace anvil {
namespace {

using testing::attrs;
using testing::error_kind_of;
using testing::f32;
using testing::i64;
using testing::i32;
using testing::u8;
using testing::make_tensor;
using testing::opset;
using testing::run_kernel;
using testing::values;

void expect_near(const Tensor& t, const std::vector<float>& want, float tol = 1e-6f) {
  std::vector<float> got = values<float>(t);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], tol) << "element " << i;
}


// --- unary ---------------------------------------------------------------------------------------------------------

TEST(Unary, TrigonometricAndHyperbolic) {
  Tensor x = f32({2}, {0.f, 0.5f});
  expect_near(run_kernel("Sin", {x})[0], {0.f, 0.4794255f});
  expect_near(run_kernel("Cos", {x})[0], {1.f, 0.8775826f});
  expect_near(run_kernel("Tan", {x})[0], {0.f, 0.5463025f});
  expect_near(run_kernel("Asin", {x})[0], {0.f, 0.5235988f});  // pi / 6
  expect_near(run_kernel("Acos", {x})[0], {1.5707964f, 1.0471976f});
  expect_near(run_kernel("Atan", {x})[0], {0.f, 0.4636476f});
  expect_near(run_kernel("Sinh", {x})[0], {0.f, 0.5210953f});
  expect_near(run_kernel("Cosh", {x})[0], {1.f, 1.1276260f});
  expect_near(run_kernel("Asinh", {x})[0], {0.f, 0.4812118f});
  expect_near(run_kernel("Atanh", {x})[0], {0.f, 0.5493061f});
  expect_near(run_kernel("Acosh", {f32({2}, {1.f, 2.f})})[0], {0.f, 1.3169579f});
}

TEST(Unary, RoundHalvesToEven) {
  std::vector<float> got = values<float>(run_kernel("Round", {f32({6}, {0.5f, 1.5f, 2.5f, -0.5f, -1.5f, 2.6f})})[0]);
  EXPECT_EQ(got, (std::vector<float>{0.f, 2.f, 2.f, -0.f, -2.f, 3.f}));
}

TEST(Unary, SignOfFloatsAndIntegers) {
  EXPECT_EQ(values<float>(run_kernel("Sign", {f32({3}, {-2.5f, 0.f, 7.f})})[0]), (std::vector<float>{-1, 0, 1}));
  EXPECT_EQ(values<int32_t>(run_kernel("Sign", {i32({3}, {-9, 0, 4})})[0]), (std::vector<int32_t>{-1, 0, 1}));
}

TEST(Unary, ActivationsWithAttributes) {
  Tensor x = f32({3}, {-1.f, 0.5f, 2.f});
  // Celu(alpha = 2): max(0, x) + min(0, 2 * (exp(x / 2) - 1)).
  expect_near(run_kernel("Celu", {x}, attrs({{"alpha", 2.f}}))[0], {-0.7869387f, 0.5f, 2.f});
  expect_near(run_kernel("ThresholdedRelu", {x}, attrs({{"alpha", 1.f}}))[0], {0.f, 0.f, 2.f});
  // Shrink(lambd = 0.75, bias = 0.5): x - bias above lambd, x + bias below -lambd, else 0.
  expect_near(run_kernel("Shrink", {x}, attrs({{"lambd", 0.75f}, {"bias", 0.5f}}))[0], {-0.5f, 0.f, 1.5f});
  EXPECT_EQ(values<int32_t>(run_kernel("Shrink", {i32({3}, {-3, 1, 3})}, attrs({{"lambd", 1.5f}, {"bias", 1.f}}))[0]),
            (std::vector<int32_t>{-2, 0, 2}));
  expect_near(run_kernel("Mish", {f32({1}, {1.f})})[0], {0.8650984f});
  expect_near(run_kernel("Gelu", {f32({1}, {1.f})}, {}, opset(20))[0], {0.8413447f});
  expect_near(run_kernel("Gelu", {f32({1}, {1.f})}, attrs({{"approximate", std::string("tanh")}}), opset(20))[0],
              {0.8411920f});
}

TEST(Unary, IsNaNAndIsInfWithDetectFlags) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  Tensor x = f32({4}, {inf, -inf, nan, 1.f});
  EXPECT_EQ(values<bool>(run_kernel("IsNaN", {x})[0]), (std::vector<bool>{false, false, true, false}));
  EXPECT_EQ(values<bool>(run_kernel("IsInf", {x})[0]), (std::vector<bool>{true, true, false, false}));
  EXPECT_EQ(values<bool>(run_kernel("IsInf", {x}, attrs({{"detect_negative", int64_t{0}}}))[0]),
            (std::vector<bool>{true, false, false, false}));
}

// --- Mod, BitShift -----------------------------------------------------------------------------------------------

TEST(Mod, IntegerSignFollowsTheDivisorUnlessFmod) {
  Tensor a = i32({5}, {-7, 7, -7, 7, 5}), b = i32({5}, {3, -3, -3, 3, 0});
  EXPECT_EQ(values<int32_t>(run_kernel("Mod", {a, b})[0]), (std::vector<int32_t>{2, -2, -1, 1, 0}));
  EXPECT_EQ(values<int32_t>(run_kernel("Mod", {a, b}, attrs({{"fmod", int64_t{1}}}))[0]),
            (std::vector<int32_t>{-1, 1, -1, 1, 0}));
}

TEST(Mod, FloatNeedsFmod) {
  Tensor a = f32({2}, {-7.5f, 7.5f}), b = f32({1}, {2.f});
  EXPECT_EQ(values<float>(run_kernel("Mod", {a, b}, attrs({{"fmod", int64_t{1}}}))[0]), (std::vector<float>{-1.5f, 1.5f}));
  EXPECT_EQ(error_kind_of([&] { run_kernel("Mod", {a, b}); }), ErrorKind::kInvalidModel);
}

TEST(BitShift, LeftAndRightOfUnsigned) {
  Tensor x = u8({3}, {16, 4, 255}), y = u8({3}, {1, 2, 8});
  EXPECT_EQ(values<uint8_t>(run_kernel("BitShift", {x, y}, attrs({{"direction", std::string("LEFT")}}))[0]),
            (std::vector<uint8_t>{32, 16, 0}));
  EXPECT_EQ(values<uint8_t>(run_kernel("BitShift", {x, y}, attrs({{"direction", std::string("RIGHT")}}))[0]),
            (std::vector<uint8_t>{8, 1, 0}));
  EXPECT_EQ(error_kind_of([&] { run_kernel("BitShift", {x, y}, attrs({{"direction", std::string("UP")}})); }),
            ErrorKind::kInvalidModel);
}

// Opset 28: signed right shifts fill with the sign bit; out-of-range amounts give the fill alone.
TEST(BitShift, SignedShiftsAreArithmetic) {
  Tensor x = make_tensor<int8_t>(DType::kInt8, {5}, {-8, -8, 100, -1, 5});
  Tensor y = make_tensor<int8_t>(DType::kInt8, {5}, {1, 8, 1, -1, 3});
  testing::KernelOptions o = opset(28);
  EXPECT_EQ(values<int8_t>(run_kernel("BitShift", {x, y}, attrs({{"direction", std::string("RIGHT")}}), o)[0]),
            (std::vector<int8_t>{-4, -1, 50, -1, 0}));
  // 100 << 1 = 200 wraps to -56; -8 << 8 and a negative amount give 0.
  EXPECT_EQ(values<int8_t>(run_kernel("BitShift", {x, y}, attrs({{"direction", std::string("LEFT")}}), o)[0]),
            (std::vector<int8_t>{-16, 0, -56, 0, 40}));
}

// SwiGLU: A * sigmoid(alpha A) * B; sigmoid(0) = 1/2, and alpha 0 makes it A / 2 * B.
TEST(SwiGLU, GatesBByTheSwishOfA) {
  std::vector<Tensor> y = run_kernel("SwiGLU", {f32({2}, {0, 2}), f32({2}, {5, 3})}, attrs({{"alpha", 0.f}}), opset(28));
  EXPECT_EQ(values<float>(y[0]), (std::vector<float>{0, 3}));
  y = run_kernel("SwiGLU", {f32({1}, {1}), f32({1}, {2})}, {}, opset(28));
  EXPECT_NEAR(values<float>(y[0])[0], 2.f / (1.f + std::exp(-1.f)), 1e-6f);
  EXPECT_EQ(error_kind_of([&] { run_kernel("SwiGLU", {f32({2}, {0, 2}), f32({1}, {5})}, {}, opset(28)); }),
            ErrorKind::kInvalidArgument);
}

// --- Size, ArgMax/ArgMin, TopK, Hardmax --------------------------------------------------------------------------

TEST(Size, CountsElements) {
  Tensor out = run_kernel("Size", {f32({2, 3}, {0, 0, 0, 0, 0, 0})})[0];
  EXPECT_EQ(out.shape(), Shape{});
  EXPECT_EQ(values<int64_t>(out), (std::vector<int64_t>{6}));
}

TEST(ArgMax, AxisKeepdimsAndLastIndex) {
  Tensor x = f32({2, 3}, {1, 5, 5, 7, 2, 7});
  Tensor first = run_kernel("ArgMax", {x}, attrs({{"axis", int64_t{1}}}))[0];
  EXPECT_EQ(first.shape(), (Shape{2, 1}));
  EXPECT_EQ(values<int64_t>(first), (std::vector<int64_t>{1, 0}));
  Tensor last = run_kernel("ArgMax", {x}, attrs({{"axis", int64_t{1}}, {"select_last_index", int64_t{1}}}))[0];
  EXPECT_EQ(values<int64_t>(last), (std::vector<int64_t>{2, 2}));
  Tensor min0 = run_kernel("ArgMin", {x}, attrs({{"keepdims", int64_t{0}}}))[0];
  EXPECT_EQ(min0.shape(), (Shape{3}));
  EXPECT_EQ(values<int64_t>(min0), (std::vector<int64_t>{0, 1, 0}));
}

TEST(TopK, LargestAndSmallestWithTiesToTheLowerIndex) {
  Tensor x = f32({2, 4}, {3, 1, 3, 2, 0, 9, 8, 9});
  std::vector<Tensor> out = run_kernel("TopK", {x, i64({1}, {2})}, {}, opset(11, 2));
  EXPECT_EQ(out[0].shape(), (Shape{2, 2}));
  EXPECT_EQ(values<float>(out[0]), (std::vector<float>{3, 3, 9, 9}));
  EXPECT_EQ(values<int64_t>(out[1]), (std::vector<int64_t>{0, 2, 1, 3}));
  out = run_kernel("TopK", {x, i64({1}, {1})}, attrs({{"largest", int64_t{0}}, {"axis", int64_t{0}}}), opset(11, 2));
  EXPECT_EQ(values<float>(out[0]), (std::vector<float>{0, 1, 3, 2}));
  EXPECT_EQ(values<int64_t>(out[1]), (std::vector<int64_t>{1, 0, 0, 0}));
  EXPECT_EQ(error_kind_of([&] { run_kernel("TopK", {x, i64({1}, {5})}, {}, opset(11, 2)); }),
            ErrorKind::kInvalidArgument);
}

TEST(Hardmax, OneAtTheFirstMaximum) {
  Tensor x = f32({2, 3}, {1, 3, 3, -1, -2, -3});
  EXPECT_EQ(values<float>(run_kernel("Hardmax", {x})[0]), (std::vector<float>{0, 1, 0, 1, 0, 0}));
}

// --- losses --------------------------------------------------------------------------------------------------------

// Log-probabilities [N=2, C=3]; targets 2 and 0; weights [1, 2, 3].
TEST(Loss, NegativeLogLikelihoodReductionsWeightsAndIgnoreIndex) {
  Tensor logp = f32({2, 3}, {-1.f, -2.f, -0.5f, -0.25f, -3.f, -4.f});
  Tensor target = i64({2}, {2, 0});
  Tensor w = f32({3}, {1.f, 2.f, 3.f});
  ir::Attributes none = attrs({{"reduction", std::string("none")}});
  EXPECT_EQ(values<float>(run_kernel("NegativeLogLikelihoodLoss", {logp, target}, none, opset(13))[0]),
            (std::vector<float>{0.5f, 0.25f}));
  expect_near(run_kernel("NegativeLogLikelihoodLoss", {logp, target}, {}, opset(13))[0], {0.375f});
  // Weighted mean: (0.5 * 3 + 0.25 * 1) / (3 + 1).
  expect_near(run_kernel("NegativeLogLikelihoodLoss", {logp, target, w}, {}, opset(13))[0], {0.4375f});
  ir::Attributes sum_ignore = attrs({{"reduction", std::string("sum")}, {"ignore_index", int64_t{0}}});
  expect_near(run_kernel("NegativeLogLikelihoodLoss", {logp, target, w}, sum_ignore, opset(13))[0], {1.5f});
  EXPECT_EQ(error_kind_of([&] { run_kernel("NegativeLogLikelihoodLoss", {logp, i64({2}, {3, 0})}, {}, opset(13)); }),
            ErrorKind::kInvalidArgument);
  EXPECT_EQ(error_kind_of([&] { run_kernel("NegativeLogLikelihoodLoss", {logp, i64({3}, {0, 0, 0})}, {}, opset(13)); }),
            ErrorKind::kInvalidArgument);
}

// Scores [1, 2] = [0, ln 3]: log_softmax = [ln 1/4, ln 3/4].
TEST(Loss, SoftmaxCrossEntropyAndItsLogProb) {
  Tensor scores = f32({1, 2}, {0.f, std::log(3.f)});
  std::vector<Tensor> out = run_kernel("SoftmaxCrossEntropyLoss", {scores, i64({1}, {1})}, {}, opset(13, 2));
  expect_near(out[0], {-std::log(0.75f)});
  expect_near(out[1], {std::log(0.25f), std::log(0.75f)});
}

// --- GatherND, ScatterND, ScatterElements ------------------------------------------------------------------------

TEST(GatherND, TuplesSlicesAndBatchDims) {
  Tensor data = f32({2, 2}, {0, 1, 2, 3});
  EXPECT_EQ(values<float>(run_kernel("GatherND", {data, i64({2, 2}, {0, 0, 1, 1})}, {}, opset(13))[0]),
            (std::vector<float>{0, 3}));
  Tensor rows = run_kernel("GatherND", {data, i64({2, 1}, {1, 0})}, {}, opset(13))[0];
  EXPECT_EQ(rows.shape(), (Shape{2, 2}));
  EXPECT_EQ(values<float>(rows), (std::vector<float>{2, 3, 0, 1}));
  // batch_dims = 1: row b picks element indices[b] of data[b].
  Tensor batched = run_kernel("GatherND", {data, i64({2, 1}, {1, 0})}, attrs({{"batch_dims", int64_t{1}}}), opset(13))[0];
  EXPECT_EQ(values<float>(batched), (std::vector<float>{1, 2}));
  EXPECT_EQ(error_kind_of([&] { run_kernel("GatherND", {data, i64({1, 2}, {2, 0})}, {}, opset(13)); }),
            ErrorKind::kInvalidArgument);
}

TEST(ScatterND, UpdatesAndReductions) {
  Tensor data = f32({4}, {1, 2, 3, 4});
  Tensor idx = i64({2, 1}, {3, -4});
  Tensor upd = f32({2}, {10, 20});
  EXPECT_EQ(values<float>(run_kernel("ScatterND", {data, idx, upd}, {}, opset(16))[0]), (std::vector<float>{20, 2, 3, 10}));
  EXPECT_EQ(values<float>(run_kernel("ScatterND", {data, idx, upd}, attrs({{"reduction", std::string("mul")}}),
                                     opset(16))[0]),
            (std::vector<float>{20, 2, 3, 40}));
  // Scalar indices hold no index tuple: the caller's error, not a read before the shape (found by the fuzzer).
  EXPECT_EQ(error_kind_of([&] { run_kernel("ScatterND", {data, i64({}, {0}), f32({}, {1})}, {}, opset(16)); }),
            ErrorKind::kInvalidArgument);
}

TEST(ScatterElements, AlongAnAxisWithAdd) {
  Tensor data = f32({2, 2}, {1, 2, 3, 4});
  Tensor idx = i64({2, 1}, {1, 0});
  Tensor upd = f32({2, 1}, {10, 20});
  ir::Attributes axis1 = attrs({{"axis", int64_t{1}}});
  EXPECT_EQ(values<float>(run_kernel("ScatterElements", {data, idx, upd}, axis1, opset(16))[0]),
            (std::vector<float>{1, 10, 20, 4}));
  ir::Attributes add = attrs({{"axis", int64_t{0}}, {"reduction", std::string("add")}});
  EXPECT_EQ(values<float>(run_kernel("ScatterElements", {data, idx, upd}, add, opset(16))[0]),
            (std::vector<float>{21, 2, 13, 4}));
  EXPECT_EQ(error_kind_of([&] { run_kernel("ScatterElements", {data, i64({2, 1}, {2, 0}), upd}, {}, opset(16)); }),
            ErrorKind::kInvalidArgument);
}

// --- opset 18-28 additions ---------------------------------------------------------------------------------------

TEST(Newer, SwishBitwiseAndFloatMod) {
  expect_near(run_kernel("Swish", {f32({2}, {0.f, 1.f})}, {}, opset(24))[0], {0.f, 0.7310586f});
  Tensor a = i32({2}, {12, -1}), b = i32({2}, {10, 7});
  EXPECT_EQ(values<int32_t>(run_kernel("BitwiseAnd", {a, b}, {}, opset(18))[0]), (std::vector<int32_t>{8, 7}));
  EXPECT_EQ(values<int32_t>(run_kernel("BitwiseOr", {a, b}, {}, opset(18))[0]), (std::vector<int32_t>{14, -1}));
  EXPECT_EQ(values<int32_t>(run_kernel("BitwiseXor", {a, b}, {}, opset(18))[0]), (std::vector<int32_t>{6, -8}));
  EXPECT_EQ(values<int32_t>(run_kernel("BitwiseNot", {i32({3}, {0, -1, 5})}, {}, opset(18))[0]),
            (std::vector<int32_t>{-1, 0, -6}));
  // Mod-28 with fmod=0 on floats: floored, the sign of the divisor; x mod 0 is NaN.
  std::vector<float> m = values<float>(run_kernel("Mod", {f32({3}, {-7.5f, 7.5f, 1.f}), f32({3}, {2.f, -2.f, 0.f})},
                                                  {}, opset(28))[0]);
  EXPECT_EQ(m[0], 0.5f);
  EXPECT_EQ(m[1], -0.5f);
  EXPECT_TRUE(std::isnan(m[2]));
}

TEST(Newer, RmsAndLpNormalizationAndCumProd) {
  // mean(1, 9) = 5: [1, 3] / sqrt(5) * [1, 2].
  expect_near(run_kernel("RMSNormalization", {f32({1, 2}, {1, 3}), f32({2}, {1, 2})}, attrs({{"epsilon", 0.f}}),
                         opset(23))[0],
              {0.4472136f, 2.6832816f});
  expect_near(run_kernel("LpNormalization", {f32({2, 2}, {1, 3, 3, 4})}, attrs({{"p", int64_t{1}}}))[0],
              {0.25f, 0.75f, 3.f / 7.f, 4.f / 7.f});
  expect_near(run_kernel("LpNormalization", {f32({1, 2}, {3, 4})})[0], {0.6f, 0.8f});
  Tensor x = f32({4}, {1, 2, 3, 4});
  testing::KernelOptions o = opset(26);
  EXPECT_EQ(values<float>(run_kernel("CumProd", {x, i64({}, {0})}, {}, o)[0]), (std::vector<float>{1, 2, 6, 24}));
  EXPECT_EQ(values<float>(run_kernel("CumProd", {x, i64({}, {0})}, attrs({{"exclusive", int64_t{1}}}), o)[0]),
            (std::vector<float>{1, 1, 2, 6}));
  EXPECT_EQ(values<float>(run_kernel("CumProd", {x, i64({}, {0})}, attrs({{"reverse", int64_t{1}}}), o)[0]),
            (std::vector<float>{24, 24, 12, 4}));
}

// --- Attention -------------------------------------------------------------------------------------------------

// One head, one query, two keys: scores q.k = 0 and ln 3 give probabilities 1/4 and 3/4 of the values 4 and 8.
TEST(Attention, SoftmaxOfScoresCausalAndBoolMask) {
  Tensor q = f32({1, 1, 1, 1}, {1.f}), k = f32({1, 1, 2, 1}, {0.f, std::log(3.f)}), v = f32({1, 1, 2, 1}, {4.f, 8.f});
  expect_near(run_kernel("Attention", {q, k, v}, {}, opset(23))[0], {7.f}, 1e-5f);
  // Causal, no past: query 0 sees key 0 only.
  expect_near(run_kernel("Attention", {q, k, v}, attrs({{"is_causal", int64_t{1}}}), opset(23))[0], {4.f}, 1e-5f);
  Tensor mask = make_tensor<bool>(DType::kBool, {1, 2}, {false, true});
  expect_near(run_kernel("Attention", {q, k, v, mask}, {}, opset(23))[0], {8.f}, 1e-5f);
  // An integer mask (ONNX's U allows them) is added as a float one: scores 0 + 1 and ln 3 + 0 give (4e + 24) / (e + 3).
  const float e = std::exp(1.f);
  expect_near(run_kernel("Attention", {q, k, v, i64({1, 2}, {1, 0})}, {}, opset(23))[0], {(4 * e + 24) / (e + 3)},
              1e-5f);
  // 3-D inputs with q_num_heads = kv_num_heads = 1 give the same.
  ir::Attributes heads = attrs({{"q_num_heads", int64_t{1}}, {"kv_num_heads", int64_t{1}}});
  Tensor y = run_kernel("Attention", {f32({1, 1, 1}, {1.f}), f32({1, 2, 1}, {0.f, std::log(3.f)}), f32({1, 2, 1}, {4.f, 8.f})},
                        heads, opset(23))[0];
  EXPECT_EQ(y.shape(), (Shape{1, 1, 1}));
  expect_near(y, {7.f}, 1e-5f);
}

// --- Resize ------------------------------------------------------------------------------------------------------

// [1, 3] upsampled x2 along the last axis.
TEST(Resize, LinearHalfPixelAndNearestAsymmetric) {
  Tensor x = f32({1, 2}, {1, 3});
  Tensor scales = f32({2}, {1, 2});
  testing::KernelOptions o = opset(13);
  o.constant_inputs = {false, false, true};
  // half_pixel: output i reads (i + 0.5) / 2 - 0.5 = -0.25, 0.25, 0.75, 1.25 (clamped at the edges).
  std::vector<Tensor> out = run_kernel("Resize", {x, Tensor(), scales}, attrs({{"mode", std::string("linear")}}), o);
  EXPECT_EQ(out[0].shape(), (Shape{1, 4}));
  expect_near(out[0], {1.f, 1.5f, 2.5f, 3.f});
  ir::Attributes nearest = attrs({{"coordinate_transformation_mode", std::string("asymmetric")},
                                  {"nearest_mode", std::string("floor")}});
  expect_near(run_kernel("Resize", {x, Tensor(), scales}, nearest, o)[0], {1.f, 1.f, 3.f, 3.f});
  // sizes instead of scales, align_corners: output i reads i * (2 - 1) / (3 - 1).
  o.constant_inputs = {false, false, false, true};
  ir::Attributes corners = attrs({{"mode", std::string("linear")},
                                  {"coordinate_transformation_mode", std::string("align_corners")}});
  expect_near(run_kernel("Resize", {x, Tensor(), Tensor(), i64({2}, {1, 3})}, corners, o)[0], {1.f, 2.f, 3.f});
}

// An axis empty in the input cannot give a non-empty output (its taps would
// read before the input's start): one clear error, not a read out of bounds.
TEST(Resize, EmptyAxisToNonEmptyIsRefused) {
  testing::KernelOptions o = opset(13);
  o.constant_inputs = {false, false, false, true};
  try {
    run_kernel("Resize", {Tensor(DType::kFloat32, {1, 0}), Tensor(), Tensor(), i64({2}, {1, 2})}, {}, o);
    ADD_FAILURE() << "resized an empty axis to 2";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument) << e.what();
    EXPECT_NE(std::string(e.what()).find("axis 1 is empty in the input but 2 long"), std::string::npos) << e.what();
  }
  // Empty to empty is fine.
  EXPECT_EQ(run_kernel("Resize", {Tensor(DType::kFloat32, {1, 0}), Tensor(), Tensor(), i64({2}, {2, 0})}, {}, o)[0].shape(),
            (Shape{2, 0}));
  // An empty output beside an axis scaled to 2^50: no samples are made (it would not finish otherwise).
  o.constant_inputs = {false, false, true};
  EXPECT_EQ(run_kernel("Resize", {Tensor(DType::kFloat32, {0, 2}), Tensor(), f32({2}, {1, 562949953421312.f})}, {}, o)[0]
                .shape(),
            (Shape{0, int64_t{1} << 50}));
}

// Antialiased downsampling by a tiny scale of a crop stretched wide (so
// that outputs remain) would take 2e8 taps per sample: refused with one
// message.
TEST(Resize, AntialiasWithTooManyTapsIsRefused) {
  testing::KernelOptions o = opset(18);
  o.constant_inputs = {false, true, true};
  try {
    run_kernel("Resize", {f32({1, 4}, {1, 2, 3, 4}), f32({4}, {0, 0, 1, 1e9f}), f32({2}, {1, 1e-8f})},
               attrs({{"mode", std::string("linear")},
                      {"antialias", int64_t{1}},
                      {"coordinate_transformation_mode", std::string("tf_crop_and_resize")}}),
               o);
    ADD_FAILURE() << "took a filter of 2e8 taps";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument) << e.what();
    EXPECT_NE(std::string(e.what()).find("taps for each of"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace anvil
