// Tests of the quantization kernels (src/kernels/ref/quantize.cc), the window
// functions (windows.cc), NonMaxSuppression (detection.cc) and Unique
// (unique.cc), against hand-computed values (the quantization ones are the
// worked examples of the ONNX operator documentation, recomputed by hand).
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
using testing::u8;
using testing::make_tensor;
using testing::opset;
using testing::run_kernel;
using testing::values;


TEST(QuantizeLinear, RoundsHalfToEvenAndSaturates) {
  Tensor x = f32({6}, {0, 2, 3, 1000, -254, -1000});
  // 3 / 2 = 1.5 rounds to 2; 1000 / 2 + 128 saturates at 255; -254 / 2 + 128 = 1.
  std::vector<Tensor> y = run_kernel("QuantizeLinear", {x, f32({}, {2}), u8({}, {128})}, {}, opset(13));
  EXPECT_EQ(values<uint8_t>(y[0]), (std::vector<uint8_t>{128, 129, 130, 255, 1, 0}));
}

TEST(QuantizeLinear, PerAxisScaleAndZeroPoint) {
  Tensor x = f32({2, 2}, {2, 2, 4, 4});
  testing::KernelOptions o = opset(13);
  o.constant_inputs = {false, true, true};
  std::vector<Tensor> y =
      run_kernel("QuantizeLinear", {x, f32({2}, {1, 2}), u8({2}, {0, 10})}, attrs({{"axis", int64_t{1}}}), o);
  EXPECT_EQ(values<uint8_t>(y[0]), (std::vector<uint8_t>{2, 11, 4, 12}));
}

TEST(DequantizeLinear, ShiftsAndScales) {
  std::vector<Tensor> y = run_kernel("DequantizeLinear", {u8({4}, {0, 3, 128, 255}), f32({}, {2}), u8({}, {128})},
                                     {}, opset(13));
  EXPECT_EQ(values<float>(y[0]), (std::vector<float>{-256, -250, 0, 254}));
}

// Blocks of 2 along axis 1, each with its scale; int4 saturates at 7.
TEST(QuantizeLinear, BlockedIntoInt4) {
  Tensor x = f32({2, 4}, {1, 2, 3, 4, 5, 6, 7, 8});
  Tensor scale = f32({2, 2}, {1, 2, 0.5f, 4});
  Tensor zero = make_tensor<int8_t>(DType::kInt4, {2, 2}, {0, 0, 0, 0});
  testing::KernelOptions o = opset(21);
  o.constant_inputs = {false, true, true};
  std::vector<Tensor> y = run_kernel("QuantizeLinear", {x, scale, zero},
                                     attrs({{"axis", int64_t{1}}, {"block_size", int64_t{2}}}), o);
  ASSERT_EQ(y[0].dtype(), DType::kInt4);
  // 3 / 2 = 1.5 rounds to even 2; 5 / 0.5 = 10 and 6 / 0.5 = 12 saturate; 7 / 4 = 1.75 -> 2.
  EXPECT_EQ(values<int8_t>(y[0]), (std::vector<int8_t>{1, 2, 2, 2, 7, 7, 2, 2}));
  // A blocked scale whose blocked axis does not match x's: the caller's inputs do not fit.
  EXPECT_EQ(error_kind_of([&] {
              run_kernel("QuantizeLinear", {x, f32({2, 3}, {1, 1, 1, 1, 1, 1}), Tensor()},
                         attrs({{"axis", int64_t{1}}, {"block_size", int64_t{2}}}), o);
            }),
            ErrorKind::kInvalidArgument);
}

TEST(QuantizeLinear, OutputDtypeWithoutZeroPointAndFloat8) {
  std::vector<Tensor> y = run_kernel("QuantizeLinear", {f32({3}, {2, -600, 1000}), f32({}, {2}), Tensor()},
                                     attrs({{"output_dtype", int64_t{17}}}), opset(21));
  ASSERT_EQ(y[0].dtype(), DType::kFloat8E4M3FN);
  EXPECT_EQ(values<uint8_t>(y[0]), (std::vector<uint8_t>{0x38, 0xf9, 0x7e}));  // 1, -300 -> -288 (S.1111.001), 500 -> 448
}

TEST(DequantizeLinear, OutputDtypeAndInt4) {
  Tensor x = make_tensor<int8_t>(DType::kInt4, {3}, {-8, 0, 7});
  Tensor zero = make_tensor<int8_t>(DType::kInt4, {}, {-1});
  std::vector<Tensor> y =
      run_kernel("DequantizeLinear", {x, f32({}, {0.5f}), zero}, attrs({{"output_dtype", int64_t{10}}}), opset(23));
  ASSERT_EQ(y[0].dtype(), DType::kFloat16);
  Tensor back = run_kernel("Cast", {y[0]}, attrs({{"to", int64_t{1}}}), opset(21))[0];
  EXPECT_EQ(values<float>(back), (std::vector<float>{-3.5f, 0.5f, 4.f}));
}

// Range [-3, 2]: scale 5 / 255, zero point round(3 / scale) = 153.
TEST(DynamicQuantizeLinear, ScaleAndZeroPointFromTheRange) {
  std::vector<Tensor> y = run_kernel("DynamicQuantizeLinear", {f32({6}, {0, 2, -3, -2.5f, 1.34f, 0.5f})}, {},
                                     opset(13, 3));
  EXPECT_EQ(values<uint8_t>(y[0]), (std::vector<uint8_t>{153, 255, 0, 26, 221, 179}));
  EXPECT_NEAR(values<float>(y[1])[0], 5.f / 255.f, 1e-9f);
  EXPECT_EQ(values<uint8_t>(y[2]), (std::vector<uint8_t>{153}));
}

TEST(MatMulInteger, ZeroPointsShiftTheOperands) {
  Tensor a = u8({4, 3}, {11, 7, 3, 10, 6, 2, 9, 5, 1, 8, 4, 0});
  Tensor b = u8({3, 2}, {1, 4, 2, 5, 3, 6});
  testing::KernelOptions o = opset(13);
  o.constant_inputs = {false, false, true, true};
  std::vector<Tensor> y = run_kernel("MatMulInteger", {a, b, u8({}, {12}), u8({}, {0})}, {}, o);
  EXPECT_EQ(y[0].dtype(), DType::kInt32);
  EXPECT_EQ(values<int32_t>(y[0]), (std::vector<int32_t>{-38, -83, -44, -98, -50, -113, -56, -128}));
}

// (a - 1) @ (b - 2) = [[2 * 3]] = 6; * 0.5 * 0.25 / 0.125 = 6; + 10.
TEST(QLinearMatMul, Requantizes) {
  testing::KernelOptions o = opset(13);
  o.constant_inputs = {false, true, true, false, true, true, true, true};
  std::vector<Tensor> y = run_kernel("QLinearMatMul",
                                     {u8({1, 2}, {2, 2}), f32({}, {0.5f}), u8({}, {1}), u8({2, 1}, {5, 5}),
                                      f32({}, {0.25f}), u8({}, {2}), f32({}, {0.125f}), u8({}, {10})},
                                     {}, o);
  EXPECT_EQ(values<uint8_t>(y[0]), (std::vector<uint8_t>{16}));
}

// 2x2 windows of x - 1 over [[0,1,2],[3,4,5],[6,7,8]]: 8, 12, 20, 24.
TEST(ConvInteger, ShiftsByTheZeroPointAndAccumulatesInInt32) {
  testing::KernelOptions o = opset(13);
  o.constant_inputs = {false, true, true};
  std::vector<Tensor> y = run_kernel("ConvInteger", {u8({1, 1, 3, 3}, {1, 2, 3, 4, 5, 6, 7, 8, 9}),
                                                     u8({1, 1, 2, 2}, {1, 1, 1, 1}), u8({}, {1})}, {}, o);
  EXPECT_EQ(y[0].dtype(), DType::kInt32);
  EXPECT_EQ(y[0].shape(), (Shape{1, 1, 2, 2}));
  EXPECT_EQ(values<int32_t>(y[0]), (std::vector<int32_t>{8, 12, 20, 24}));
}

// Found by the model-loader fuzzer: NaN reached an integer cast (undefined). NaN quantizes to 0;
// TopK and Unique order NaN after every number; a NaN grid position samples 0.
TEST(NaN, QuantizeTopKUniqueAndGridSampleStayDefined) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(values<uint8_t>(run_kernel("QuantizeLinear", {f32({2}, {nan, 4}), f32({}, {2}), u8({}, {10})}, {},
                                       opset(13))[0]),
            (std::vector<uint8_t>{0, 12}));
  std::vector<Tensor> top = run_kernel("TopK", {f32({3}, {1, nan, 2}), i64({1}, {2})}, {}, opset(11, 2));
  EXPECT_EQ(values<int64_t>(top[1]), (std::vector<int64_t>{1, 2}));  // NaN is the largest
  std::vector<Tensor> u = run_kernel("Unique", {f32({3}, {nan, 1, nan})}, {}, opset(11, 4));
  ASSERT_EQ(u[0].numel(), 2);
  EXPECT_EQ(u[0].data<float>()[0], 1.f);
  EXPECT_TRUE(std::isnan(u[0].data<float>()[1]));
  EXPECT_EQ(values<int64_t>(u[3]), (std::vector<int64_t>{1, 2}));
  Tensor g = run_kernel("GridSample", {f32({1, 1, 2, 2}, {1, 2, 3, 4}), f32({1, 1, 1, 2}, {nan, 0})}, {}, opset(16))[0];
  EXPECT_EQ(values<float>(g), (std::vector<float>{0}));
}

// Inputs the new kernels refuse, each with its error kind.
TEST(BadInputs, RefusedWithAClearKind) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  testing::KernelOptions roi = opset(16);
  roi.constant_inputs = {false, false, true};
  EXPECT_EQ(error_kind_of([&] {
              run_kernel("RoiAlign", {f32({1, 1, 2, 2}, {1, 2, 3, 4}), f32({1, 4}, {0, 0, nan, 1}), i64({1}, {0})}, {}, roi);
            }),
            ErrorKind::kInvalidArgument);  // a region that is not a finite position
  testing::KernelOptions q = opset(13);
  q.constant_inputs = {false, true, true, false, true, true, true, true};
  EXPECT_EQ(error_kind_of([&] {
              run_kernel("QLinearConv", {u8({1, 1, 2, 2}, {1, 2, 3, 4}), f32({}, {1}), u8({}, {0}), u8({2, 1, 1, 1}, {1, 1}),
                                         f32({3}, {1, 1, 1}), u8({}, {0}), f32({}, {1}), u8({}, {0})},
                         {}, q);
            }),
            ErrorKind::kInvalidArgument);  // three weight scales for two output channels
  EXPECT_EQ(error_kind_of([&] {
              run_kernel("RandomUniform", {}, attrs({{"shape", std::vector<int64_t>{2}}, {"low", 3.f}, {"high", 2.f}}));
            }),
            ErrorKind::kInvalidModel);  // low > high
  Tensor qkv = f32({1, 1, 2, 1}, {1, 2});
  EXPECT_EQ(error_kind_of([&] {
              run_kernel("Attention", {qkv, qkv, qkv, make_tensor<bool>(DType::kBool, {3, 2}, std::vector<bool>(6, true))},
                         {}, opset(23));
            }),
            ErrorKind::kInvalidArgument);  // a [3, 2] mask does not broadcast to [1, 1, 2, 2]
  Tensor big = f32({2000, 2000}, std::vector<float>(4000000, 1.f));
  EXPECT_EQ(error_kind_of([&] {
              run_kernel("Einsum", {big, big, big}, attrs({{"equation", std::string("ab,cd,ef->")}}), opset(12));
            }),
            ErrorKind::kUnsupported);  // 6.4e19 steps for the reference loop
}

TEST(Windows, PeriodicAndSymmetricHann) {
  EXPECT_EQ(values<float>(run_kernel("HannWindow", {i64({}, {4})}, {}, opset(17))[0]),
            (std::vector<float>{0, 0.5f, 1, 0.5f}));
  std::vector<float> sym = values<float>(run_kernel("HannWindow", {i64({}, {5})}, attrs({{"periodic", int64_t{0}}}),
                                                    opset(17))[0]);
  ASSERT_EQ(sym.size(), 5u);
  EXPECT_NEAR(sym[1], 0.5f, 1e-6f);
  EXPECT_NEAR(sym[2], 1.f, 1e-6f);
  EXPECT_NEAR(sym[4], 0.f, 1e-6f);
  // Hamming at the centre: 25/46 + 21/46 = 1; Blackman at 0: 0.42 - 0.5 + 0.08 = 0.
  EXPECT_NEAR(values<float>(run_kernel("HammingWindow", {i64({}, {2})}, {}, opset(17))[0])[1], 1.f, 1e-6f);
  EXPECT_NEAR(values<float>(run_kernel("BlackmanWindow", {i64({}, {2})}, {}, opset(17))[0])[0], 0.f, 1e-6f);
}

TEST(NonMaxSuppression, SuppressesOverlapsAboveTheThreshold) {
  // Box 1 overlaps box 0 with IoU 0.9 / 1.1 = 0.82 > 0.5; box 2 is apart.
  Tensor boxes = f32({1, 3, 4}, {0, 0, 1, 1, 0, 0.1f, 1, 1.1f, 0, 10, 1, 11});
  Tensor scores = f32({1, 1, 3}, {0.9f, 0.75f, 0.6f});
  testing::KernelOptions o = opset(11);
  o.constant_inputs = {false, false, true, true, true};
  std::vector<Tensor> y = run_kernel("NonMaxSuppression", {boxes, scores, i64({1}, {3}), f32({1}, {0.5f}),
                                                           f32({1}, {0.f})}, {}, o);
  EXPECT_EQ(y[0].shape(), (Shape{2, 3}));
  EXPECT_EQ(values<int64_t>(y[0]), (std::vector<int64_t>{0, 0, 0, 0, 0, 2}));
}

TEST(Unique, SortedWithIndicesInverseAndCounts) {
  std::vector<Tensor> y = run_kernel("Unique", {f32({6}, {2, 1, 1, 3, 4, 3})}, {}, opset(11, 4));
  EXPECT_EQ(values<float>(y[0]), (std::vector<float>{1, 2, 3, 4}));
  EXPECT_EQ(values<int64_t>(y[1]), (std::vector<int64_t>{1, 0, 3, 4}));
  EXPECT_EQ(values<int64_t>(y[2]), (std::vector<int64_t>{1, 0, 0, 2, 3, 2}));
  EXPECT_EQ(values<int64_t>(y[3]), (std::vector<int64_t>{2, 1, 2, 1}));
  std::vector<Tensor> unsorted = run_kernel("Unique", {f32({6}, {2, 1, 1, 3, 4, 3})}, attrs({{"sorted", int64_t{0}}}),
                                            opset(11, 4));
  EXPECT_EQ(values<float>(unsorted[0]), (std::vector<float>{2, 1, 3, 4}));
}

TEST(Einsum, ContractionTraceAndImplicitOutput) {
  Tensor a = f32({2, 2}, {1, 2, 3, 4}), b = f32({2, 2}, {5, 6, 7, 8});
  ir::Attributes mm = attrs({{"equation", std::string("ij,jk->ik")}});
  EXPECT_EQ(values<float>(run_kernel("Einsum", {a, b}, mm, opset(12))[0]), (std::vector<float>{19, 22, 43, 50}));
  // "ii": the trace (implicit output: no label used once, so a scalar).
  Tensor trace = run_kernel("Einsum", {a}, attrs({{"equation", std::string("ii")}}), opset(12))[0];
  EXPECT_EQ(trace.shape(), Shape{});
  EXPECT_EQ(values<float>(trace), (std::vector<float>{5}));
  // "ji" implicitly outputs "ij": a transpose.
  EXPECT_EQ(values<float>(run_kernel("Einsum", {a}, attrs({{"equation", std::string("ji")}}), opset(12))[0]),
            (std::vector<float>{1, 3, 2, 4}));
  EXPECT_EQ(error_kind_of([&] { run_kernel("Einsum", {a, f32({3}, {1, 2, 3})}, attrs({{"equation", std::string("ij,j->i")}}),
                                           opset(12)); }),
            ErrorKind::kInvalidArgument);
}

// An empty label stays empty (it was taken as the largest dim, 1 over 0: the
// kernel then read an empty input and wrote an empty output; found by make
// fuzz). An empty contraction sums nothing.
TEST(Einsum, EmptyLabelsStayEmpty) {
  Tensor sum_of_nothing = run_kernel("Einsum", {f32({3, 0}, {}), f32({0, 2}, {})},
                                     attrs({{"equation", std::string("ij,jk->ik")}}), opset(12))[0];
  EXPECT_EQ(sum_of_nothing.shape(), (Shape{3, 2}));
  EXPECT_EQ(values<float>(sum_of_nothing), (std::vector<float>(6, 0.f)));
  // (64 x 1 x 16 floats written past an empty output: ASan reports it)
  std::vector<float> y_values(5 * 3 * 16, 1.f);
  Tensor empty = run_kernel("Einsum", {f32({64, 0, 3}, {}), f32({5, 3, 16}, y_values)},
                            attrs({{"equation", std::string("bij,hjk->bik")}}), opset(12))[0];
  EXPECT_EQ(empty.shape(), (Shape{64, 0, 16}));
}

// X [1, 1, 2, 2] = [[1, 2], [3, 4]]: the grid point (0, 0) is the image centre, the average with
// align_corners=0; (-1, -1) is the top-left pixel's outer corner, half padding with zeros.
TEST(GridSample, BilinearCentreAndZeroPaddedCorner) {
  Tensor x = f32({1, 1, 2, 2}, {1, 2, 3, 4});
  Tensor grid = f32({1, 1, 2, 2}, {0, 0, -1, -1});
  std::vector<Tensor> y = run_kernel("GridSample", {x, grid}, {}, opset(16));
  EXPECT_EQ(y[0].shape(), (Shape{1, 1, 1, 2}));
  EXPECT_EQ(values<float>(y[0]), (std::vector<float>{2.5f, 0.25f}));
  ir::Attributes border = attrs({{"padding_mode", std::string("border")}});
  EXPECT_EQ(values<float>(run_kernel("GridSample", {x, grid}, border, opset(16))[0]), (std::vector<float>{2.5f, 1.f}));
}

// Multinomial draws classes by the softmax of the logits: with probabilities
// 1/4 and 3/4 over 4,000 draws, class 1's share is 0.75 within 0.03 (about
// five standard deviations); a class of logit -inf is never drawn.
TEST(Multinomial, DrawsBySoftmaxProbabilities) {
  Tensor logits = f32({2, 3}, {std::log(0.25f), std::log(0.75f), -INFINITY, -INFINITY, 0.f, -INFINITY});
  ir::Attributes a = attrs({{"sample_size", int64_t{4000}}, {"seed", 3.f}, {"dtype", int64_t{7}}});
  std::vector<Tensor> y = run_kernel("Multinomial", {logits}, a, opset(7));
  ASSERT_EQ(y[0].shape(), (Shape{2, 4000}));
  const std::vector<int64_t> v = values<int64_t>(y[0]);
  int64_t ones = 0;
  for (int64_t i = 0; i < 4000; ++i) {
    EXPECT_TRUE(v[static_cast<size_t>(i)] == 0 || v[static_cast<size_t>(i)] == 1);
    ones += v[static_cast<size_t>(i)];
    EXPECT_EQ(v[static_cast<size_t>(4000 + i)], 1);
  }
  EXPECT_NEAR(static_cast<double>(ones) / 4000, 0.75, 0.03);
  EXPECT_EQ(values<int64_t>(run_kernel("Multinomial", {logits}, a, opset(7))[0]), v);  // the seed repeats the draws
  EXPECT_EQ(error_kind_of([&] {
              run_kernel("Multinomial", {f32({1, 2}, {-INFINITY, -INFINITY})}, attrs({{"seed", 1.f}}), opset(7));
            }),
            ErrorKind::kInvalidArgument);
}

TEST(Random, UniformNormalAndBernoulliDrawWithinTheirLaws) {
  ir::Attributes uni = attrs({{"shape", std::vector<int64_t>{10000}}, {"low", 2.f}, {"high", 3.f}, {"seed", 3.f}});
  std::vector<float> u = values<float>(run_kernel("RandomUniform", {}, uni)[0]);
  double sum = 0;
  for (float v : u) {
    ASSERT_TRUE(v >= 2.f && v <= 3.f) << v;
    sum += v;
  }
  EXPECT_NEAR(sum / 10000, 2.5, 0.015);  // the mean's standard deviation is 0.0029
  EXPECT_EQ(values<float>(run_kernel("RandomUniform", {}, uni)[0]), u);  // the same seed draws the same values
  std::vector<double> n = values<double>(run_kernel(
      "RandomNormalLike", {make_tensor<double>(DType::kFloat64, {10000}, std::vector<double>(10000, 0.0))},
      attrs({{"mean", 5.f}, {"scale", 0.5f}}))[0]);
  double mean = 0;
  for (double v : n) mean += v / 10000;
  EXPECT_NEAR(mean, 5.0, 0.025);  // standard deviation 0.005
  std::vector<float> p(10000, 0.3f);
  p[0] = 0.f;
  p[1] = 1.f;
  std::vector<float> b = values<float>(run_kernel("Bernoulli", {f32({10000}, p)}, {}, opset(15))[0]);
  EXPECT_EQ(b[0], 0.f);
  EXPECT_EQ(b[1], 1.f);
  double ones = 0;
  for (float v : b) {
    ASSERT_TRUE(v == 0.f || v == 1.f);
    ones += v;
  }
  EXPECT_NEAR(ones / 10000, 0.3, 0.025);  // standard deviation 0.0046
}

}  // namespace
}  // namespace anvil
