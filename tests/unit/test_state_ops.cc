// Tests of the decode-time state ops (src/kernels/ref/state_update.cc),
// RotaryEmbedding (attention.cc) and BitCast (cast.cc) against values worked
// out by hand from the ONNX definitions, and the inputs they refuse.
#include <gtest/gtest.h>

#include <cstring>

#include "kernel_tester.h"

namespace anvil {
namespace {

using testing::attrs;
using testing::error_kind_of;
using testing::f32;
using testing::i64;
using testing::opset;
using testing::run_kernel;
using testing::u8;
using testing::values;

// Taps {1, 10} over [0 (no past), 1, 2, 3]: y_i = x_{i-1} + 10 x_i; the state keeps the last step.
TEST(CausalConvWithState, ZeroPastThenTheLastSteps) {
  std::vector<Tensor> y = run_kernel("CausalConvWithState", {f32({1, 1, 3}, {1, 2, 3}), f32({1, 1, 2}, {1, 10})}, {},
                                     opset(27, 2));
  EXPECT_EQ(values<float>(y[0]), (std::vector<float>{10, 21, 32}));
  EXPECT_EQ(y[1].shape(), (Shape{1, 1, 1}));
  EXPECT_EQ(values<float>(y[1]), (std::vector<float>{3}));
  // With past_state 5 and a bias of 1: y_0 = 5 + 10 + 1.
  y = run_kernel("CausalConvWithState",
                 {f32({1, 1, 1}, {1}), f32({1, 1, 2}, {1, 10}), f32({1}, {1}), f32({1, 1, 1}, {5})}, {}, opset(27, 2));
  EXPECT_EQ(values<float>(y[0]), (std::vector<float>{16}));
  EXPECT_EQ(error_kind_of([&] {
              run_kernel("CausalConvWithState", {f32({1, 2, 3}, {1, 2, 3, 4, 5, 6}), f32({1, 1, 2}, {1, 10})}, {},
                         opset(27, 2));
            }),
            ErrorKind::kInvalidArgument);
}

// update_rule linear, one head of size 1, scale 1: S_t = S_{t-1} + k_t v_t, o_t = q_t S_t.
TEST(LinearAttention, LinearRuleAccumulatesOuterProducts) {
  ir::Attributes a = attrs({{"q_num_heads", int64_t{1}}, {"kv_num_heads", int64_t{1}}, {"scale", 1.f},
                            {"update_rule", std::string("linear")}});
  std::vector<Tensor> y = run_kernel(
      "LinearAttention", {f32({1, 2, 1}, {1, 2}), f32({1, 2, 1}, {2, 3}), f32({1, 2, 1}, {5, 7})}, a, opset(27, 2));
  EXPECT_EQ(values<float>(y[0]), (std::vector<float>{10, 62}));  // 1 * 10, 2 * (10 + 21)
  EXPECT_EQ(values<float>(y[1]), (std::vector<float>{31}));
  // gated: S_t = exp(g_t) S_{t-1} + k_t v_t with g = log 2 then 0, from past_state 1.
  ir::Attributes g = attrs({{"q_num_heads", int64_t{1}}, {"kv_num_heads", int64_t{1}}, {"scale", 1.f},
                            {"update_rule", std::string("gated")}});
  y = run_kernel("LinearAttention",
                 {f32({1, 1, 1}, {1}), f32({1, 1, 1}, {1}), f32({1, 1, 1}, {1}), f32({1, 1, 1, 1}, {1}),
                  f32({1, 1, 1}, {std::log(2.f)})},
                 g, opset(27, 2));
  EXPECT_NEAR(values<float>(y[1])[0], 3.f, 1e-6f);  // 2 * 1 + 1
  // The linear rule forbids a decay input: an invalid model.
  EXPECT_EQ(error_kind_of([&] {
              run_kernel("LinearAttention",
                         {f32({1, 1, 1}, {1}), f32({1, 1, 1}, {1}), f32({1, 1, 1}, {1}), Tensor(), f32({1, 1, 1}, {0})},
                         a, opset(27, 2));
            }),
            ErrorKind::kInvalidModel);
}

TEST(TensorScatter, WritesAtPerBatchPositions) {
  Tensor cache = f32({2, 3, 1}, {0, 0, 0, 0, 0, 0});
  std::vector<Tensor> y = run_kernel("TensorScatter", {cache, f32({2, 1, 1}, {7, 8}), i64({2}, {2, 0})}, {}, opset(24));
  EXPECT_EQ(values<float>(y[0]), (std::vector<float>{0, 0, 7, 8, 0, 0}));
  // Linear mode past the end is the caller's error; circular wraps around.
  EXPECT_EQ(error_kind_of([&] {
              run_kernel("TensorScatter", {cache, f32({2, 1, 1}, {7, 8}), i64({2}, {3, 0})}, {}, opset(24));
            }),
            ErrorKind::kInvalidArgument);
  y = run_kernel("TensorScatter", {cache, f32({2, 1, 1}, {7, 8}), i64({2}, {3, 0})},
                 attrs({{"mode", std::string("circular")}}), opset(24));
  EXPECT_EQ(values<float>(y[0]), (std::vector<float>{7, 0, 0, 8, 0, 0}));
}

// A quarter turn: cos 0, sin 1 maps (x1, x2) = (1, 0) to (0, 1).
TEST(RotaryEmbedding, RotatesPairsByPosition) {
  Tensor x = f32({1, 1, 1, 4}, {1, 2, 0, 5});  // [B, heads, S, size]: pairs (1, 0) and (2, 5)
  Tensor cos = f32({1, 1, 2}, {0, 1}), sin = f32({1, 1, 2}, {1, 0});
  std::vector<Tensor> y = run_kernel("RotaryEmbedding", {x, cos, sin}, {}, opset(23));
  EXPECT_EQ(values<float>(y[0]), (std::vector<float>{0, 2, 1, 5}));
  // Interleaved pairs are neighbours: (1, 2) turns to (-2, 1); (0, 5) stays.
  y = run_kernel("RotaryEmbedding", {x, cos, sin}, attrs({{"interleaved", int64_t{1}}}), opset(23));
  EXPECT_EQ(values<float>(y[0]), (std::vector<float>{-2, 1, 0, 5}));
  // A position id outside the caches.
  EXPECT_EQ(error_kind_of([&] {
              run_kernel("RotaryEmbedding", {x, f32({1, 2}, {0, 1}), f32({1, 2}, {1, 0}), i64({1, 1}, {1})}, {},
                         opset(23));
            }),
            ErrorKind::kInvalidArgument);
}

TEST(BitCast, ReinterpretsBitsOfTheSameWidth) {
  std::vector<Tensor> y = run_kernel("BitCast", {f32({2}, {1.f, -2.f})}, attrs({{"to", int64_t{6}}}), opset(26));
  EXPECT_EQ(values<int32_t>(y[0]), (std::vector<int32_t>{0x3f800000, static_cast<int32_t>(0xc0000000u)}));
  EXPECT_EQ(error_kind_of([&] { run_kernel("BitCast", {f32({1}, {1.f})}, attrs({{"to", int64_t{7}}}), opset(26)); }),
            ErrorKind::kInvalidModel);
}

// Into bool, any nonzero byte is true and becomes 1: kernels reading a bool
// that holds another byte would be undefined behaviour.
TEST(BitCast, IntoBoolEveryNonzeroByteIsOne) {
  std::vector<Tensor> y =
      run_kernel("BitCast", {u8({4}, {0, 0x81, 1, 0xff})}, attrs({{"to", int64_t{9}}}), opset(26));
  ASSERT_EQ(y[0].dtype(), DType::kBool);
  EXPECT_EQ(values<uint8_t>(y[0]), (std::vector<uint8_t>{0, 1, 1, 1}));
}

}  // namespace
}  // namespace anvil
