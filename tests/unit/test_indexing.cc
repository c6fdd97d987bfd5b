// Expand, Tile, Range, GatherElements, Trilu, CumSum and LayerNormalization
// (src/kernels/ref/indexing.cc, normalization.cc) against hand-computed values.
#include <gtest/gtest.h>

#include <cmath>

#include "anvil/error.h"
#include "kernel_tester.h"

namespace anvil {
namespace {

using testing::attrs;
using testing::error_kind_of;
using testing::f32;
using testing::i64;
using testing::run_kernel;
using testing::values;

TEST(Expand, BidirectionalBroadcast) {
  auto out = run_kernel("Expand", {f32({3, 1}, {1, 2, 3}), i64({3}, {2, 1, 2})})[0];
  EXPECT_EQ(out.shape(), (Shape{2, 3, 2}));
  EXPECT_EQ(values<float>(out), (std::vector<float>{1, 1, 2, 2, 3, 3, 1, 1, 2, 2, 3, 3}));
  EXPECT_EQ(error_kind_of([] { run_kernel("Expand", {f32({3}, {1, 2, 3}), i64({1}, {2})}); }),
            ErrorKind::kInvalidArgument);
}

TEST(Expand, OutputLargerThanMemoryIsRefusedBeforeAllocating) {
  EXPECT_EQ(error_kind_of([] { run_kernel("Expand", {f32({1}, {1}), i64({2}, {1 << 30, 1 << 30})}); }),
            ErrorKind::kOutOfMemory);
}

TEST(Tile, RepeatsEachAxis) {
  auto out = run_kernel("Tile", {f32({2, 2}, {1, 2, 3, 4}), i64({2}, {2, 1})})[0];
  EXPECT_EQ(out.shape(), (Shape{4, 2}));
  EXPECT_EQ(values<float>(out), (std::vector<float>{1, 2, 3, 4, 1, 2, 3, 4}));
  auto wide = run_kernel("Tile", {f32({2}, {5, 6}), i64({1}, {3})})[0];
  EXPECT_EQ(values<float>(wide), (std::vector<float>{5, 6, 5, 6, 5, 6}));
  EXPECT_EQ(error_kind_of([] { run_kernel("Tile", {f32({2}, {5, 6}), i64({1}, {int64_t{1} << 62})}); }),
            ErrorKind::kInvalidArgument);  // 2 * 2^62 overflows int64
}

TEST(Range, FloatAndIntegerRanges) {
  testing::KernelOptions known;
  known.constant_inputs = {true, true, true};
  auto f = run_kernel("Range", {f32({}, {1}), f32({}, {2}), f32({}, {0.25f})}, {}, known)[0];
  EXPECT_EQ(values<float>(f), (std::vector<float>{1, 1.25f, 1.5f, 1.75f}));
  auto down = run_kernel("Range", {i64({}, {10}), i64({}, {4}), i64({}, {-3})})[0];
  EXPECT_EQ(values<int64_t>(down), (std::vector<int64_t>{10, 7}));
  EXPECT_EQ(run_kernel("Range", {i64({}, {5}), i64({}, {1}), i64({}, {1})})[0].numel(), 0);
  EXPECT_EQ(error_kind_of([] { run_kernel("Range", {i64({}, {0}), i64({}, {5}), i64({}, {0})}); }),
            ErrorKind::kInvalidArgument);
}

TEST(GatherElements, PicksAlongTheAxis) {
  Tensor data = f32({2, 3}, {1, 2, 3, 4, 5, 6});
  auto out = run_kernel("GatherElements", {data, i64({2, 2}, {2, 0, -1, 1})}, attrs({{"axis", int64_t{1}}}))[0];
  EXPECT_EQ(values<float>(out), (std::vector<float>{3, 1, 6, 5}));
  auto rows = run_kernel("GatherElements", {data, i64({1, 3}, {1, 0, 1})}, attrs({{"axis", int64_t{0}}}))[0];
  EXPECT_EQ(values<float>(rows), (std::vector<float>{4, 2, 6}));
}

TEST(GatherElements, OutOfRangeIndexAtRunTimeIsAnError) {
  testing::KernelOptions runtime_indices;
  runtime_indices.constant_inputs = {false, false};
  EXPECT_EQ(error_kind_of([&] {
              run_kernel("GatherElements", {f32({3}, {1, 2, 3}), i64({1}, {3})}, {}, runtime_indices);
            }),
            ErrorKind::kInvalidArgument);
}

TEST(Trilu, UpperAndLowerWithDiagonalOffset) {
  Tensor x = f32({3, 3}, {1, 2, 3, 4, 5, 6, 7, 8, 9});
  EXPECT_EQ(values<float>(run_kernel("Trilu", {x})[0]), (std::vector<float>{1, 2, 3, 0, 5, 6, 0, 0, 9}));
  EXPECT_EQ(values<float>(run_kernel("Trilu", {x}, attrs({{"upper", int64_t{0}}}))[0]),
            (std::vector<float>{1, 0, 0, 4, 5, 0, 7, 8, 9}));
  EXPECT_EQ(values<float>(run_kernel("Trilu", {x, i64({}, {1})})[0]), (std::vector<float>{0, 2, 3, 0, 0, 6, 0, 0, 0}));
  EXPECT_EQ(values<float>(run_kernel("Trilu", {x, i64({}, {-1})}, attrs({{"upper", int64_t{0}}}))[0]),
            (std::vector<float>{0, 0, 0, 4, 0, 0, 7, 8, 0}));
}

TEST(CumSum, ExclusiveAndReverse) {
  Tensor x = f32({2, 3}, {1, 2, 3, 4, 5, 6});
  EXPECT_EQ(values<float>(run_kernel("CumSum", {x, i64({}, {1})})[0]), (std::vector<float>{1, 3, 6, 4, 9, 15}));
  EXPECT_EQ(values<float>(run_kernel("CumSum", {x, i64({}, {0})})[0]), (std::vector<float>{1, 2, 3, 5, 7, 9}));
  EXPECT_EQ(values<float>(run_kernel("CumSum", {x, i64({}, {1})}, attrs({{"exclusive", int64_t{1}}}))[0]),
            (std::vector<float>{0, 1, 3, 0, 4, 9}));
  EXPECT_EQ(values<float>(run_kernel("CumSum", {x, i64({}, {-1})}, attrs({{"reverse", int64_t{1}}}))[0]),
            (std::vector<float>{6, 5, 3, 15, 11, 6}));
}

TEST(LayerNormalization, NormalizesTheLastAxes) {
  // Rows [1,2,3] and [2,4,6]: means 2 and 4, variances 2/3 and 8/3.
  Tensor x = f32({2, 3}, {1, 2, 3, 2, 4, 6});
  Tensor scale = f32({3}, {1, 2, 1});
  Tensor bias = f32({3}, {0, 0, 1});
  auto out = run_kernel("LayerNormalization", {x, scale, bias}, attrs({{"epsilon", 0.f}}), testing::opset(17, 3));
  const float a = 1.f / std::sqrt(2.f / 3.f);
  std::vector<float> expect = {-a, 0, a + 1, -a, 0, a + 1};
  for (size_t i = 0; i < expect.size(); ++i) EXPECT_NEAR(values<float>(out[0])[i], expect[i], 1e-5f) << i;
  EXPECT_EQ(out[1].shape(), (Shape{2, 1}));
  EXPECT_EQ(values<float>(out[1]), (std::vector<float>{2, 4}));
  EXPECT_NEAR(values<float>(out[2])[1], 1.f / std::sqrt(8.f / 3.f), 1e-5f);
  // axis 0: one group over everything.
  auto all = run_kernel("LayerNormalization", {f32({2, 1}, {1, 3}), f32({2, 1}, {1, 1})},
                        attrs({{"axis", int64_t{0}}, {"epsilon", 0.f}}))[0];
  EXPECT_EQ(values<float>(all), (std::vector<float>{-1, 1}));
}

}  // namespace
}  // namespace anvil
