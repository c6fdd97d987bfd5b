// Concats planned in place (planner.cc, place_inputs_in_output): where a
// concat's inputs are whole ranges of its output, their producers write
// there and the concat copies nothing. Each case checks the count the plan
// reports and the outputs against values computed by hand, including the
// cases the planner must leave alone.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "anvil/session.h"
#include "ir/graph.h"
#include "kernel_tester.h"

namespace anvil {
namespace {

using testing::random_f32;
using testing::scalar_f32;

// Builds graphs over one input x of shape [1, C, H, W]; a value's elements
// are kept as a function of x's, to compute the expected outputs by hand.
struct Builder {
  explicit Builder(Shape shape) : x_shape(std::move(shape)) {
    g = std::make_unique<ir::Graph>();
    g->opsets[""] = 13;
    x = g->add_input("x", DType::kFloat32, x_shape);
  }
  // x times a constant: a fresh buffer (values of both signs).
  ir::Value* scaled(float k) {
    std::string name = "k";
    name += std::to_string(constants++);
    return g->add_node("Mul", {x, g->add_constant(name, scalar_f32(k))}, 1)->output(0);
  }
  ir::Value* op(const std::string& type, std::vector<ir::Value*> in) { return g->add_node(type, in, 1)->output(0); }
  ir::Value* concat(std::vector<ir::Value*> in, int64_t axis = 1) {
    ir::Node* n = g->add_node("Concat", in, 1);
    n->attrs.set("axis", axis);
    return n->output(0);
  }

  Shape x_shape;
  std::unique_ptr<ir::Graph> g;
  ir::Value* x = nullptr;
  int constants = 0;
};

// Plans the graph at the default level, checks how many concats were placed
// in place, and returns the outputs.
std::vector<Tensor> run(Builder& b, const Tensor& x, size_t in_place) {
  Session s = Session::from_graph(std::move(b.g));
  EXPECT_EQ(s.plan_stats({{"x", x}}).concats_in_place, in_place);
  return s.run({{"x", x}});
}

// Concatenation along channels of [1, C, H, W] tensors by hand.
std::vector<float> channels(const std::vector<std::vector<float>>& parts) {
  std::vector<float> out;
  for (const auto& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

std::vector<float> map(const Tensor& x, const std::function<float(float)>& f) {
  std::vector<float> out(static_cast<size_t>(x.numel()));
  for (int64_t i = 0; i < x.numel(); ++i) out[static_cast<size_t>(i)] = f(x.data<float>()[i]);
  return out;
}

float relu(float v) { return v > 0 ? v : 0; }

void expect_values(const Tensor& got, const std::vector<float>& want) {
  ASSERT_EQ(static_cast<size_t>(got.numel()), want.size());
  for (size_t i = 0; i < want.size(); ++i) ASSERT_FLOAT_EQ(got.data<float>()[i], want[i]) << "element " << i;
}

const Shape kShape = {1, 16, 4, 4};  // 1 KiB per input: ranges stay 64-byte aligned

TEST(ConcatInPlace, ProducersWriteIntoTheOutput) {
  Builder b(kShape);
  ir::Value* c = b.concat({b.scaled(2), b.scaled(-3)});
  b.g->add_output(b.op("Relu", {c}));  // in place over the concat's buffer
  const Tensor x = random_f32(kShape, 1);
  std::vector<Tensor> y = run(b, x, 1);
  expect_values(y[0], channels({map(x, [](float v) { return relu(2 * v); }), map(x, [](float v) { return relu(-3 * v); })}));
}

TEST(ConcatInPlace, NestedConcatsChainTheirOffsets) {
  Builder b(kShape);
  ir::Value* inner = b.concat({b.scaled(2), b.scaled(-3)});
  ir::Value* outer = b.concat({b.scaled(5), inner});
  b.g->add_output(b.op("Relu", {outer}));
  const Tensor x = random_f32(kShape, 2);
  std::vector<Tensor> y = run(b, x, 2);
  expect_values(y[0], channels({map(x, [](float v) { return relu(5 * v); }), map(x, [](float v) { return relu(2 * v); }),
                                map(x, [](float v) { return relu(-3 * v); })}));
}

TEST(ConcatInPlace, AnInputWrittenInPlaceBeforeTheConcat) {
  Builder b(kShape);
  ir::Value* a = b.op("Relu", {b.scaled(2)});  // shares the Mul's buffer
  b.g->add_output(b.op("Neg", {b.concat({a, b.scaled(-3)})}));
  const Tensor x = random_f32(kShape, 3);
  std::vector<Tensor> y = run(b, x, 1);
  expect_values(y[0], channels({map(x, [](float v) { return -relu(2 * v); }), map(x, [](float v) { return 3 * v; })}));
}

// The concat's buffer must live from its first input's producer on: here a
// Transpose writes input 0 while reading a buffer that dies right after,
// which the arena could otherwise place where the concat's output goes.
TEST(ConcatInPlace, TheOutputLivesFromTheFirstProducer) {
  Builder b(kShape);
  ir::Node* t = b.g->add_node("Transpose", {b.scaled(2)}, 1);
  t->attrs.set("perm", std::vector<int64_t>{0, 1, 3, 2});
  b.g->add_output(b.op("Relu", {b.concat({t->output(0), b.scaled(-3)})}));
  const Tensor x = random_f32(kShape, 8);
  std::vector<float> transposed;
  for (int64_t c = 0; c < 16; ++c)
    for (int64_t i = 0; i < 4; ++i)
      for (int64_t j = 0; j < 4; ++j) transposed.push_back(relu(2 * x.data<float>()[(c * 4 + j) * 4 + i]));
  expect_values(run(b, x, 1)[0], channels({transposed, map(x, [](float v) { return relu(-3 * v); })}));
}

// An input made long before its concat while a large buffer lives: the
// output's buffer, live from that input on, would sit beside the large one
// and raise the arena's peak, so the concat stays a copy.
TEST(ConcatInPlace, LeftAloneWhenTheArenaWouldGrow) {
  Builder b(kShape);
  ir::Value* a = b.scaled(2);
  ir::Value* y = b.g->add_input("y", DType::kFloat32, {1, 16, 64, 64});
  ir::Value* big = b.op("Sigmoid", {b.op("Mul", {y, b.g->add_constant("three", scalar_f32(3))})});
  ir::Node* sum = b.g->add_node("ReduceSum", {big}, 1);
  sum->attrs.set("keepdims", int64_t{0});
  b.g->add_output(b.op("Relu", {b.concat({a, b.scaled(-3)})}));
  b.g->add_output(sum->output(0));
  const Tensor x = random_f32(kShape, 9), yv = random_f32({1, 16, 64, 64}, 10);
  Session s = Session::from_graph(std::move(b.g));
  EXPECT_EQ(s.plan_stats({{"x", x}, {"y", yv}}).concats_in_place, 0u);
  std::vector<Tensor> out = s.run({{"x", x}, {"y", yv}});
  expect_values(out[0], channels({map(x, [](float v) { return relu(2 * v); }), map(x, [](float v) { return relu(-3 * v); })}));
  double want = 0;
  for (int64_t i = 0; i < yv.numel(); ++i) want += 1 / (1 + std::exp(-3.0 * yv.data<float>()[i]));
  EXPECT_NEAR(out[1].data<float>()[0], want, 1e-3 * want);
}

// float64, which the oneDNN backend's concat does not take: the reference
// kernel's skip of inputs already in place.
TEST(ConcatInPlace, TheReferenceConcatToo) {
  auto g = std::make_unique<ir::Graph>();
  g->opsets[""] = 13;
  ir::Value* x = g->add_input("x", DType::kFloat64, kShape);
  const auto times = [&](const std::string& name, double k) {
    Tensor t(DType::kFloat64, {});
    t.data<double>()[0] = k;
    return g->add_node("Mul", {x, g->add_constant(name, t)}, 1)->output(0);
  };
  ir::Node* concat = g->add_node("Concat", {times("two", 2), times("minus3", -3)}, 1);
  concat->attrs.set("axis", int64_t{1});
  g->add_output(g->add_node("Neg", {concat->output(0)}, 1)->output(0));
  Tensor xv(DType::kFloat64, kShape);
  for (int64_t i = 0; i < xv.numel(); ++i) xv.data<double>()[i] = 0.25 * static_cast<double>(i % 7) - 0.5;
  Session s = Session::from_graph(std::move(g));
  EXPECT_EQ(s.plan_stats({{"x", xv}}).concats_in_place, 1u);
  const Tensor y = s.run({{"x", xv}})[0];
  ASSERT_EQ(y.numel(), 2 * xv.numel());
  for (int64_t i = 0; i < y.numel(); ++i) {
    const double v = xv.data<double>()[i % xv.numel()];
    ASSERT_EQ(y.data<double>()[i], i < xv.numel() ? -2 * v : 3 * v) << "element " << i;
  }
}

// An input read after the concat: the concat's output, overwritten in place
// by the Relu, must not be that input's memory.
TEST(ConcatInPlace, LeftAloneWhenAnInputIsReadLater) {
  Builder b(kShape);
  ir::Value* a = b.scaled(2);
  ir::Value* c = b.concat({a, b.scaled(-3)});
  b.g->add_output(b.op("Relu", {c}));
  b.g->add_output(b.op("Neg", {a}));
  const Tensor x = random_f32(kShape, 4);
  std::vector<Tensor> y = run(b, x, 0);
  expect_values(y[0], channels({map(x, [](float v) { return relu(2 * v); }), map(x, [](float v) { return relu(-3 * v); })}));
  expect_values(y[1], map(x, [](float v) { return -2 * v; }));
}

TEST(ConcatInPlace, LeftAloneForGraphInputsRepeatsAndGraphOutputs) {
  const Tensor x = random_f32(kShape, 5);
  {
    Builder b(kShape);
    b.g->add_output(b.op("Relu", {b.concat({b.x, b.scaled(-3)})}));
    expect_values(run(b, x, 0)[0], channels({map(x, relu), map(x, [](float v) { return relu(-3 * v); })}));
  }
  {
    Builder b(kShape);
    ir::Value* a = b.scaled(2);
    b.g->add_output(b.op("Relu", {b.concat({a, a})}));
    const std::vector<float> twice = map(x, [](float v) { return relu(2 * v); });
    expect_values(run(b, x, 0)[0], channels({twice, twice}));
  }
  {
    Builder b(kShape);
    b.g->add_output(b.concat({b.scaled(2), b.scaled(-3)}));
    expect_values(run(b, x, 0)[0],
                  channels({map(x, [](float v) { return 2 * v; }), map(x, [](float v) { return -3 * v; })}));
  }
}

// Ranges that are not whole rows of the output (axis 2 of [1, C, H, W]) or
// not 64-byte aligned (an input of 12 bytes) stay copies.
TEST(ConcatInPlace, LeftAloneForRowsAndUnalignedRanges) {
  {
    Builder b(kShape);
    b.g->add_output(b.op("Relu", {b.concat({b.scaled(2), b.scaled(-3)}, 2)}));
    const Tensor x = random_f32(kShape, 6);
    std::vector<float> want;
    for (int64_t c = 0; c < 16; ++c)
      for (float k : {2.f, -3.f})
        for (int64_t i = 0; i < 16; ++i) want.push_back(relu(k * x.data<float>()[c * 16 + i]));
    expect_values(run(b, x, 0)[0], want);
  }
  {
    const Shape small = {1, 3, 1, 1};
    Builder b(small);
    b.g->add_output(b.op("Relu", {b.concat({b.scaled(2), b.scaled(-3)})}));
    const Tensor x = random_f32(small, 7);
    expect_values(run(b, x, 0)[0],
                  channels({map(x, [](float v) { return relu(2 * v); }), map(x, [](float v) { return relu(-3 * v); })}));
  }
}

// y = conv(x, w) + bias, stride 1, `k` x `k` window, zero padding k / 2: by hand.
std::vector<float> conv_by_hand(const Tensor& x, const Tensor& w, float bias) {
  Tensor b(DType::kFloat32, {w.dim(0)});
  for (int64_t o = 0; o < w.dim(0); ++o) b.data<float>()[o] = bias;
  return testing::values<float>(testing::conv2d_by_hand(x, w, &b, testing::ConvByHand::padded(w.dim(2) / 2)));
}

Tensor filled(Shape shape, float v) {
  Tensor t(DType::kFloat32, std::move(shape));
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = v;
  return t;
}

// A fire module's shape: x (default [1, 16, 6, 7]) through a 1x1 and a k x k
// convolution (default 3x3; 32 channels each, bias 0.25, padding k / 2),
// concatenated along channels.
struct FireModule {
  explicit FireModule(Shape shape = {1, 16, 6, 7}, int64_t k = 3)
      : b(std::move(shape)), w1(random_f32({32, 16, 1, 1}, 2)), w3(random_f32({32, 16, k, k}, 3)) {
    ir::Value* c = b.concat({conv(w1, "w1"), conv(w3, "w3")});
    b.g->add_output(b.op("Relu", {c}));
  }
  ir::Value* conv(const Tensor& w, const std::string& name) {
    ir::Node* n = b.g->add_node("Conv", {b.x, b.g->add_constant(name, w), b.g->add_constant(name + "_b", filled({32}, 0.25f))}, 1);
    n->attrs.set("pads", std::vector<int64_t>(4, w.dim(2) / 2));
    return n->output(0);
  }
  std::vector<float> expected(const Tensor& x) const {
    std::vector<float> want = channels({conv_by_hand(x, w1, 0.25f), conv_by_hand(x, w3, 0.25f)});
    for (float& v : want) v = relu(v);
    return want;
  }
  Builder b;
  Tensor w1, w3;
};

// The convolutions write channel blocks (nChw16c on AVX-512, where oneDNN's
// own pick is NHWC, whose channel ranges the concat would have to copy), so
// the concat is planned in place. (Below AVX-512 oneDNN picks nChw8c anyway:
// there the test passes without the planner's hint too.)
TEST(ConcatInPlace, ConvolutionsFeedingAChannelConcatWriteChannelBlocks) {
  FireModule fire;
  const Tensor x = random_f32(fire.b.x_shape, 1);
  const std::vector<float> want = fire.expected(x);
  std::vector<Tensor> y = run(fire.b, x, 1);
  ASSERT_EQ(static_cast<size_t>(y[0].numel()), want.size());
  for (size_t i = 0; i < want.size(); ++i) ASSERT_NEAR(y[0].data<float>()[i], want[i], 1e-4f) << "element " << i;
}

// oneDNN has only its reference kernel for a 7x7 window over a 1x1 plane in
// channel blocks: there the convolution keeps oneDNN's own pick.
TEST(ConcatInPlace, ChannelBlocksOnlyWhereAJitKernelTakesThem) {
  FireModule fire({1, 16, 1, 1}, 7);
  const Tensor x = random_f32(fire.b.x_shape, 1);
  const std::vector<float> want = fire.expected(x);
  Session s = Session::from_graph(std::move(fire.b.g));
  for (const std::string& line : s.describe_plan({{"x", x}}))
    EXPECT_EQ(line.find("dnnl:ref"), std::string::npos) << line;
  std::vector<Tensor> y = s.run({{"x", x}});
  ASSERT_EQ(static_cast<size_t>(y[0].numel()), want.size());
  for (size_t i = 0; i < want.size(); ++i) ASSERT_NEAR(y[0].data<float>()[i], want[i], 1e-4f) << "element " << i;
}

// Named VecKernels.* to be among the tests ctest runs again under
// ANVIL_MAX_ISA=sse41 and avx2, each in a process of its own: there the
// first oneDNN call of the process is this plan's, and asking for the ISA's
// channel blocks must not fix oneDNN's ISA before the cap is applied. (It
// guards that only while nothing in the test asks oneDNN anything earlier.)
TEST(VecKernels, ConvolutionsAskingForChannelBlocksKeepTheIsaCap) {
  const char* cap = std::getenv("ANVIL_MAX_ISA");
  if (!cap || (std::string(cap) != "sse41" && std::string(cap) != "avx2")) GTEST_SKIP() << "no ISA cap below AVX-512";
  FireModule fire;
  const Tensor x = random_f32(fire.b.x_shape, 1);
  Session s = Session::from_graph(std::move(fire.b.g));
  for (const std::string& line : s.describe_plan({{"x", x}}))
    EXPECT_EQ(line.find("avx512"), std::string::npos) << line;
  std::vector<Tensor> y = s.run({{"x", x}});
  const std::vector<float> want = fire.expected(x);
  ASSERT_EQ(static_cast<size_t>(y[0].numel()), want.size());
  for (size_t i = 0; i < want.size(); ++i) ASSERT_NEAR(y[0].data<float>()[i], want[i], 1e-4f) << "element " << i;
}

}  // namespace
}  // namespace anvil
