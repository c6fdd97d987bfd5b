// Tests of the reference pooling kernels (src/kernels/ref/pool.cc) and pool_geometry (src/kernels/nn_geometry.cc)
// against small hand-computed cases.
#include <gtest/gtest.h>

#include <numeric>

#include "anvil/error.h"
#include "kernel_tester.h"

namespace anvil {
namespace {

using testing::f32;
using testing::values;
using testing::attrs;
using testing::iota_f;
using testing::make_tensor;
using testing::run_kernel;

using Ints = std::vector<int64_t>;

testing::KernelOptions outputs(int n, int opset = 17) {
  testing::KernelOptions o;
  o.num_outputs = n;
  o.opset = opset;
  return o;
}

// The kind of anvil::Error that running `op` throws (its message goes to *message).
ErrorKind error_of(const std::string& op, const std::vector<Tensor>& inputs, const ir::Attributes& a = {},
                   std::string* message = nullptr) {
  try {
    run_kernel(op, inputs, a);
  } catch (const Error& e) {
    if (message) *message = e.what();
    return e.kind();
  }
  ADD_FAILURE() << "no anvil::Error thrown";
  return ErrorKind::kInternal;
}

TEST(MaxPool, TwoByTwoStrideTwoWithIndices) {
  // Two channels of a 4x4 iota (channel 1 continues at 16). Each 2x2 window's max is its bottom-right element;
  // Indices flatten over N, C, H, W, so channel 1's indices include the 16-element offset.
  Tensor x = f32({1, 2, 4, 4}, iota_f(32));
  auto out = run_kernel("MaxPool", {x}, attrs({{"kernel_shape", Ints{2, 2}}, {"strides", Ints{2, 2}}}), outputs(2));
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].shape(), (Shape{1, 2, 2, 2}));
  EXPECT_EQ(values<float>(out[0]), (std::vector<float>{5, 7, 13, 15, 21, 23, 29, 31}));
  EXPECT_EQ(out[1].dtype(), DType::kInt64);
  EXPECT_EQ(values<int64_t>(out[1]), (std::vector<int64_t>{5, 7, 13, 15, 21, 23, 29, 31}));
}

TEST(MaxPool, ColumnMajorIndices) {
  // storage_order = 1 flattens (h, w) as h + w * H: (1,1) -> 5, (1,3) -> 13, (3,1) -> 7, (3,3) -> 15.
  Tensor x = f32({1, 1, 4, 4}, iota_f(16));
  auto out = run_kernel("MaxPool", {x},
                        attrs({{"kernel_shape", Ints{2, 2}}, {"strides", Ints{2, 2}}, {"storage_order", int64_t{1}}}),
                        outputs(2));
  EXPECT_EQ(values<float>(out[0]), (std::vector<float>{5, 7, 13, 15}));
  EXPECT_EQ(values<int64_t>(out[1]), (std::vector<int64_t>{5, 13, 7, 15}));
}

TEST(MaxPool, NoIndicesOutputUnlessRequested) {
  auto out = run_kernel("MaxPool", {f32({1, 1, 2, 2}, {1, 2, 3, 4})}, attrs({{"kernel_shape", Ints{2, 2}}}));
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(values<float>(out[0]), (std::vector<float>{4}));
}

TEST(MaxPool, CeilModeOutputSizeAndIndices) {
  // 4x4 iota, kernel 3, stride 2: floor mode gives (4 - 3) / 2 + 1 = 1 per axis, ceil mode ceil(1 / 2) + 1 = 2.
  // The second window starts at 2 and is clipped to rows/cols 2..3: maxima x[2][2] = 10, x[2][3] = 11,
  // x[3][2] = 14, x[3][3] = 15.
  Tensor x = f32({1, 1, 4, 4}, iota_f(16));
  auto floor_out = run_kernel("MaxPool", {x}, attrs({{"kernel_shape", Ints{3, 3}}, {"strides", Ints{2, 2}}}));
  EXPECT_EQ(floor_out[0].shape(), (Shape{1, 1, 1, 1}));
  EXPECT_EQ(values<float>(floor_out[0]), (std::vector<float>{10}));
  auto ceil_out =
      run_kernel("MaxPool", {x},
                 attrs({{"kernel_shape", Ints{3, 3}}, {"strides", Ints{2, 2}}, {"ceil_mode", int64_t{1}}}), outputs(2));
  EXPECT_EQ(ceil_out[0].shape(), (Shape{1, 1, 2, 2}));
  EXPECT_EQ(values<float>(ceil_out[0]), (std::vector<float>{10, 11, 14, 15}));
  EXPECT_EQ(values<int64_t>(ceil_out[1]), (std::vector<int64_t>{10, 11, 14, 15}));
}

TEST(MaxPool, CeilModeDropsAWindowStartingInTheEndPadding) {
  // Width 4, kernel 2, stride 2, end pad 1: ceil((4 + 1 - 2) / 2) + 1 = 3, but the third window would start at 4,
  // inside the end padding, so there are 2 outputs.
  Tensor x = f32({1, 1, 1, 4}, {1, 2, 3, 4});
  auto out = run_kernel("MaxPool", {x},
                        attrs({{"kernel_shape", Ints{1, 2}},
                               {"strides", Ints{1, 2}},
                               {"pads", Ints{0, 0, 0, 1}},
                               {"ceil_mode", int64_t{1}}}));
  EXPECT_EQ(out[0].shape(), (Shape{1, 1, 1, 2}));
  EXPECT_EQ(values<float>(out[0]), (std::vector<float>{2, 4}));
}

TEST(MaxPool, CeilModeWindowLargerThanTheRest) {
  // Width 1, kernel 2, stride 2, ceil mode: one window starting at 0 that runs past the end.
  auto out = run_kernel("MaxPool", {f32({1, 1, 1}, {7})},
                        attrs({{"kernel_shape", Ints{2}}, {"strides", Ints{2}}, {"ceil_mode", int64_t{1}}}));
  EXPECT_EQ(values<float>(out[0]), (std::vector<float>{7}));
}

TEST(MaxPool, Dilations) {
  // Kernel 2 dilated by 2 pairs x[i] with x[i+2]: max(1,2), max(5,4), max(2,3).
  Tensor x = f32({1, 1, 5}, {1, 5, 2, 4, 3});
  auto out = run_kernel("MaxPool", {x}, attrs({{"kernel_shape", Ints{2}}, {"dilations", Ints{2}}}), outputs(2));
  EXPECT_EQ(values<float>(out[0]), (std::vector<float>{2, 5, 3}));
  EXPECT_EQ(values<int64_t>(out[1]), (std::vector<int64_t>{2, 1, 4}));
}

TEST(MaxPool, PaddingNeverWins) {
  // All values negative; the padded positions must not act as zeros.
  Tensor x = f32({1, 1, 3}, {-1, -2, -3});
  auto out = run_kernel("MaxPool", {x}, attrs({{"kernel_shape", Ints{2}}, {"pads", Ints{1, 1}}}), outputs(2));
  EXPECT_EQ(values<float>(out[0]), (std::vector<float>{-1, -1, -2, -3}));
  EXPECT_EQ(values<int64_t>(out[1]), (std::vector<int64_t>{0, 0, 1, 2}));
}

TEST(MaxPool, AutoPadSame) {
  // in 5, kernel 3, stride 2: out = ceil(5 / 2) = 3, pads (3-1)*2 + 3 - 5 = 2, one each side.
  // Windows [-1..1], [1..3], [3..5] of 1..5.
  Tensor x = f32({1, 1, 5}, {1, 2, 3, 4, 5});
  auto out =
      run_kernel("MaxPool", {x},
                 attrs({{"kernel_shape", Ints{3}}, {"strides", Ints{2}}, {"auto_pad", std::string("SAME_UPPER")}}));
  EXPECT_EQ(values<float>(out[0]), (std::vector<float>{2, 4, 5}));
}

// anvil.MaxPoolGrad(dY, X): each output's gradient goes to the element its
// window's maximum came from (the first of equals in scan order), summed
// where windows overlap; padding never takes it.
testing::KernelOptions anvil_op() {
  testing::KernelOptions o;
  o.domain = "anvil";
  return o;
}

TEST(MaxPoolGrad, EachGradientGoesToItsWindowsFirstMaximum) {
  // Windows (2x2, stride 1) of [[1 5 5] [2 0 3] [4 4 1]]: maxima at (0,1), (0,1) again (the first 5), (2,0), (2,1).
  const Tensor x = f32({1, 1, 3, 3}, {1, 5, 5, 2, 0, 3, 4, 4, 1});
  const auto out = run_kernel("MaxPoolGrad", {f32({1, 1, 2, 2}, {1, 10, 100, 1000}), x},
                              attrs({{"kernel_shape", Ints{2, 2}}}), anvil_op());
  EXPECT_EQ(out[0].shape(), (Shape{1, 1, 3, 3}));
  EXPECT_EQ(values<float>(out[0]), (std::vector<float>{0, 11, 0, 0, 0, 0, 100, 1000, 0}));
}

TEST(MaxPoolGrad, PaddingNeverTakesTheGradient) {
  // Pads of 1, 2x2 windows at stride 2 over negative values: each window holds one real element.
  const auto out = run_kernel("MaxPoolGrad", {f32({1, 1, 2, 2}, {1, 2, 3, 4}), f32({1, 1, 2, 2}, {-3, -1, -2, -4})},
                              attrs({{"kernel_shape", Ints{2, 2}}, {"strides", Ints{2, 2}}, {"pads", Ints{1, 1, 1, 1}}}),
                              anvil_op());
  EXPECT_EQ(values<float>(out[0]), (std::vector<float>{1, 2, 3, 4}));
}

TEST(MaxPoolGrad, AWindowOfPaddingAloneSendsNothing) {
  // Width 2, a window of 2 taps 3 apart from -1 (pads 1 and 1): taps at -1 and 2, both padding.
  const auto out = run_kernel("MaxPoolGrad", {f32({1, 1, 1, 1}, {5}), f32({1, 1, 1, 2}, {1, 2})},
                              attrs({{"kernel_shape", Ints{1, 2}}, {"dilations", Ints{1, 3}}, {"pads", Ints{0, 1, 0, 1}}}),
                              anvil_op());
  EXPECT_EQ(values<float>(out[0]), (std::vector<float>{0, 0}));
}

TEST(MaxPoolGrad, AGradientOfAnotherShapeIsRefused) {
  try {
    run_kernel("MaxPoolGrad", {f32({1, 1, 3, 3}, iota_f(9)), f32({1, 1, 4, 4}, iota_f(16))},
               attrs({{"kernel_shape", Ints{2, 2}}, {"strides", Ints{2, 2}}}), anvil_op());
    ADD_FAILURE() << "no anvil::Error thrown";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("is not the shape MaxPool gives"), std::string::npos) << e.what();
  }
}

TEST(MaxPool, ThreeDimensional) {
  Tensor x = f32({1, 1, 2, 2, 3}, {0, 1, 2, 3, 4, 5, 11, 10, 9, 8, 7, 6});
  auto out = run_kernel("MaxPool", {x}, attrs({{"kernel_shape", Ints{2, 2, 2}}}), outputs(2));
  EXPECT_EQ(out[0].shape(), (Shape{1, 1, 1, 1, 2}));
  EXPECT_EQ(values<float>(out[0]), (std::vector<float>{11, 10}));
  EXPECT_EQ(values<int64_t>(out[1]), (std::vector<int64_t>{6, 7}));
}

TEST(MaxPool, Int8AndUInt8) {
  Tensor u = make_tensor<uint8_t>(DType::kUInt8, {1, 1, 4}, {3, 200, 7, 255});
  Tensor yu = run_kernel("MaxPool", {u}, attrs({{"kernel_shape", Ints{2}}, {"strides", Ints{2}}}))[0];
  EXPECT_EQ(yu.dtype(), DType::kUInt8);
  EXPECT_EQ(values<uint8_t>(yu), (std::vector<uint8_t>{200, 255}));
  Tensor s = make_tensor<int8_t>(DType::kInt8, {1, 1, 3}, {-128, -100, -5});
  Tensor ys = run_kernel("MaxPool", {s}, attrs({{"kernel_shape", Ints{2}}, {"pads", Ints{1, 0}}}))[0];
  EXPECT_EQ(values<int8_t>(ys), (std::vector<int8_t>{-128, -100, -5}));
}

TEST(MaxPool, Float64) {
  Tensor x = make_tensor<double>(DType::kFloat64, {1, 1, 3}, {0.5, -1, 0.25});
  Tensor y = run_kernel("MaxPool", {x}, attrs({{"kernel_shape", Ints{2}}}))[0];
  EXPECT_EQ(values<double>(y), (std::vector<double>{0.5, 0.25}));
}

TEST(AveragePool, CountIncludePadAtAPaddedCorner) {
  // [[1 2] [3 4]], kernel 2x2, pads 1 on every side, stride 1: 3x3 outputs.
  // Corner (0,0) sees only x[0][0] = 1: count_include_pad 0 divides by 1, count_include_pad 1 by 4 (0.25).
  // Edge (0,1) sees 1 + 2 = 3: 1.5 or 0.75. The centre sees all four: 2.5 either way.
  Tensor x = f32({1, 1, 2, 2}, {1, 2, 3, 4});
  ir::Attributes a = attrs({{"kernel_shape", Ints{2, 2}}, {"pads", Ints{1, 1, 1, 1}}});
  Tensor exclude = run_kernel("AveragePool", {x}, a)[0];
  EXPECT_EQ(exclude.shape(), (Shape{1, 1, 3, 3}));
  EXPECT_EQ(values<float>(exclude), (std::vector<float>{1, 1.5f, 2, 2, 2.5f, 3, 3, 3.5f, 4}));
  a.set("count_include_pad", int64_t{1});
  Tensor include = run_kernel("AveragePool", {x}, a)[0];
  EXPECT_EQ(values<float>(include), (std::vector<float>{0.25f, 0.75f, 0.5f, 1, 2.5f, 1.5f, 0.75f, 1.75f, 1}));
}

TEST(AveragePool, CeilModePaddingIsNeverCounted) {
  // x = 1..6, kernel 3, stride 2, pads [1, 1], ceil mode: padded length 8, out = ceil(5 / 2) + 1 = 4, and
  // ceil mode adds one more end position (7). Windows start at -1, 1, 3, 5:
  //   [-1 0 1] = 0+1+2   [1 2 3] = 2+3+4   [3 4 5] = 4+5+6   [5 6 7] = 6 + pad + ceil pad
  // count_include_pad 0: 3/2, 9/3, 15/3, 6/1. count_include_pad 1 counts the model's pad (-1 and 6) but not
  // ceil mode's position 7: 3/3, 9/3, 15/3, 6/2.
  Tensor x = f32({1, 1, 6}, {1, 2, 3, 4, 5, 6});
  ir::Attributes a =
      attrs({{"kernel_shape", Ints{3}}, {"strides", Ints{2}}, {"pads", Ints{1, 1}}, {"ceil_mode", int64_t{1}}});
  Tensor exclude = run_kernel("AveragePool", {x}, a)[0];
  EXPECT_EQ(values<float>(exclude), (std::vector<float>{1.5f, 3, 5, 6}));
  a.set("count_include_pad", int64_t{1});
  Tensor include = run_kernel("AveragePool", {x}, a)[0];
  EXPECT_EQ(values<float>(include), (std::vector<float>{1, 3, 5, 3}));
}

TEST(AveragePool, CeilModeWithoutPads) {
  // 1..5, kernel 2, stride 2, ceil mode: [1 2], [3 4], [5] -> 1.5, 3.5, 5 even with count_include_pad.
  Tensor x = f32({1, 1, 5}, {1, 2, 3, 4, 5});
  Tensor y = run_kernel("AveragePool", {x},
                        attrs({{"kernel_shape", Ints{2}},
                               {"strides", Ints{2}},
                               {"ceil_mode", int64_t{1}},
                               {"count_include_pad", int64_t{1}}}))[0];
  EXPECT_EQ(values<float>(y), (std::vector<float>{1.5f, 3.5f, 5}));
}

TEST(AveragePool, SameUpperAndLower) {
  // in 4, kernel 2, stride 1: one unit of padding, at the end (SAME_UPPER) or the beginning (SAME_LOWER).
  Tensor x = f32({1, 1, 4}, {1, 2, 3, 4});
  Tensor upper =
      run_kernel("AveragePool", {x}, attrs({{"kernel_shape", Ints{2}}, {"auto_pad", std::string("SAME_UPPER")}}))[0];
  EXPECT_EQ(values<float>(upper), (std::vector<float>{1.5f, 2.5f, 3.5f, 4}));
  Tensor lower =
      run_kernel("AveragePool", {x}, attrs({{"kernel_shape", Ints{2}}, {"auto_pad", std::string("SAME_LOWER")}}))[0];
  EXPECT_EQ(values<float>(lower), (std::vector<float>{1, 1.5f, 2.5f, 3.5f}));
  // With count_include_pad the SAME padding is real padding: 4 / 2 at the end.
  Tensor counted = run_kernel(
      "AveragePool", {x},
      attrs(
          {{"kernel_shape", Ints{2}}, {"auto_pad", std::string("SAME_UPPER")}, {"count_include_pad", int64_t{1}}}))[0];
  EXPECT_EQ(values<float>(counted), (std::vector<float>{1.5f, 2.5f, 3.5f, 2}));
}

TEST(AveragePool, ThreeDimensionalAndStrided2D) {
  Tensor y3 = run_kernel("AveragePool", {f32({1, 1, 2, 2, 2}, iota_f(8))}, attrs({{"kernel_shape", Ints{2, 2, 2}}}))[0];
  EXPECT_EQ(y3.shape(), (Shape{1, 1, 1, 1, 1}));
  EXPECT_EQ(values<float>(y3), (std::vector<float>{3.5f}));
  // 4x4 iota, 2x2 windows with stride 2: means of {0,1,4,5}, {2,3,6,7}, ...
  Tensor y2 = run_kernel("AveragePool", {f32({1, 1, 4, 4}, iota_f(16))},
                         attrs({{"kernel_shape", Ints{2, 2}}, {"strides", Ints{2, 2}}}))[0];
  EXPECT_EQ(values<float>(y2), (std::vector<float>{2.5f, 4.5f, 10.5f, 12.5f}));
}

TEST(GlobalPool, AverageAndMax) {
  // Two channels of 2x2: means 2.5 and 6.5, maxima 4 and 8; the spatial axes stay as 1s.
  Tensor x = f32({1, 2, 2, 2}, {1, 2, 3, 4, 8, 7, 6, 5});
  Tensor avg = run_kernel("GlobalAveragePool", {x})[0];
  EXPECT_EQ(avg.shape(), (Shape{1, 2, 1, 1}));
  EXPECT_EQ(values<float>(avg), (std::vector<float>{2.5f, 6.5f}));
  Tensor mx = run_kernel("GlobalMaxPool", {x})[0];
  EXPECT_EQ(mx.shape(), (Shape{1, 2, 1, 1}));
  EXPECT_EQ(values<float>(mx), (std::vector<float>{4, 8}));
  Tensor x3 = make_tensor<double>(DType::kFloat64, {2, 1, 3}, {1, 2, 6, -1, -2, -3});
  EXPECT_EQ(values<double>(run_kernel("GlobalAveragePool", {x3})[0]), (std::vector<double>{3, -2}));
  EXPECT_EQ(values<double>(run_kernel("GlobalMaxPool", {x3})[0]), (std::vector<double>{6, -1}));
}

TEST(Pool, Errors) {
  std::string msg;
  Tensor x = f32({1, 1, 4, 4}, iota_f(16));
  EXPECT_EQ(error_of("MaxPool", {x}, {}, &msg), ErrorKind::kInvalidModel);
  EXPECT_NE(msg.find("kernel_shape"), std::string::npos) << msg;
  EXPECT_NE(msg.find("MaxPool 'test_MaxPool'"), std::string::npos) << msg;
  EXPECT_EQ(error_of("AveragePool", {x}, attrs({{"kernel_shape", Ints{2}}}), &msg), ErrorKind::kInvalidModel);
  EXPECT_NE(msg.find("kernel_shape"), std::string::npos) << msg;
  EXPECT_EQ(
      error_of("AveragePool", {x}, attrs({{"kernel_shape", Ints{2, 2}}, {"auto_pad", std::string("FULL")}}), &msg),
      ErrorKind::kInvalidModel);
  EXPECT_NE(msg.find("auto_pad"), std::string::npos) << msg;
  EXPECT_EQ(error_of("MaxPool", {x}, attrs({{"kernel_shape", Ints{2, 2}}, {"pads", Ints{2, 0, 0, 0}}}), &msg),
            ErrorKind::kInvalidModel);
  EXPECT_NE(msg.find("pads"), std::string::npos) << msg;
  EXPECT_EQ(error_of("MaxPool", {x}, attrs({{"kernel_shape", Ints{2, 2}}, {"strides", Ints{1, -1}}}), &msg),
            ErrorKind::kInvalidModel);
  EXPECT_NE(msg.find("strides"), std::string::npos) << msg;
  EXPECT_EQ(error_of("MaxPool", {x}, attrs({{"kernel_shape", Ints{2, 2}}, {"storage_order", int64_t{2}}}), &msg),
            ErrorKind::kInvalidModel);
  EXPECT_NE(msg.find("storage_order"), std::string::npos) << msg;
  EXPECT_EQ(error_of("MaxPool", {x}, attrs({{"kernel_shape", Ints{5, 5}}}), &msg), ErrorKind::kInvalidArgument);
  EXPECT_EQ(error_of("MaxPool", {f32({4, 4}, iota_f(16))}, attrs({{"kernel_shape", Ints{2}}})),
            ErrorKind::kInvalidArgument);
  EXPECT_EQ(error_of("AveragePool", {make_tensor<uint8_t>(DType::kUInt8, {1, 1, 2}, {1, 2})},
                     attrs({{"kernel_shape", Ints{2}}})),
            ErrorKind::kUnsupported);
}

}  // namespace
}  // namespace anvil
