// RNN directions with per-batch sequence_lens, against the recurrence written
// out by hand: h_t = tanh(W x_t + R h_{t-1}), with one hidden unit.
#include <gtest/gtest.h>

#include <cmath>

#include "kernel_tester.h"

namespace anvil {
namespace {

using testing::f32;
using testing::run_kernel;

constexpr float kW = 0.5f, kR = 0.25f;
// x[t][b]: batch 1 has length 2, so its t = 2 entry must be ignored.
const float kX[3][2] = {{1.f, -1.f}, {2.f, 0.5f}, {3.f, 9.f}};

struct RnnRun {
  Tensor y, y_h;
};

RnnRun run_rnn(const std::string& direction) {
  const int64_t dirs = direction == "bidirectional" ? 2 : 1;
  std::vector<float> x;
  for (const auto& row : kX) x.insert(x.end(), {row[0], row[1]});
  ir::Attributes a;
  a.set("hidden_size", int64_t{1});
  a.set("direction", direction);
  testing::KernelOptions o;
  o.num_outputs = 2;
  Tensor lens = testing::make_tensor<int32_t>(DType::kInt32, {2}, {3, 2});
  auto out = run_kernel("RNN",
                        {f32({3, 2, 1}, x), f32({dirs, 1, 1}, std::vector<float>(dirs, kW)),
                         f32({dirs, 1, 1}, std::vector<float>(dirs, kR)), Tensor(), lens},
                        a, o);
  return {out[0], out[1]};
}

// Forward by hand: h over t = 0..len-1; zeros after the end; Y_h the last valid h.
TEST(Recurrent, RnnForwardStopsAtEachSequenceLength) {
  RnnRun r = run_rnn("forward");
  ASSERT_EQ(r.y.shape(), (Shape{3, 1, 2, 1}));
  const float b0_1 = std::tanh(kW * 1.f), b0_2 = std::tanh(kW * 2.f + kR * b0_1), b0_3 = std::tanh(kW * 3.f + kR * b0_2);
  const float b1_1 = std::tanh(kW * -1.f), b1_2 = std::tanh(kW * 0.5f + kR * b1_1);
  const float* y = r.y.data<float>();  // [t][dir][b]
  EXPECT_NEAR(y[0], b0_1, 1e-6f);
  EXPECT_NEAR(y[2], b0_2, 1e-6f);
  EXPECT_NEAR(y[4], b0_3, 1e-6f);
  EXPECT_NEAR(y[1], b1_1, 1e-6f);
  EXPECT_NEAR(y[3], b1_2, 1e-6f);
  EXPECT_EQ(y[5], 0.f);  // past batch 1's length
  EXPECT_NEAR(r.y_h.data<float>()[0], b0_3, 1e-6f);
  EXPECT_NEAR(r.y_h.data<float>()[1], b1_2, 1e-6f);
}

// Reverse by hand: each sequence starts at its own last step (len - 1) and
// ends at t = 0, which holds Y_h.
TEST(Recurrent, RnnReverseStartsAtEachSequencesOwnEnd) {
  RnnRun r = run_rnn("reverse");
  const float b0_2 = std::tanh(kW * 3.f), b0_1 = std::tanh(kW * 2.f + kR * b0_2), b0_0 = std::tanh(kW * 1.f + kR * b0_1);
  const float b1_1 = std::tanh(kW * 0.5f), b1_0 = std::tanh(kW * -1.f + kR * b1_1);
  const float* y = r.y.data<float>();
  EXPECT_NEAR(y[4], b0_2, 1e-6f);
  EXPECT_NEAR(y[2], b0_1, 1e-6f);
  EXPECT_NEAR(y[0], b0_0, 1e-6f);
  EXPECT_EQ(y[5], 0.f);
  EXPECT_NEAR(y[3], b1_1, 1e-6f);
  EXPECT_NEAR(y[1], b1_0, 1e-6f);
  EXPECT_NEAR(r.y_h.data<float>()[0], b0_0, 1e-6f);
  EXPECT_NEAR(r.y_h.data<float>()[1], b1_0, 1e-6f);
}

TEST(Recurrent, RnnBidirectionalHoldsBothDirections) {
  RnnRun fwd = run_rnn("forward"), rev = run_rnn("reverse"), both = run_rnn("bidirectional");
  ASSERT_EQ(both.y.shape(), (Shape{3, 2, 2, 1}));
  ASSERT_EQ(both.y_h.shape(), (Shape{2, 2, 1}));
  for (int t = 0; t < 3; ++t)
    for (int b = 0; b < 2; ++b) {
      EXPECT_FLOAT_EQ(both.y.data<float>()[(t * 2 + 0) * 2 + b], fwd.y.data<float>()[t * 2 + b]);
      EXPECT_FLOAT_EQ(both.y.data<float>()[(t * 2 + 1) * 2 + b], rev.y.data<float>()[t * 2 + b]);
    }
  for (int b = 0; b < 2; ++b) {
    EXPECT_FLOAT_EQ(both.y_h.data<float>()[b], fwd.y_h.data<float>()[b]);
    EXPECT_FLOAT_EQ(both.y_h.data<float>()[2 + b], rev.y_h.data<float>()[b]);
  }
}

}  // namespace
}  // namespace anvil
