// Reverse-mode gradients against central finite differences, on small graphs
// that use every gradient rule; and the errors of build_gradient_graph.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <algorithm>
#include <functional>
#include <random>

#include "anvil/error.h"
#include "anvil/session.h"
#include "kernel_tester.h"
#include "kernels/vec/vec_kernels.h"
#include "train/autodiff.h"
#include "train/training_mode.h"

namespace anvil {
namespace {

using ir::Graph;
using ir::Value;

Tensor random_tensor(Shape shape, uint32_t seed, float lo = -1.f, float hi = 1.f) {
  Tensor t(DType::kFloat32, std::move(shape));
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = d(rng);
  return t;
}

Value* node(Graph& g, const std::string& op, std::vector<Value*> in, ir::Attributes attrs = {}) {
  ir::Node* n = g.add_node(op, std::move(in), 1);
  n->attrs = std::move(attrs);
  return n->outputs[0];
}

// A node whose output is the value named `name`.
Value* named(Graph& g, const std::string& name, const std::string& op, std::vector<Value*> in,
             ir::Attributes attrs = {}) {
  ir::Node* n = g.add_node_with_outputs(op, std::move(in), {g.add_value(name)});
  n->attrs = std::move(attrs);
  return n->outputs[0];
}

ir::Attributes attrs(std::initializer_list<std::pair<const char*, ir::AttrValue>> list) {
  ir::Attributes a;
  for (const auto& [k, v] : list) a.set(k, v);
  return a;
}

Value* ints(Graph& g, std::vector<int64_t> v) {
  Tensor t(DType::kInt64, {static_cast<int64_t>(v.size())});
  std::copy(v.begin(), v.end(), t.data<int64_t>());
  return g.add_constant(g.unique_name("ints"), t);
}

// loss = sum(out * R) for a fixed random R: every element of `out` matters.
void weighted_sum_loss(Graph& g, Value* out, Shape shape) {
  Value* r = g.add_constant("R", random_tensor(std::move(shape), 99));
  g.add_output(named(g, "loss", "ReduceSum", {node(g, "Mul", {out, r})}, attrs({{"keepdims", int64_t{0}}})));
}

using GraphMaker = std::function<std::unique_ptr<Graph>()>;

// Compares every parameter's gradient with (L(p + e) - L(p - e)) / 2e at up to 12 elements.
void expect_gradients_match(const GraphMaker& make, const std::map<std::string, Tensor>& inputs,
                            const std::vector<std::string>& params, float tolerance = 2e-2f,
                            const std::vector<std::string>& extra_outputs = {}) {
  auto grad = train::build_gradient_graph(make(), "loss", params, extra_outputs);
  SessionOptions options;
  options.optimization_level = 0;
  options.num_threads = 1;
  Session s = Session::from_graph(std::move(grad.graph), options);
  std::map<std::string, Tensor> feed = inputs;
  for (size_t k = 0; k < params.size(); ++k) feed[params[k]] = grad.initial_values[k].clone();
  std::vector<Tensor> out = s.run(feed);
  const size_t first_grad = 1 + extra_outputs.size();
  ASSERT_EQ(out.size(), first_grad + params.size());
  auto loss_at = [&](const std::map<std::string, Tensor>& f) { return static_cast<double>(s.run(f)[0].data<float>()[0]); };
  for (size_t k = 0; k < params.size(); ++k) {
    const Tensor& analytic = out[first_grad + k];
    ASSERT_EQ(analytic.shape(), grad.initial_values[k].shape()) << params[k];
    const int64_t n = analytic.numel();
    for (int64_t i = 0; i < n; i += std::max<int64_t>(1, n / 12)) {
      auto plus = feed, minus = feed;
      plus[params[k]] = feed[params[k]].clone();
      minus[params[k]] = feed[params[k]].clone();
      const float eps = 1e-2f;
      plus[params[k]].data<float>()[i] += eps;
      minus[params[k]].data<float>()[i] -= eps;
      const double numeric = (loss_at(plus) - loss_at(minus)) / (2 * eps);
      const double got = analytic.data<float>()[i];
      EXPECT_NEAR(got, numeric, tolerance * std::max(1.0, std::fabs(numeric))) << params[k] << "[" << i << "]";
    }
  }
}

std::unique_ptr<Graph> new_graph() {
  auto g = std::make_unique<Graph>();
  g->opsets[""] = 17;
  return g;
}

TEST(Autodiff, MlpWithSoftmaxCrossEntropy) {
  auto make = [] {
    auto g = new_graph();
    Value* x = g->add_input("x", DType::kFloat32, {5, 6});
    Value* labels = g->add_input("labels", DType::kInt64, {5});
    Value* w1 = g->add_constant("W1", random_tensor({8, 6}, 1));
    Value* b1 = g->add_constant("b1", random_tensor({8}, 2));
    Value* w2 = g->add_constant("W2", random_tensor({8, 3}, 3));
    Value* b2 = g->add_constant("b2", random_tensor({3}, 4));
    Value* h = node(*g, "Relu", {node(*g, "Gemm", {x, w1, b1}, attrs({{"transB", int64_t{1}}}))});
    Value* logits = node(*g, "Add", {node(*g, "MatMul", {h, w2}), b2});
    g->add_output(named(*g, "loss", "SoftmaxCrossEntropyLoss", {logits, labels}));
    return g;
  };
  Tensor labels(DType::kInt64, {5});
  for (int i = 0; i < 5; ++i) labels.data<int64_t>()[i] = i % 3;
  expect_gradients_match(make, {{"x", random_tensor({5, 6}, 5)}, {"labels", labels}}, {"W1", "b1", "W2", "b2"});
}

// Each unary op directly under the loss: loss = sum(f(x * a + c) * R), with a
// of shape [4] and c of shape [3, 1] broadcast against x [3, 4].
TEST(Autodiff, UnaryOps) {
  for (const char* op :
       {"Tanh", "Sigmoid", "Relu", "LeakyRelu", "Exp", "Log", "Sqrt", "Neg", "Pow", "Identity", "Erf", "Abs"}) {
    SCOPED_TRACE(op);
    auto make = [op] {
      auto g = new_graph();
      Value* x = g->add_input("x", DType::kFloat32, {3, 4});
      Value* a = g->add_constant("a", random_tensor({4}, 11));
      Value* c = g->add_constant("c", random_tensor({3, 1}, 12, 1.5f, 2.5f));
      Value* z = node(*g, "Add", {node(*g, "Mul", {x, a}), c});  // in [0.5, 3.5]: Log and Sqrt are defined
      const std::string name = op;
      const bool signed_input = name == "Relu" || name == "LeakyRelu" || name == "Erf" || name == "Abs";
      std::vector<Value*> in = {signed_input ? node(*g, "Sub", {z, g->add_constant("two", [] {
        Tensor t(DType::kFloat32, {});
        t.data<float>()[0] = 2.f;
        return t;
      }())}) : z};
      if (name == "Pow") {
        Tensor e(DType::kFloat32, {});
        e.data<float>()[0] = 3.f;
        in.push_back(g->add_constant("e", e));
      }
      ir::Attributes at;
      if (name == "LeakyRelu") at.set("alpha", 0.1f);
      weighted_sum_loss(*g, node(*g, op, in, at), {3, 4});
      return g;
    };
    expect_gradients_match(make, {{"x", random_tensor({3, 4}, 14)}}, {"a", "c"});
  }
}

// Dims shape inference leaves unknown: whether an operand was broadcast is
// decided at run time (here y is [1, 4] against x [3, 4], both declared [?, 4]).
TEST(Autodiff, BroadcastAlongUnknownDimsIsFoundAtRunTime) {
  auto make = [] {
    auto g = new_graph();
    Value* x = g->add_input("x", DType::kFloat32, {-1, 4});
    Value* y = g->add_input("y", DType::kFloat32, {-1, 4});
    Value* w = g->add_constant("w", random_tensor({4}, 51));
    Value* v = g->add_constant("v", random_tensor({4}, 52));
    Value* sum = node(*g, "Add", {node(*g, "Mul", {x, w}), node(*g, "Mul", {y, v})});
    weighted_sum_loss(*g, sum, {3, 4});
    return g;
  };
  expect_gradients_match(make, {{"x", random_tensor({3, 4}, 53)}, {"y", random_tensor({1, 4}, 54)}}, {"w", "v"});
}

TEST(Autodiff, ConcatAndSliceSendTheGradientBack) {
  auto make = [] {
    auto g = new_graph();
    Value* x = g->add_input("x", DType::kFloat32, {2, 3});
    Value* a = g->add_constant("a", random_tensor({2, 2}, 61));
    Value* c = g->add_constant("c", random_tensor({2, 1}, 62));
    Value* cat = node(*g, "Concat", {a, node(*g, "Tanh", {x}), c, a}, attrs({{"axis", int64_t{-1}}}));
    // Columns 1 to 6 of the 8, then the last row: a Slice with a negative start.
    Value* cols = node(*g, "Slice", {cat, ints(*g, {1}), ints(*g, {7}), ints(*g, {1})});
    Value* row = node(*g, "Slice", {cols, ints(*g, {-1}), ints(*g, {100})});
    weighted_sum_loss(*g, node(*g, "Sigmoid", {row}), {1, 6});
    return g;
  };
  expect_gradients_match(make, {{"x", random_tensor({2, 3}, 63)}}, {"a", "c"});
}

// Binary arithmetic with both operands trained and broadcast: [4] against [3, 1].
TEST(Autodiff, BinaryOpsWithBroadcasting) {
  for (const char* op : {"Add", "Sub", "Mul", "Div"}) {
    SCOPED_TRACE(op);
    auto make = [op] {
      auto g = new_graph();
      Value* x = g->add_input("x", DType::kFloat32, {3, 4});
      Value* a = g->add_constant("a", random_tensor({4}, 21));
      Value* c = g->add_constant("c", random_tensor({3, 1}, 22, 0.5f, 1.5f));
      Value* y = node(*g, op, {node(*g, "Mul", {x, a}), c});
      weighted_sum_loss(*g, node(*g, op, {y, a}), {3, 4});
      return g;
    };
    expect_gradients_match(make, {{"x", random_tensor({3, 4}, 23)}}, {"a", "c"});
  }
}

TEST(Autodiff, SoftmaxReductionsAndShapes) {
  auto make = [] {
    auto g = new_graph();
    Value* x = g->add_input("x", DType::kFloat32, {2, 3, 4});
    Value* w = g->add_constant("w", random_tensor({2, 3, 4}, 21));
    Value* v = g->add_constant("v", random_tensor({4, 5}, 22));
    Value* p = node(*g, "Softmax", {node(*g, "Mul", {x, w})}, attrs({{"axis", int64_t{-1}}}));
    Value* tr = node(*g, "Transpose", {p}, attrs({{"perm", std::vector<int64_t>{1, 0, 2}}}));
    Value* ls = node(*g, "LogSoftmax", {tr}, attrs({{"axis", int64_t{1}}}));
    Value* flat = node(*g, "Reshape", {node(*g, "Flatten", {ls}, attrs({{"axis", int64_t{2}}})), ints(*g, {6, 4})});
    Value* mm = node(*g, "MatMul", {node(*g, "Reshape", {flat, ints(*g, {2, 3, 4})}), v});  // batched A @ 2-D v
    Value* sum = node(*g, "ReduceSum", {mm, ints(*g, {1})}, attrs({{"keepdims", int64_t{0}}}));
    Value* mean = node(*g, "ReduceMean", {sum}, attrs({{"axes", std::vector<int64_t>{-1}}, {"keepdims", int64_t{1}}}));
    weighted_sum_loss(*g, mean, {2, 1});
    return g;
  };
  expect_gradients_match(make, {{"x", random_tensor({2, 3, 4}, 23)}}, {"w", "v"});
}

TEST(Autodiff, GemmTranspositionsAndScales) {
  for (int64_t ta : {0, 1})
    for (int64_t tb : {0, 1}) {
      auto make = [ta, tb] {
        auto g = new_graph();
        Value* x = g->add_input("x", DType::kFloat32, ta ? Shape{4, 3} : Shape{3, 4});
        Value* a = g->add_constant("a", random_tensor(ta ? Shape{4, 3} : Shape{3, 4}, 31));
        Value* b = g->add_constant("b", random_tensor(tb ? Shape{5, 4} : Shape{4, 5}, 32));
        Value* c = g->add_constant("c", random_tensor({1, 5}, 33));
        Value* y = node(*g, "Gemm", {node(*g, "Mul", {x, a}), b, c},
                        attrs({{"transA", ta}, {"transB", tb}, {"alpha", 0.5f}, {"beta", 2.f}}));
        weighted_sum_loss(*g, y, {3, 5});
        return g;
      };
      SCOPED_TRACE("transA " + std::to_string(ta) + " transB " + std::to_string(tb));
      expect_gradients_match(make, {{"x", random_tensor(ta ? Shape{4, 3} : Shape{3, 4}, 34)}}, {"a", "b", "c"});
    }
}

TEST(Autodiff, BadRequestsAreRefused) {
  auto make = [] {
    auto g = new_graph();
    Value* x = g->add_input("x", DType::kFloat32, {1, 2, 4, 4});
    Value* w = g->add_constant("w", random_tensor({2, 2, 3, 3}, 41));
    g->add_constant("u", random_tensor({2}, 42));  // the loss does not depend on it
    weighted_sum_loss(*g, node(*g, "Conv", {x, w}, attrs({{"pads", std::vector<int64_t>{1, 1, 1, 1}}})), {1, 2, 4, 4});
    return g;
  };
  EXPECT_EQ(testing::error_kind_of([&] { train::build_gradient_graph(make(), "nosuch", {"w"}); }), ErrorKind::kInvalidArgument);
  EXPECT_EQ(testing::error_kind_of([&] { train::build_gradient_graph(make(), "loss", {"x"}); }), ErrorKind::kInvalidArgument);
  EXPECT_EQ(testing::error_kind_of([&] { train::build_gradient_graph(make(), "loss", {"w", "w"}); }), ErrorKind::kInvalidArgument);
  EXPECT_EQ(testing::error_kind_of([&] { train::build_gradient_graph(make(), "loss", {"u"}); }), ErrorKind::kInvalidArgument);
  auto without_rule = [] {
    auto g = new_graph();
    Value* w = g->add_constant("w", random_tensor({2, 3}, 43));
    weighted_sum_loss(*g, node(*g, "Sin", {w}), {2, 3});
    return g;
  };
  try {
    train::build_gradient_graph(without_rule(), "loss", {"w"});
    FAIL() << "Sin has no gradient rule";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kUnsupported);
    EXPECT_NE(std::string(e.what()).find("no gradient for Sin"), std::string::npos) << e.what();
  }
}

// Distinct values at least 0.05 apart, shuffled: a finite-difference step of
// 0.01 never changes which element of a pooling window is the largest.
Tensor spaced_tensor(Shape shape, uint32_t seed) {
  Tensor t(DType::kFloat32, std::move(shape));
  std::vector<float> v(static_cast<size_t>(t.numel()));
  for (size_t i = 0; i < v.size(); ++i) v[i] = 0.05f * static_cast<float>(i) - 1.f;
  std::shuffle(v.begin(), v.end(), std::mt19937(seed));
  std::copy(v.begin(), v.end(), t.data<float>());
  return t;
}

// Conv: grouped, strided, padded, with a bias; the gradient reaches its input
// too (X is a parameter). Batch symbolic, as training models have it.
TEST(Autodiff, ConvDataWeightsAndBias) {
  for (int64_t group : {1, 2}) {
    auto make = [group] {
      auto g = new_graph();
      Value* x = g->add_constant("X", random_tensor({2, 4, 7, 7}, 51));
      Value* w = g->add_constant("W", random_tensor({6, 4 / group, 3, 3}, 52));
      Value* b = g->add_constant("B", random_tensor({6}, 53));
      Value* y = node(*g, "Conv", {x, w, b},
                      attrs({{"strides", std::vector<int64_t>{2, 2}}, {"pads", std::vector<int64_t>{1, 1, 1, 1}},
                             {"group", group}}));
      weighted_sum_loss(*g, y, {2, 6, 4, 4});
      return g;
    };
    SCOPED_TRACE("group " + std::to_string(group));
    expect_gradients_match(make, {}, {"X", "W", "B"});
  }
}

// Channels that fill oneDNN's blocks (16 and 32: whole blocks at every ISA),
// where the convolution and both its gradients run on blocked kernels with
// their operands reordered in and out (dnnl/conv.cc, dnnl/conv_grad.cc); and
// a first convolution's weights' gradient, blocked on its output's side.
TEST(Autodiff, ConvOnChannelBlocks) {
  auto make = [] {
    auto g = new_graph();
    Value* x = g->add_constant("X", random_tensor({2, 16, 6, 6}, 57));
    Value* w = g->add_constant("W", random_tensor({32, 16, 3, 3}, 58, -0.2f, 0.2f));
    Value* b = g->add_constant("B", random_tensor({32}, 59));
    Value* y = node(*g, "Conv", {x, w, b}, attrs({{"pads", std::vector<int64_t>{1, 1, 1, 1}}}));
    weighted_sum_loss(*g, y, {2, 32, 6, 6});
    return g;
  };
  expect_gradients_match(make, {}, {"X", "W", "B"});
  // A first convolution, on an image's 3 channels into 16: its weights' gradient on the blocked kernel, which
  // reads the image plain (no gradient for the image itself).
  auto first = [] {
    auto g = new_graph();
    Value* x = g->add_constant("X", random_tensor({2, 3, 6, 6}, 60));
    Value* w = g->add_constant("W", random_tensor({16, 3, 3, 3}, 61, -0.3f, 0.3f));
    Value* b = g->add_constant("B", random_tensor({16}, 62));
    Value* y = node(*g, "Conv", {x, w, b}, attrs({{"pads", std::vector<int64_t>{1, 1, 1, 1}}}));
    weighted_sum_loss(*g, y, {2, 16, 6, 6});
    return g;
  };
  expect_gradients_match(first, {}, {"W", "B"});
  // Strided, dilated and padded unevenly, still on channel blocks.
  for (const auto& [strides, dilations] : {std::pair<int64_t, int64_t>{2, 1}, {1, 2}}) {
    SCOPED_TRACE("stride " + std::to_string(strides) + ", dilation " + std::to_string(dilations));
    auto windows = [strides = strides, dilations = dilations] {
      auto g = new_graph();
      Value* x = g->add_constant("X", random_tensor({2, 16, 7, 7}, 63));
      Value* w = g->add_constant("W", random_tensor({16, 16, 3, 3}, 64, -0.2f, 0.2f));
      const int64_t out = (7 + 2 + 1 - (2 * dilations + 1)) / strides + 1;  // pads 2 before, 1 after
      Value* y = node(*g, "Conv", {x, w},
                      attrs({{"pads", std::vector<int64_t>{2, 2, 1, 1}}, {"strides", std::vector<int64_t>{strides, strides}},
                             {"dilations", std::vector<int64_t>{dilations, dilations}}}));
      weighted_sum_loss(*g, y, {2, 16, out, out});
      return g;
    };
    expect_gradients_match(windows, {}, {"X", "W"});
  }
}

// A CNN's gradients planned as training plans them (the default level): in
// the format the forward convolutions keep (NHWC or channel blocks, by ISA),
// the convolutions' gradients, the ReLU's between them and the max
// pooling's (its ReLU folded in) read and write that format, with no
// reorder between them (dnnl/conv_grad.cc, dnnl/relu_grad.cc, dnnl/pool.cc).
// The plan only: the values are checked against PyTorch, step for step, by
// tests/models/test_training_matches_torch.py (finite differences through
// two ReLUs and an overlapping max pool are too rough to tell).
TEST(Autodiff, CnnGradientsKeepTheConvolutionsLayout) {
  auto g = new_graph();
  Value* x = g->add_constant("X", random_tensor({2, 16, 8, 8}, 70));
  Value* w1 = g->add_constant("W1", random_tensor({16, 16, 3, 3}, 71, -0.2f, 0.2f));
  Value* b1 = g->add_constant("B1", random_tensor({16}, 72));
  Value* w2 = g->add_constant("W2", random_tensor({16, 16, 3, 3}, 73, -0.2f, 0.2f));
  Value* w3 = g->add_constant("W3", random_tensor({32, 16, 3, 3}, 74, -0.2f, 0.2f));
  const auto pad = attrs({{"pads", std::vector<int64_t>{1, 1, 1, 1}}});
  Value* h = node(*g, "Relu", {node(*g, "Conv", {x, w1, b1}, pad)});
  h = node(*g, "Relu", {node(*g, "Conv", {h, w2}, pad)});
  h = node(*g, "MaxPool", {h},  // overlapping windows
           attrs({{"kernel_shape", std::vector<int64_t>{3, 3}}, {"strides", std::vector<int64_t>{2, 2}},
                  {"pads", std::vector<int64_t>{1, 1, 1, 1}}}));
  weighted_sum_loss(*g, node(*g, "Conv", {h, w3}, pad), {2, 32, 4, 4});
  const std::vector<std::string> params = {"W1", "B1", "W2", "W3"};
  auto grad = train::build_gradient_graph(std::move(g), "loss", params);
  Session s = Session::from_graph(std::move(grad.graph));
  std::map<std::string, Tensor> feed;
  for (size_t k = 0; k < params.size(); ++k) feed[params[k]] = grad.initial_values[k];
  RunProfile profile;
  s.run(feed, &profile);

  std::string conv_layout;
  std::map<std::string, std::vector<std::string>> ran;  // op -> "impl layout" of each node
  for (const NodeProfile& p : profile.nodes) {
    if (p.op == "Conv" && conv_layout.empty()) conv_layout = p.layout;
    ran[p.op].push_back(p.impl + " " + p.layout);
  }
  if (conv_layout == "plain" || conv_layout.empty()) GTEST_SKIP() << "the forward convolutions ran plain here";
  if (ran["ConvGradWeight"].empty() || ran["ConvGradWeight"][0].find("gemm") != std::string::npos)
    GTEST_SKIP() << "no direct backward kernel at this ISA (oneDNN's SSE4.1 runs its GEMM, on plain tensors)";
  // Reorders only at the edges (X in, the loss's tensors), none of the ReLUs' or pooling's outputs or of a gradient.
  for (const NodeProfile& p : profile.nodes) {
    if (p.op != "Reorder") continue;
    for (const char* chain : {"Relu", "MaxPool", "Grad"}) EXPECT_EQ(p.node.find(chain), std::string::npos) << p.node;
  }
  EXPECT_EQ(ran["MaxPoolGrad"],
            std::vector<std::string>{std::string(kernels::vec::vec_impl_name()) + ":max_pool_grad " + conv_layout});
  EXPECT_EQ(ran["ReluGrad"], std::vector<std::string>{"planned " + conv_layout});
  EXPECT_EQ(ran["ConvGradInput"].size(), 2u);  // none into X, a constant here
  EXPECT_EQ(ran["ConvGradWeight"].size(), 3u);
  for (const char* op : {"ConvGradInput", "ConvGradWeight"})
    for (const std::string& r : ran[op]) EXPECT_EQ(r.substr(r.find(' ') + 1), conv_layout) << op << ": " << r;
}

TEST(Autodiff, PoolingSendsTheGradientToTheWindows) {
  const auto window = attrs({{"kernel_shape", std::vector<int64_t>{3, 3}}, {"strides", std::vector<int64_t>{2, 2}},
                             {"pads", std::vector<int64_t>{1, 1, 1, 1}}});
  for (const char* op : {"MaxPool", "AveragePool"}) {
    auto make = [&] {
      auto g = new_graph();
      Value* p = g->add_constant("P", spaced_tensor({2, 3, 7, 7}, 54));
      weighted_sum_loss(*g, node(*g, op, {p}, window), {2, 3, 4, 4});
      return g;
    };
    SCOPED_TRACE(op);
    expect_gradients_match(make, {}, {"P"});
  }
  auto include_pad = [] {
    auto g = new_graph();
    Value* p = g->add_constant("P", random_tensor({1, 2, 6, 6}, 55));
    Value* y = node(*g, "AveragePool", {p},
                    attrs({{"kernel_shape", std::vector<int64_t>{2, 2}}, {"strides", std::vector<int64_t>{2, 2}},
                           {"pads", std::vector<int64_t>{1, 1, 1, 1}}, {"count_include_pad", int64_t{1}}}));
    weighted_sum_loss(*g, y, {1, 2, 4, 4});
    return g;
  };
  expect_gradients_match(include_pad, {}, {"P"});
  auto global = [] {
    auto g = new_graph();
    weighted_sum_loss(*g, node(*g, "GlobalAveragePool", {g->add_constant("P", random_tensor({2, 3, 5, 5}, 56))}),
                      {2, 3, 1, 1});
    return g;
  };
  expect_gradients_match(global, {}, {"P"});
}

// BatchNormalization in training mode: normalized with the batch's statistics,
// whose gradients flow through the mean and variance too; the batch mean and
// unbiased variance come out for the running statistics.
TEST(Autodiff, BatchNormalizationTrainsOnTheBatchStatistics) {
  std::vector<std::string> stats;
  auto make = [&stats] {
    auto g = new_graph();
    Value* p = g->add_constant("P", random_tensor({4, 3, 5, 5}, 61, -2.f, 3.f));
    Value* bn = node(*g, "BatchNormalization",
                     {p, g->add_constant("scale", random_tensor({3}, 62, 0.5f, 1.5f)),
                      g->add_constant("bias", random_tensor({3}, 63)), g->add_constant("mean", random_tensor({3}, 64)),
                      g->add_constant("var", random_tensor({3}, 65, 0.5f, 1.f))},
                     attrs({{"epsilon", 1e-5f}}));
    weighted_sum_loss(*g, bn, {4, 3, 5, 5});
    train::TrainingMode mode = train::to_training_mode(*g, 0);
    EXPECT_EQ(mode.batch_norms.size(), 1u);
    stats = {mode.batch_norms[0].batch_mean, mode.batch_norms[0].batch_var};
    return g;
  };
  make();
  expect_gradients_match(make, {}, {"P", "scale", "bias"}, 2e-2f, stats);

  // The statistics, against numpy-style sums over N, H, W of P.
  auto grad = train::build_gradient_graph(make(), "loss", {"scale"}, stats);
  Session s = Session::from_graph(std::move(grad.graph));
  std::vector<Tensor> out = s.run({{"scale", grad.initial_values[0]}});
  const Tensor p = random_tensor({4, 3, 5, 5}, 61, -2.f, 3.f);
  for (int c = 0; c < 3; ++c) {
    double sum = 0, squares = 0;
    for (int n = 0; n < 4; ++n)
      for (int i = 0; i < 25; ++i) sum += p.data<float>()[(n * 3 + c) * 25 + i];
    const double mean = sum / 100;
    for (int n = 0; n < 4; ++n)
      for (int i = 0; i < 25; ++i) squares += std::pow(p.data<float>()[(n * 3 + c) * 25 + i] - mean, 2);
    EXPECT_NEAR(out[1].data<float>()[c], mean, 1e-5);
    EXPECT_NEAR(out[2].data<float>()[c], squares / 99, 1e-4);
  }
}

// Dropout in training mode (anvil.TrainingDropout): dP = R * mask / (1 - ratio),
// the mask of this step (finite differences cannot check it: each step draws
// a new mask). The mask is a function of the step alone: the same step gives
// the same mask in another session, another step another mask.
TEST(Autodiff, DropoutScalesTheKeptGradients) {
  auto make = [] {
    auto g = new_graph();
    Value* p = g->add_constant("P", random_tensor({6, 50}, 71));
    Tensor ratio(DType::kFloat32, {});
    *ratio.data<float>() = 0.25f;
    Value* d = node(*g, "Dropout", {p, g->add_constant("ratio", ratio)});
    d->producer->opset = 13;
    weighted_sum_loss(*g, d, {6, 50});
    return g;
  };
  auto g = make();
  train::TrainingMode mode = train::to_training_mode(*g, 7);
  EXPECT_EQ(mode.dropouts, 1);
  ASSERT_FALSE(mode.step_input.empty());
  std::string mask;
  for (const auto& n : g->nodes())
    if (n->op_type == "TrainingDropout" && n->output(1)) mask = n->output(1)->name;
  ASSERT_FALSE(mask.empty());
  auto grad = train::build_gradient_graph(std::move(g), "loss", {"P"}, {mask});
  Session s = Session::from_graph(std::move(grad.graph));
  auto run_at = [&](int64_t step) {
    Tensor t(DType::kInt64, {});
    *t.data<int64_t>() = step;
    return s.run({{"P", grad.initial_values[0]}, {mode.step_input, t}});
  };
  std::vector<Tensor> out = run_at(5);
  const Tensor r = random_tensor({6, 50}, 99);
  int64_t kept = 0;
  for (int64_t i = 0; i < 300; ++i) {
    const bool keep = out[1].data<bool>()[i];
    kept += keep;
    EXPECT_NEAR(out[2].data<float>()[i], keep ? r.data<float>()[i] / 0.75f : 0.f, 1e-6) << i;
  }
  EXPECT_GT(kept, 180);  // about 225 of 300 kept
  EXPECT_LT(kept, 270);
  const std::vector<Tensor> again = run_at(5), other = run_at(6);
  EXPECT_EQ(std::memcmp(again[1].raw(), out[1].raw(), 300), 0);
  EXPECT_NE(std::memcmp(other[1].raw(), out[1].raw(), 300), 0);
}

}  // namespace
}  // namespace anvil
