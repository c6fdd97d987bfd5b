// Tests of the reference data-movement kernels (src/kernels/ref/transform.cc) against hand-computed values.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <numeric>

#include <omp.h>

#include "anvil/error.h"
#include "core/half.h"
#include "kernel_tester.h"

namespace anvil {
namespace {

using testing::f32;
using testing::error_kind_of;
using testing::opset;
using testing::values;
using testing::attrs;
using testing::iota_f;
using testing::i64;
using testing::make_tensor;
using testing::run_kernel;

constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
constexpr int64_t kMin = std::numeric_limits<int64_t>::min();

TEST(Transpose, DefaultReversesAxes) {
  std::vector<Tensor> out = run_kernel("Transpose", {f32({2, 3}, iota_f(6))});
  EXPECT_EQ(out[0].shape(), (Shape{3, 2}));
  EXPECT_EQ(values<float>(out[0]), (std::vector<float>{0, 3, 1, 4, 2, 5}));
}

TEST(Transpose, AllPermutationsOf3D) {
  Tensor x = f32({2, 3, 4}, iota_f(24));
  std::vector<int64_t> perm = {0, 1, 2};
  do {
    Tensor y = run_kernel("Transpose", {x}, attrs({{"perm", perm}}))[0];
    Shape expect_shape = {x.dim(static_cast<int>(perm[0])), x.dim(static_cast<int>(perm[1])),
                          x.dim(static_cast<int>(perm[2]))};
    ASSERT_EQ(y.shape(), expect_shape);
    const int64_t strides[3] = {12, 4, 1};
    int64_t k = 0;
    for (int64_t i = 0; i < y.dim(0); ++i)
      for (int64_t j = 0; j < y.dim(1); ++j)
        for (int64_t l = 0; l < y.dim(2); ++l, ++k)
          EXPECT_EQ(y.data<float>()[k], i * strides[perm[0]] + j * strides[perm[1]] + l * strides[perm[2]]);
  } while (std::next_permutation(perm.begin(), perm.end()));
}

TEST(Transpose, SmallDtypeAndLargeTensor) {
  Tensor x = make_tensor<int8_t>(DType::kInt8, {2, 2}, {1, 2, 3, 4});
  EXPECT_EQ(values<int8_t>(run_kernel("Transpose", {x})[0]), (std::vector<int8_t>{1, 3, 2, 4}));
  // Big enough to take the OpenMP path.
  Tensor big = f32({300, 200}, iota_f(60000));
  Tensor t = run_kernel("Transpose", {big})[0];
  for (int64_t i = 0; i < 200; i += 37)
    for (int64_t j = 0; j < 300; j += 41) EXPECT_EQ(t.data<float>()[i * 300 + j], j * 200 + i);
}

TEST(Transpose, BadPermNamesTheNode) {
  std::string msg;
  EXPECT_EQ(error_kind_of([&] {
              run_kernel("Transpose", {f32({2, 3}, iota_f(6))}, attrs({{"perm", std::vector<int64_t>{0, 0}}}));
            }, &msg),
            ErrorKind::kInvalidModel);
  EXPECT_NE(msg.find("Transpose 'test_Transpose'"), std::string::npos) << msg;
  EXPECT_EQ(error_kind_of([&] {
              run_kernel("Transpose", {f32({2, 3}, iota_f(6))}, attrs({{"perm", std::vector<int64_t>{1, 0, 2}}}));
            }),
            ErrorKind::kInvalidModel);
}

TEST(Concat, NegativeAxisAndEmptyInput) {
  Tensor a = f32({2, 1}, {1, 2});
  Tensor b = f32({2, 2}, {3, 4, 5, 6});
  Tensor e(DType::kFloat32, {2, 0});
  std::vector<Tensor> out = run_kernel("Concat", {a, e, b}, attrs({{"axis", int64_t{-1}}}));
  EXPECT_EQ(out[0].shape(), (Shape{2, 3}));
  EXPECT_EQ(values<float>(out[0]), (std::vector<float>{1, 3, 4, 2, 5, 6}));
  out = run_kernel("Concat", {i64({2}, {1, 2}), i64({1}, {3})}, attrs({{"axis", int64_t{0}}}));
  EXPECT_EQ(values<int64_t>(out[0]), (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(error_kind_of([&] { run_kernel("Concat", {a, f32({3, 1}, {1, 2, 3})}, attrs({{"axis", int64_t{1}}})); }),
            ErrorKind::kInvalidArgument);
  EXPECT_EQ(error_kind_of([&] { run_kernel("Concat", {a, i64({2, 1}, {1, 2})}, attrs({{"axis", int64_t{1}}})); }),
            ErrorKind::kInvalidModel);
}

TEST(Split, EqualInputAndAttribute) {
  Tensor x = f32({6}, iota_f(6));
  std::vector<Tensor> out = run_kernel("Split", {x}, {}, opset(13, 3));
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(values<float>(out[2]), (std::vector<float>{4, 5}));
  out = run_kernel("Split", {x, i64({2}, {1, 5})}, {}, opset(13, 2));
  EXPECT_EQ(values<float>(out[0]), (std::vector<float>{0}));
  EXPECT_EQ(values<float>(out[1]), (std::vector<float>{1, 2, 3, 4, 5}));
  Tensor m = f32({2, 4}, iota_f(8));
  ir::Attributes split_attrs = attrs({{"axis", int64_t{-1}}, {"split", std::vector<int64_t>{1, 0, 3}}});
  out = run_kernel("Split", {m}, split_attrs, opset(11, 3));
  EXPECT_EQ(out[0].shape(), (Shape{2, 1}));
  EXPECT_EQ(values<float>(out[0]), (std::vector<float>{0, 4}));
  EXPECT_EQ(out[1].shape(), (Shape{2, 0}));
  EXPECT_EQ(values<float>(out[2]), (std::vector<float>{1, 2, 3, 5, 6, 7}));
  EXPECT_EQ(error_kind_of([&] { run_kernel("Split", {x}, {}, opset(13, 4)); }), ErrorKind::kInvalidArgument);
  EXPECT_EQ(error_kind_of([&] { run_kernel("Split", {x, i64({2}, {1, 4})}, {}, opset(13, 2)); }),
            ErrorKind::kInvalidArgument);
}

// Split-18 with num_outputs: parts of ceil(7 / 4) = 2, the last one smaller (ONNX's split_uneven case).
TEST(Split, Opset18NumOutputsLeavesASmallerLastPart) {
  Tensor x = f32({7}, iota_f(7));
  std::vector<Tensor> out = run_kernel("Split", {x}, attrs({{"num_outputs", int64_t{4}}}), opset(18, 4));
  EXPECT_EQ(out[0].shape(), (Shape{2}));
  EXPECT_EQ(out[3].shape(), (Shape{1}));
  EXPECT_EQ(values<float>(out[3]), (std::vector<float>{6}));
  // 5 into 4 parts of ceil(5 / 4) = 2 until the axis runs out: 2, 2, 1, 0 (ONNX's reference).
  out = run_kernel("Split", {f32({5}, {0, 1, 2, 3, 4})}, attrs({{"num_outputs", int64_t{4}}}), opset(18, 4));
  EXPECT_EQ(out[2].shape(), (Shape{1}));
  EXPECT_EQ(values<float>(out[2]), (std::vector<float>{4}));
  EXPECT_EQ(out[3].shape(), (Shape{0}));
}

// With a negative step, ONNX clamps start to [0, dim - 1] after adding dim: a start far below -dim
// is 0, so x[0] is taken (ONNX Runtime agrees).
// Found by the model-loader fuzzer: a tensor with a zero dim has no elements, but its other dims may
// multiply past int64 in a kernel's stride computation (undefined). Such shapes are refused.
TEST(Transpose, ZeroElementShapeWhoseSizesOverflowIsRefused) {
  Tensor x(DType::kFloat32, {0, int64_t{1} << 40, int64_t{1} << 40});
  EXPECT_EQ(error_kind_of([&] { run_kernel("Transpose", {x}); }), ErrorKind::kInvalidArgument);
  EXPECT_EQ(run_kernel("Transpose", {Tensor(DType::kFloat32, {0, 3})})[0].shape(), (Shape{3, 0}));
}

TEST(Slice, NegativeStepWithAStartBelowMinusDim) {
  Tensor x = f32({5}, iota_f(5));
  std::vector<Tensor> out = run_kernel("Slice", {x, i64({1}, {-100}), i64({1}, {-200}), i64({1}, {0}), i64({1}, {-1})});
  EXPECT_EQ(values<float>(out[0]), (std::vector<float>{0}));
}

TEST(Slice, NegativeStepsAndHugeBounds) {
  Tensor x = f32({3, 4}, iota_f(12));
  // Reverse the columns: start -1, end INT64_MIN, step -1.
  std::vector<Tensor> out = run_kernel("Slice", {x, i64({1}, {-1}), i64({1}, {kMin}), i64({1}, {1}), i64({1}, {-1})});
  EXPECT_EQ(out[0].shape(), (Shape{3, 4}));
  EXPECT_EQ(values<float>(out[0]), (std::vector<float>{3, 2, 1, 0, 7, 6, 5, 4, 11, 10, 9, 8}));
  // Rows 2 and 0 (end -4 -> -1 is "before row 0"), columns 1.. (end INT64_MAX).
  out = run_kernel("Slice", {x, i64({2}, {2, 1}), i64({2}, {-4, kMax}), i64({2}, {0, -1}), i64({2}, {-2, 1})});
  EXPECT_EQ(out[0].shape(), (Shape{2, 3}));
  EXPECT_EQ(values<float>(out[0]), (std::vector<float>{9, 10, 11, 1, 2, 3}));
  // Huge steps take one element.
  out = run_kernel("Slice", {x, i64({1}, {1}), i64({1}, {kMax}), i64({1}, {1}), i64({1}, {kMax})});
  EXPECT_EQ(values<float>(out[0]), (std::vector<float>{1, 5, 9}));
  out = run_kernel("Slice", {x, i64({1}, {kMax}), i64({1}, {kMin}), i64({1}, {0}), i64({1}, {kMin})});
  EXPECT_EQ(values<float>(out[0]), (std::vector<float>{8, 9, 10, 11}));
  // Empty results.
  EXPECT_EQ(run_kernel("Slice", {x, i64({1}, {3}), i64({1}, {1}), i64({1}, {1})})[0].shape(), (Shape{3, 0}));
  EXPECT_EQ(error_kind_of([&] {
              run_kernel("Slice", {x, i64({1}, {0}), i64({1}, {1}), i64({1}, {0}), i64({1}, {0})});
            }),
            ErrorKind::kInvalidModel);
}

TEST(Slice, AttributesBeforeOpset10) {
  Tensor x = f32({3, 4}, iota_f(12));
  std::vector<Tensor> out = run_kernel(
      "Slice", {x},
      attrs({{"starts", std::vector<int64_t>{1, 0}}, {"ends", std::vector<int64_t>{1000, 2}}}), opset(9));
  EXPECT_EQ(out[0].shape(), (Shape{2, 2}));
  EXPECT_EQ(values<float>(out[0]), (std::vector<float>{4, 5, 8, 9}));
  out = run_kernel("Slice", {x},
                   attrs({{"starts", std::vector<int64_t>{-2}}, {"ends", std::vector<int64_t>{-1}},
                          {"axes", std::vector<int64_t>{1}}}),
                   opset(9));
  EXPECT_EQ(values<float>(out[0]), (std::vector<float>{2, 6, 10}));
}

TEST(Pad, ConstantFromInputAndNegativePads) {
  Tensor x = f32({2, 2}, {1, 2, 3, 4});
  std::vector<Tensor> out = run_kernel("Pad", {x, i64({4}, {1, 0, 0, 1}), f32({}, {9})});
  EXPECT_EQ(out[0].shape(), (Shape{3, 3}));
  EXPECT_EQ(values<float>(out[0]), (std::vector<float>{9, 9, 9, 1, 2, 9, 3, 4, 9}));
  out = run_kernel("Pad", {f32({4}, {1, 2, 3, 4}), i64({2}, {-1, 1})});
  EXPECT_EQ(values<float>(out[0]), (std::vector<float>{2, 3, 4, 0}));
  out = run_kernel("Pad", {x}, attrs({{"pads", std::vector<int64_t>{0, 1, 0, 0}}, {"value", 1.5f}}), opset(2));
  EXPECT_EQ(values<float>(out[0]), (std::vector<float>{1.5f, 1, 2, 1.5f, 3, 4}));
}

// An output with an empty axis and another of 2^40 (what a fuzzed file's
// pads made): empty at once, no index maps built along the long axis.
TEST(Pad, EmptyOutputWithAHugeAxis) {
  const Tensor x(DType::kFloat32, {2, 0});
  const std::vector<Tensor> out = run_kernel("Pad", {x, i64({4}, {0, 0, int64_t{1} << 40, 0})});
  EXPECT_EQ(out[0].shape(), (Shape{(int64_t{1} << 40) + 2, 0}));
}

TEST(Pad, ReflectAndEdge) {
  Tensor x = f32({4}, {1, 2, 3, 4});
  ir::Attributes reflect = attrs({{"mode", std::string("reflect")}});
  EXPECT_EQ(values<float>(run_kernel("Pad", {x, i64({2}, {2, 3})}, reflect)[0]),
            (std::vector<float>{3, 2, 1, 2, 3, 4, 3, 2, 1}));
  // Pads longer than the axis keep reflecting (numpy's "reflect").
  EXPECT_EQ(values<float>(run_kernel("Pad", {f32({3}, {1, 2, 3}), i64({2}, {4, 0})}, reflect)[0]),
            (std::vector<float>{1, 2, 3, 2, 1, 2, 3}));
  Tensor m = make_tensor<int32_t>(DType::kInt32, {2, 2}, {1, 2, 3, 4});
  std::vector<Tensor> out = run_kernel("Pad", {m, i64({4}, {1, 1, 0, 0})}, attrs({{"mode", std::string("edge")}}));
  EXPECT_EQ(out[0].shape(), (Shape{3, 3}));
  EXPECT_EQ(values<int32_t>(out[0]), (std::vector<int32_t>{1, 1, 2, 1, 1, 2, 3, 3, 4}));
  // wrap (opset 19, numpy's "wrap"): the axis repeats, past its length too.
  ir::Attributes wrap = attrs({{"mode", std::string("wrap")}});
  EXPECT_EQ(values<float>(run_kernel("Pad", {x, i64({2}, {5, 2})}, wrap, opset(19))[0]),
            (std::vector<float>{4, 1, 2, 3, 4, 1, 2, 3, 4, 1, 2}));
  EXPECT_EQ(error_kind_of([&] { run_kernel("Pad", {x, i64({2}, {1, 1})}, attrs({{"mode", std::string("circle")}}), opset(19)); }),
            ErrorKind::kInvalidModel);
  // Only a constant fills an empty axis.
  EXPECT_EQ(error_kind_of([&] { run_kernel("Pad", {f32({0}, {}), i64({2}, {1, 1})}, reflect); }),
            ErrorKind::kInvalidArgument);
  EXPECT_EQ(error_kind_of([&] { run_kernel("Pad", {x, i64({3}, {1, 1, 1})}); }), ErrorKind::kInvalidModel);
}

// The ONNX operator documentation's example: channel c holds c*9 + h*3 + w.
Tensor depth_example() {
  std::vector<float> v;
  for (int c = 0; c < 8; ++c)
    for (int i = 0; i < 6; ++i) v.push_back(static_cast<float>(c * 9 + i));
  return f32({1, 8, 2, 3}, v);
}

TEST(DepthToSpace, DcrAndCrd) {
  Tensor x = depth_example();
  std::vector<Tensor> out = run_kernel("DepthToSpace", {x}, attrs({{"blocksize", int64_t{2}}}));
  EXPECT_EQ(out[0].shape(), (Shape{1, 2, 4, 6}));
  EXPECT_EQ(values<float>(out[0]),
            (std::vector<float>{0,  18, 1,  19, 2,  20, 36, 54, 37, 55, 38, 56, 3,  21, 4,  22,
                                5,  23, 39, 57, 40, 58, 41, 59, 9,  27, 10, 28, 11, 29, 45, 63,
                                46, 64, 47, 65, 12, 30, 13, 31, 14, 32, 48, 66, 49, 67, 50, 68}));
  out = run_kernel("DepthToSpace", {x}, attrs({{"blocksize", int64_t{2}}, {"mode", std::string("CRD")}}));
  EXPECT_EQ(values<float>(out[0]),
            (std::vector<float>{0,  9,  1,  10, 2,  11, 18, 27, 19, 28, 20, 29, 3,  12, 4,  13,
                                5,  14, 21, 30, 22, 31, 23, 32, 36, 45, 37, 46, 38, 47, 54, 63,
                                55, 64, 56, 65, 39, 48, 40, 49, 41, 50, 57, 66, 58, 67, 59, 68}));
  EXPECT_EQ(error_kind_of([&] { run_kernel("DepthToSpace", {x}, attrs({{"blocksize", int64_t{3}}})); }),
            ErrorKind::kInvalidArgument);
}

// Large enough for the copy's threads, whose runs of rows start mid-plane:
// every element against the ONNX formula, blocksize 3 (rows 3 long).
TEST(DepthToSpace, LargeBlocksize3EveryElement) {
  const int saved_threads = omp_get_max_threads();
  omp_set_num_threads(2);  // two runs of rows, also on a one-core machine
  const int64_t n = 1, c = 27, h = 41, w = 31, b = 3, co = c / (b * b);  // 369 blocks of [w, b]: split mid-plane
  Tensor x = f32({n, c, h, w}, iota_f(n * c * h * w));
  for (const std::string mode : {"DCR", "CRD"}) {
    SCOPED_TRACE(mode);
    Tensor y = run_kernel("DepthToSpace", {x}, attrs({{"blocksize", b}, {"mode", mode}}))[0];
    ASSERT_EQ(y.shape(), (Shape{n, co, h * b, w * b}));
    const float* got = y.data<float>();
    int64_t at = 0, wrong = 0;
    for (int64_t in = 0; in < n; ++in)
      for (int64_t oc = 0; oc < co; ++oc)
        for (int64_t row = 0; row < h * b; ++row)
          for (int64_t col = 0; col < w * b; ++col, ++at) {
            const int64_t i = row % b, j = col % b;
            const int64_t ic = mode == "DCR" ? (i * b + j) * co + oc : oc * b * b + i * b + j;
            const float want = static_cast<float>(((in * c + ic) * h + row / b) * w + col / b);
            if (got[at] != want && ++wrong <= 3) ADD_FAILURE() << "y[" << at << "] = " << got[at] << ", want " << want;
          }
    EXPECT_EQ(wrong, 0);
  }
  omp_set_num_threads(saved_threads);
}

// Values i % 251 (they fit every element type) in a tensor of `shape`.
template <typename T>
Tensor counting(DType dtype, const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  std::vector<T> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = static_cast<T>(i % 251);
  return make_tensor<T>(dtype, shape, v);
}

// Output elements that are not the input element source(i) of `counting`.
template <typename T>
int64_t count_wrong(const Tensor& y, const std::function<int64_t(int64_t)>& source) {
  int64_t wrong = 0;
  for (int64_t i = 0; i < y.numel(); ++i)
    if (y.data<T>()[i] != static_cast<T>(source(i) % 251) && ++wrong <= 3)
      ADD_FAILURE() << "y[" << i << "] = " << +y.data<T>()[i] << ", want input element " << source(i);
  return wrong;
}

// Strided copies whose last axis is short, on 3 threads, in 1-, 4- and 8-byte
// elements, every element against its index formula: 2-D blocks where the
// short axis is far apart in the input and the blocks give every thread
// work (3 channels moved innermost over 16 images), rows otherwise (one
// image: one block; a contiguous or a reversed short last axis).
template <typename T>
void check_short_last_axes(DType dtype) {
  const int saved_threads = omp_get_max_threads();
  omp_set_num_threads(3);
  for (int64_t images : {16, 1}) {
    SCOPED_TRACE(images);
    const int64_t c = 3, h = 20, w = 25;
    Tensor y = run_kernel("Transpose", {counting<T>(dtype, {images, c, h, w})},
                          attrs({{"perm", std::vector<int64_t>{0, 2, 3, 1}}}))[0];
    ASSERT_EQ(y.shape(), (Shape{images, h, w, c}));
    EXPECT_EQ(count_wrong<T>(y, [&](int64_t i) {
                const int64_t ci = i % c, wi = i / c % w, hi = i / (c * w) % h, ni = i / (c * w * h);
                return ((ni * c + ci) * h + hi) * w + wi;
              }),
              0);
  }
  Tensor y = run_kernel("Slice", {counting<T>(dtype, {6000, 8}), i64({1}, {0}), i64({1}, {6}), i64({1}, {1})})[0];
  ASSERT_EQ(y.shape(), (Shape{6000, 6}));
  EXPECT_EQ(count_wrong<T>(y, [](int64_t i) { return i / 6 * 8 + i % 6; }), 0);
  // Axes 1 and 3 reversed: in strides [9000, -900, 6, -1], 40 rows of [150, 6] split 13/14/13.
  y = run_kernel("Slice", {counting<T>(dtype, {4, 10, 150, 6}), i64({2}, {-1, -1}), i64({2}, {kMin, kMin}),
                           i64({2}, {1, 3}), i64({2}, {-1, -1})})[0];
  ASSERT_EQ(y.shape(), (Shape{4, 10, 150, 6}));
  EXPECT_EQ(count_wrong<T>(y, [](int64_t i) {
              const int64_t l = i % 6, k = i / 6 % 150, j = i / 900 % 10, n = i / 9000;
              return ((n * 10 + (9 - j)) * 150 + k) * 6 + (5 - l);
            }),
            0);
  omp_set_num_threads(saved_threads);
}

TEST(StridedCopy, ShortLastAxesAcrossThreads) {
  {
    SCOPED_TRACE("uint8");
    check_short_last_axes<uint8_t>(DType::kUInt8);
  }
  {
    SCOPED_TRACE("float32");
    check_short_last_axes<float>(DType::kFloat32);
  }
  {
    SCOPED_TRACE("int64");
    check_short_last_axes<int64_t>(DType::kInt64);
  }
}

TEST(SpaceToDepth, InvertsDepthToSpaceDcr) {
  ir::Attributes block2 = attrs({{"blocksize", int64_t{2}}});
  std::vector<Tensor> out = run_kernel("SpaceToDepth", {f32({1, 2, 2, 2}, iota_f(8))}, block2);
  EXPECT_EQ(out[0].shape(), (Shape{1, 8, 1, 1}));
  EXPECT_EQ(values<float>(out[0]), (std::vector<float>{0, 4, 1, 5, 2, 6, 3, 7}));
  Tensor x = depth_example();
  Tensor space = run_kernel("DepthToSpace", {x}, attrs({{"blocksize", int64_t{2}}}))[0];
  Tensor back = run_kernel("SpaceToDepth", {space}, attrs({{"blocksize", int64_t{2}}}))[0];
  EXPECT_EQ(back.shape(), x.shape());
  EXPECT_EQ(values<float>(back), values<float>(x));
  EXPECT_EQ(error_kind_of([&] { run_kernel("SpaceToDepth", {x}, attrs({{"blocksize", int64_t{2}}})); }),
            ErrorKind::kInvalidArgument);
}

// Opset 28's CRD mode: output channel c*b*b + i*b + j reads channel c at (i, j) of each block.
TEST(SpaceToDepth, CrdModeKeepsChannelsOutermost) {
  testing::KernelOptions o;
  o.opset = 28;
  ir::Attributes crd = attrs({{"blocksize", int64_t{2}}, {"mode", std::string("CRD")}});
  Tensor x = f32({1, 2, 2, 4}, iota_f(16));
  Tensor out = run_kernel("SpaceToDepth", {x}, crd, o)[0];
  EXPECT_EQ(out.shape(), (Shape{1, 8, 1, 2}));
  EXPECT_EQ(values<float>(out), (std::vector<float>{0, 2, 1, 3, 4, 6, 5, 7, 8, 10, 9, 11, 12, 14, 13, 15}));
  Tensor back = run_kernel("DepthToSpace", {out}, crd, o)[0];
  EXPECT_EQ(values<float>(back), values<float>(x));
}

TEST(Gather, NegativeIndicesAnyRank) {
  Tensor data = f32({3, 2}, {1, 2, 3, 4, 5, 6});
  std::vector<Tensor> out = run_kernel("Gather", {data, i64({2, 2}, {0, -1, 1, 0})});
  EXPECT_EQ(out[0].shape(), (Shape{2, 2, 2}));
  EXPECT_EQ(values<float>(out[0]), (std::vector<float>{1, 2, 5, 6, 3, 4, 1, 2}));
  out = run_kernel("Gather", {data, make_tensor<int32_t>(DType::kInt32, {1}, {-1})}, attrs({{"axis", int64_t{-1}}}));
  EXPECT_EQ(out[0].shape(), (Shape{3, 1}));
  EXPECT_EQ(values<float>(out[0]), (std::vector<float>{2, 4, 6}));
  out = run_kernel("Gather", {i64({3}, {7, 8, 9}), i64({}, {1})});
  EXPECT_EQ(out[0].shape(), Shape{});
  EXPECT_EQ(values<int64_t>(out[0]), (std::vector<int64_t>{8}));
}

TEST(Gather, OutOfRangeIndices) {
  Tensor data = f32({3}, {1, 2, 3});
  // Known at plan time: rejected by prepare().
  EXPECT_EQ(error_kind_of([&] { run_kernel("Gather", {data, i64({1}, {3})}); }), ErrorKind::kInvalidArgument);
  // Only known at run time: run() does not validate, it clamps into the axis.
  testing::KernelOptions dynamic;
  dynamic.constant_inputs = {false, false};
  EXPECT_EQ(values<float>(run_kernel("Gather", {data, i64({2}, {5, -7})}, {}, dynamic)[0]),
            (std::vector<float>{3, 1}));
}

// y[o, j, r] = x[o, idx[j], r] over each element size the kernel moves as one
// integer (1, 2, 4, 8 bytes: an inner-axis gather), a slice of three (memcpy),
// int32 and int64 indices with negatives and, at run time, clamped ones, and
// rows of more indices than one parallel block.
template <typename T>
void check_gather_rows(DType dtype, int64_t outer, int64_t dim, int64_t inner, int64_t count, bool idx64) {
  std::vector<T> x(static_cast<size_t>(outer * dim * inner));
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<T>(i * 7 + 1);
  std::vector<int64_t> idx(static_cast<size_t>(count));
  for (int64_t j = 0; j < count; ++j) idx[j] = (j * 37) % (2 * dim) - dim;  // [-dim, dim)
  idx[0] = dim + 5;                                                          // clamped to dim - 1
  idx[count - 1] = -dim - 2;                                                 // clamped to 0
  std::vector<T> want;
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t j = 0; j < count; ++j) {
      const int64_t at = std::clamp<int64_t>(idx[j] < 0 ? idx[j] + dim : idx[j], 0, dim - 1);
      for (int64_t r = 0; r < inner; ++r) want.push_back(x[static_cast<size_t>((o * dim + at) * inner + r)]);
    }
  Tensor indices = idx64 ? i64({count}, idx)
                         : make_tensor<int32_t>(DType::kInt32, {count}, std::vector<int32_t>(idx.begin(), idx.end()));
  testing::KernelOptions dynamic;
  dynamic.constant_inputs = {false, false};
  Tensor out = run_kernel("Gather", {make_tensor<T>(dtype, {outer, dim, inner}, x), indices},
                          attrs({{"axis", int64_t{1}}}), dynamic)[0];
  EXPECT_EQ(out.shape(), (Shape{outer, count, inner}));
  EXPECT_EQ(values<T>(out), want);
}

TEST(Gather, EveryElementSizeAndLongRows) {
  for (bool idx64 : {true, false}) {
    SCOPED_TRACE(idx64 ? "int64 indices" : "int32 indices");
    check_gather_rows<uint8_t>(DType::kUInt8, 3, 50, 1, 2500, idx64);
    check_gather_rows<int16_t>(DType::kInt16, 2, 300, 1, 70, idx64);
    check_gather_rows<float>(DType::kFloat32, 40, 512, 1, 3000, idx64);
    check_gather_rows<float>(DType::kFloat32, 5, 9, 2, 1100, idx64);  // 8-byte slices
    check_gather_rows<int64_t>(DType::kInt64, 1, 64, 1, 5000, idx64);
    check_gather_rows<float>(DType::kFloat32, 4, 33, 3, 2100, idx64);  // 12-byte slices
  }
}

// Data of no elements whose dims count 2^40 empty slices: the gather returns
// at once (it walked every empty slice).
TEST(Gather, EmptySlicesOfHugeDimsReturnAtOnce) {
  testing::KernelOptions dynamic;
  dynamic.constant_inputs = {false, false};
  const int64_t huge = int64_t{1} << 40;
  Tensor out = run_kernel("Gather", {Tensor(DType::kFloat32, {huge, 4, 0}), i64({3}, {0, 3, -1})},
                          attrs({{"axis", int64_t{1}}}), dynamic)[0];
  EXPECT_EQ(out.shape(), (Shape{huge, 3, 0}));
}

ir::Attributes cast_to(int64_t code) { return attrs({{"to", code}}); }

TEST(Cast, FloatToInt64TruncatesAndSaturates) {
  float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<Tensor> out = run_kernel("Cast", {f32({6}, {1.7f, -1.7f, 0.f, 3e20f, -3e20f, nan})}, cast_to(7));
  EXPECT_EQ(out[0].dtype(), DType::kInt64);
  EXPECT_EQ(values<int64_t>(out[0]), (std::vector<int64_t>{1, -1, 0, kMax, kMin, 0}));
}

TEST(Cast, FloatToHalfAndBack) {
  Tensor x = f32({5}, {1.f, 0.1f, 65504.f, 1e5f, 1.f / 3});
  Tensor h = run_kernel("Cast", {x}, cast_to(10))[0];
  EXPECT_EQ(h.dtype(), DType::kFloat16);
  EXPECT_EQ(h.data<Half>()[0].bits, 0x3c00);
  Tensor back = run_kernel("Cast", {h}, cast_to(1))[0];
  std::vector<float> v = values<float>(back);
  EXPECT_EQ(v[0], 1.f);
  EXPECT_EQ(v[1], 0.0999755859375f);
  EXPECT_EQ(v[2], 65504.f);
  EXPECT_TRUE(std::isinf(v[3]));
  EXPECT_EQ(v[4], 0.333251953125f);
}

TEST(Cast, BoolIntegerAndDoublePairs) {
  std::vector<Tensor> out = run_kernel("Cast", {f32({3}, {0.f, -0.5f, 2.f})}, cast_to(9));
  EXPECT_EQ(values<bool>(out[0]), (std::vector<bool>{false, true, true}));
  out = run_kernel("Cast", {out[0]}, cast_to(11));
  EXPECT_EQ(values<double>(out[0]), (std::vector<double>{0, 1, 1}));
  out = run_kernel("Cast", {make_tensor<int32_t>(DType::kInt32, {3}, {300, -1, 7})}, cast_to(2));
  EXPECT_EQ(values<uint8_t>(out[0]), (std::vector<uint8_t>{44, 255, 7}));
  out = run_kernel("Cast", {make_tensor<double>(DType::kFloat64, {2}, {1.0 + 1.0 / 256, -2.5})}, cast_to(16));
  EXPECT_EQ(out[0].dtype(), DType::kBFloat16);
  EXPECT_EQ(static_cast<float>(out[0].data<BFloat16>()[0]), 1.0f);  // ties to even
  EXPECT_EQ(static_cast<float>(out[0].data<BFloat16>()[1]), -2.5f);
  // Double straight to half rounds once: 1 + 2^-11 + 2^-30 is just above a tie and must round up.
  const double above_tie = 1.0 + std::ldexp(1.0, -11) + std::ldexp(1.0, -30);
  out = run_kernel("Cast", {make_tensor<double>(DType::kFloat64, {1}, {above_tie})}, cast_to(10));
  EXPECT_EQ(out[0].data<Half>()[0].bits, 0x3c01);
  out = run_kernel("Cast", {i64({2}, {-3, 5})}, cast_to(7));
  EXPECT_EQ(values<int64_t>(out[0]), (std::vector<int64_t>{-3, 5}));
}

// Numbers print as numpy prints them; strings parse as numbers, INF and NaN in any case.
TEST(Cast, ToAndFromStrings) {
  std::vector<Tensor> out = run_kernel("Cast", {f32({4}, {1.5f, 0.47892547f, NAN, -INFINITY})}, cast_to(8));
  ASSERT_EQ(out[0].dtype(), DType::kString);
  EXPECT_EQ(values<std::string>(out[0]), (std::vector<std::string>{"1.5", "0.47892547", "nan", "-inf"}));
  out = run_kernel("Cast", {make_tensor<bool>(DType::kBool, {2}, {true, false})}, cast_to(8));
  EXPECT_EQ(values<std::string>(out[0]), (std::vector<std::string>{"True", "False"}));
  Tensor s = make_tensor<std::string>(DType::kString, {5}, {"3.25", "-INF", "nan", "1e3", "abc"});
  out = run_kernel("Cast", {s}, cast_to(1));
  const std::vector<float> f = values<float>(out[0]);
  EXPECT_EQ(f[0], 3.25f);
  EXPECT_EQ(f[1], -INFINITY);
  EXPECT_TRUE(std::isnan(f[2]));
  EXPECT_EQ(f[3], 1000.f);
  EXPECT_EQ(f[4], 0.f);  // not a number: ONNX leaves it undefined
  out = run_kernel("Cast", {make_tensor<std::string>(DType::kString, {1}, {"9007199254740993"})}, cast_to(7));
  EXPECT_EQ(values<int64_t>(out[0]), (std::vector<int64_t>{9007199254740993}));  // exact, not through double
}

TEST(Cast, UnknownCodesAreUnsupported) {
  EXPECT_EQ(error_kind_of([&] { run_kernel("Cast", {f32({1}, {1})}, cast_to(14)); }), ErrorKind::kUnsupported);
}

TEST(CastLike, TakesTheSecondInputsDtype) {
  Tensor like = make_tensor<int8_t>(DType::kInt8, {1}, {0});
  std::vector<Tensor> out = run_kernel("CastLike", {f32({2}, {2.9f, -1.f}), like});
  EXPECT_EQ(out[0].dtype(), DType::kInt8);
  EXPECT_EQ(values<int8_t>(out[0]), (std::vector<int8_t>{2, -1}));
}

}  // namespace
}  // namespace anvil
