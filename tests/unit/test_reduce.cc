// Tests of the reference reduction kernels (src/kernels/ref/reduce.cc) against hand-computed values: axes as an
// attribute and (ReduceSum, opset 13) as an input, keepdims, noop_with_empty_axes, and errors.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <numeric>

#include "anvil/error.h"
#include "kernel_tester.h"

namespace anvil {
namespace {

using testing::f32;
using testing::values;
using testing::attrs;
using testing::i64;
using testing::make_tensor;
using testing::run_kernel;

using Ints = std::vector<int64_t>;

testing::KernelOptions opset(int version) {
  testing::KernelOptions o;
  o.opset = version;
  return o;
}

void expect_near(const Tensor& t, const std::vector<float>& expected, float tol = 1e-5f) {
  ASSERT_EQ(t.numel(), static_cast<int64_t>(expected.size()));
  for (size_t i = 0; i < expected.size(); ++i) EXPECT_NEAR(t.data<float>()[i], expected[i], tol) << "element " << i;
}

ErrorKind error_of(const std::string& op, const std::vector<Tensor>& inputs, const ir::Attributes& a,
                   const testing::KernelOptions& o = {}) {
  try {
    run_kernel(op, inputs, a, o);
  } catch (const Error& e) {
    return e.kind();
  }
  ADD_FAILURE() << "no anvil::Error thrown";
  return ErrorKind::kInternal;
}

// X = [[1, 2, 3],
//      [4, 5, 6]]
Tensor x23() { return f32({2, 3}, {1, 2, 3, 4, 5, 6}); }

TEST(ReduceMean, KeepDimsOneAndZero) {
  auto keep = run_kernel("ReduceMean", {x23()}, attrs({{"axes", Ints{1}}}), opset(13));
  EXPECT_EQ(keep[0].shape(), (Shape{2, 1}));
  expect_near(keep[0], {2, 5});
  auto drop = run_kernel("ReduceMean", {x23()}, attrs({{"axes", Ints{1}}, {"keepdims", int64_t{0}}}), opset(13));
  EXPECT_EQ(drop[0].shape(), (Shape{2}));
  expect_near(drop[0], {2, 5});
}

TEST(ReduceMean, EmptyAxesReduceEverything) {
  auto keep = run_kernel("ReduceMean", {x23()}, {}, opset(13));
  EXPECT_EQ(keep[0].shape(), (Shape{1, 1}));
  expect_near(keep[0], {3.5f});
  auto drop = run_kernel("ReduceMean", {x23()}, attrs({{"keepdims", int64_t{0}}}), opset(11));
  EXPECT_EQ(drop[0].shape(), (Shape{}));
  expect_near(drop[0], {3.5f});
}

TEST(ReduceMean, NegativeAxis) {
  auto out = run_kernel("ReduceMean", {x23()}, attrs({{"axes", Ints{-2}}}), opset(13));
  EXPECT_EQ(out[0].shape(), (Shape{1, 3}));
  expect_near(out[0], {2.5f, 3.5f, 4.5f});
}

TEST(ReduceMean, NonAdjacentAxes) {
  // X [2,2,2] = 0..7 reduced over axes 0 and 2: index j of axis 1 averages {0,1,4,5} (j = 0) and {2,3,6,7}.
  std::vector<float> v(8);
  std::iota(v.begin(), v.end(), 0.f);
  auto out = run_kernel("ReduceMean", {f32({2, 2, 2}, v)}, attrs({{"axes", Ints{0, 2}}}), opset(13));
  EXPECT_EQ(out[0].shape(), (Shape{1, 2, 1}));
  expect_near(out[0], {2.5f, 4.5f});
}

TEST(ReduceMean, Float64AndInt32) {
  Tensor d = make_tensor<double>(DType::kFloat64, {2, 2}, {1, 2, 3, 5});
  auto out = run_kernel("ReduceMean", {d}, attrs({{"axes", Ints{0}}, {"keepdims", int64_t{0}}}));
  EXPECT_EQ(out[0].dtype(), DType::kFloat64);
  EXPECT_EQ(values<double>(out[0]), (std::vector<double>{2, 3.5}));
  // Integer means truncate.
  Tensor i = make_tensor<int32_t>(DType::kInt32, {2, 2}, {1, 2, 4, 5});
  auto iout = run_kernel("ReduceMean", {i}, attrs({{"axes", Ints{0}}, {"keepdims", int64_t{0}}}));
  EXPECT_EQ(values<int32_t>(iout[0]), (std::vector<int32_t>{2, 3}));
}

TEST(ReduceMean, LargeInputTakesTheParallelPath) {
  // 64 rows of 1024: each row's mean is its row index + 0.5 (values r, r+1 alternating).
  std::vector<float> v(64 * 1024);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i / 1024 + i % 2);
  auto out = run_kernel("ReduceMean", {f32({64, 1024}, v)}, attrs({{"axes", Ints{1}}, {"keepdims", int64_t{0}}}));
  for (int r = 0; r < 64; ++r) EXPECT_FLOAT_EQ(out[0].data<float>()[r], r + 0.5f);
}

// Leading axes of whole rows (a bias gradient's shape): the column-block path,
// with more columns than one block (2,048) and a partial last block, rows
// split between the threads (more than 32,768 elements), each thread's rows
// in runs of 64 summed in float (one full run and a partial one at 2 threads).
TEST(ReduceSum, LeadingAxesOfWholeRows) {
  const int64_t rows = 160, cols = 2100;
  std::vector<float> v(rows * cols);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) v[r * cols + c] = static_cast<float>(c) + 0.25f * static_cast<float>(r % 4);
  // Column c: 160 * c + 0.25 * (0 + 1 + 2 + 3) * 40 = 160c + 60.
  auto sum = run_kernel("ReduceSum", {f32({16, 10, cols}, v), i64({2}, {0, 1})}, {}, opset(13));
  EXPECT_EQ(sum[0].shape(), (Shape{1, 1, cols}));
  auto mean = run_kernel("ReduceMean", {f32({rows, cols}, v)}, attrs({{"axes", Ints{0}}, {"keepdims", int64_t{0}}}));
  for (int64_t c = 0; c < cols; ++c) {
    EXPECT_FLOAT_EQ(sum[0].data<float>()[c], 160.f * c + 60.f) << c;
    EXPECT_FLOAT_EQ(mean[0].data<float>()[c], c + 0.375f) << c;
  }
}

// Values near float's limits whose float sums over a run of rows overflow
// but whose total does not: the run is added again in double.
TEST(ReduceSum, LeadingAxesNearFloatsLimitsSumInDouble) {
  const int64_t rows = 80, cols = 500;  // split between the threads: more than 32,768 elements
  std::vector<float> v(rows * cols, 1.f);
  for (int64_t r = 0; r < rows; ++r) v[r * cols] = r < 40 ? 3e37f : -3e37f;  // column 0: +-1.2e39 halves
  for (int64_t r = 0; r < rows; ++r) v[r * cols + 1] = 1e37f;                  // column 1: 8e38, past float
  auto sum = run_kernel("ReduceSum", {f32({rows, cols}, v), i64({1}, {0})}, {}, opset(13));
  EXPECT_EQ(sum[0].data<float>()[0], 0.f);
  EXPECT_EQ(sum[0].data<float>()[1], std::numeric_limits<float>::infinity());  // the true sum overflows float
  EXPECT_EQ(sum[0].data<float>()[2], 80.f);
  auto mean = run_kernel("ReduceMean", {f32({rows, cols}, v)}, attrs({{"axes", Ints{0}}, {"keepdims", int64_t{0}}}));
  EXPECT_FLOAT_EQ(mean[0].data<float>()[1], 1e37f);
  EXPECT_EQ(mean[0].data<float>()[0], 0.f);
}

TEST(ReduceSum, AxesAsInputFromOpset13) {
  auto out = run_kernel("ReduceSum", {x23(), i64({1}, {1})}, {}, opset(13));
  EXPECT_EQ(out[0].shape(), (Shape{2, 1}));
  expect_near(out[0], {6, 15});
  // Omitted or empty axes: all axes.
  auto omitted = run_kernel("ReduceSum", {x23()}, attrs({{"keepdims", int64_t{0}}}), opset(13));
  EXPECT_EQ(omitted[0].shape(), (Shape{}));
  expect_near(omitted[0], {21});
  auto empty = run_kernel("ReduceSum", {x23(), i64({0}, {})}, {}, opset(13));
  EXPECT_EQ(empty[0].shape(), (Shape{1, 1}));
  expect_near(empty[0], {21});
}

TEST(ReduceSum, NoopWithEmptyAxes) {
  auto out = run_kernel("ReduceSum", {x23(), i64({0}, {})}, attrs({{"noop_with_empty_axes", int64_t{1}}}), opset(13));
  EXPECT_EQ(out[0].shape(), (Shape{2, 3}));
  expect_near(out[0], {1, 2, 3, 4, 5, 6});
}

TEST(ReduceSum, AxesAttributeBeforeOpset13) {
  auto out = run_kernel("ReduceSum", {x23()}, attrs({{"axes", Ints{0}}, {"keepdims", int64_t{0}}}), opset(11));
  EXPECT_EQ(out[0].shape(), (Shape{3}));
  expect_near(out[0], {5, 7, 9});
}

TEST(ReduceSum, Int64) {
  auto out = run_kernel("ReduceSum", {i64({2, 2}, {1, -2, 30, 40}), i64({1}, {-1})}, {}, opset(13));
  EXPECT_EQ(out[0].dtype(), DType::kInt64);
  EXPECT_EQ(values<int64_t>(out[0]), (std::vector<int64_t>{-1, 70}));
}

TEST(ReduceSum, AxesInputMustBeConstant) {
  testing::KernelOptions o = opset(13);
  o.constant_inputs = {false, false};
  EXPECT_EQ(error_of("ReduceSum", {x23(), i64({1}, {1})}, {}, o), ErrorKind::kUnsupported);
}

TEST(Reduce, MaxMinProd) {
  ir::Attributes axis0 = attrs({{"axes", Ints{0}}, {"keepdims", int64_t{0}}});
  expect_near(run_kernel("ReduceMax", {x23()}, axis0)[0], {4, 5, 6});
  expect_near(run_kernel("ReduceMin", {x23()}, axis0)[0], {1, 2, 3});
  expect_near(run_kernel("ReduceProd", {x23()}, axis0)[0], {4, 10, 18});
  expect_near(run_kernel("ReduceMax", {f32({3}, {-5, -2, -9})}, {})[0], {-2});
  Tensor i8 = make_tensor<int8_t>(DType::kInt8, {2, 2}, {-128, 5, 127, -3});
  auto min = run_kernel("ReduceMin", {i8}, attrs({{"axes", Ints{1}}}));
  EXPECT_EQ(values<int8_t>(min[0]), (std::vector<int8_t>{-128, -3}));
}

TEST(Reduce, NormsAndLogSums) {
  ir::Attributes axis1 = attrs({{"axes", Ints{1}}, {"keepdims", int64_t{0}}});
  Tensor x = f32({2, 2}, {3, -4, -1, 1});
  expect_near(run_kernel("ReduceL1", {x}, axis1)[0], {7, 2});
  expect_near(run_kernel("ReduceL2", {x}, axis1)[0], {5, std::sqrt(2.0f)});
  expect_near(run_kernel("ReduceSumSquare", {x}, axis1)[0], {25, 2});
  expect_near(run_kernel("ReduceLogSum", {f32({2, 2}, {1, 2, 0.5f, 0.5f})}, axis1)[0], {std::log(3.0f), 0});
  // log(exp(1000) + exp(1000)) = 1000 + log 2, which a naive sum of exps would turn into inf.
  expect_near(run_kernel("ReduceLogSumExp", {f32({2, 2}, {1000, 1000, 0, 0})}, axis1)[0],
              {1000 + std::log(2.0f), std::log(2.0f)}, 1e-3f);
}

// Found by the model-loader fuzzer: log(0) = -inf stored in int8 was an
// undefined float-to-int cast. Integer results saturate instead.
TEST(Reduce, IntegerLogSumsOfEmptySetsSaturate) {
  Tensor empty = make_tensor<int8_t>(DType::kInt8, {0, 2}, {});
  ir::Attributes axis0 = attrs({{"axes", Ints{0}}, {"keepdims", int64_t{0}}});
  EXPECT_EQ(values<int8_t>(run_kernel("ReduceLogSumExp", {empty}, axis0)[0]), (std::vector<int8_t>{-128, -128}));
  EXPECT_EQ(values<int8_t>(run_kernel("ReduceLogSum", {empty}, axis0)[0]), (std::vector<int8_t>{-128, -128}));
  Tensor big = make_tensor<int8_t>(DType::kInt8, {2}, {100, 100});
  EXPECT_EQ(values<int8_t>(run_kernel("ReduceSumSquare", {big}, attrs({{"keepdims", int64_t{0}}}))[0]),
            (std::vector<int8_t>{static_cast<int8_t>(20000 & 0xff)}));  // integer sums wrap, as numpy's do
}

TEST(Reduce, Errors) {
  EXPECT_EQ(error_of("ReduceMean", {x23()}, attrs({{"axes", Ints{2}}})), ErrorKind::kInvalidArgument);
  EXPECT_EQ(error_of("ReduceMean", {x23()}, attrs({{"axes", Ints{1, -1}}})), ErrorKind::kInvalidModel);
  Tensor b = make_tensor<bool>(DType::kBool, {2}, {true, false});
  EXPECT_EQ(error_of("ReduceMax", {b}, {}), ErrorKind::kUnsupported);
}

}  // namespace
}  // namespace anvil

namespace anvil {
namespace {

// Opset 20: ReduceMax/Min of bools are any/all; an empty min is true, an empty max false.
TEST(ReduceMax, BoolInputs) {
  Tensor x = make_tensor<bool>(DType::kBool, {2, 2}, {true, false, false, false});
  ir::Attributes rows = attrs({{"keepdims", int64_t{0}}});
  std::vector<Tensor> y = run_kernel("ReduceMax", {x, i64({1}, {1})}, rows, opset(20));
  EXPECT_EQ(values<bool>(y[0]), (std::vector<bool>{true, false}));
  y = run_kernel("ReduceMin", {x, i64({1}, {1})}, rows, opset(20));
  EXPECT_EQ(values<bool>(y[0]), (std::vector<bool>{false, false}));
  Tensor empty = make_tensor<bool>(DType::kBool, {2, 0}, {});
  y = run_kernel("ReduceMin", {empty, i64({1}, {1})}, rows, opset(20));
  EXPECT_EQ(values<bool>(y[0]), (std::vector<bool>{true, true}));
  y = run_kernel("ReduceMax", {empty, i64({1}, {1})}, rows, opset(20));
  EXPECT_EQ(values<bool>(y[0]), (std::vector<bool>{false, false}));
}

}  // namespace
}  // namespace anvil
