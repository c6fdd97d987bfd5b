// Tests of the reference Conv and ConvTranspose kernels (src/kernels/ref/conv.cc) and of the geometry they share
// with the oneDNN kernels (src/kernels/nn_geometry.cc), against small hand-computed cases.
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

// x = [[1 2 3] [4 5 6] [7 8 9]] as 1x1x3x3.
Tensor x3x3() { return f32({1, 1, 3, 3}, iota_f(9, 1.f)); }
Tensor ones(Shape shape) { return f32(shape, std::vector<float>(static_cast<size_t>(shape_numel(shape)), 1.f)); }

TEST(Conv, TwoByTwoKernelNoPadding) {
  // Each output is the sum of a 2x2 window: 1+2+4+5, 2+3+5+6, 4+5+7+8, 5+6+8+9.
  Tensor y = run_kernel("Conv", {x3x3(), ones({1, 1, 2, 2})})[0];
  EXPECT_EQ(y.shape(), (Shape{1, 1, 2, 2}));
  EXPECT_EQ(values<float>(y), (std::vector<float>{12, 16, 24, 28}));
}

TEST(Conv, KernelShapeAttributeMayRepeatTheWeights) {
  Tensor y = run_kernel("Conv", {x3x3(), ones({1, 1, 2, 2})}, attrs({{"kernel_shape", Ints{2, 2}}}))[0];
  EXPECT_EQ(values<float>(y), (std::vector<float>{12, 16, 24, 28}));
}

TEST(Conv, StrideTwoWithPaddingAndBias) {
  // Padded to 5x5, out = floor((3 + 2 - 2) / 2) + 1 = 2. The windows start at rows/cols -1 and 1:
  //   (0,0): x[0][0] = 1            (0,1): x[0][1] + x[0][2] = 5
  //   (1,0): x[1][0] + x[2][0] = 11 (1,1): 5 + 6 + 8 + 9 = 28
  // plus the bias 10.
  Tensor y = run_kernel("Conv", {x3x3(), ones({1, 1, 2, 2}), f32({1}, {10})},
                        attrs({{"strides", Ints{2, 2}}, {"pads", Ints{1, 1, 1, 1}}}))[0];
  EXPECT_EQ(y.shape(), (Shape{1, 1, 2, 2}));
  EXPECT_EQ(values<float>(y), (std::vector<float>{11, 15, 21, 38}));
}

TEST(Conv, AsymmetricPads) {
  // pads = [top 1, left 0, bottom 0, right 1]: out = (3 + 1 - 2) + 1 = 3 both ways. Row r covers input rows
  // r-1..r (row -1 is padding), column c covers input columns c..c+1 (column 3 is padding).
  Tensor y = run_kernel("Conv", {x3x3(), ones({1, 1, 2, 2})}, attrs({{"pads", Ints{1, 0, 0, 1}}}))[0];
  EXPECT_EQ(y.shape(), (Shape{1, 1, 3, 3}));
  // Row 0 (input row 0 only): 1+2, 2+3, 3. Row 1: 1+2+4+5, 2+3+5+6, 3+6. Row 2: 4+5+7+8, 5+6+8+9, 6+9.
  EXPECT_EQ(values<float>(y), (std::vector<float>{3, 5, 3, 12, 16, 9, 24, 28, 15}));
}

TEST(Conv, GroupedConvMapsOutputChannelsToTheirGroup) {
  // X has 2 channels, group 2, 4 output channels of 1x1 weights 1, 2, 3, 4:
  // outputs 0 and 1 read channel 0, outputs 2 and 3 read channel 1.
  Tensor x = f32({1, 2, 1, 2}, {1, 2, 10, 20});
  Tensor w = f32({4, 1, 1, 1}, {1, 2, 3, 4});
  Tensor y = run_kernel("Conv", {x, w}, attrs({{"group", int64_t{2}}}))[0];
  EXPECT_EQ(y.shape(), (Shape{1, 4, 1, 2}));
  EXPECT_EQ(values<float>(y), (std::vector<float>{1, 2, 2, 4, 30, 60, 40, 80}));
}

TEST(Conv, DepthwiseWithSpatialKernel) {
  // group = C = 2, each channel summed by its own 2x2 kernel (1s for channel 0, -1s for channel 1).
  Tensor x = f32({1, 2, 2, 2}, iota_f(8, 1.f));
  Tensor w = f32({2, 1, 2, 2}, {1, 1, 1, 1, -1, -1, -1, -1});
  Tensor y = run_kernel("Conv", {x, w}, attrs({{"group", int64_t{2}}}))[0];
  EXPECT_EQ(values<float>(y), (std::vector<float>{10, -26}));
}

TEST(Conv, MultipleInputChannelsAreSummed) {
  // One output channel over two input channels with weights 1 and -2: y = x0 - 2 x1.
  Tensor x = f32({1, 2, 1, 3}, {1, 2, 3, 10, 20, 30});
  Tensor w = f32({1, 2, 1, 1}, {1, -2});
  Tensor y = run_kernel("Conv", {x, w})[0];
  EXPECT_EQ(values<float>(y), (std::vector<float>{-19, -38, -57}));
}

TEST(Conv, Dilated1D) {
  // Kernel [1, 10] with dilation 2: y[i] = x[i] + 10 x[i + 2], out = 5 - 3 + 1 = 3.
  Tensor x = f32({1, 1, 5}, {1, 2, 3, 4, 5});
  Tensor y = run_kernel("Conv", {x, f32({1, 1, 2}, {1, 10})}, attrs({{"dilations", Ints{2}}}))[0];
  EXPECT_EQ(y.shape(), (Shape{1, 1, 3}));
  EXPECT_EQ(values<float>(y), (std::vector<float>{31, 42, 53}));
}

TEST(Conv, Dilated2DWithStride) {
  // 5x5 iota, 2x2 ones dilated by 2 (a 3x3 footprint), stride 2: out = (5 - 3) / 2 + 1 = 2.
  // (0,0) sums x[0][0], x[0][2], x[2][0], x[2][2] = 0 + 2 + 10 + 12 = 24; each step right adds 4*2, down 4*10.
  Tensor x = f32({1, 1, 5, 5}, iota_f(25));
  Tensor y =
      run_kernel("Conv", {x, ones({1, 1, 2, 2})}, attrs({{"dilations", Ints{2, 2}}, {"strides", Ints{2, 2}}}))[0];
  EXPECT_EQ(values<float>(y), (std::vector<float>{24, 32, 64, 72}));
}

TEST(Conv, ThreeDimensional) {
  // 2x2x2 iota 0..7 under a 2x2x2 kernel of ones: one output, 28.
  Tensor y = run_kernel("Conv", {f32({1, 1, 2, 2, 2}, iota_f(8)), ones({1, 1, 2, 2, 2})})[0];
  EXPECT_EQ(y.shape(), (Shape{1, 1, 1, 1, 1}));
  EXPECT_EQ(values<float>(y), (std::vector<float>{28}));
}

TEST(Conv, BatchOfTwo) {
  Tensor x = f32({2, 1, 1, 2}, {1, 2, 3, 4});
  Tensor y = run_kernel("Conv", {x, f32({1, 1, 1, 2}, {1, 1})})[0];
  EXPECT_EQ(y.shape(), (Shape{2, 1, 1, 1}));
  EXPECT_EQ(values<float>(y), (std::vector<float>{3, 7}));
}

TEST(Conv, AutoPadSameUpperAndLower) {
  // Kernel [1, 10], stride 1, in 4: out = 4 and one unit of padding in total.
  // SAME_UPPER pads at the end: y[i] = x[i] + 10 x[i+1]; SAME_LOWER at the beginning: y[i] = x[i-1] + 10 x[i].
  Tensor x = f32({1, 1, 4}, {1, 2, 3, 4});
  Tensor w = f32({1, 1, 2}, {1, 10});
  Tensor upper = run_kernel("Conv", {x, w}, attrs({{"auto_pad", std::string("SAME_UPPER")}}))[0];
  EXPECT_EQ(values<float>(upper), (std::vector<float>{21, 32, 43, 4}));
  Tensor lower = run_kernel("Conv", {x, w}, attrs({{"auto_pad", std::string("SAME_LOWER")}}))[0];
  EXPECT_EQ(values<float>(lower), (std::vector<float>{10, 21, 32, 43}));
}

TEST(Conv, AutoPadSameWithStrideIsCeilOfInOverStride) {
  // in 5, stride 2: out = 3; kernel 3 needs (3-1)*2 + 3 - 5 = 2 units, one each side.
  Tensor x = f32({1, 1, 5}, {1, 2, 3, 4, 5});
  Tensor y = run_kernel("Conv", {x, ones({1, 1, 3})},
                        attrs({{"auto_pad", std::string("SAME_UPPER")}, {"strides", Ints{2}}}))[0];
  EXPECT_EQ(values<float>(y), (std::vector<float>{3, 9, 9}));
}

TEST(Conv, ValidIgnoresPads) {
  Tensor y = run_kernel("Conv", {x3x3(), ones({1, 1, 2, 2})},
                        attrs({{"auto_pad", std::string("VALID")}, {"pads", Ints{1, 1, 1, 1}}}))[0];
  EXPECT_EQ(values<float>(y), (std::vector<float>{12, 16, 24, 28}));
}

TEST(Conv, Float64) {
  Tensor x = make_tensor<double>(DType::kFloat64, {1, 1, 3}, {1, 2, 3});
  Tensor w = make_tensor<double>(DType::kFloat64, {1, 1, 2}, {0.5, 0.25});
  Tensor b = make_tensor<double>(DType::kFloat64, {1}, {1});
  Tensor y = run_kernel("Conv", {x, w, b})[0];
  EXPECT_EQ(y.dtype(), DType::kFloat64);
  EXPECT_EQ(values<double>(y), (std::vector<double>{2, 2.75}));
}

TEST(Conv, ChannelMismatchNamesTheNode) {
  std::string msg;
  EXPECT_EQ(error_of("Conv", {f32({1, 3, 4, 4}, iota_f(48)), ones({1, 2, 3, 3})}, {}, &msg),
            ErrorKind::kInvalidArgument);
  EXPECT_NE(msg.find("Conv 'test_Conv'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("channels"), std::string::npos) << msg;
}

// The kind of error a 1x1x3x3 input and a 2x2 kernel give under `a`; the message goes to *msg.
ErrorKind conv_error(const ir::Attributes& a, std::string* msg) {
  return error_of("Conv", {x3x3(), ones({1, 1, 2, 2})}, a, msg);
}

TEST(Conv, InvalidAttributes) {
  std::string msg;
  EXPECT_EQ(conv_error(attrs({{"auto_pad", std::string("SAME")}}), &msg), ErrorKind::kInvalidModel);
  EXPECT_NE(msg.find("auto_pad"), std::string::npos) << msg;
  EXPECT_NE(msg.find("test_Conv"), std::string::npos) << msg;
  EXPECT_EQ(conv_error(attrs({{"kernel_shape", Ints{3, 3}}}), &msg), ErrorKind::kInvalidModel);
  EXPECT_NE(msg.find("kernel_shape"), std::string::npos) << msg;
  EXPECT_EQ(conv_error(attrs({{"strides", Ints{0, 1}}}), &msg), ErrorKind::kInvalidModel);
  EXPECT_NE(msg.find("strides"), std::string::npos) << msg;
  EXPECT_EQ(conv_error(attrs({{"dilations", Ints{1}}}), &msg), ErrorKind::kInvalidModel);
  EXPECT_NE(msg.find("dilations"), std::string::npos) << msg;
  EXPECT_EQ(conv_error(attrs({{"pads", Ints{1, 1}}}), &msg), ErrorKind::kInvalidModel);
  EXPECT_NE(msg.find("pads"), std::string::npos) << msg;
  EXPECT_EQ(conv_error(attrs({{"pads", Ints{-1, 0, 0, 0}}}), &msg), ErrorKind::kInvalidModel);
  EXPECT_EQ(conv_error(attrs({{"group", int64_t{0}}}), &msg), ErrorKind::kInvalidModel);
  EXPECT_NE(msg.find("group"), std::string::npos) << msg;
}

TEST(Conv, InvalidShapes) {
  // Kernel larger than the input: no output position.
  EXPECT_EQ(error_of("Conv", {x3x3(), ones({1, 1, 4, 4})}), ErrorKind::kInvalidArgument);
  // W of another rank, a bias of the wrong length, channels not divisible by group, no spatial dimension.
  EXPECT_EQ(error_of("Conv", {x3x3(), ones({1, 1, 2})}), ErrorKind::kInvalidArgument);
  EXPECT_EQ(error_of("Conv", {x3x3(), ones({1, 1, 2, 2}), ones({2})}), ErrorKind::kInvalidArgument);
  EXPECT_EQ(error_of("Conv", {f32({1, 3, 2, 2}, iota_f(12)), ones({2, 1, 1, 1})}, attrs({{"group", int64_t{2}}})),
            ErrorKind::kInvalidArgument);
  EXPECT_EQ(error_of("Conv", {f32({1, 3}, {1, 2, 3}), ones({1, 3})}), ErrorKind::kInvalidArgument);
  // Mixed dtypes.
  Tensor wd = make_tensor<double>(DType::kFloat64, {1, 1, 2, 2}, {1, 1, 1, 1});
  EXPECT_EQ(error_of("Conv", {x3x3(), wd}), ErrorKind::kInvalidModel);
}

TEST(ConvTranspose, TwoByTwoFullOutput) {
  // Every input pixel stamps a 2x2 block of ones: [[1 2] [3 4]] -> [[1 3 2] [4 10 6] [3 7 4]].
  Tensor x = f32({1, 1, 2, 2}, {1, 2, 3, 4});
  Tensor y = run_kernel("ConvTranspose", {x, ones({1, 1, 2, 2})})[0];
  EXPECT_EQ(y.shape(), (Shape{1, 1, 3, 3}));
  EXPECT_EQ(values<float>(y), (std::vector<float>{1, 3, 2, 4, 10, 6, 3, 7, 4}));
  // pads crop the full output: only the centre is left.
  Tensor c = run_kernel("ConvTranspose", {x, ones({1, 1, 2, 2})}, attrs({{"pads", Ints{1, 1, 1, 1}}}))[0];
  EXPECT_EQ(c.shape(), (Shape{1, 1, 1, 1}));
  EXPECT_EQ(values<float>(c), (std::vector<float>{10}));
}

TEST(ConvTranspose, StrideWithOutputPaddingAndBias) {
  // x = [1 2], kernel [1 1], stride 2: x0 covers 0..1, x1 covers 2..3 -> [1 1 2 2] (length 2*(2-1) + 2 = 4).
  // output_padding 1 adds one more position that only gets the bias: [1.5 1.5 2.5 2.5 0.5].
  Tensor x = f32({1, 1, 2}, {1, 2});
  Tensor y = run_kernel("ConvTranspose", {x, ones({1, 1, 2}), f32({1}, {0.5f})},
                        attrs({{"strides", Ints{2}}, {"output_padding", Ints{1}}}))[0];
  EXPECT_EQ(y.shape(), (Shape{1, 1, 5}));
  EXPECT_EQ(values<float>(y), (std::vector<float>{1.5f, 1.5f, 2.5f, 2.5f, 0.5f}));
}

TEST(ConvTranspose, Dilated) {
  // Kernel [1 1] dilated by 2: x0 lands on 0 and 2, x1 on 1 and 3 -> [1 2 1 2].
  Tensor y = run_kernel("ConvTranspose", {f32({1, 1, 2}, {1, 2}), ones({1, 1, 2})}, attrs({{"dilations", Ints{2}}}))[0];
  EXPECT_EQ(values<float>(y), (std::vector<float>{1, 2, 1, 2}));
}

TEST(ConvTranspose, OutputShapeOverridesPads) {
  // x = [1 2], kernel of 3 ones, stride 1: the full output is [1 3 3 2].
  // output_shape [3] leaves 1 unit of padding: NOTSET puts it at the beginning ([3 3 2]), SAME_UPPER at the end.
  Tensor x = f32({1, 1, 2}, {1, 2});
  Tensor notset =
      run_kernel("ConvTranspose", {x, ones({1, 1, 3})}, attrs({{"output_shape", Ints{3}}, {"pads", Ints{2, 2}}}))[0];
  EXPECT_EQ(values<float>(notset), (std::vector<float>{3, 3, 2}));
  Tensor upper = run_kernel("ConvTranspose", {x, ones({1, 1, 3})},
                            attrs({{"output_shape", Ints{3}}, {"auto_pad", std::string("SAME_UPPER")}}))[0];
  EXPECT_EQ(values<float>(upper), (std::vector<float>{1, 3, 3}));
  // An output_shape past the full size extends it with positions nothing reaches.
  Tensor longer = run_kernel("ConvTranspose", {x, ones({1, 1, 3})}, attrs({{"output_shape", Ints{1, 1, 6}}}))[0];
  EXPECT_EQ(values<float>(longer), (std::vector<float>{1, 3, 3, 2, 0, 0}));
}

TEST(ConvTranspose, AutoPadSame) {
  // stride 2: out = in * stride = 4; the full output [1 1 3 2 2] has one unit too many.
  Tensor x = f32({1, 1, 2}, {1, 2});
  Tensor upper = run_kernel("ConvTranspose", {x, ones({1, 1, 3})},
                            attrs({{"auto_pad", std::string("SAME_UPPER")}, {"strides", Ints{2}}}))[0];
  EXPECT_EQ(values<float>(upper), (std::vector<float>{1, 1, 3, 2}));
  Tensor lower = run_kernel("ConvTranspose", {x, ones({1, 1, 3})},
                            attrs({{"auto_pad", std::string("SAME_LOWER")}, {"strides", Ints{2}}}))[0];
  EXPECT_EQ(values<float>(lower), (std::vector<float>{1, 3, 2, 2}));
}

TEST(ConvTranspose, GroupsAndOutputChannels) {
  // C = 2, group 2, W is [C, M/group = 2, 1]: channel 0 feeds outputs 0, 1 (x3, x5), channel 1 outputs 2, 3 (x7, x11).
  Tensor x = f32({1, 2, 1}, {1, 2});
  Tensor w = f32({2, 2, 1}, {3, 5, 7, 11});
  Tensor y = run_kernel("ConvTranspose", {x, w}, attrs({{"group", int64_t{2}}}))[0];
  EXPECT_EQ(y.shape(), (Shape{1, 4, 1}));
  EXPECT_EQ(values<float>(y), (std::vector<float>{3, 5, 14, 22}));
  // Without groups both input channels feed each of the 2 outputs: W [2, 2, 1] -> y0 = 3*1 + 7*2, y1 = 5*1 + 11*2.
  Tensor dense = run_kernel("ConvTranspose", {x, w})[0];
  EXPECT_EQ(values<float>(dense), (std::vector<float>{17, 27}));
}

TEST(ConvTranspose, Stride2D) {
  // 2x2 input, 2x2 ones kernel, stride 2: every input pixel becomes a separate 2x2 block.
  Tensor y = run_kernel("ConvTranspose", {f32({1, 1, 2, 2}, {1, 2, 3, 4}), ones({1, 1, 2, 2})},
                        attrs({{"strides", Ints{2, 2}}}))[0];
  EXPECT_EQ(y.shape(), (Shape{1, 1, 4, 4}));
  EXPECT_EQ(values<float>(y), (std::vector<float>{1, 1, 2, 2, 1, 1, 2, 2, 3, 3, 4, 4, 3, 3, 4, 4}));
}

TEST(ConvTranspose, Errors) {
  std::string msg;
  const Tensor x = f32({1, 1, 2}, {1, 2});
  // W's first dimension must be X's channel count.
  EXPECT_EQ(error_of("ConvTranspose", {f32({1, 2, 2}, {1, 2, 3, 4}), ones({1, 1, 2})}, {}, &msg),
            ErrorKind::kInvalidArgument);
  EXPECT_NE(msg.find("ConvTranspose 'test_ConvTranspose'"), std::string::npos) << msg;
  EXPECT_EQ(error_of("ConvTranspose", {x, ones({1, 1, 2})}, attrs({{"output_shape", Ints{1, 2, 3, 4}}}), &msg),
            ErrorKind::kInvalidModel);
  EXPECT_NE(msg.find("output_shape"), std::string::npos) << msg;
  EXPECT_EQ(error_of("ConvTranspose", {x, ones({1, 1, 2})}, attrs({{"auto_pad", std::string("same_upper")}})),
            ErrorKind::kInvalidModel);
  EXPECT_EQ(error_of("ConvTranspose", {x, ones({1, 1, 2})}, attrs({{"output_padding", Ints{-1}}})),
            ErrorKind::kInvalidModel);
  // Pads that crop everything away.
  EXPECT_EQ(error_of("ConvTranspose", {x, ones({1, 1, 2})}, attrs({{"pads", Ints{2, 1}}})),
            ErrorKind::kInvalidArgument);
}

}  // namespace
}  // namespace anvil
