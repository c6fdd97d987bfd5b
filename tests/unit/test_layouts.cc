// Layouts in the planned tensor type: at optimization level 3 a chain of oneDNN
// convolutions and pooling stays in the layout the convolution chose, the
// planner reorders only at the chain's edges, and the results match a direct
// computation by hand.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <string>
#include <tuple>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "anvil/cpu.h"
#include "anvil/session.h"
#include "ir/graph.h"
#include "kernel_tester.h"

namespace anvil {
namespace {

Tensor random_tensor(Shape shape, unsigned seed) {
  Tensor t(DType::kFloat32, std::move(shape));
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = dist(gen);
  return t;
}

// Direct NCHW convolution, stride 1, padding `pad` on every side, no bias.
Tensor conv_by_hand(const Tensor& x, const Tensor& w, int64_t pad) {
  return anvil::testing::conv2d_by_hand(x, w, nullptr, anvil::testing::ConvByHand::padded(pad));
}

// 2x2 max pooling, stride 2.
Tensor maxpool_by_hand(const Tensor& x) {
  const int64_t n = x.shape()[0], c = x.shape()[1], h = x.shape()[2] / 2, w = x.shape()[3] / 2;
  Tensor y(DType::kFloat32, {n, c, h, w});
  for (int64_t p = 0; p < n * c; ++p)
    for (int64_t i = 0; i < h; ++i)
      for (int64_t j = 0; j < w; ++j) {
        const float* src = x.data<float>() + (p * x.shape()[2] + 2 * i) * x.shape()[3] + 2 * j;
        y.data<float>()[(p * h + i) * w + j] =
            std::max({src[0], src[1], src[x.shape()[3]], src[x.shape()[3] + 1]});
      }
  return y;
}

struct Chain {
  Tensor w1 = random_tensor({32, 16, 3, 3}, 1);
  Tensor w2 = random_tensor({16, 32, 3, 3}, 2);
  std::unique_ptr<ir::Graph> graph() const {
    auto g = std::make_unique<ir::Graph>();
    g->opsets[""] = 17;
    ir::Value* x = g->add_input("x", DType::kFloat32, {1, 16, 12, 12});
    ir::Node* c1 = g->add_node("Conv", {x, g->add_constant("w1", w1)}, 1, "conv1");
    c1->attrs.set("pads", std::vector<int64_t>{1, 1, 1, 1});
    ir::Node* pool = g->add_node("MaxPool", {c1->output(0)}, 1, "pool");
    pool->attrs.set("kernel_shape", std::vector<int64_t>{2, 2});
    pool->attrs.set("strides", std::vector<int64_t>{2, 2});
    ir::Node* c2 = g->add_node("Conv", {pool->output(0), g->add_constant("w2", w2)}, 1, "conv2");
    c2->attrs.set("pads", std::vector<int64_t>{1, 1, 1, 1});
    g->add_output(c2->output(0));
    return g;
  }
};

// The plan line of a node: "  MaxPool 'pool'  dnnl:jit:avx2  aBcd8b  [1,32,6,6]".
std::string line_of(const std::vector<std::string>& plan, const std::string& name) {
  for (const std::string& l : plan)
    if (l.find("'" + name + "'") != std::string::npos) return l;
  return "";
}

size_t index_of(const std::vector<std::string>& plan, const std::string& name) {
  for (size_t i = 0; i < plan.size(); ++i)
    if (plan[i].find("'" + name + "'") != std::string::npos) return i;
  return plan.size();
}

TEST(Layouts, ConvPoolConvChainStaysBlocked) {
  Chain chain;
  Session s = Session::from_graph(chain.graph());
  Tensor x = random_tensor({1, 16, 12, 12}, 3);
  std::vector<std::string> plan = s.describe_plan({{"x", x}});
  const size_t conv1 = index_of(plan, "conv1"), pool = index_of(plan, "pool"), conv2 = index_of(plan, "conv2");
  ASSERT_LT(conv2, plan.size());
  // No reorder inside the chain; the pool reads the conv's own (non-plain) layout.
  EXPECT_EQ(pool, conv1 + 1) << fmt::format("{}", fmt::join(plan, "\n"));
  EXPECT_EQ(conv2, pool + 1) << fmt::format("{}", fmt::join(plan, "\n"));
  EXPECT_EQ(line_of(plan, "pool").find(" plain "), std::string::npos) << line_of(plan, "pool");
  EXPECT_LE(s.plan_stats({{"x", x}}).reorders, 1u);  // at most one, at the graph input

  Tensor expected = conv_by_hand(maxpool_by_hand(conv_by_hand(x, chain.w1, 1)), chain.w2, 1);
  Tensor y = s.run({{"x", x}})[0];
  ASSERT_EQ(y.shape(), expected.shape());
  for (int64_t i = 0; i < y.numel(); ++i)
    ASSERT_NEAR(y.data<float>()[i], expected.data<float>()[i], 1e-3f) << "element " << i;
}

TEST(Layouts, PlainBetweenNodesAtLevelTwo) {
  Chain chain;
  SessionOptions o;
  o.optimization_level = 2;
  Session s = Session::from_graph(chain.graph(), o);
  Tensor x = random_tensor({1, 16, 12, 12}, 3);
  EXPECT_EQ(s.plan_stats({{"x", x}}).reorders, 0u);
  Tensor expected = conv_by_hand(maxpool_by_hand(conv_by_hand(x, chain.w1, 1)), chain.w2, 1);
  Tensor y = s.run({{"x", x}})[0];
  for (int64_t i = 0; i < y.numel(); ++i)
    ASSERT_NEAR(y.data<float>()[i], expected.data<float>()[i], 1e-3f) << "element " << i;
}

// A blocked value read by two plain-only kernels is reordered once, and the
// graph outputs come back plain and right.
TEST(Layouts, OneReorderServesEveryPlainConsumer) {
  Tensor w = random_tensor({16, 16, 3, 3}, 4);
  auto g = std::make_unique<ir::Graph>();
  g->opsets[""] = 17;
  ir::Value* x = g->add_input("x", DType::kFloat32, {1, 16, 8, 8});
  ir::Node* conv = g->add_node("Conv", {x, g->add_constant("w", w)}, 1, "conv");
  conv->attrs.set("pads", std::vector<int64_t>{1, 1, 1, 1});
  ir::Node* neg = g->add_node("Neg", {conv->output(0)}, 1, "neg");
  ir::Node* abs = g->add_node("Abs", {conv->output(0)}, 1, "abs");
  g->add_output(neg->output(0));
  g->add_output(abs->output(0));
  Session s = Session::from_graph(std::move(g));
  Tensor in = random_tensor({1, 16, 8, 8}, 5);
  std::vector<std::string> plan = s.describe_plan({{"x", in}});
  size_t to_plain = std::count_if(plan.begin(), plan.end(),
                                  [](const std::string& l) { return l.find("->abcd") != std::string::npos; });
  EXPECT_LE(to_plain, 1u) << fmt::format("{}", fmt::join(plan, "\n"));
  Tensor expected = conv_by_hand(in, w, 1);
  std::vector<Tensor> out = s.run({{"x", in}});
  for (int64_t i = 0; i < expected.numel(); ++i) {
    ASSERT_NEAR(out[0].data<float>()[i], -expected.data<float>()[i], 1e-3f) << "element " << i;
    ASSERT_NEAR(out[1].data<float>()[i], std::fabs(expected.data<float>()[i]), 1e-3f) << "element " << i;
  }
}

// Element-wise ops between convolutions (a unary op, a squeeze-and-excitation
// style scale by a [1, C, 1, 1] tensor, a residual sum of two same-shaped
// tensors) keep the layout their input arrives in, so the chain is not
// reordered to plain data and back around each of them; with 20 channels a
// blocked layout pads its last channel block, and then they take plain data
// (channels-last on AVX-512 has no padding and is kept).
// Against the computation by hand either way.
TEST(Layouts, ElementwiseOpsBetweenConvolutionsKeepTheirLayout) {
  for (const std::string op : {"Mul", "Div", "Sub"})
  for (int64_t channels : {16, 20}) {
    SCOPED_TRACE(fmt::format("{} channels, {}", channels, op));
    Tensor w1 = random_tensor({channels, channels, 3, 3}, 20), w2 = random_tensor({channels, channels, 3, 3}, 21);
    auto g = std::make_unique<ir::Graph>();
    g->opsets[""] = 17;
    ir::Value* x = g->add_input("x", DType::kFloat32, {1, channels, 8, 8});
    ir::Value* scale = g->add_input("scale", DType::kFloat32, {1, channels, 1, 1});
    ir::Node* c1 = g->add_node("Conv", {x, g->add_constant("w1", w1)}, 1, "conv1");
    c1->attrs.set("pads", std::vector<int64_t>{1, 1, 1, 1});
    ir::Node* neg = g->add_node("Neg", {c1->output(0)}, 1, "neg");
    ir::Node* mul = g->add_node(op, {neg->output(0), scale}, 1, "scale_mul");
    ir::Node* add = g->add_node("Add", {mul->output(0), c1->output(0)}, 1, "residual");
    ir::Node* c2 = g->add_node("Conv", {add->output(0), g->add_constant("w2", w2)}, 1, "conv2");
    c2->attrs.set("pads", std::vector<int64_t>{1, 1, 1, 1});
    g->add_output(c2->output(0));
    Session s = Session::from_graph(std::move(g));
    const Tensor in = random_tensor({1, channels, 8, 8}, 22), sc = random_tensor({1, channels, 1, 1}, 23);
    const std::map<std::string, Tensor> inputs = {{"x", in}, {"scale", sc}};
    const std::vector<std::string> plan = s.describe_plan(inputs);
    // With whole blocks in every layout a convolution picks; below AVX2
    // oneDNN has no JIT binary for blocked data, and the plain one is faster
    // than its reference kernel.
    const bool jit_binary = dnnl_isa_name() != "sse41" && dnnl_isa_name() != "avx";
    if (channels == 16 && jit_binary) {
      EXPECT_LE(s.plan_stats(inputs).reorders, 1u) << fmt::format("{}", fmt::join(plan, "\n"));  // the input's
      for (const char* name : {"neg", "scale_mul", "residual"})
        EXPECT_EQ(line_of(plan, name).find(" plain "), std::string::npos) << line_of(plan, name);
    }
    Tensor a = conv_by_hand(in, w1, 1);
    for (int64_t c = 0; c < channels; ++c)
      for (int64_t p = 0; p < 64; ++p) {
        float& v = a.data<float>()[c * 64 + p];
        const float k = sc.data<float>()[c];
        v = (op == "Mul" ? -v * k : op == "Div" ? -v / k : -v - k) + v;
      }
    const Tensor expected = conv_by_hand(a, w2, 1);
    const Tensor y = s.run(inputs)[0];
    ASSERT_EQ(y.shape(), expected.shape());
    for (int64_t i = 0; i < y.numel(); ++i)
      ASSERT_NEAR(y.data<float>()[i], expected.data<float>()[i], 1e-3f) << "element " << i;
  }
}

// Two convolutions concatenated along channels and read by a third
// (SqueezeNet's fire module): the Concat reads the convolutions' layout and,
// when every input fills whole channel blocks, copies rows itself (nChw8c /
// nChw16c at batch 1 is one row per input); with partial blocks oneDNN's
// concat runs. Against the convolutions by hand, at batch 1 and 2.
TEST(Layouts, ConcatOfBlockedConvolutions) {
  for (const auto& [c1, c2, whole_blocks] : {std::tuple{16, 32, true}, std::tuple{12, 20, false}}) {
    for (int64_t batch : {1, 2}) {
      SCOPED_TRACE(fmt::format("{} + {} channels, batch {}", c1, c2, batch));
      Tensor w1 = random_tensor({c1, 8, 3, 3}, 5), w2 = random_tensor({c2, 8, 3, 3}, 6);
      Tensor w3 = random_tensor({8, c1 + c2, 1, 1}, 7);
      auto g = std::make_unique<ir::Graph>();
      g->opsets[""] = 17;
      ir::Value* x = g->add_input("x", DType::kFloat32, {batch, 8, 10, 10});
      ir::Node* a = g->add_node("Conv", {x, g->add_constant("w1", w1)}, 1, "conv1");
      ir::Node* b = g->add_node("Conv", {x, g->add_constant("w2", w2)}, 1, "conv2");
      for (ir::Node* conv : {a, b}) conv->attrs.set("pads", std::vector<int64_t>{1, 1, 1, 1});
      ir::Node* cat = g->add_node("Concat", {a->output(0), b->output(0)}, 1, "cat");
      cat->attrs.set("axis", int64_t{1});
      ir::Node* c3 = g->add_node("Conv", {cat->output(0), g->add_constant("w3", w3)}, 1, "conv3");
      g->add_output(c3->output(0));
      Session s = Session::from_graph(std::move(g));
      Tensor xv = random_tensor({batch, 8, 10, 10}, 8);
      const std::vector<std::string> plan = s.describe_plan({{"x", xv}});
      const std::string cat_line = line_of(plan, "cat");
      if (whole_blocks) {  // no reorder around the Concat: it reads the convolutions' layout
        EXPECT_EQ(index_of(plan, "cat"), index_of(plan, "conv2") + 1) << fmt::format("{}", fmt::join(plan, "\n"));
        EXPECT_EQ(index_of(plan, "conv3"), index_of(plan, "cat") + 1) << fmt::format("{}", fmt::join(plan, "\n"));
        if (batch == 1) {
          EXPECT_NE(cat_line.find(" rows "), std::string::npos) << cat_line;
        }
      }
      const Tensor ya = conv_by_hand(xv, w1, 1), yb = conv_by_hand(xv, w2, 1);
      Tensor joined(DType::kFloat32, {batch, c1 + c2, 10, 10});
      const int64_t plane = 100;
      for (int64_t n = 0; n < batch; ++n) {
        std::copy_n(ya.data<float>() + n * c1 * plane, c1 * plane, joined.data<float>() + n * (c1 + c2) * plane);
        std::copy_n(yb.data<float>() + n * c2 * plane, c2 * plane, joined.data<float>() + (n * (c1 + c2) + c1) * plane);
      }
      const Tensor expected = conv_by_hand(joined, w3, 0);
      const Tensor y = s.run({{"x", xv}})[0];
      ASSERT_EQ(y.shape(), expected.shape());
      for (int64_t i = 0; i < y.numel(); ++i)
        ASSERT_NEAR(y.data<float>()[i], expected.data<float>()[i], 2e-3f) << "element " << i;
    }
  }
}

}  // namespace
}  // namespace anvil
