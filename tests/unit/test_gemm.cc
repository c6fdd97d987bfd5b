// Tests of the reference Gemm and MatMul kernels (src/kernels/ref/gemm.cc) against hand-computed values and a naive
// triple loop.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <random>

#include "anvil/error.h"
#include "kernel_tester.h"

namespace anvil {
namespace {

using testing::f32;
using testing::values;
using testing::attrs;
using testing::iota_f;
using testing::i64;
using testing::make_tensor;
using testing::run_kernel;

testing::KernelOptions opset(int version) {
  testing::KernelOptions o;
  o.opset = version;
  return o;
}

// The kind of anvil::Error that running `op` throws (its message goes to *message).
ErrorKind error_of(const std::string& op, const std::vector<Tensor>& inputs, const ir::Attributes& a = {},
                   std::string* message = nullptr, const testing::KernelOptions& options = {}) {
  try {
    run_kernel(op, inputs, a, options);
  } catch (const Error& e) {
    if (message) *message = e.what();
    return e.kind();
  }
  ADD_FAILURE() << "no anvil::Error thrown";
  return ErrorKind::kInternal;
}

Tensor random_f32(Shape shape, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  Tensor t(DType::kFloat32, std::move(shape));
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = dist(rng);
  return t;
}

// A = [[1 2 3] [4 5 6]], B = [[7 8] [9 10] [11 12]]: A B = [[58 64] [139 154]].
const std::vector<float> kA = {1, 2, 3, 4, 5, 6};
const std::vector<float> kB = {7, 8, 9, 10, 11, 12};
const std::vector<float> kAB = {58, 64, 139, 154};

TEST(Gemm, PlainProduct) {
  Tensor y = run_kernel("Gemm", {f32({2, 3}, kA), f32({3, 2}, kB)})[0];
  EXPECT_EQ(y.shape(), (Shape{2, 2}));
  EXPECT_EQ(values<float>(y), kAB);
}

TEST(Gemm, TransposesAlphaBetaAndVectorBias) {
  // A given as A^T [3, 2], B as B^T [2, 3]; y = 0.5 A B + 2 [1 -1]:
  //   [[29 + 2, 32 - 2] [69.5 + 2, 77 - 2]] = [[31 30] [71.5 75]].
  Tensor at = f32({3, 2}, {1, 4, 2, 5, 3, 6});
  Tensor bt = f32({2, 3}, {7, 9, 11, 8, 10, 12});
  Tensor y = run_kernel("Gemm", {at, bt, f32({2}, {1, -1})},
                        attrs({{"transA", int64_t{1}}, {"transB", int64_t{1}}, {"alpha", 0.5f}, {"beta", 2.f}}))[0];
  EXPECT_EQ(y.shape(), (Shape{2, 2}));
  EXPECT_EQ(values<float>(y), (std::vector<float>{31, 30, 71.5f, 75}));
}

TEST(Gemm, OneTransposeAtATime) {
  Tensor at = f32({3, 2}, {1, 4, 2, 5, 3, 6});
  Tensor bt = f32({2, 3}, {7, 9, 11, 8, 10, 12});
  EXPECT_EQ(values<float>(run_kernel("Gemm", {at, f32({3, 2}, kB)}, attrs({{"transA", int64_t{1}}}))[0]), kAB);
  EXPECT_EQ(values<float>(run_kernel("Gemm", {f32({2, 3}, kA), bt}, attrs({{"transB", int64_t{1}}}))[0]), kAB);
}

TEST(Gemm, BiasShapesBroadcast) {
  Tensor a = f32({2, 3}, kA), b = f32({3, 2}, kB);
  // Scalar, [M, 1] column and full [M, N] biases.
  EXPECT_EQ(values<float>(run_kernel("Gemm", {a, b, f32({}, {1})})[0]), (std::vector<float>{59, 65, 140, 155}));
  EXPECT_EQ(values<float>(run_kernel("Gemm", {a, b, f32({2, 1}, {1, 2})})[0]), (std::vector<float>{59, 65, 141, 156}));
  EXPECT_EQ(values<float>(run_kernel("Gemm", {a, b, f32({2, 2}, {1, 2, 3, 4})})[0]),
            (std::vector<float>{59, 66, 142, 158}));
  EXPECT_EQ(values<float>(run_kernel("Gemm", {a, b, f32({1, 1}, {-8})})[0]), (std::vector<float>{50, 56, 131, 146}));
}

TEST(Gemm, BetaZeroIgnoresC) {
  Tensor c = f32({2}, {NAN, NAN});
  Tensor y = run_kernel("Gemm", {f32({2, 3}, kA), f32({3, 2}, kB), c}, attrs({{"beta", 0.f}}))[0];
  EXPECT_EQ(values<float>(y), kAB);
}

TEST(Gemm, OptionalCFromOpset11) {
  EXPECT_EQ(values<float>(run_kernel("Gemm", {f32({2, 3}, kA), f32({3, 2}, kB)}, {}, opset(11))[0]), kAB);
  std::string msg;
  EXPECT_EQ(error_of("Gemm", {f32({2, 3}, kA), f32({3, 2}, kB)}, {}, &msg, opset(9)), ErrorKind::kInvalidModel);
  EXPECT_NE(msg.find("Gemm 'test_Gemm'"), std::string::npos) << msg;
}

TEST(Gemm, IntegerAndDouble) {
  Tensor a = make_tensor<int32_t>(DType::kInt32, {1, 2}, {1, 2});
  Tensor b = make_tensor<int32_t>(DType::kInt32, {2, 1}, {3, 4});
  Tensor c = make_tensor<int32_t>(DType::kInt32, {1}, {100});
  EXPECT_EQ(values<int32_t>(run_kernel("Gemm", {a, b, c})[0]), (std::vector<int32_t>{111}));
  Tensor ad = make_tensor<double>(DType::kFloat64, {1, 2}, {0.5, 0.25});
  Tensor bd = make_tensor<double>(DType::kFloat64, {2, 1}, {2, 4});
  EXPECT_EQ(values<double>(run_kernel("Gemm", {ad, bd}, attrs({{"alpha", 2.f}}))[0]), (std::vector<double>{4}));
}

TEST(Gemm, LargeMatchesNaiveLoop) {
  // Sizes that cross the row, K and N blocks; every transpose combination.
  const int64_t m = 37, n = 600, k = 300;
  for (int ta = 0; ta < 2; ++ta) {
    for (int tb = 0; tb < 2; ++tb) {
      Tensor a = random_f32(ta ? Shape{k, m} : Shape{m, k}, 1);
      Tensor b = random_f32(tb ? Shape{n, k} : Shape{k, n}, 2);
      Tensor c = random_f32({n}, 3);
      Tensor y =
          run_kernel("Gemm", {a, b, c},
                     attrs({{"transA", int64_t{ta}}, {"transB", int64_t{tb}}, {"alpha", 0.5f}, {"beta", -1.f}}))[0];
      ASSERT_EQ(y.shape(), (Shape{m, n}));
      float worst = 0;
      for (int64_t i = 0; i < m; ++i) {
        for (int64_t j = 0; j < n; ++j) {
          double acc = 0;
          for (int64_t l = 0; l < k; ++l)
            acc += double(a.data<float>()[ta ? l * m + i : i * k + l]) * b.data<float>()[tb ? j * k + l : l * n + j];
          double expect = 0.5 * acc - c.data<float>()[j];
          worst = std::max(worst, float(std::fabs(expect - y.data<float>()[i * n + j])));
        }
      }
      EXPECT_LT(worst, 1e-4f) << "transA=" << ta << " transB=" << tb;
    }
  }
}

TEST(Gemm, Errors) {
  std::string msg;
  EXPECT_EQ(error_of("Gemm", {f32({2, 3}, kA), f32({2, 3}, kA)}, {}, &msg), ErrorKind::kInvalidArgument);
  EXPECT_NE(msg.find("inner"), std::string::npos) << msg;
  EXPECT_EQ(error_of("Gemm", {f32({2, 3}, kA), f32({3, 2}, kB), f32({3}, {1, 2, 3})}), ErrorKind::kInvalidArgument);
  EXPECT_EQ(error_of("Gemm", {f32({2, 3}, kA), f32({3, 2}, kB), f32({1, 2, 2}, {1, 2, 3, 4})}),
            ErrorKind::kInvalidArgument);
  EXPECT_EQ(error_of("Gemm", {f32({6}, kA), f32({3, 2}, kB)}), ErrorKind::kInvalidArgument);
  EXPECT_EQ(error_of("Gemm", {f32({2, 3}, kA), make_tensor<double>(DType::kFloat64, {3, 2}, {7, 8, 9, 10, 11, 12})}),
            ErrorKind::kInvalidModel);
}

TEST(MatMul, TwoD) {
  Tensor y = run_kernel("MatMul", {f32({2, 3}, kA), f32({3, 2}, kB)})[0];
  EXPECT_EQ(y.shape(), (Shape{2, 2}));
  EXPECT_EQ(values<float>(y), kAB);
}

TEST(MatMul, OneDimensionalOperands) {
  // [1 2 3] . [7 9 11] = 58: both promoted dims are dropped, leaving a scalar.
  Tensor dot = run_kernel("MatMul", {f32({3}, {1, 2, 3}), f32({3}, {7, 9, 11})})[0];
  EXPECT_EQ(dot.shape(), Shape{});
  EXPECT_EQ(values<float>(dot), (std::vector<float>{58}));
  // A vector on the left is a row: [1 2 3] B = [58 64], shape [2].
  Tensor row = run_kernel("MatMul", {f32({3}, {1, 2, 3}), f32({3, 2}, kB)})[0];
  EXPECT_EQ(row.shape(), (Shape{2}));
  EXPECT_EQ(values<float>(row), (std::vector<float>{58, 64}));
  // A vector on the right is a column: A [7 9 11] = [58 139], shape [2].
  Tensor col = run_kernel("MatMul", {f32({2, 3}, kA), f32({3}, {7, 9, 11})})[0];
  EXPECT_EQ(col.shape(), (Shape{2}));
  EXPECT_EQ(values<float>(col), (std::vector<float>{58, 139}));
  // A batched B with a vector A: [2, 3, 2] -> [2, 2].
  Tensor bb = f32({2, 3, 2}, {7, 8, 9, 10, 11, 12, 1, 0, 0, 1, 1, 1});
  Tensor batched = run_kernel("MatMul", {f32({3}, {1, 2, 3}), bb})[0];
  EXPECT_EQ(batched.shape(), (Shape{2, 2}));
  EXPECT_EQ(values<float>(batched), (std::vector<float>{58, 64, 4, 5}));
}

TEST(MatMul, BroadcastBatch) {
  // A [2, 1, 2, 2] holds (b + 1) * I; B [3, 2, 2] holds [[j 1] [2 j]]. Out [2, 3, 2, 2] = (b + 1) * B[j].
  Tensor a = f32({2, 1, 2, 2}, {1, 0, 0, 1, 2, 0, 0, 2});
  Tensor b = f32({3, 2, 2}, {0, 1, 2, 0, 1, 1, 2, 1, 2, 1, 2, 2});
  Tensor y = run_kernel("MatMul", {a, b})[0];
  ASSERT_EQ(y.shape(), (Shape{2, 3, 2, 2}));
  std::vector<float> expect;
  for (int bi = 0; bi < 2; ++bi)
    for (int j = 0; j < 3; ++j)
      for (float v : {float(j), 1.f, 2.f, float(j)}) expect.push_back(float(bi + 1) * v);
  EXPECT_EQ(values<float>(y), expect);
}

TEST(MatMul, BatchOnOneSideOnly) {
  // A [2, 1, 3] against a shared B [3, 2].
  Tensor y = run_kernel("MatMul", {f32({2, 1, 3}, {1, 2, 3, 4, 5, 6}), f32({3, 2}, kB)})[0];
  EXPECT_EQ(y.shape(), (Shape{2, 1, 2}));
  EXPECT_EQ(values<float>(y), kAB);
}

TEST(MatMul, IntegerAndDouble) {
  Tensor a = i64({2, 2}, {1, 2, 3, 4});
  Tensor y = run_kernel("MatMul", {a, a})[0];
  EXPECT_EQ(y.dtype(), DType::kInt64);
  EXPECT_EQ(values<int64_t>(y), (std::vector<int64_t>{7, 10, 15, 22}));
  Tensor ai = make_tensor<int32_t>(DType::kInt32, {1, 2}, {-3, 5});
  Tensor bi = make_tensor<int32_t>(DType::kInt32, {2, 1}, {2, 1});
  EXPECT_EQ(values<int32_t>(run_kernel("MatMul", {ai, bi})[0]), (std::vector<int32_t>{-1}));
  Tensor ad = make_tensor<double>(DType::kFloat64, {1, 2}, {0.5, 1.5});
  Tensor bd = make_tensor<double>(DType::kFloat64, {2}, {2, 2});
  EXPECT_EQ(values<double>(run_kernel("MatMul", {ad, bd})[0]), (std::vector<double>{4}));
}

TEST(MatMul, LargeBatchedMatchesNaiveLoop) {
  const int64_t batch = 3, m = 21, k = 260, n = 530;
  Tensor a = random_f32({batch, m, k}, 4);
  Tensor b = random_f32({batch, k, n}, 5);
  Tensor y = run_kernel("MatMul", {a, b})[0];
  float worst = 0;
  for (int64_t p = 0; p < batch; ++p)
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double acc = 0;
        for (int64_t l = 0; l < k; ++l)
          acc += double(a.data<float>()[(p * m + i) * k + l]) * b.data<float>()[(p * k + l) * n + j];
        worst = std::max(worst, float(std::fabs(acc - y.data<float>()[(p * m + i) * n + j])));
      }
  EXPECT_LT(worst, 1e-4f);
}

TEST(MatMul, Errors) {
  std::string msg;
  EXPECT_EQ(error_of("MatMul", {f32({2, 3}, kA), f32({2, 3}, kA)}, {}, &msg), ErrorKind::kInvalidArgument);
  EXPECT_NE(msg.find("MatMul 'test_MatMul'"), std::string::npos) << msg;
  EXPECT_EQ(error_of("MatMul", {f32({2, 1, 3}, kA), f32({3, 3, 1}, iota_f(9))}), ErrorKind::kInvalidArgument);
  EXPECT_EQ(error_of("MatMul", {f32({}, {1}), f32({1}, {1})}), ErrorKind::kInvalidArgument);
  EXPECT_EQ(error_of("MatMul", {f32({2}, {1, 2}), i64({2}, {1, 2})}), ErrorKind::kInvalidModel);
}

}  // namespace
}  // namespace anvil
