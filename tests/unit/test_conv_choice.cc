// The implementation rules of the convolutions (kernels/dnnl/conv.cc): a
// Winograd algorithm for 3x3 windows at stride 1 on output planes of 196
// pixels or more (oneDNN's on AVX-512, winograd_pd; Anvil's F(4x4, 3x3)
// where oneDNN's pick is jit:avx2, vec::conv_winograd), and oneDNN's jit_dw
// kernel for depthwise convolutions where it picks brdgmm_dw (AVX-512), on
// the same plane sizes. Checked against convolutions computed here in
// double, with the plan's implementations: which nodes take them, which
// stay on oneDNN's own pick, and the strided convolution after a Winograd
// one that keeps oneDNN's own layout. Named VecKernels.* so that ctest also
// runs them capped at sse41 (where no node may take either) and avx2.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <unistd.h>

#include <nlohmann/json.hpp>

#include "anvil/session.h"
#include "core/vector_isa.h"
#include "ir/graph.h"
#include "kernel_tester.h"
#include "kernels/dnnl/common.h"

namespace anvil {
namespace {

using testing::random_f32;
using testing::scalar_f32;

// ONNX's pads of a 2-D convolution: begin and end of each spatial axis.
struct Pads {
  int64_t top = 1, left = 1, bottom = 1, right = 1;
};

// relu?(conv(x, w) + bias + residual) for w [O, C, 3, 3], stride `stride`,
// zero padding `pads`, computed in double; residual null for none.
std::vector<float> conv3x3_by_hand(const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor* residual,
                                   bool relu, int64_t stride = 1, Pads pads = {}) {
  testing::ConvByHand geometry{stride, pads.top, pads.left, pads.bottom, pads.right, 1};
  std::vector<float> y = testing::values<float>(testing::conv2d_by_hand(x, w, &bias, geometry));
  for (size_t i = 0; i < y.size(); ++i) {
    if (residual) y[i] += residual->data<float>()[i];
    if (relu && y[i] < 0) y[i] = 0;
  }
  return y;
}

// Each value within 1e-4 x (1 + |want|), plus slack[i] where given.
void expect_near(const Tensor& got, const std::vector<float>& want, const std::vector<float>& slack = {}) {
  ASSERT_EQ(static_cast<size_t>(got.numel()), want.size());
  for (size_t i = 0; i < want.size(); ++i)
    ASSERT_NEAR(got.data<float>()[i], want[i], 1e-4f * (1 + std::abs(want[i])) + (slack.empty() ? 0.f : slack[i]))
        << "element " << i;
}

Tensor absolute(const Tensor& t) {
  Tensor a(DType::kFloat32, t.shape());
  for (int64_t i = 0; i < t.numel(); ++i) a.data<float>()[i] = std::abs(t.data<float>()[i]);
  return a;
}

// Anvil's F(4x4, 3x3) rounds more than a direct convolution: its error
// grows with the sum of the terms' magnitudes (about 1e-6 of it;
// test_conv_gemm.cc holds it to 1e-5), 1.6e-4 on 64 random channels. The
// slack of each output of conv(x, w) on it (plan_line's impl), else none.
std::vector<float> winograd_slack(const std::string& plan, const Tensor& x, const Tensor& w,
                                  testing::ConvByHand geometry = testing::ConvByHand::padded(1)) {
  if (plan.find("vec:") == std::string::npos || plan.find(":winograd") == std::string::npos) return {};
  std::vector<float> slack = testing::values<float>(testing::conv2d_by_hand(absolute(x), absolute(w), nullptr, geometry));
  for (float& v : slack) v = 1e-5f * (v + 4);
  return slack;
}

// Whether a node takes a Winograd convolution here: oneDNN's on AVX-512,
// Anvil's on AVX2 (and none with a cap below it).
bool winograd_expected() { return vector_isa() == VectorIsa::kAvx512 || vector_isa() == VectorIsa::kAvx2; }
// Whether oneDNN picks brdgmm_dw for depthwise convolutions: AVX-512 only.
bool jit_dw_expected() { return vector_isa() == VectorIsa::kAvx512; }

// The plan line of the node named `name`.
std::string plan_line(const Session& s, const Tensor& x, const std::string& name) {
  for (const std::string& line : s.describe_plan({{"x", x}}))
    if (line.find("'" + name + "'") != std::string::npos) return line;
  ADD_FAILURE() << "no step for " << name;
  return "";
}

ir::Node* conv3x3(ir::Graph& g, const std::string& name, std::vector<ir::Value*> inputs, int64_t stride = 1) {
  ir::Node* n = g.add_node("Conv", std::move(inputs), 1, name);
  n->attrs.set("pads", std::vector<int64_t>{1, 1, 1, 1});
  n->attrs.set("strides", std::vector<int64_t>{stride, stride});
  return n;
}

// A residual block's second convolution (bias, residual, ReLU: fused into
// one node by the optimizer; not a graph output, which is written plain) on
// a 16x16 plane (oneDNN's Winograd on AVX-512: F(2x2, 3x3) at batch 1, F(4x4,
// 3x3) at 2) and a 28x28 one (Anvil's F(4x4, 3x3) on AVX-512 too), at 1 and
// 2 threads.
TEST(VecKernels, ConvolutionsOnLargePlanesRunOnWinograd) {
  const Tensor w = random_f32({32, 32, 3, 3}, 2), bias = random_f32({32}, 3);
  for (int64_t side : {16, 28})
    for (int64_t batch : {1, 2})
      for (int threads : {1, 2}) {
        SCOPED_TRACE(::testing::Message() << side << "x" << side << ", batch " << batch << ", " << threads
                                          << " threads");
        auto g = std::make_unique<ir::Graph>();
        g->opsets[""] = 17;
        ir::Value* x = g->add_input("x", DType::kFloat32, {batch, 32, side, side});
        ir::Node* n = conv3x3(*g, "block", {x, g->add_constant("w", w), g->add_constant("b", bias)});
        ir::Value* sum = g->add_node("Add", {n->output(0), x}, 1)->output(0);
        ir::Value* relu = g->add_node("Relu", {sum}, 1)->output(0);
        g->add_output(g->add_node("Sigmoid", {relu}, 1)->output(0));  // the block's output is not the graph's
        SessionOptions options;
        options.num_threads = threads;
        Session s = Session::from_graph(std::move(g), options);
        const Tensor in = random_f32({batch, 32, side, side}, 1);
        const std::string line = plan_line(s, in, "block");
        EXPECT_EQ(line.find("wino") != std::string::npos, winograd_expected()) << line;
        if (winograd_expected()) {
          const bool anvil = vector_isa() == VectorIsa::kAvx2 || side * side >= 784;
          EXPECT_EQ(line.find("vec:") != std::string::npos, anvil) << line;
        }
        std::vector<float> want = conv3x3_by_hand(in, w, bias, &in, true);
        for (float& v : want) v = static_cast<float>(1 / (1 + std::exp(-double{v})));
        expect_near(s.run({{"x", in}})[0], want, winograd_slack(line, in, w));  // the sigmoid's slope is at most 1/4
      }
}

// oneDNN's Winograd takes a convolution only where its transformed weights
// per output pixel stay within what the rule allows (64 KiB): 512 channels
// in and out at 14x14 (F(2x2, 3x3) or F(4x4, 3x3): 85 or 192 KiB a pixel)
// at batch 1 run the direct algorithm; where more pixels share the weights
// (batch 4: 21 or 48 KiB) Winograd, as 256 channels at batch 1 (21 or 48
// KiB). AVX-512 only (oneDNN 2.6 has no Winograd below); the plans'
// choices only: the values of both algorithms are checked above.
TEST(VecKernels, WinogradWeightsMustPayForThemselves) {
  if (vector_isa() != VectorIsa::kAvx512) GTEST_SKIP() << "oneDNN's Winograd is AVX-512's";
  struct Case {
    int64_t channels, batch;
    bool winograd;
  };
  for (const Case& c : {Case{512, 1, false}, Case{512, 4, true}, Case{256, 1, true}}) {
    SCOPED_TRACE(::testing::Message() << c.channels << " channels, batch " << c.batch);
    auto g = std::make_unique<ir::Graph>();
    g->opsets[""] = 17;
    ir::Value* x = g->add_input("x", DType::kFloat32, {c.batch, c.channels, 14, 14});
    ir::Node* conv = conv3x3(*g, "conv", {x, g->add_constant("w", random_f32({c.channels, c.channels, 3, 3}, 27))});
    g->add_output(g->add_node("Neg", {conv->output(0)}, 1)->output(0));  // "conv" writes no graph output
    Session s = Session::from_graph(std::move(g));
    const std::string line = plan_line(s, random_f32({c.batch, c.channels, 14, 14}, 28), "conv");
    EXPECT_EQ(line.find("wino") != std::string::npos, c.winograd) << line;
  }
}

// Padding other than one pixel all round (none; more at the end than the
// start, and the reverse), at batch 1 and 3, on Winograd (oneDNN declines
// some paddings, two pixels for one: then the direct algorithm runs), values
// as by hand.
TEST(VecKernels, WinogradConvolutionsWithOtherPaddings) {
  const Tensor w = random_f32({16, 16, 3, 3}, 24), bias = random_f32({16}, 25);
  int on_winograd = 0;
  for (const Pads& pads : {Pads{0, 0, 0, 0}, Pads{0, 1, 1, 0}, Pads{1, 0, 0, 1}})
    for (int64_t batch : {1, 3}) {
      SCOPED_TRACE(::testing::Message() << "pads " << pads.top << pads.left << pads.bottom << pads.right << ", batch "
                                        << batch);
      auto g = std::make_unique<ir::Graph>();
      g->opsets[""] = 17;
      ir::Value* x = g->add_input("x", DType::kFloat32, {batch, 16, 20, 20});
      ir::Node* conv = conv3x3(*g, "conv", {x, g->add_constant("w", w), g->add_constant("b", bias)});
      conv->attrs.set("pads", std::vector<int64_t>{pads.top, pads.left, pads.bottom, pads.right});
      g->add_output(g->add_node("Neg", {conv->output(0)}, 1)->output(0));  // "conv" writes no graph output
      Session s = Session::from_graph(std::move(g));
      const Tensor in = random_f32({batch, 16, 20, 20}, 26);
      const std::string line = plan_line(s, in, "conv");
      on_winograd += line.find("wino") != std::string::npos;
      std::vector<float> want = conv3x3_by_hand(in, w, bias, nullptr, false, 1, pads);
      for (float& v : want) v = -v;
      expect_near(s.run({{"x", in}})[0], want,
                  winograd_slack(line, in, w, {1, pads.top, pads.left, pads.bottom, pads.right, 1}));
    }
  if (winograd_expected()) {
    EXPECT_EQ(on_winograd, 6);  // oneDNN (and Anvil) take each of these paddings
  } else {
    EXPECT_EQ(on_winograd, 0);
  }
}

// A 13x13 plane (169 pixels) stays on a direct algorithm (conv_gemm with
// AVX2); so does a
// strided convolution, which after a Winograd one (nChw16c) takes oneDNN's
// own layout (NHWC on AVX-512) rather than the blocks it receives.
TEST(VecKernels, SmallPlanesAndStridedConvolutionsStayDirect) {
  const Tensor w1 = random_f32({16, 16, 3, 3}, 4), b1 = random_f32({16}, 5);
  const Tensor w2 = random_f32({32, 16, 3, 3}, 6), b2 = random_f32({32}, 7);
  for (int64_t side : {13, 14}) {
    SCOPED_TRACE(::testing::Message() << side << "x" << side);
    auto g = std::make_unique<ir::Graph>();
    g->opsets[""] = 17;
    ir::Value* x = g->add_input("x", DType::kFloat32, {1, 16, side, side});
    ir::Node* first = conv3x3(*g, "first", {x, g->add_constant("w1", w1), g->add_constant("b1", b1)});
    ir::Node* second = conv3x3(*g, "strided", {first->output(0), g->add_constant("w2", w2), g->add_constant("b2", b2)}, 2);
    g->add_output(g->add_node("Neg", {second->output(0)}, 1)->output(0));  // not fused: "strided" writes no graph output
    Session s = Session::from_graph(std::move(g));
    const Tensor in = random_f32({1, 16, side, side}, 8);
    const std::string first_line = plan_line(s, in, "first"), strided_line = plan_line(s, in, "strided");
    EXPECT_EQ(first_line.find("wino") != std::string::npos, winograd_expected() && side == 14) << first_line;
    EXPECT_EQ(strided_line.find("wino"), std::string::npos) << strided_line;
    if (winograd_expected()) {
      EXPECT_EQ(strided_line.find("16b"), std::string::npos) << strided_line;
    }
    Tensor mid(DType::kFloat32, {1, 16, side, side});
    const std::vector<float> first_want = conv3x3_by_hand(in, w1, b1, nullptr, false);
    std::copy(first_want.begin(), first_want.end(), mid.data<float>());
    std::vector<float> want = conv3x3_by_hand(mid, w2, b2, nullptr, false, 2);
    for (float& v : want) v = -v;
    // The first convolution's slack, carried through the second.
    std::vector<float> slack;
    const std::vector<float> first_slack = winograd_slack(first_line, in, w1);
    if (!first_slack.empty()) {
      Tensor carried(DType::kFloat32, {1, 16, side, side});
      std::copy(first_slack.begin(), first_slack.end(), carried.data<float>());
      slack = testing::values<float>(
          testing::conv2d_by_hand(carried, absolute(w2), nullptr, testing::ConvByHand::padded(1, 2)));
    }
    expect_near(s.run({{"x", in}})[0], want, slack);
  }
}

// Winograd's transformed weights differ per batch size (F(2x2, 3x3) at 1,
// F(4x4, 3x3) above) and oneDNN cannot reorder them back: the session keeps
// the original weights for the next plan's packing instead of releasing
// them (before, every batch size after the first failed on that reorder).
TEST(VecKernels, WinogradWeightsServeEveryBatchSize) {
  const Tensor w = random_f32({64, 64, 3, 3}, 12), bias = random_f32({64}, 13);  // 144 KiB: worth releasing
  auto g = std::make_unique<ir::Graph>();
  g->opsets[""] = 17;
  ir::Value* x = g->add_input("x", DType::kFloat32, {-1, 64, 14, 14});
  // Copies the session alone holds: a caller's tensor is never released.
  ir::Node* conv = conv3x3(*g, "conv", {x, g->add_constant("w", w.clone()), g->add_constant("b", bias.clone())});
  g->add_output(g->add_node("Neg", {conv->output(0)}, 1)->output(0));
  Session s = Session::from_graph(std::move(g));
  for (int64_t batch : {1, 2, 1, 3}) {
    SCOPED_TRACE(::testing::Message() << "batch " << batch);
    const Tensor in = random_f32({batch, 64, 14, 14}, static_cast<uint32_t>(20 + batch));
    const std::string line = plan_line(s, in, "conv");
    EXPECT_EQ(line.find("wino") != std::string::npos, winograd_expected()) << line;
    std::vector<float> want = conv3x3_by_hand(in, w, bias, nullptr, false);
    for (float& v : want) v = -v;
    expect_near(s.run({{"x", in}})[0], want, winograd_slack(line, in, w));
  }
}

// A depthwise 3x3 (bias, ReLU6 as a Clip fused by the optimizer) at stride
// 1 and 2: jit_dw where the output plane has 196 pixels or more, oneDNN's
// own pick (brdgmm_dw on AVX-512) below.
TEST(VecKernels, DepthwiseConvolutionsOnLargePlanesRunOnJitDw) {
  const int64_t channels = 32;
  const Tensor w = random_f32({channels, 1, 3, 3}, 14), bias = random_f32({channels}, 15);
  for (int64_t side : {14, 28})
    for (int64_t stride : {1, 2}) {
      SCOPED_TRACE(::testing::Message() << side << "x" << side << ", stride " << stride);
      auto g = std::make_unique<ir::Graph>();
      g->opsets[""] = 17;
      ir::Value* x = g->add_input("x", DType::kFloat32, {1, channels, side, side});
      ir::Node* conv = conv3x3(*g, "dw", {x, g->add_constant("w", w), g->add_constant("b", bias)}, stride);
      conv->attrs.set("group", channels);
      ir::Node* clip = g->add_node("Clip", {conv->output(0), g->add_constant("lo", scalar_f32(0.f)),
                                            g->add_constant("hi", scalar_f32(6.f))}, 1);
      g->add_output(g->add_node("Neg", {clip->output(0)}, 1)->output(0));  // "dw" writes no graph output
      Session s = Session::from_graph(std::move(g));
      const Tensor in = random_f32({1, channels, side, side}, 16);
      const int64_t out_side = (side - 1) / stride + 1;
      const std::string line = plan_line(s, in, "dw");
      if (jit_dw_expected()) {
        EXPECT_EQ(line.find("jit_dw") != std::string::npos, out_side * out_side >= 196) << line;
      } else {
        EXPECT_EQ(line.find("avx512"), std::string::npos) << line;  // (jit_dw is oneDNN's own pick there)
      }
      testing::ConvByHand geometry = testing::ConvByHand::padded(1, stride);
      geometry.group = channels;
      std::vector<float> want = testing::values<float>(testing::conv2d_by_hand(in, w, &bias, geometry));
      for (float& v : want) v = -std::min(6.f, std::max(0.f, v));
      expect_near(s.run({{"x", in}})[0], want);
    }
}

// A network's first convolution reads its image of three channels in NCHW as
// it arrives and writes channel blocks on AVX-512 (oneDNN's jit kernel; its
// pick there, brgconv, wanted the image reordered to NHWC first), and the
// depthwise convolutions after it keep the blocks at either stride
// (jit_dw), so no reorder runs between them. Values against convolutions in
// double, at every ISA.
TEST(VecKernels, FirstConvolutionsReadTheImageAsItArrives) {
  const int64_t channels = 16;
  const Tensor w = random_f32({channels, 3, 3, 3}, 21), bias = random_f32({channels}, 22);
  const Tensor w_dw = random_f32({channels, 1, 3, 3}, 23), bias_dw = random_f32({channels}, 24);
  for (int64_t stride : {1, 2}) {
    SCOPED_TRACE(::testing::Message() << "depthwise stride " << stride);
    auto g = std::make_unique<ir::Graph>();
    g->opsets[""] = 17;
    ir::Value* x = g->add_input("x", DType::kFloat32, {1, 3, 30, 30});
    ir::Node* first = conv3x3(*g, "first", {x, g->add_constant("w", w), g->add_constant("b", bias)}, 2);
    ir::Node* relu = g->add_node("Relu", {first->output(0)}, 1);
    ir::Node* dw = conv3x3(*g, "dw", {relu->output(0), g->add_constant("w_dw", w_dw), g->add_constant("b_dw", bias_dw)},
                           stride);
    dw->attrs.set("group", channels);
    g->add_output(g->add_node("Neg", {dw->output(0)}, 1)->output(0));  // "dw" writes no graph output
    Session s = Session::from_graph(std::move(g));
    const Tensor in = random_f32({1, 3, 30, 30}, 25);
    if (vector_isa() == VectorIsa::kAvx512) {
      const std::string first_line = plan_line(s, in, "first"), dw_line = plan_line(s, in, "dw");
      EXPECT_NE(first_line.find("dnnl:jit:avx512"), std::string::npos) << first_line;
      EXPECT_NE(dw_line.find("jit_dw"), std::string::npos) << dw_line;
      EXPECT_NE(dw_line.find("aBcd16b"), std::string::npos) << dw_line;
      for (const std::string& line : s.describe_plan({{"x", in}}))  // only the result's, to plain for the Neg
        if (line.find("Reorder") != std::string::npos) {
          EXPECT_NE(line.find("'dw:out/plain'"), std::string::npos) << line;
        }
    }
    Tensor mid = testing::conv2d_by_hand(in, w, &bias, testing::ConvByHand::padded(1, 2));
    for (int64_t i = 0; i < mid.numel(); ++i) mid.data<float>()[i] = std::max(0.f, mid.data<float>()[i]);
    testing::ConvByHand geometry = testing::ConvByHand::padded(1, stride);
    geometry.group = channels;
    std::vector<float> want = testing::values<float>(testing::conv2d_by_hand(mid, w_dw, &bias_dw, geometry));
    for (float& v : want) v = -v;
    expect_near(s.run({{"x", in}})[0], want);
  }
}

// RegNet's block: 1x1, a grouped 3x3 (groups of 8 channels), 1x1. On AVX-512
// the 1x1 convolutions run brgconv in NHWC, and the grouped one keeps it
// (grouped_keeps_nhwc) rather than take oneDNN's pick of nChw8c between two
// reorders. Against the convolutions by hand, at every ISA.
TEST(VecKernels, GroupedConvolutionsKeepTheNhwcTheyArriveIn) {
  const Tensor w1 = random_f32({48, 16, 1, 1}, 31), w2 = random_f32({48, 8, 3, 3}, 32), w3 = random_f32({16, 48, 1, 1}, 33);
  const Tensor b1 = random_f32({48}, 34), b2 = random_f32({48}, 35), b3 = random_f32({16}, 36);
  auto g = std::make_unique<ir::Graph>();
  g->opsets[""] = 17;
  ir::Value* x = g->add_input("x", DType::kFloat32, {1, 16, 14, 14});
  ir::Node* pw1 = g->add_node("Conv", {x, g->add_constant("w1", w1), g->add_constant("b1", b1)}, 1, "pw1");
  ir::Node* grouped = conv3x3(*g, "grouped", {pw1->output(0), g->add_constant("w2", w2), g->add_constant("b2", b2)});
  grouped->attrs.set("group", int64_t{6});
  ir::Node* pw2 = g->add_node("Conv", {grouped->output(0), g->add_constant("w3", w3), g->add_constant("b3", b3)}, 1, "pw2");
  g->add_output(g->add_node("Neg", {pw2->output(0)}, 1)->output(0));  // "pw2" writes no graph output
  Session s = Session::from_graph(std::move(g));
  const Tensor in = random_f32({1, 16, 14, 14}, 37);
  if (vector_isa() == VectorIsa::kAvx512) {
    const std::string pw1_line = plan_line(s, in, "pw1"), grouped_line = plan_line(s, in, "grouped");
    EXPECT_NE(pw1_line.find(" acdb "), std::string::npos) << pw1_line;
    EXPECT_NE(grouped_line.find(" acdb "), std::string::npos) << grouped_line;
    for (const std::string& line : s.describe_plan({{"x", in}}))  // the input's into NHWC, the result's to plain
      if (line.find("Reorder") != std::string::npos) {
        EXPECT_TRUE(line.find("'x/") != std::string::npos || line.find("'pw2:out/plain'") != std::string::npos) << line;
      }
  }
  const Tensor mid = testing::conv2d_by_hand(in, w1, &b1, testing::ConvByHand::padded(0));
  testing::ConvByHand geometry = testing::ConvByHand::padded(1);
  geometry.group = 6;
  const Tensor mid2 = testing::conv2d_by_hand(mid, w2, &b2, geometry);
  std::vector<float> want = testing::values<float>(testing::conv2d_by_hand(mid2, w3, &b3, testing::ConvByHand::padded(0)));
  for (float& v : want) v = -v;
  expect_near(s.run({{"x", in}})[0], want);
}

// With tuning, the node's alternatives (oneDNN direct, Winograd where it
// has one) are each prepared by their index and timed, the faster kept;
// either computes the convolution.
TEST(VecKernels, TunedConvolutionsChooseBetweenDirectAndWinograd) {
  const std::string cache =
      (std::filesystem::temp_directory_path() / ("anvil_winograd_tune_" + std::to_string(::getpid()) + ".json"))
          .string();
  std::filesystem::remove(cache);
  const Tensor w = random_f32({16, 16, 3, 3}, 9), bias = random_f32({16}, 10);
  auto g = std::make_unique<ir::Graph>();
  g->opsets[""] = 17;
  ir::Value* x = g->add_input("x", DType::kFloat32, {1, 16, 20, 20});
  ir::Node* conv = conv3x3(*g, "conv", {x, g->add_constant("w", w), g->add_constant("b", bias)});
  g->add_output(g->add_node("Neg", {conv->output(0)}, 1)->output(0));  // "conv" writes no graph output
  SessionOptions options;
  options.tune = true;
  options.tune_cache = cache;
  {
    Session s = Session::from_graph(std::move(g), options);
    const Tensor in = random_f32({1, 16, 20, 20}, 11);
    std::vector<float> want = conv3x3_by_hand(in, w, bias, nullptr, false);
    for (float& v : want) v = -v;
    const Tensor got = s.run({{"x", in}})[0];  // tunes the plan: the line below reads its choice
    const std::string line = plan_line(s, in, "conv");
    expect_near(got, want, winograd_slack(line, in, w));
    if (winograd_expected()) {
      std::ifstream file(cache);
      ASSERT_TRUE(file) << cache;
      const nlohmann::json doc = nlohmann::json::parse(file);
      ASSERT_EQ(doc["choices"].size(), 1u) << doc.dump();
      const nlohmann::json& entry = doc["choices"].begin().value();
      // oneDNN's Winograd on AVX-512, Anvil's below; on AVX-512 Anvil's too
      // where 16 channels in NHWC are its channel blocks.
      const std::string winograd = vector_isa() == VectorIsa::kAvx512 ? "dnnl_winograd" : "winograd";
      EXPECT_TRUE(entry["median_ms"].contains("dnnl") && entry["median_ms"].contains(winograd)) << doc.dump();
      const std::string choice = entry["choice"];
      EXPECT_EQ(line.find("wino") != std::string::npos, choice.find("winograd") != std::string::npos)
          << line << doc.dump();
    }
  }
  std::filesystem::remove(cache);
  std::filesystem::remove(cache + ".lock");  // the tuner's lock file beside it
}

// 1-D convolutions (a depthwise one, which oneDNN may give brdgmm_dw) keep
// oneDNN's own pick: the rules are for 2-D ones, and read a plane's two
// sizes (under ASan, this test also guards that they read no further than
// a 1-D shape holds).
// On AVX-512 (oneDNN's pick brgconv), a 7x7 plane at batch 1 on one thread
// runs on Anvil's conv_gemm where the model's weights stream from memory
// (streamed_gemm_wanted): here a second, unrelated product makes them
// outgrow the threshold. On two threads, or with the weights resident, the
// convolution keeps oneDNN's pick. Below AVX-512 the older rule (conv_gemm
// where oneDNN's pick is jit:avx2, at any thread count) decides.
TEST(VecKernels, SmallPlanesOfStreamedModelsRunOnConvGemm) {
  const size_t threshold = kernels::dnnl_util::streaming_weight_bytes();
  if (threshold == 0) GTEST_SKIP() << "the CPU's last-level cache size is not known";
  const Tensor w = random_f32({32, 32, 3, 3}, 20), b = random_f32({32}, 21), in = random_f32({1, 32, 7, 7}, 22);
  const int64_t big_cols = static_cast<int64_t>(threshold / sizeof(float) / 64) + 64;  // 64 rows: past the threshold
  for (bool streamed : {false, true})
    for (int threads : {1, 2}) {
      SCOPED_TRACE(::testing::Message() << (streamed ? "streamed" : "resident") << ", " << threads << " threads");
      auto g = std::make_unique<ir::Graph>();
      g->opsets[""] = 17;
      ir::Value* x = g->add_input("x", DType::kFloat32, {1, 32, 7, 7});
      ir::Node* conv = conv3x3(*g, "conv", {x, g->add_constant("w", w), g->add_constant("b", b)});
      g->add_output(g->add_node("Neg", {conv->output(0)}, 1)->output(0));  // a graph output is written plain
      if (streamed) {
        ir::Value* row = g->add_input("r", DType::kFloat32, {1, 64});
        g->add_output(g->add_node("MatMul", {row, g->add_constant("big", random_f32({64, big_cols}, 23))}, 1)->output(0));
      }
      SessionOptions options;
      options.num_threads = threads;
      Session s = Session::from_graph(std::move(g), options);
      std::map<std::string, Tensor> feed{{"x", in}};
      if (streamed) feed["r"] = random_f32({1, 64}, 24);
      std::string line;
      for (const std::string& l : s.describe_plan(feed))
        if (l.find("'conv'") != std::string::npos) line = l;
      const bool avx512 = vector_isa() == VectorIsa::kAvx512;
      if (avx512) {
        EXPECT_EQ(line.find(":conv_gemm") != std::string::npos, streamed && threads == 1) << line;
      }
      std::vector<float> want = conv3x3_by_hand(in, w, b, nullptr, false);
      for (float& v : want) v = -v;
      expect_near(s.run(feed)[0], want);
    }
}

TEST(VecKernels, OneDimensionalConvolutionsKeepOnednnsPick) {
  const int64_t channels = 32, length = 300;
  const Tensor w = random_f32({channels, 1, 3}, 17), bias = random_f32({channels}, 18);
  auto g = std::make_unique<ir::Graph>();
  g->opsets[""] = 17;
  ir::Value* x = g->add_input("x", DType::kFloat32, {1, channels, length});
  ir::Node* conv = g->add_node("Conv", {x, g->add_constant("w", w), g->add_constant("b", bias)}, 1, "dw1d");
  conv->attrs.set("pads", std::vector<int64_t>{1, 1});
  conv->attrs.set("group", channels);
  g->add_output(g->add_node("Neg", {conv->output(0)}, 1)->output(0));
  Session s = Session::from_graph(std::move(g));
  const Tensor in = random_f32({1, channels, length}, 19);
  EXPECT_EQ(plan_line(s, in, "dw1d").find("jit_dw:avx512"), std::string::npos) << plan_line(s, in, "dw1d");
  const Tensor y = s.run({{"x", in}})[0];
  ASSERT_EQ(y.numel(), channels * length);
  for (int64_t c = 0; c < channels; ++c)
    for (int64_t i = 0; i < length; ++i) {
      double sum = bias.data<float>()[c];
      for (int64_t k = 0; k < 3; ++k)
        if (i - 1 + k >= 0 && i - 1 + k < length)
          sum += double{in.data<float>()[c * length + i - 1 + k]} * w.data<float>()[c * 3 + k];
      ASSERT_NEAR(y.data<float>()[c * length + i], -sum, 1e-4 * (1 + std::abs(sum))) << c << ", " << i;
    }
}

}  // namespace
}  // namespace anvil
