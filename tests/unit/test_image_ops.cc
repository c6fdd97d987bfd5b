// Tests of CenterCropPad (src/kernels/ref/transform.cc), Col2Im (conv.cc),
// AffineGrid and 5-D GridSample (grid_sample.cc), GroupNormalization
// (normalization.cc) and LpPool (pool.cc) against values worked out by hand
// from the ONNX definitions, and the inputs they refuse.
#include <gtest/gtest.h>

#include <cmath>

#include "kernel_tester.h"

namespace anvil {
namespace {

using testing::attrs;
using testing::error_kind_of;
using testing::f32;
using testing::i64;
using testing::opset;
using testing::run_kernel;
using testing::values;

// Crops keep the middle (an odd difference drops the extra element at the end); pads centre the data.
TEST(CenterCropPad, CropsAndPadsAroundTheCentre) {
  Tensor x = f32({3}, {1, 2, 3});
  testing::KernelOptions o = opset(18);
  o.constant_inputs = {false, true};
  EXPECT_EQ(values<float>(run_kernel("CenterCropPad", {x, i64({1}, {1})}, {}, o)[0]), (std::vector<float>{2}));
  EXPECT_EQ(values<float>(run_kernel("CenterCropPad", {x, i64({1}, {6})}, {}, o)[0]),
            (std::vector<float>{0, 1, 2, 3, 0, 0}));
  Tensor m = f32({2, 2}, {1, 2, 3, 4});
  Tensor y = run_kernel("CenterCropPad", {m, i64({1}, {3})}, attrs({{"axes", std::vector<int64_t>{-1}}}), o)[0];
  EXPECT_EQ(y.shape(), (Shape{2, 3}));
  EXPECT_EQ(values<float>(y), (std::vector<float>{1, 2, 0, 3, 4, 0}));
  EXPECT_EQ(error_kind_of([&] { run_kernel("CenterCropPad", {m, i64({1}, {3})}, {}, o); }), ErrorKind::kInvalidArgument);
}

// 1-D, block 2, stride 1 over 3 positions: column j of tap t lands on j + t, overlaps add.
TEST(Col2Im, AddsOverlappingBlocks) {
  testing::KernelOptions o = opset(18);
  o.constant_inputs = {false, true, true};
  Tensor y = run_kernel("Col2Im", {f32({1, 2, 2}, {1, 2, 3, 4}), i64({1}, {3}), i64({1}, {2})}, {}, o)[0];
  EXPECT_EQ(y.shape(), (Shape{1, 1, 3}));
  EXPECT_EQ(values<float>(y), (std::vector<float>{1, 5, 4}));
  // 2 x 2 blocks of one column each fill a 2 x 2 image.
  y = run_kernel("Col2Im", {f32({1, 4, 1}, {1, 2, 3, 4}), i64({2}, {2, 2}), i64({2}, {2, 2})}, {}, o)[0];
  EXPECT_EQ(y.shape(), (Shape{1, 1, 2, 2}));
  EXPECT_EQ(values<float>(y), (std::vector<float>{1, 2, 3, 4}));
  EXPECT_EQ(error_kind_of([&] {
              run_kernel("Col2Im", {f32({1, 2, 3}, {1, 2, 3, 4, 5, 6}), i64({1}, {3}), i64({1}, {2})}, {}, o);
            }),
            ErrorKind::kInvalidArgument);
}

TEST(AffineGrid, IdentityGivesPixelCentres) {
  testing::KernelOptions o = opset(20);
  o.constant_inputs = {false, true};
  Tensor theta = f32({1, 2, 3}, {1, 0, 0, 0, 1, 0});
  Tensor g = run_kernel("AffineGrid", {theta, i64({4}, {1, 1, 2, 2})}, {}, o)[0];
  EXPECT_EQ(g.shape(), (Shape{1, 2, 2, 2}));
  EXPECT_EQ(values<float>(g), (std::vector<float>{-0.5f, -0.5f, 0.5f, -0.5f, -0.5f, 0.5f, 0.5f, 0.5f}));
  g = run_kernel("AffineGrid", {theta, i64({4}, {1, 1, 2, 2})}, attrs({{"align_corners", int64_t{1}}}), o)[0];
  EXPECT_EQ(values<float>(g), (std::vector<float>{-1, -1, 1, -1, -1, 1, 1, 1}));
  // A translation by (0.25, 0): every x moves.
  g = run_kernel("AffineGrid", {f32({1, 2, 3}, {1, 0, 0.25f, 0, 1, 0}), i64({4}, {1, 1, 1, 2})}, {}, o)[0];
  EXPECT_EQ(values<float>(g), (std::vector<float>{-0.25f, 0, 0.75f, 0}));
  EXPECT_EQ(error_kind_of([&] { run_kernel("AffineGrid", {theta, i64({4}, {2, 1, 2, 2})}, {}, o); }),
            ErrorKind::kInvalidArgument);
}

// Trilinear between two voxels: the centre of [10, 20] along W.
TEST(GridSample, VolumeIsTrilinear) {
  Tensor x = f32({1, 1, 1, 1, 2}, {10, 20});
  Tensor grid = f32({1, 1, 1, 1, 3}, {0, 0, 0});
  std::vector<Tensor> y = run_kernel("GridSample", {x, grid}, attrs({{"align_corners", int64_t{1}}}), opset(20));
  EXPECT_EQ(y[0].shape(), (Shape{1, 1, 1, 1, 1}));
  EXPECT_EQ(values<float>(y[0]), (std::vector<float>{15}));
  EXPECT_EQ(error_kind_of([&] {
              run_kernel("GridSample", {x, grid}, attrs({{"mode", std::string("cubic")}}), opset(20));
            }),
            ErrorKind::kInvalidModel);
}

// Two groups of one channel each: channel {1, 3} has mean 2 and variance 1.
TEST(GroupNormalization, PerGroupMomentsPerChannelAffine) {
  Tensor x = f32({1, 2, 1, 2}, {1, 3, 5, 9});
  ir::Attributes a = attrs({{"num_groups", int64_t{2}}, {"epsilon", 0.f}});
  std::vector<Tensor> y = run_kernel("GroupNormalization", {x, f32({2}, {1, 2}), f32({2}, {0, 1})}, a, opset(21));
  EXPECT_EQ(values<float>(y[0]), (std::vector<float>{-1, 1, -1, 3}));
  // One group over both channels: mean 4.5, variance (12.25 + 2.25 + 0.25 + 20.25) / 4 = 8.75.
  ir::Attributes one = attrs({{"num_groups", int64_t{1}}, {"epsilon", 0.f}});
  y = run_kernel("GroupNormalization", {x, f32({2}, {1, 1}), f32({2}, {0, 0})}, one, opset(21));
  const float sd = std::sqrt(8.75f);
  const std::vector<float> got = values<float>(y[0]);
  const float want[] = {-3.5f / sd, -1.5f / sd, 0.5f / sd, 4.5f / sd};
  for (size_t i = 0; i < 4; ++i) EXPECT_NEAR(got[i], want[i], 1e-6f);
  EXPECT_EQ(error_kind_of([&] {
              run_kernel("GroupNormalization", {x, f32({2}, {1, 2}), f32({2}, {0, 1})},
                         attrs({{"num_groups", int64_t{3}}}), opset(21));
            }),
            ErrorKind::kInvalidArgument);
}

// Zero offsets are a plain convolution; an offset of half a pixel interpolates.
TEST(DeformConv, OffsetsShiftTheTaps) {
  Tensor x = f32({1, 1, 2, 2}, {1, 2, 3, 4}), w = f32({1, 1, 1, 1}, {2});
  std::vector<Tensor> y = run_kernel("DeformConv", {x, w, f32({1, 2, 2, 2}, {0, 0, 0, 0, 0, 0, 0, 0})}, {}, opset(19));
  EXPECT_EQ(values<float>(y[0]), (std::vector<float>{2, 4, 6, 8}));
  // +0.5 along w: (0, 0.5) -> 1.5, (0, 1.5) half outside -> 1, (1, 0.5) -> 3.5, (1, 1.5) -> 2.
  y = run_kernel("DeformConv", {x, w, f32({1, 2, 2, 2}, {0, 0, 0, 0, 0.5f, 0.5f, 0.5f, 0.5f})}, {}, opset(19));
  EXPECT_EQ(values<float>(y[0]), (std::vector<float>{3, 2, 7, 4}));
  EXPECT_EQ(error_kind_of([&] { run_kernel("DeformConv", {x, w, f32({1, 2, 1, 1}, {0, 0})}, {}, opset(19)); }),
            ErrorKind::kInvalidArgument);
}

TEST(LpPool, SumsPowersOfTheWindow) {
  ir::Attributes a = attrs({{"kernel_shape", std::vector<int64_t>{2}}, {"p", int64_t{1}}});
  std::vector<Tensor> y = run_kernel("LpPool", {f32({1, 1, 3}, {1, -2, 3})}, a, opset(18));
  EXPECT_EQ(values<float>(y[0]), (std::vector<float>{3, 5}));
  y = run_kernel("GlobalLpPool", {f32({1, 1, 2}, {3, -4})}, {}, opset(18));
  EXPECT_NEAR(values<float>(y[0])[0], 5.f, 1e-6f);
}

}  // namespace
}  // namespace anvil
