// Layouts in the planned tensor type: at optimization level 3 a chain of oneDNN
// convolutions and pooling stays in the layout the convolution chose, the
// planner reorders only at the chain's edges, and the results match a direct
// computation by hand.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
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
#include "kernels/dnnl/common.h"
#include "relaid.h"

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

// An element-wise op between convolutions: x [N, C, S, S] -> conv1 -> Neg ->
// `op` with the operand `k` (a graph input of shape `operand`, first when
// operand_first) -> + conv1's output (a residual sum) -> conv2.
struct ElementwiseCase {
  std::string op;
  Shape operand;
  bool operand_first = false;
  int64_t batch = 1, channels = 16, size = 8;
  float k_lo = -1.f, k_hi = 1.f;  // the operand's values (a divisor away from zero)
};

std::unique_ptr<ir::Graph> elementwise_graph(const ElementwiseCase& c, const Tensor& w1, const Tensor& w2) {
  auto g = std::make_unique<ir::Graph>();
  g->opsets[""] = 17;
  ir::Value* x = g->add_input("x", DType::kFloat32, {c.batch, c.channels, c.size, c.size});
  ir::Value* k = g->add_input("k", DType::kFloat32, c.operand);
  ir::Node* c1 = g->add_node("Conv", {x, g->add_constant("w1", w1)}, 1, "conv1");
  c1->attrs.set("pads", std::vector<int64_t>{1, 1, 1, 1});
  ir::Node* neg = g->add_node("Neg", {c1->output(0)}, 1, "neg");
  ir::Node* op = g->add_node(c.op, c.operand_first ? std::vector<ir::Value*>{k, neg->output(0)}
                                                   : std::vector<ir::Value*>{neg->output(0), k},
                             1, "operand_op");
  ir::Node* add = g->add_node("Add", {op->output(0), c1->output(0)}, 1, "residual");
  ir::Node* c2 = g->add_node("Conv", {add->output(0), g->add_constant("w2", w2)}, 1, "conv2");
  c2->attrs.set("pads", std::vector<int64_t>{1, 1, 1, 1});
  g->add_output(c2->output(0));
  return g;
}

// The graph by hand, the operand broadcast as numpy does.
Tensor elementwise_by_hand(const ElementwiseCase& c, const Tensor& x, const Tensor& k, const Tensor& w1,
                           const Tensor& w2) {
  Tensor a = conv_by_hand(x, w1, 1);
  const Shape& s = a.shape();
  Shape kd(4 - c.operand.size(), 1);
  kd.insert(kd.end(), c.operand.begin(), c.operand.end());
  for (int64_t n = 0; n < s[0]; ++n)
    for (int64_t ch = 0; ch < s[1]; ++ch)
      for (int64_t h = 0; h < s[2]; ++h)
        for (int64_t w = 0; w < s[3]; ++w) {
          const int64_t ki = (((kd[0] == 1 ? 0 : n) * kd[1] + (kd[1] == 1 ? 0 : ch)) * kd[2] + (kd[2] == 1 ? 0 : h)) *
                                 kd[3] +
                             (kd[3] == 1 ? 0 : w);
          float& v = a.data<float>()[((n * s[1] + ch) * s[2] + h) * s[3] + w];
          const float l = c.operand_first ? k.data<float>()[ki] : -v, r = c.operand_first ? -v : k.data<float>()[ki];
          const float o = c.op == "Mul" ? l * r : c.op == "Div" ? l / r : c.op == "Sub" ? l - r : c.op == "Add" ? l + r
                                                                                               : std::max(l, r);
          v = o + v;
        }
  return conv_by_hand(a, w2, 1);
}

Tensor uniform_tensor(Shape shape, unsigned seed, float lo, float hi) {
  Tensor t = random_tensor(std::move(shape), seed);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = lo + (hi - lo) * (t.data<float>()[i] + 1) / 2;
  return t;
}

// Returns the plan at 2 threads, after checking the outputs against the
// computation by hand at 1 and 2 (a per-channel op runs in place at 1 only).
std::vector<std::string> check_elementwise_case(const ElementwiseCase& c) {
  const Tensor w1 = random_tensor({c.channels, c.channels, 3, 3}, 20), w2 = random_tensor({c.channels, c.channels, 3, 3}, 21);
  const Tensor x = random_tensor({c.batch, c.channels, c.size, c.size}, 22), k = uniform_tensor(c.operand, 23, c.k_lo, c.k_hi);
  const std::map<std::string, Tensor> inputs = {{"x", x}, {"k", k}};
  const Tensor expected = elementwise_by_hand(c, x, k, w1, w2);
  std::vector<std::string> plan;
  for (int threads : {1, 2}) {
    SessionOptions options;
    options.num_threads = threads;
    Session s = Session::from_graph(elementwise_graph(c, w1, w2), options);
    const Tensor y = s.run(inputs)[0];
    EXPECT_EQ(y.shape(), expected.shape());
    if (y.shape() == expected.shape())
      for (int64_t i = 0; i < y.numel(); ++i)
        if (std::fabs(y.data<float>()[i] - expected.data<float>()[i]) > 1e-3f * (1 + std::fabs(expected.data<float>()[i]))) {
          ADD_FAILURE() << threads << " threads, element " << i << ": " << y.data<float>()[i] << " against "
                        << expected.data<float>()[i];
          break;
        }
    plan = s.describe_plan(inputs);
  }
  return plan;
}

// Element-wise ops between convolutions (a unary op, a squeeze-and-excitation
// style scale by one value per channel, a residual sum of two same-shaped
// tensors) keep the layout their input arrives in, so the chain is not
// reordered to plain data and back around each of them; the per-channel op
// runs on Anvil's loop over whole pixels. With 20 channels a blocked layout
// pads its last channel block, and then they take plain data (channels-last
// on AVX-512 has no padding and is kept). Against the computation by hand.
TEST(Layouts, ElementwiseOpsBetweenConvolutionsKeepTheirLayout) {
  // Below AVX2 oneDNN has no JIT binary for blocked data (the residual sum
  // takes plain data there, faster than its reference kernel).
  const bool jit_binary = dnnl_isa_name() != "sse41" && dnnl_isa_name() != "avx";
  for (const char* op : {"Mul", "Div", "Sub"})
    for (int64_t channels : {16, 20}) {
      ElementwiseCase c{op, {1, channels, 1, 1}};
      c.channels = channels;
      if (c.op == "Div") c.k_lo = 0.5f, c.k_hi = 1.5f;
      SCOPED_TRACE(fmt::format("{} channels, {}", channels, op));
      const std::vector<std::string> plan = check_elementwise_case(c);
      if (channels == 16 && jit_binary) {  // whole blocks in every layout a convolution picks
        const size_t reorders = std::count_if(plan.begin(), plan.end(), [](const std::string& l) {
          return l.find("anvil.Reorder") != std::string::npos;
        });
        EXPECT_LE(reorders, 1u) << fmt::format("{}", fmt::join(plan, "\n"));  // the input's
        for (const char* name : {"neg", "operand_op", "residual"})
          EXPECT_EQ(line_of(plan, name).find(" plain "), std::string::npos) << line_of(plan, name);
        EXPECT_NE(line_of(plan, "operand_op").find(":per_channel"), std::string::npos) << line_of(plan, "operand_op");
      }
    }
}

// The other operands a binary op between convolutions meets, each against
// the computation by hand: the per-channel one first, at batch 2, over a
// tensor large enough to split between threads; Add and Max per channel; a
// scalar (no per-channel operand: [1, 1, 1, 1] after broadcasting); a
// same-shaped one of lower rank (no layout of the full rank to read it in).
TEST(Layouts, BinaryOpsBetweenConvolutionsTakeEveryOperand) {
  std::vector<ElementwiseCase> cases = {
      {"Mul", {1, 16, 1, 1}, true},  {"Mul", {1, 16, 1, 1}, false, 2}, {"Add", {1, 16, 1, 1}},
      {"Max", {1, 16, 1, 1}},        {"Add", {1}},                     {"Div", {1, 1, 1, 1}, false, 1, 16, 8, 0.5f, 1.5f},
      {"Add", {16, 8, 8}},           {"Sub", {8, 8}},
  };
  ElementwiseCase large{"Mul", {1, 16, 1, 1}};
  large.size = 64;  // 65,536 elements: the per-channel loop's threads
  cases.push_back(large);
  for (const ElementwiseCase& c : cases) {
    SCOPED_TRACE(fmt::format("{} by [{}]{}, batch {}, {}x{}", c.op, fmt::join(c.operand, ","),
                             c.operand_first ? " (first)" : "", c.batch, c.size, c.size));
    check_elementwise_case(c);
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

// DenseNet's layer: two convolutions concatenated, then BatchNormalization and
// ReLU (one anvil.FusedBatchNorm), then a 1x1 convolution. Over whole channel
// blocks the normalization reads the layout the Concat keeps, so nothing is
// reordered between the convolutions (20 channels make a partial block,
// where the blocked layouts go through plain data; AVX-512's NHWC has no
// blocks). Against the computation by hand, at batch 1 and 2.
TEST(Layouts, BatchNormAfterAConcatKeepsItsLayout) {
  for (const auto& [c1, c2] : {std::pair{16, 32}, std::pair{12, 8}}) {
    for (int64_t batch : {1, 2}) {
      const int64_t c = c1 + c2;
      SCOPED_TRACE(fmt::format("{} + {} channels, batch {}", c1, c2, batch));
      Tensor w1 = random_tensor({c1, 8, 3, 3}, 15), w2 = random_tensor({c2, 8, 3, 3}, 16);
      Tensor w3 = random_tensor({8, c, 1, 1}, 17);
      Tensor gamma = random_tensor({c}, 18), beta = random_tensor({c}, 19), mean = random_tensor({c}, 20);
      Tensor var = random_tensor({c}, 21);
      for (int64_t i = 0; i < c; ++i) var.data<float>()[i] += 1.5f;
      auto g = std::make_unique<ir::Graph>();
      g->opsets[""] = 17;
      ir::Value* x = g->add_input("x", DType::kFloat32, {batch, 8, 10, 10});
      ir::Node* a = g->add_node("Conv", {x, g->add_constant("w1", w1)}, 1, "conv1");
      ir::Node* b = g->add_node("Conv", {x, g->add_constant("w2", w2)}, 1, "conv2");
      for (ir::Node* conv : {a, b}) conv->attrs.set("pads", std::vector<int64_t>{1, 1, 1, 1});
      ir::Node* cat = g->add_node("Concat", {a->output(0), b->output(0)}, 1, "cat");
      cat->attrs.set("axis", int64_t{1});
      ir::Node* bn = g->add_node("BatchNormalization",
                                 {cat->output(0), g->add_constant("gamma", gamma), g->add_constant("beta", beta),
                                  g->add_constant("mean", mean), g->add_constant("var", var)},
                                 1, "bn");
      ir::Node* relu = g->add_node("Relu", {bn->output(0)}, 1, "relu");
      ir::Node* c3 = g->add_node("Conv", {relu->output(0), g->add_constant("w3", w3)}, 1, "conv3");
      g->add_output(c3->output(0));
      Session s = Session::from_graph(std::move(g));
      Tensor xv = random_tensor({batch, 8, 10, 10}, 22);
      const std::vector<std::string> plan = s.describe_plan({{"x", xv}});
      const std::string bn_line = line_of(plan, "bn");
      EXPECT_NE(bn_line.find("FusedBatchNorm"), std::string::npos) << fmt::format("{}", fmt::join(plan, "\n"));
      EXPECT_NE(bn_line.find(":batchnorm"), std::string::npos) << bn_line;
      if (c1 == 16) {  // no reorder from the first convolution to the last
        EXPECT_EQ(bn_line.find(" plain "), std::string::npos) << bn_line;
        EXPECT_EQ(index_of(plan, "bn"), index_of(plan, "cat") + 1) << fmt::format("{}", fmt::join(plan, "\n"));
        EXPECT_EQ(index_of(plan, "conv3"), index_of(plan, "bn") + 1) << fmt::format("{}", fmt::join(plan, "\n"));
      }
      const Tensor ya = conv_by_hand(xv, w1, 1), yb = conv_by_hand(xv, w2, 1);
      Tensor normalized(DType::kFloat32, {batch, c, 10, 10});
      const int64_t plane = 100;
      for (int64_t n = 0; n < batch; ++n)
        for (int64_t ch = 0; ch < c; ++ch) {
          const float* src = ch < c1 ? ya.data<float>() + (n * c1 + ch) * plane
                                     : yb.data<float>() + (n * c2 + ch - c1) * plane;
          const double k = gamma.data<float>()[ch] / std::sqrt(double(var.data<float>()[ch]) + 1e-5);
          for (int64_t i = 0; i < plane; ++i) {
            const double v = (src[i] - mean.data<float>()[ch]) * k + beta.data<float>()[ch];
            normalized.data<float>()[(n * c + ch) * plane + i] = static_cast<float>(std::max(v, 0.0));
          }
        }
      const Tensor expected = conv_by_hand(normalized, w3, 0);
      const Tensor y = s.run({{"x", xv}})[0];
      ASSERT_EQ(y.shape(), expected.shape());
      for (int64_t i = 0; i < y.numel(); ++i)
        ASSERT_NEAR(y.data<float>()[i], expected.data<float>()[i], 2e-3f) << "element " << i;
    }
  }
}

// A standalone Swish (after a max pool, so no convolution takes it as a
// post-op) runs Anvil's loop in the layout the pool writes (NHWC with
// AVX-512, nChw8c below), and the next convolution reads it there. 20
// channels would pad nChw8c: those go through plain data (values checked).
TEST(Layouts, SwishRunsInTheLayoutItArrivesIn) {
  for (int64_t c : {32, 24, 20}) {
    SCOPED_TRACE(fmt::format("{} channels", c));
    Tensor w = random_tensor({c, 8, 3, 3}, 41), w2 = random_tensor({8, c, 1, 1}, 42);
    auto g = std::make_unique<ir::Graph>();
    g->opsets[""] = 24;
    ir::Value* x = g->add_input("x", DType::kFloat32, {1, 8, 10, 10});
    ir::Node* conv = g->add_node("Conv", {x, g->add_constant("w", w)}, 1, "conv");
    conv->attrs.set("pads", std::vector<int64_t>{1, 1, 1, 1});
    ir::Node* pool = g->add_node("MaxPool", {conv->output(0)}, 1, "pool");
    pool->attrs.set("kernel_shape", std::vector<int64_t>{2, 2});
    pool->attrs.set("strides", std::vector<int64_t>{2, 2});
    ir::Node* swish = g->add_node("Swish", {pool->output(0)}, 1, "swish");
    swish->attrs.set("alpha", 1.5f);
    g->add_output(g->add_node("Conv", {swish->output(0), g->add_constant("w2", w2)}, 1, "conv2")->output(0));
    Session s = Session::from_graph(std::move(g));
    Tensor xv = random_tensor({1, 8, 10, 10}, 43);
    const std::vector<std::string> plan = s.describe_plan({{"x", xv}});
    const std::string line = line_of(plan, "swish");
    EXPECT_NE(line.find(":swish"), std::string::npos) << line;
    if (c != 20) {
      EXPECT_EQ(line.find(" plain "), std::string::npos) << line;
      EXPECT_EQ(index_of(plan, "swish"), index_of(plan, "pool") + 1) << fmt::format("{}", fmt::join(plan, "\n"));
      EXPECT_EQ(index_of(plan, "conv2"), index_of(plan, "swish") + 1) << fmt::format("{}", fmt::join(plan, "\n"));
    }
    const Tensor y1 = conv_by_hand(xv, w, 1);
    Tensor act(DType::kFloat32, {1, c, 5, 5});
    for (int64_t ch = 0; ch < c; ++ch)
      for (int64_t i = 0; i < 5; ++i)
        for (int64_t j = 0; j < 5; ++j) {
          float m = -std::numeric_limits<float>::infinity();
          for (int64_t di = 0; di < 2; ++di)
            for (int64_t dj = 0; dj < 2; ++dj) m = std::max(m, y1.data<float>()[(ch * 10 + 2 * i + di) * 10 + 2 * j + dj]);
          act.data<float>()[(ch * 5 + i) * 5 + j] = static_cast<float>(m / (1 + std::exp(-1.5 * m)));
        }
    const Tensor want = conv_by_hand(act, w2, 0);
    const Tensor got = s.run({{"x", xv}})[0];
    ASSERT_EQ(got.shape(), want.shape());
    for (int64_t i = 0; i < got.numel(); ++i)
      EXPECT_NEAR(got.data<float>()[i], want.data<float>()[i], 1e-4 * std::max(1.f, std::abs(want.data<float>()[i])))
          << i;
  }
}

// A convolution, then a squeeze-and-excitation block (GlobalAveragePool ->
// 1x1 -> Swish -> 1x1 -> Sigmoid: one anvil.SqueezeExcite) whose gates scale
// the convolution's output, then a 1x1 convolution. The block reads the
// layout the first convolution wrote (channel blocks below AVX-512, NHWC on
// it; 24 channels make a partial 16-block, which goes through plain data),
// and nothing is reordered between the convolutions. Against the
// computation by hand, at batch 1 and 2.
TEST(Layouts, SqueezeExciteReadsTheLayoutItArrivesIn) {
  for (int64_t c : {32, 24}) {
    for (int64_t batch : {1, 2}) {
      SCOPED_TRACE(fmt::format("{} channels, batch {}", c, batch));
      const int64_t r = 8;
      Tensor w = random_tensor({c, 8, 3, 3}, 31), w1 = random_tensor({r, c, 1, 1}, 32), b1 = random_tensor({r}, 33);
      Tensor w2 = random_tensor({c, r, 1, 1}, 34), b2 = random_tensor({c}, 35), w3 = random_tensor({8, c, 1, 1}, 36);
      auto g = std::make_unique<ir::Graph>();
      g->opsets[""] = 17;
      ir::Value* x = g->add_input("x", DType::kFloat32, {batch, 8, 10, 10});
      ir::Node* conv = g->add_node("Conv", {x, g->add_constant("w", w)}, 1, "conv");
      conv->attrs.set("pads", std::vector<int64_t>{1, 1, 1, 1});
      ir::Value* pooled = g->add_node("GlobalAveragePool", {conv->output(0)}, 1, "se")->output(0);
      ir::Value* h = g->add_node("Conv", {pooled, g->add_constant("w1", w1), g->add_constant("b1", b1)}, 1)->output(0);
      h = g->add_node("Mul", {h, g->add_node("Sigmoid", {h}, 1)->output(0)}, 1)->output(0);  // SiLU as exported
      ir::Value* e = g->add_node("Conv", {h, g->add_constant("w2", w2), g->add_constant("b2", b2)}, 1)->output(0);
      ir::Value* gates = g->add_node("Sigmoid", {e}, 1)->output(0);
      ir::Value* scaled = g->add_node("Mul", {conv->output(0), gates}, 1, "scale")->output(0);
      g->add_output(g->add_node("Conv", {scaled, g->add_constant("w3", w3)}, 1, "conv3")->output(0));
      Session s = Session::from_graph(std::move(g));
      Tensor xv = random_tensor({batch, 8, 10, 10}, 37);
      const std::vector<std::string> plan = s.describe_plan({{"x", xv}});
      const std::string se_line = line_of(plan, "se");
      EXPECT_NE(se_line.find("SqueezeExcite"), std::string::npos) << fmt::format("{}", fmt::join(plan, "\n"));
      EXPECT_NE(se_line.find(":squeeze_excite"), std::string::npos) << se_line;
      if (c == 32) {  // read where the convolution wrote it: no reorder before it
        EXPECT_EQ(se_line.find(" plain "), std::string::npos) << se_line;
        EXPECT_EQ(index_of(plan, "se"), index_of(plan, "conv") + 1) << fmt::format("{}", fmt::join(plan, "\n"));
      }
      const Tensor y1 = conv_by_hand(xv, w, 1);
      Tensor gated(DType::kFloat32, y1.shape());
      for (int64_t n = 0; n < batch; ++n) {
        std::vector<double> mean(static_cast<size_t>(c)), hid(static_cast<size_t>(r));
        for (int64_t ch = 0; ch < c; ++ch)
          for (int64_t i = 0; i < 100; ++i) mean[static_cast<size_t>(ch)] += y1.data<float>()[(n * c + ch) * 100 + i] / 100.0;
        for (int64_t j = 0; j < r; ++j) {
          double acc = b1.data<float>()[j];
          for (int64_t ch = 0; ch < c; ++ch) acc += double(w1.data<float>()[j * c + ch]) * mean[static_cast<size_t>(ch)];
          hid[static_cast<size_t>(j)] = acc / (1 + std::exp(-acc));
        }
        for (int64_t ch = 0; ch < c; ++ch) {
          double acc = b2.data<float>()[ch];
          for (int64_t j = 0; j < r; ++j) acc += double(w2.data<float>()[ch * r + j]) * hid[static_cast<size_t>(j)];
          const double gate = 1 / (1 + std::exp(-acc));
          for (int64_t i = 0; i < 100; ++i) {
            const int64_t at = (n * c + ch) * 100 + i;
            gated.data<float>()[at] = static_cast<float>(y1.data<float>()[at] * gate);
          }
        }
      }
      const Tensor expected = conv_by_hand(gated, w3, 0);
      const Tensor y = s.run({{"x", xv}})[0];
      ASSERT_EQ(y.shape(), expected.shape());
      for (int64_t i = 0; i < y.numel(); ++i)
        ASSERT_NEAR(y.data<float>()[i], expected.data<float>()[i], 2e-3f) << "element " << i;
    }
  }
}

Tensor int64s(std::vector<int64_t> v) {
  Tensor t(DType::kInt64, {static_cast<int64_t>(v.size())});
  std::copy(v.begin(), v.end(), t.data<int64_t>());
  return t;
}

// A ShuffleNet unit's data movement between 1x1 convolutions: Concat, the
// channel shuffle (one anvil.ChannelShuffle), two Slices of channels, then a
// convolution of one half and a Concat with the other. Where the
// convolutions run in NHWC (brgconv, AVX-512) every op between them keeps it
// (pixels:channel_shuffle, pixels:slice): the only reorders are the input's
// and the result's. Against the computation by hand, at batch 1 and 2.
TEST(Layouts, ChannelShuffleAndSlicesKeepNhwc) {
  for (const auto& [groups, batch] : {std::pair<int64_t, int64_t>{2, 1}, {2, 2}, {4, 2}}) {
    SCOPED_TRACE(fmt::format("{} groups, batch {}", groups, batch));
    Tensor w1 = random_tensor({32, 16, 1, 1}, 25), w2 = random_tensor({32, 16, 1, 1}, 26);
    Tensor w3 = random_tensor({32, 32, 1, 1}, 27);
    auto g = std::make_unique<ir::Graph>();
    g->opsets[""] = 13;
    ir::Value* x = g->add_input("x", DType::kFloat32, {batch, 16, 8, 8});
    ir::Node* a = g->add_node("Conv", {x, g->add_constant("w1", w1)}, 1, "conv1");
    ir::Node* b = g->add_node("Conv", {x, g->add_constant("w2", w2)}, 1, "conv2");
    ir::Node* cat = g->add_node("Concat", {a->output(0), b->output(0)}, 1, "cat");
    cat->attrs.set("axis", int64_t{1});
    ir::Node* split = g->add_node("Reshape", {cat->output(0), g->add_constant("split", int64s({batch, groups, 64 / groups, 8, 8}))}, 1);
    ir::Node* t = g->add_node("Transpose", {split->output(0)}, 1);
    t->attrs.set("perm", std::vector<int64_t>{0, 2, 1, 3, 4});
    ir::Node* shuffle = g->add_node("Reshape", {t->output(0), g->add_constant("merged", int64s({batch, 64, 8, 8}))}, 1,
                                    "shuffle");
    ir::Value* axis = g->add_constant("axis", int64s({1}));
    ir::Node* left = g->add_node("Slice", {shuffle->output(0), g->add_constant("s0", int64s({0})),
                                           g->add_constant("e0", int64s({32})), axis}, 1, "left");
    ir::Node* right = g->add_node("Slice", {shuffle->output(0), g->add_constant("s1", int64s({32})),
                                            g->add_constant("e1", int64s({64})), axis}, 1, "right");
    ir::Node* c3 = g->add_node("Conv", {right->output(0), g->add_constant("w3", w3)}, 1, "conv3");
    ir::Node* joined = g->add_node("Concat", {left->output(0), c3->output(0)}, 1, "joined");
    joined->attrs.set("axis", int64_t{1});
    g->add_output(g->add_node("Neg", {joined->output(0)}, 1, "neg")->output(0));
    Session s = Session::from_graph(std::move(g));
    Tensor xv = random_tensor({batch, 16, 8, 8}, 28);
    const std::vector<std::string> plan = s.describe_plan({{"x", xv}});
    EXPECT_NE(line_of(plan, "shuffle").find("ChannelShuffle"), std::string::npos) << fmt::format("{}", fmt::join(plan, "\n"));
    // NHWC convolutions (AVX-512; at batch 1 they write channel blocks for the Concat to join in place)
    if (line_of(plan, "conv1").find(" acdb ") != std::string::npos) {
      EXPECT_NE(line_of(plan, "shuffle").find("pixels:channel_shuffle"), std::string::npos) << line_of(plan, "shuffle");
      for (const char* name : {"left", "right"})
        EXPECT_NE(line_of(plan, name).find("pixels:slice"), std::string::npos) << line_of(plan, name);
      const size_t reorders = std::count_if(plan.begin(), plan.end(), [](const std::string& l) {
        return l.find("anvil.Reorder") != std::string::npos;
      });
      EXPECT_EQ(reorders, 2u) << fmt::format("{}", fmt::join(plan, "\n"));  // the input's and the result's
    }
    // By hand: shuffled channel c = j * groups + i is channel i * 64 / groups + j of [conv1, conv2].
    const Tensor ya = conv_by_hand(xv, w1, 0), yb = conv_by_hand(xv, w2, 0);
    const int64_t plane = 64;
    Tensor shuffled(DType::kFloat32, {batch, 64, 8, 8});
    for (int64_t n = 0; n < batch; ++n)
      for (int64_t c = 0; c < 64; ++c) {
        const int64_t from = c % groups * (64 / groups) + c / groups;
        const float* src = from < 32 ? ya.data<float>() + (n * 32 + from) * plane : yb.data<float>() + (n * 32 + from - 32) * plane;
        std::copy_n(src, plane, shuffled.data<float>() + (n * 64 + c) * plane);
      }
    Tensor right_half(DType::kFloat32, {batch, 32, 8, 8});
    for (int64_t n = 0; n < batch; ++n)
      std::copy_n(shuffled.data<float>() + (n * 64 + 32) * plane, 32 * plane, right_half.data<float>() + n * 32 * plane);
    const Tensor yc = conv_by_hand(right_half, w3, 0);
    const Tensor y = s.run({{"x", xv}})[0];
    ASSERT_EQ(y.shape(), (Shape{batch, 64, 8, 8}));
    for (int64_t n = 0; n < batch; ++n)
      for (int64_t c = 0; c < 64; ++c)
        for (int64_t p = 0; p < plane; ++p) {
          const float want = c < 32 ? shuffled.data<float>()[(n * 64 + c) * plane + p] : yc.data<float>()[(n * 32 + c - 32) * plane + p];
          ASSERT_NEAR(y.data<float>()[(n * 64 + c) * plane + p], -want, 2e-3f) << n << " " << c << " " << p;
        }
  }
}

// NCHW <-> NHWC copies of a 4-D float tensor (the data of the same logical tensor).
Tensor to_nhwc(const Tensor& x) {
  const int64_t n = x.shape()[0], c = x.shape()[1], hw = x.shape()[2] * x.shape()[3];
  Tensor y(DType::kFloat32, x.shape());
  for (int64_t b = 0; b < n; ++b)
    for (int64_t ch = 0; ch < c; ++ch)
      for (int64_t p = 0; p < hw; ++p) y.data<float>()[(b * hw + p) * c + ch] = x.data<float>()[(b * c + ch) * hw + p];
  return y;
}
Tensor from_nhwc(const Tensor& y) {
  const int64_t n = y.shape()[0], c = y.shape()[1], hw = y.shape()[2] * y.shape()[3];
  Tensor x(DType::kFloat32, y.shape());
  for (int64_t b = 0; b < n; ++b)
    for (int64_t ch = 0; ch < c; ++ch)
      for (int64_t p = 0; p < hw; ++p) x.data<float>()[(b * c + ch) * hw + p] = y.data<float>()[(b * hw + p) * c + ch];
  return x;
}

// The kernels that keep NHWC where their input arrives in it (channel
// Slices, ChannelShuffle, BatchNormalization and FusedBatchNorm), run on
// NHWC data directly, whatever layout this CPU's convolutions would pick,
// against the reference kernels on plain data: Slice bounds counted from
// the end and past it, groups of 2 and 3, batch 2.
TEST(Layouts, NhwcKernelsMatchTheReferenceKernels) {
  const Shape shape{2, 12, 3, 5};
  const Tensor x = random_tensor(shape, 31);
  struct Case {
    std::string op, domain;
    std::vector<Tensor> extra;  // inputs after X
    ir::Attributes attrs;
    const char* impl;
  };
  auto slice = [](int64_t start, int64_t end) {
    return std::vector<Tensor>{int64s({start}), int64s({end}), int64s({1})};
  };
  Tensor var = random_tensor({12}, 35);
  for (int64_t i = 0; i < 12; ++i) var.data<float>()[i] += 1.5f;
  const std::vector<Tensor> bn = {random_tensor({12}, 32), random_tensor({12}, 33), random_tensor({12}, 34), var};
  ir::Attributes group2, group3, relu;
  group2.set("group", int64_t{2});
  group3.set("group", int64_t{3});
  relu.set("activation", std::string("Relu"));
  const std::vector<Case> cases = {
      {"Slice", "", slice(0, 6), {}, "pixels:slice"},
      {"Slice", "", slice(-5, std::numeric_limits<int64_t>::max()), {}, "pixels:slice"},
      {"Slice", "", slice(3, 11), {}, "pixels:slice"},
      {"ChannelShuffle", "anvil", {}, group2, "pixels:channel_shuffle"},
      {"ChannelShuffle", "anvil", {}, group3, "pixels:channel_shuffle"},
      {"BatchNormalization", "", bn, {}, ":batchnorm"},
      {"FusedBatchNorm", "anvil", bn, relu, ":batchnorm"},
  };
  const kernels::Layout nhwc = kernels::dnnl_util::layout_of(kernels::dnnl_util::nhwc_desc(shape), shape, DType::kFloat32);
  for (const Case& c : cases) {
    SCOPED_TRACE(c.op + " " + std::to_string(&c - cases.data()));
    std::vector<Tensor> plain = {x}, blocked = {to_nhwc(x)};
    plain.insert(plain.end(), c.extra.begin(), c.extra.end());
    blocked.insert(blocked.end(), c.extra.begin(), c.extra.end());
    testing::KernelOptions ref, own;
    ref.domain = own.domain = c.domain;
    if (c.op == "BatchNormalization" || c.op == "FusedBatchNorm")
      ref.constant_inputs = own.constant_inputs = {false, true, true, true, true};
    own.backend = kernels::Backend::kDnnl;
    own.incoming_layouts = {nhwc};
    const Tensor want = testing::run_kernel(c.op, plain, c.attrs, ref)[0];
    const testing::KernelResult got = testing::run_kernel_full(c.op, blocked, c.attrs, own);
    EXPECT_NE(got.impl.find(c.impl), std::string::npos) << got.impl;
    const Tensor y = from_nhwc(got.outputs[0]);
    ASSERT_EQ(y.shape(), want.shape());
    for (int64_t i = 0; i < y.numel(); ++i) ASSERT_NEAR(y.data<float>()[i], want.data<float>()[i], 1e-5f) << i;
  }
}

using testing::relaid;

// DepthToSpace reading pixel layouts (pixels:depth_to_space): NHWC and the
// ISA's channel blocks; DCR and CRD; output channels that fill the blocks
// (16), that do not (8 on AVX-512: the output is plain then) and one (the
// super-resolution net's, whose NHWC is its plain layout); writing the
// input's format where the plan lets it and plain where not (a graph
// output); against the reference kernel on plain data. (The output's
// reported layout is taken as the input's format where that fills: the
// tester returns no layouts.)
TEST(Layouts, DepthToSpaceReadsPixelLayouts) {
  namespace du = kernels::dnnl_util;
  // 16, 8, 1 and 3 output channels; batch 2 with blocks filled; one channel
  // from blocks (b 4); blocksize 1 and 5; CRD taps across a block boundary
  // (144 = 16 x 9 channels, b 3); a tensor large enough to split between threads.
  const std::pair<Shape, int64_t> shapes[] = {{{1, 64, 3, 5}, 2},  {{2, 32, 2, 3}, 2}, {{1, 9, 4, 3}, 3},
                                              {{2, 12, 3, 5}, 2},  {{2, 64, 3, 5}, 2}, {{1, 16, 6, 7}, 4},
                                              {{1, 16, 3, 3}, 1},  {{1, 25, 3, 3}, 5}, {{1, 144, 2, 3}, 3},
                                              {{2, 64, 24, 24}, 2}};
  for (du::Format format : {&du::nhwc_desc, &du::blocked_desc})
    for (const auto& [shape, block] : shapes)
      for (const char* mode : {"DCR", "CRD"})
        for (bool blocked_out : {true, false}) {
          const dnnl::memory::desc x_md = format(shape);
          if (!du::pixel_layout(x_md)) continue;  // channels that do not fill the blocks
          SCOPED_TRACE(fmt::format("{} {} {}, blocksize {}, blocked output {}", format == &du::nhwc_desc ? "NHWC" : "blocks",
                                   shape_str(shape), mode, block, blocked_out));
          const Tensor x = random_tensor(shape, 51);
          ir::Attributes a;
          a.set("blocksize", block);
          a.set("mode", std::string(mode));
          testing::KernelOptions ref, own;
          own.backend = kernels::Backend::kDnnl;
          own.incoming_layouts = {du::layout_of(x_md, shape, DType::kFloat32)};
          own.blocked_outputs = blocked_out;
          const Tensor want = testing::run_kernel("DepthToSpace", {x}, a, ref)[0];
          const testing::KernelResult got =
              testing::run_kernel_full("DepthToSpace", {relaid(x, du::plain_desc(shape, DType::kFloat32), x_md)}, a, own);
          EXPECT_EQ(got.impl, "pixels:depth_to_space");
          const Shape& ys = want.shape();
          const dnnl::memory::desc y_md = format(ys);
          const bool laid_out = blocked_out && du::pixel_layout(y_md).has_value();
          const Tensor y = laid_out ? relaid(got.outputs[0], y_md, du::plain_desc(ys, DType::kFloat32)) : got.outputs[0];
          ASSERT_EQ(y.shape(), ys);
          for (int64_t i = 0; i < y.numel(); ++i) ASSERT_EQ(y.data<float>()[i], want.data<float>()[i]) << i;
        }
}


// Resize on pixel layouts (pixels:resize, and pixels:resize_copy where every
// output pixel copies one): NHWC, the ISA's channel blocks and plain NCHW
// (arriving so, and with no layouts allowed); nearest x2 as YOLO upsamples,
// nearest with floor, linear with half_pixel and align_corners, cubic with
// exclude_outside, antialiased downsampling, a crop reaching outside the
// input (extrapolation_value), Upsample-9; the output in the input's format
// or plain; against the reference kernel on plain data. The taps both take
// from resize_spec are checked by the ONNX backend suite's resize cases,
// which run this kernel on 4-D float32 data.
TEST(Layouts, ResizeReadsPixelLayouts) {
  namespace du = kernels::dnnl_util;
  struct Case {
    Shape shape;
    std::vector<float> scales;
    std::vector<int64_t> sizes;
    ir::Attributes attrs;
    std::vector<float> roi;
    int opset = 13;
    const char* impl = "pixels:resize";
  };
  auto with = [](std::initializer_list<std::pair<const char*, ir::AttrValue>> list) { return testing::attrs(list); };
  const std::string floor = "floor", linear = "linear", cubic = "cubic";
  const Case cases[] = {
      {{1, 32, 5, 7}, {1, 1, 2, 2}, {}, {}, {}, 13, "pixels:resize_copy"},
      {{2, 64, 24, 24}, {1, 1, 2, 2}, {}, {}, {}, 13, "pixels:resize_copy"},
      {{2, 16, 4, 3}, {1, 1, 2, 3}, {}, with({{"coordinate_transformation_mode", std::string("asymmetric")}, {"nearest_mode", floor}}), {}, 13, "pixels:resize_copy"},
      {{1, 16, 6, 5}, {}, {1, 16, 9, 8}, with({{"mode", linear}}), {}},
      {{2, 32, 5, 6}, {1, 1, 2, 1.5f}, {}, with({{"mode", linear}}), {}},  // blending at batch 2
      {{1, 48, 5, 5}, {1, 1, 1.5f, 0.5f}, {}, with({{"mode", linear}, {"coordinate_transformation_mode", std::string("align_corners")}}), {}},
      {{1, 16, 7, 9}, {1, 1, 0.5f, 0.4f}, {}, with({{"mode", linear}, {"antialias", int64_t{1}}}), {}, 18},
      {{1, 16, 4, 4}, {1, 1, 2, 2}, {}, with({{"mode", cubic}, {"exclude_outside", int64_t{1}}, {"cubic_coeff_a", -0.5f}}), {}},
      {{1, 16, 4, 5}, {}, {1, 16, 5, 6}, with({{"mode", linear}, {"coordinate_transformation_mode", std::string("tf_crop_and_resize")}, {"extrapolation_value", 7.5f}}), {0, 0, -0.2f, 0.1f, 1, 1, 1.3f, 0.8f}},
      // a crop reaching past both ends of the width too (samples outside along each axis)
      {{1, 16, 4, 5}, {}, {1, 16, 6, 7}, with({{"mode", linear}, {"coordinate_transformation_mode", std::string("tf_crop_and_resize")}, {"extrapolation_value", -3.f}}), {0, 0, -0.3f, -0.4f, 1, 1, 1.2f, 1.5f}},
      {{1, 16, 3, 4}, {1, 1, 2, 2}, {}, {}, {}, 9, "pixels:resize_copy"},  // Upsample: asymmetric, floor
  };
  enum class Arrives { kNhwc, kBlocks, kPlain, kNoLayouts };
  for (const Case& c : cases)
    for (Arrives arrives : {Arrives::kNhwc, Arrives::kBlocks, Arrives::kPlain, Arrives::kNoLayouts})
      for (bool blocked_out : {true, false}) {
        const du::Format format = arrives == Arrives::kNhwc ? &du::nhwc_desc : arrives == Arrives::kBlocks ? &du::blocked_desc : nullptr;
        const dnnl::memory::desc plain_md = du::plain_desc(c.shape, DType::kFloat32);
        const dnnl::memory::desc x_md = format ? format(c.shape) : plain_md;
        if (!du::pixel_layout(x_md) && format) continue;  // channels that do not fill the blocks
        const bool upsample = c.opset == 9;
        SCOPED_TRACE(fmt::format("{} {}, arriving as {}, blocked output {}", upsample ? "Upsample" : "Resize", shape_str(c.shape),
                                 static_cast<int>(arrives), blocked_out));
        const Tensor x = random_tensor(c.shape, 52);
        const Tensor scales = c.scales.empty() ? Tensor() : testing::f32({static_cast<int64_t>(c.scales.size())}, c.scales);
        const Tensor sizes = c.sizes.empty() ? Tensor() : testing::i64({static_cast<int64_t>(c.sizes.size())}, c.sizes);
        const Tensor roi = c.roi.empty() ? Tensor() : testing::f32({static_cast<int64_t>(c.roi.size())}, c.roi);
        testing::KernelOptions ref, own;
        ref.opset = own.opset = c.opset;
        ref.constant_inputs = own.constant_inputs = upsample ? std::vector<bool>{false, true} : std::vector<bool>{false, true, true, true};
        own.backend = kernels::Backend::kDnnl;
        if (arrives != Arrives::kNoLayouts) own.incoming_layouts = {format ? du::layout_of(x_md, c.shape, DType::kFloat32) : nullptr};
        own.blocked_outputs = blocked_out;
        const char* op = upsample ? "Upsample" : "Resize";
        auto inputs = [&](const Tensor& data) {
          return upsample ? std::vector<Tensor>{data, scales} : std::vector<Tensor>{data, roi, scales, sizes};
        };
        const Tensor want = testing::run_kernel(op, inputs(x), c.attrs, ref)[0];
        const testing::KernelResult got = testing::run_kernel_full(op, inputs(relaid(x, plain_md, x_md)), c.attrs, own);
        EXPECT_EQ(got.impl, c.impl);
        const Shape& ys = want.shape();
        const dnnl::memory::desc y_md = format ? format(ys) : du::plain_desc(ys, DType::kFloat32);
        const bool laid_out = format && blocked_out && arrives != Arrives::kNoLayouts && du::pixel_layout(y_md).has_value();
        const Tensor y = laid_out ? relaid(got.outputs[0], y_md, du::plain_desc(ys, DType::kFloat32)) : got.outputs[0];
        ASSERT_EQ(y.shape(), ys);
        for (int64_t i = 0; i < y.numel(); ++i)
          ASSERT_NEAR(y.data<float>()[i], want.data<float>()[i], 1e-5f * (1 + std::fabs(want.data<float>()[i]))) << i;
      }
}

// Transpose [0, 2, 3, 1] of an image arriving in NHWC or the ISA's channel
// blocks (pixels:transpose): y[n, h, w, c] = x[n, c, h, w], by hand; YOLO's
// 255 channels (NHWC only: blocks would be padded), whole blocks at batch 2.
// It leaves plain images, padded blocks and other permutations alone.
TEST(Layouts, TransposeToChannelsLastReadsPixelLayouts) {
  namespace du = kernels::dnnl_util;
  for (const Shape& shape : {Shape{1, 255, 5, 7}, Shape{2, 32, 4, 3}, Shape{1, 64, 2, 1}})
    for (du::Format format : {&du::nhwc_desc, &du::blocked_desc}) {
      const dnnl::memory::desc x_md = format(shape);
      if (!du::pixel_layout(x_md)) continue;  // channels that do not fill the blocks
      SCOPED_TRACE(fmt::format("{} {}", format == &du::nhwc_desc ? "NHWC" : "blocks", shape_str(shape)));
      const Tensor x = random_tensor(shape, 54);
      testing::KernelOptions own;
      own.backend = kernels::Backend::kDnnl;
      own.incoming_layouts = {du::layout_of(x_md, shape, DType::kFloat32)};
      const testing::KernelResult got = testing::run_kernel_full(
          "Transpose", {relaid(x, du::plain_desc(shape, DType::kFloat32), x_md)},
          testing::attrs({{"perm", std::vector<int64_t>{0, 2, 3, 1}}}), own);
      EXPECT_EQ(got.impl, "pixels:transpose");
      const Tensor& y = got.outputs[0];
      const int64_t c_count = shape[1], h_count = shape[2], w_count = shape[3];
      ASSERT_EQ(y.shape(), (Shape{shape[0], h_count, w_count, c_count}));
      for (int64_t n = 0; n < shape[0]; ++n)
        for (int64_t c = 0; c < c_count; ++c)
          for (int64_t h = 0; h < h_count; ++h)
            for (int64_t w = 0; w < w_count; ++w)
              ASSERT_EQ(y.data<float>()[((n * h_count + h) * w_count + w) * c_count + c],
                        x.data<float>()[((n * c_count + c) * h_count + h) * w_count + w])
                  << n << " " << c << " " << h << " " << w;
    }
  const Shape shape{1, 16, 3, 3};
  const Tensor x = random_tensor(shape, 55);
  const std::pair<const char*, std::vector<int64_t>> declined[] = {{"plain", {0, 2, 3, 1}}, {"NHWC", {0, 3, 1, 2}}};
  for (const auto& [arrives, perm] : declined) {
    SCOPED_TRACE(arrives);
    testing::KernelOptions own;
    own.backend = kernels::Backend::kDnnl;
    const dnnl::memory::desc x_md = std::string(arrives) == "NHWC" ? du::nhwc_desc(shape) : du::plain_desc(shape, DType::kFloat32);
    own.incoming_layouts = {du::layout_of(x_md, shape, DType::kFloat32)};
    try {
      testing::run_kernel("Transpose", {relaid(x, du::plain_desc(shape, DType::kFloat32), x_md)},
                          testing::attrs({{"perm", perm}}), own);
      ADD_FAILURE() << "took it";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kUnsupported) << e.what();
    }
  }
}

// InstanceNormalization reading the pixel layout it arrives in
// (pixels:instance_norm): channels last (NWC, NHWC, NDHWC) and the ISA's
// channel blocks of each; one image and two, channel groups of 64 and a
// remainder (80), planes large enough to split between threads; against
// the normalization by hand in double. Its output keeps the input's layout;
// where the plan wants it plain (a graph output) it declines.
TEST(Layouts, InstanceNormReadsPixelLayouts) {
  namespace du = kernels::dnnl_util;
  using tag = dnnl::memory::format_tag;
  const int64_t block = du::channel_block(Shape{1, 16, 1, 1});
  const auto format_of = [&](size_t rank, bool channels_last) {
    const tag last[] = {tag::nwc, tag::nhwc, tag::ndhwc};
    const tag blocks[] = {block == 16 ? tag::nCw16c : tag::nCw8c, block == 16 ? tag::nChw16c : tag::nChw8c,
                          block == 16 ? tag::nCdhw16c : tag::nCdhw8c};
    return (channels_last ? last : blocks)[rank - 3];
  };
  const Shape shapes[] = {{1, 32, 37}, {2, 48, 5, 7}, {1, 80, 3, 3}, {1, 16, 2, 3, 4}, {1, 256, 300}, {2, 8, 2, 2},
                          {1, 4, 33}};
  for (const Shape& shape : shapes)
    for (bool channels_last : {true, false})
      for (bool blocked_out : {true, false}) {
        if (!channels_last && shape[1] % block != 0) continue;  // blocks would be padded (below)
        const dnnl::memory::desc plain_md = du::plain_desc(shape, DType::kFloat32);
        const dnnl::memory::desc x_md(du::dims(shape), dnnl::memory::data_type::f32, format_of(shape.size(), channels_last));
        const std::optional<du::PixelLayout> px = du::spatial_pixel_layout(x_md);
        ASSERT_TRUE(px.has_value());
        const int64_t pixels_of = shape_numel(shape) / (shape[0] * shape[1]);
        const int64_t runs = channels_last ? shape[1] : block;  // channels a pixel holds together
        EXPECT_EQ(*px, (du::PixelLayout{runs, runs, shape[0] * (shape[1] / runs), pixels_of * runs}));
        SCOPED_TRACE(fmt::format("{} {}, blocked output {}", channels_last ? "channels last" : "blocks", shape_str(shape),
                                 blocked_out));
        const int64_t n_count = shape[0], c_count = shape[1], pixels = shape_numel(shape) / (n_count * c_count);
        Tensor x = random_tensor(shape, 56);
        for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = x.data<float>()[i] * 3 + static_cast<float>(i % 5);
        const int64_t plane = shape_numel(shape) / (shape[0] * shape[1]);
        std::fill(x.data<float>() + plane, x.data<float>() + 2 * plane, 7.25f);  // channel 1: no spread
        const Tensor scale = random_tensor({c_count}, 57), bias = random_tensor({c_count}, 58);
        testing::KernelOptions own;
        own.backend = kernels::Backend::kDnnl;
        own.incoming_layouts = {du::layout_of(x_md, shape, DType::kFloat32)};
        own.blocked_outputs = blocked_out;
        own.num_threads = 2;
        const std::vector<Tensor> inputs = {relaid(x, plain_md, x_md), scale, bias};
        const ir::Attributes attrs = testing::attrs({{"epsilon", 1e-3f}});
        if (!blocked_out) {  // a plain output: the planner reorders the input for the vectorized kernel
          try {
            testing::run_kernel("InstanceNormalization", inputs, attrs, own);
            ADD_FAILURE() << "wrote a plain output";
          } catch (const Error& e) {
            EXPECT_EQ(e.kind(), ErrorKind::kUnsupported) << e.what();
          }
          continue;
        }
        const testing::KernelResult got = testing::run_kernel_full("InstanceNormalization", inputs, attrs, own);
        EXPECT_EQ(got.impl, "pixels:instance_norm");
        const Tensor y = relaid(got.outputs[0], x_md, plain_md);
        ASSERT_EQ(y.shape(), shape);
        for (int64_t n = 0; n < n_count; ++n)
          for (int64_t c = 0; c < c_count; ++c) {
            const float* xp = x.data<float>() + (n * c_count + c) * pixels;
            double mean = 0, variance = 0;
            for (int64_t i = 0; i < pixels; ++i) mean += xp[i];
            mean /= static_cast<double>(pixels);
            for (int64_t i = 0; i < pixels; ++i) variance += (xp[i] - mean) * (xp[i] - mean);
            variance /= static_cast<double>(pixels);
            const double factor = scale.data<float>()[c] / std::sqrt(variance + 1e-3);
            for (int64_t i = 0; i < pixels; ++i) {
              const double want = (xp[i] - mean) * factor + bias.data<float>()[c];
              ASSERT_NEAR(y.data<float>()[(n * c_count + c) * pixels + i], want, 1e-5 * (1 + std::fabs(want)))
                  << n << " " << c << " " << i;
            }
          }
      }
  // A plain input is the vectorized kernel's (vec/normalization.cc), and so
  // is one in padded channel blocks (20 channels).
  const Shape padded{1, 20, 5, 5};
  const dnnl::memory::desc padded_md = du::blocked_desc(padded);
  const std::pair<Shape, kernels::Layout> declined[] = {
      {{1, 16, 9}, nullptr}, {padded, du::layout_of(padded_md, padded, DType::kFloat32)}};
  for (const auto& [shape, layout] : declined) {
    testing::KernelOptions own;
    own.backend = kernels::Backend::kDnnl;
    own.incoming_layouts = {layout};
    Tensor storage(DType::kFloat32, Shape{static_cast<int64_t>(padded_md.get_size() / sizeof(float))});
    // In padded blocks: a view of the padded bytes, as laid out.
    const Tensor x = layout ? Tensor::view(DType::kFloat32, shape, storage.raw()) : random_tensor(shape, 59);
    try {
      testing::run_kernel("InstanceNormalization", {x, random_tensor({shape[1]}, 60), random_tensor({shape[1]}, 61)}, {}, own);
      ADD_FAILURE() << "took " << (layout ? "padded blocks" : "a plain input");
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kUnsupported) << e.what();
    }
  }
}

// GroupNormalization in the pixel layout it arrives in (the InstanceNorm
// kernel's, groups of several channels pooled): against the definition in
// double, groups of one to all channels, scale and bias per channel
// (opset 21) and per group (18), a group of constant values, channels last
// and in blocks, groups that span blocks and blocks that span groups.
TEST(Layouts, GroupNormReadsPixelLayouts) {
  namespace du = kernels::dnnl_util;
  using tag = dnnl::memory::format_tag;
  const int64_t block = du::channel_block(Shape{1, 16, 1, 1});
  struct Case {
    Shape shape;
    int64_t groups;
    bool channels_last;
    int opset;
  };
  const Case cases[] = {
      {{2, 32, 5, 7}, 1, true, 21},  {{1, 32, 5, 7}, 4, false, 21}, {{1, 64, 3, 3}, 2, false, 21},
      {{2, 48, 9}, 3, true, 21},     {{1, 32, 2, 3, 4}, 8, true, 18},
      {{1, 32, 6, 6}, 32, false, 18}, {{1, 160, 2, 2}, 5, true, 21},
      {{1, 96, 4, 4}, 32, true, 18},   // a group across the 64-channel chunks' boundary
      {{2, 64, 16, 17}, 4, false, 21},  // enough to split between threads
  };
  for (const Case& c : cases) {
    const Shape& shape = c.shape;
    const tag last[] = {tag::nwc, tag::nhwc, tag::ndhwc};
    const tag blocks[] = {block == 16 ? tag::nCw16c : tag::nCw8c, block == 16 ? tag::nChw16c : tag::nChw8c,
                          block == 16 ? tag::nCdhw16c : tag::nCdhw8c};
    const tag format = (c.channels_last ? last : blocks)[shape.size() - 3];
    SCOPED_TRACE(fmt::format("{} {} groups, {}, opset {}", shape_str(shape), c.groups,
                             c.channels_last ? "channels last" : "blocks", c.opset));
    const dnnl::memory::desc plain_md = du::plain_desc(shape, DType::kFloat32);
    const dnnl::memory::desc x_md(du::dims(shape), dnnl::memory::data_type::f32, format);
    const int64_t n_count = shape[0], c_count = shape[1], pixels = shape_numel(shape) / (n_count * c_count);
    const int64_t per_group = c_count / c.groups;
    Tensor x = random_tensor(shape, 66);
    for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = x.data<float>()[i] * 3 + static_cast<float>(i % 7);
    std::fill(x.data<float>(), x.data<float>() + per_group * pixels, 2.5f);  // image 0's group 0: no spread
    const int64_t params = c.opset >= 21 ? c_count : c.groups;
    const Tensor scale = random_tensor({params}, 67), bias = random_tensor({params}, 68);
    testing::KernelOptions own;
    own.backend = kernels::Backend::kDnnl;
    own.opset = c.opset;
    own.incoming_layouts = {du::layout_of(x_md, shape, DType::kFloat32)};
    own.num_threads = 2;
    const ir::Attributes attrs = testing::attrs({{"epsilon", 1e-3f}, {"num_groups", c.groups}});
    const testing::KernelResult got =
        testing::run_kernel_full("GroupNormalization", {relaid(x, plain_md, x_md), scale, bias}, attrs, own);
    EXPECT_EQ(got.impl, "pixels:group_norm");
    const Tensor y = relaid(got.outputs[0], x_md, plain_md);
    for (int64_t n = 0; n < n_count; ++n)
      for (int64_t g = 0; g < c.groups; ++g) {
        const float* xg = x.data<float>() + (n * c_count + g * per_group) * pixels;
        const int64_t count = per_group * pixels;
        double mean = 0, variance = 0;
        for (int64_t i = 0; i < count; ++i) mean += xg[i];
        mean /= static_cast<double>(count);
        for (int64_t i = 0; i < count; ++i) variance += (xg[i] - mean) * (xg[i] - mean);
        variance /= static_cast<double>(count);
        for (int64_t i = 0; i < count; ++i) {
          const int64_t ch = g * per_group + i / pixels, p = c.opset >= 21 ? ch : g;
          const double want = (xg[i] - mean) / std::sqrt(variance + 1e-3) * scale.data<float>()[p] + bias.data<float>()[p];
          ASSERT_NEAR(y.data<float>()[(n * c_count + g * per_group) * pixels + i], want, 1e-5 * (1 + std::fabs(want)))
              << n << " " << g << " " << i;
        }
      }
  }
}

// What the pixel-layout Resize leaves to the reference kernel: resizing the
// channels or the batch, and other ranks.
TEST(Layouts, ResizeLeavesOtherAxesToTheReference) {
  testing::KernelOptions own;
  own.backend = kernels::Backend::kDnnl;
  own.opset = 13;
  own.constant_inputs = {false, true, true};
  const Tensor x = random_tensor({1, 4, 3, 3}, 53);
  for (const std::vector<float>& s : {std::vector<float>{1, 2, 1, 1}, std::vector<float>{2, 1, 1, 1}}) {
    try {
      testing::run_kernel("Resize", {x, Tensor(), testing::f32({4}, s)}, {}, own);
      ADD_FAILURE() << "took a resize of the channels or the batch";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kUnsupported) << e.what();
      EXPECT_NE(std::string(e.what()).find("resizes the batch or the channels"), std::string::npos) << e.what();
    }
  }
  try {
    testing::run_kernel("Resize", {random_tensor({2, 3, 4}, 54), Tensor(), testing::f32({3}, {1, 1, 2})}, {}, own);
    ADD_FAILURE() << "took a 3-D tensor";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kUnsupported) << e.what();
    EXPECT_NE(std::string(e.what()).find("not a float32 image"), std::string::npos) << e.what();
  }
}


// A Concat whose float32 images arrive in different pixel formats (YOLO's
// upsampled maps in channel blocks beside NHWC ones) concatenates in the
// format that carries the most bytes, the other inputs read in it (the
// planner reorders them), rather than in plain data; where that format
// would pad an input's channel blocks, in plain data. Against the inputs
// concatenated by hand.
TEST(Layouts, ConcatOfMixedFormatsTakesTheLargestInputsFormat) {
  namespace du = kernels::dnnl_util;
  const int64_t block = du::channel_block({1, 16, 4, 5});
  struct Case {
    Shape a, b;            // a arrives in NHWC, b in channel blocks
    du::Format expected;  // the format both are read in and the output written in; null: plain
  };
  const Case cases[] = {
      {{1, 2 * block, 4, 5}, {1, block, 4, 5}, &du::nhwc_desc},     // NHWC carries more
      {{1, block, 4, 5}, {1, 3 * block, 4, 5}, &du::blocked_desc},  // the blocks carry more
      {{1, 4, 4, 5}, {1, block, 4, 5}, nullptr},                    // the blocks, which would pad 4 channels
  };
  for (const Case& c : cases)
    for (bool blocked_out : {true, false}) {  // false: a graph output, concatenated in plain data
      const du::Format expected = blocked_out ? c.expected : nullptr;
      SCOPED_TRACE(fmt::format("{} in NHWC, {} in blocks, blocked output {}", shape_str(c.a), shape_str(c.b), blocked_out));
      const Tensor a = random_tensor(c.a, 55), b = random_tensor(c.b, 56);
      testing::KernelOptions own;
      own.backend = kernels::Backend::kDnnl;
      own.incoming_layouts = {du::layout_of(du::nhwc_desc(c.a), c.a, DType::kFloat32),
                              du::layout_of(du::blocked_desc(c.b), c.b, DType::kFloat32)};
      own.blocked_outputs = blocked_out;
      // The inputs as the kernel reads them (the planner's reorders): in the expected format, or plain.
      auto as_read = [&](const Tensor& t) {
        return expected ? relaid(t, du::plain_desc(t.shape(), DType::kFloat32), expected(t.shape())) : t;
      };
      const testing::KernelResult got = testing::run_kernel_full(
          "Concat", {as_read(a), as_read(b)}, testing::attrs({{"axis", int64_t{1}}}), own);
      const Shape ys{1, c.a[1] + c.b[1], 4, 5};
      const Tensor y = expected ? relaid(got.outputs[0], expected(ys), du::plain_desc(ys, DType::kFloat32)) : got.outputs[0];
      ASSERT_EQ(y.shape(), ys);
      for (int64_t ch = 0; ch < ys[1]; ++ch)
        for (int64_t p = 0; p < 20; ++p) {
          const float want = ch < c.a[1] ? a.data<float>()[ch * 20 + p] : b.data<float>()[(ch - c.a[1]) * 20 + p];
          ASSERT_EQ(y.data<float>()[ch * 20 + p], want) << "channel " << ch << " pixel " << p;
        }
    }
}

// Reorders between NHWC and channel blocks of 8 (1-3 spatial dims) run
// Anvil's copy of runs of channels (kernels/dnnl/layout.cc), those with
// blocks of 16 oneDNN's; each must move every element where oneDNN's
// reorder from plain puts it.
TEST(Layouts, PixelReordersMoveEveryChannel) {
  using tag = dnnl::memory::format_tag;
  namespace du = kernels::dnnl_util;
  struct Case {
    Shape shape;
    tag from, to;
    bool anvil;  // the reorder Anvil's
  };
  const Case cases[] = {
      {{2, 16, 3, 5}, tag::nhwc, tag::nChw8c, true},     {{2, 16, 3, 5}, tag::nChw8c, tag::nhwc, true},
      {{1, 32, 7, 9}, tag::nChw16c, tag::nChw8c, true},  {{3, 24, 40}, tag::nwc, tag::nCw8c, true},
      {{2, 16, 2, 3, 4}, tag::ndhwc, tag::nCdhw8c, true},
      {{1, 8, 70, 3}, tag::nChw8c, tag::nhwc, true},  // more pixels than a tile, a partial last tile
      {{2, 64, 32, 17}, tag::nhwc, tag::nChw8c, true},  // enough to split between threads
      {{1, 32, 7, 9}, tag::nhwc, tag::nChw16c, false}, {{2, 16, 2, 3, 4}, tag::nCdhw16c, tag::ndhwc, false},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(::testing::Message() << shape_str(c.shape) << " " << static_cast<int>(c.from) << " -> "
                                      << static_cast<int>(c.to));
    const dnnl::memory::desc plain = du::plain_desc(c.shape, DType::kFloat32);
    const dnnl::memory::desc from_md(du::dims(c.shape), dnnl::memory::data_type::f32, c.from);
    const dnnl::memory::desc to_md(du::dims(c.shape), dnnl::memory::data_type::f32, c.to);
    const Tensor x = random_tensor(c.shape, 17);
    const Tensor laid = testing::relaid(x, plain, from_md);
    const kernels::TensorType from{DType::kFloat32, c.shape, du::layout_of(from_md, c.shape, DType::kFloat32)};
    const kernels::Layout to = du::layout_of(to_md, c.shape, DType::kFloat32);
    ASSERT_TRUE(from.layout && to);
    std::unique_ptr<kernels::Kernel> reorder = from.layout->make_reorder(from, to);
    EXPECT_EQ(reorder->impl_name(), c.anvil ? "pixels:reorder" : "dnnl:reorder");
    Tensor y(DType::kFloat32, c.shape);
    kernels::RunContext ctx;
    ctx.inputs = {&laid};
    ctx.outputs = {&y};
    reorder->run(ctx);
    EXPECT_EQ(testing::values<float>(testing::relaid(y, to_md, plain)), testing::values<float>(x));
  }
}

}  // namespace
}  // namespace anvil
