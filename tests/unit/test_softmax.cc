// Tests of the reference Softmax / LogSoftmax kernels (src/kernels/ref/softmax.cc): the axis semantics before
// opset 13 (coerce to 2-D) and from 13 (one axis), numerical stability, and errors.
#include <gtest/gtest.h>

#include <cmath>

#include "anvil/error.h"
#include "kernel_tester.h"

namespace anvil {
namespace {

using testing::f32;
using testing::make_tensor;
using testing::run_kernel;

ir::Attributes axis(int64_t a) {
  ir::Attributes attrs;
  attrs.set("axis", a);
  return attrs;
}

testing::KernelOptions opset(int version) {
  testing::KernelOptions o;
  o.opset = version;
  return o;
}

void expect_near(const Tensor& t, const std::vector<float>& expected, float tol = 1e-6f) {
  ASSERT_EQ(t.numel(), static_cast<int64_t>(expected.size()));
  for (size_t i = 0; i < expected.size(); ++i) EXPECT_NEAR(t.data<float>()[i], expected[i], tol) << "element " << i;
}

ErrorKind error_of(const std::string& op, const std::vector<Tensor>& inputs, const ir::Attributes& a,
                   const testing::KernelOptions& o) {
  try {
    run_kernel(op, inputs, a, o);
  } catch (const Error& e) {
    return e.kind();
  }
  ADD_FAILURE() << "no anvil::Error thrown";
  return ErrorKind::kInternal;
}

// softmax([0, ln 3]) = [1/4, 3/4]; softmax([0, 0]) = [1/2, 1/2]. X is [2,2]:
//   [[0,    ln3],
//    [0,    0  ]]
const float kLn3 = std::log(3.0f);

TEST(Softmax, LastAxisOpset13) {
  auto out = run_kernel("Softmax", {f32({2, 2}, {0, kLn3, 0, 0})}, {}, opset(13));
  EXPECT_EQ(out[0].shape(), (Shape{2, 2}));
  expect_near(out[0], {0.25f, 0.75f, 0.5f, 0.5f});
}

TEST(Softmax, AxisZeroOpset13) {
  // Along columns: column 0 is [0, 0] -> [1/2, 1/2]; column 1 is [ln3, 0] -> [3/4, 1/4].
  auto out = run_kernel("Softmax", {f32({2, 2}, {0, kLn3, 0, 0})}, axis(0), opset(13));
  expect_near(out[0], {0.5f, 0.75f, 0.5f, 0.25f});
}

TEST(Softmax, MiddleAxisOpset13) {
  // X [1,2,2] along axis 1 is the same column-wise normalisation as above, with a stride of 2.
  auto out = run_kernel("Softmax", {f32({1, 2, 2}, {0, kLn3, 0, 0})}, axis(1), opset(13));
  expect_near(out[0], {0.5f, 0.75f, 0.5f, 0.25f});
}

TEST(Softmax, Opset11CoercesTo2D) {
  // X [1,2,2] with the default axis 1 normalises all four elements together:
  // exp = [1, 3, 1, 1], sum 6.
  Tensor x = f32({1, 2, 2}, {0, kLn3, 0, 0});
  expect_near(run_kernel("Softmax", {x}, {}, opset(11))[0], {1 / 6.f, 3 / 6.f, 1 / 6.f, 1 / 6.f});
  // The same input at opset 13 normalises the last axis only.
  expect_near(run_kernel("Softmax", {x}, {}, opset(13))[0], {0.25f, 0.75f, 0.5f, 0.5f});
  // Opset 11 with axis 2 (or -1) gives rows of the last axis.
  expect_near(run_kernel("Softmax", {x}, axis(-1), opset(11))[0], {0.25f, 0.75f, 0.5f, 0.5f});
  // Axis 0: one row of everything.
  expect_near(run_kernel("Softmax", {x}, axis(0), opset(9))[0], {1 / 6.f, 3 / 6.f, 1 / 6.f, 1 / 6.f});
}

TEST(Softmax, LargeValuesAreStable) {
  // exp(1000) overflows; subtracting the max makes it softmax([0, -1000 + 1000...]).
  auto out = run_kernel("Softmax", {f32({3}, {1000, 1000, -1000})}, {}, opset(13));
  expect_near(out[0], {0.5f, 0.5f, 0});
  auto log = run_kernel("LogSoftmax", {f32({2}, {1000, 1000})}, {}, opset(13));
  expect_near(log[0], {-std::log(2.0f), -std::log(2.0f)});
}

TEST(LogSoftmax, AxesAndOpsets) {
  // log(1/4) = -1.3862944, log(3/4) = -0.2876821, log(1/2) = -0.6931472, log(1/6) = -1.7917595, log(1/2) ...
  Tensor x = f32({1, 2, 2}, {0, kLn3, 0, 0});
  expect_near(run_kernel("LogSoftmax", {x}, {}, opset(13))[0], {-1.3862944f, -0.2876821f, -0.6931472f, -0.6931472f});
  expect_near(run_kernel("LogSoftmax", {x}, axis(1), opset(13))[0],
              {-0.6931472f, -0.2876821f, -0.6931472f, -1.3862944f});
  expect_near(run_kernel("LogSoftmax", {x}, {}, opset(11))[0], {-1.7917595f, -0.6931472f, -1.7917595f, -1.7917595f});
}

TEST(Softmax, Float64) {
  Tensor x = make_tensor<double>(DType::kFloat64, {2}, {0, std::log(3.0)});
  auto out = run_kernel("Softmax", {x}, {}, opset(13));
  EXPECT_EQ(out[0].dtype(), DType::kFloat64);
  EXPECT_NEAR(out[0].data<double>()[0], 0.25, 1e-12);
  EXPECT_NEAR(out[0].data<double>()[1], 0.75, 1e-12);
}

TEST(Softmax, Errors) {
  EXPECT_EQ(error_of("Softmax", {f32({2, 2}, {0, 0, 0, 0})}, axis(2), opset(13)), ErrorKind::kInvalidArgument);
  EXPECT_EQ(error_of("Softmax", {f32({2, 2}, {0, 0, 0, 0})}, axis(-3), opset(11)), ErrorKind::kInvalidArgument);
  Tensor ints = make_tensor<int32_t>(DType::kInt32, {2}, {1, 2});
  EXPECT_EQ(error_of("LogSoftmax", {ints}, {}, opset(13)), ErrorKind::kUnsupported);
}

}  // namespace
}  // namespace anvil
