// Common-subexpression elimination (passes/eliminate_common_subexpressions.cc):
// repeated nodes and equal constants become one, with values checked against
// hand-computed ones; the cases it must leave alone stay.
#include <gtest/gtest.h>

#include <cmath>

#include "anvil/session.h"
#include "ir/schema.h"
#include "kernel_tester.h"
#include "passes/pipeline.h"

namespace anvil {
namespace {

using testing::count_live_ops;
using testing::f32;

std::unique_ptr<ir::Graph> new_graph() {
  auto g = std::make_unique<ir::Graph>();
  g->opsets[""] = 17;
  return g;
}

ir::Value* unary(ir::Graph& g, const std::string& op, ir::Value* x) { return g.add_node(op, {x}, 1)->output(0); }
ir::Value* binary(ir::Graph& g, const std::string& op, ir::Value* a, ir::Value* b) {
  return g.add_node(op, {a, b}, 1)->output(0);
}

// Runs the pass alone (with the clean-up the pipeline does after it); whether it changed the graph.
bool eliminate(ir::Graph& g) {
  const bool changed = passes::make_eliminate_common_subexpressions()->run(g);
  passes::make_dead_code()->run(g);
  g.compact();
  return changed;
}

const Tensor kX = f32({2, 3}, {-1.5f, 0.f, 2.f, 3.f, -4.f, 0.5f});

std::vector<float> run_on_x(std::unique_ptr<ir::Graph> g, size_t output = 0) {
  Session s = Session::from_graph(std::move(g));
  return testing::values<float>(s.run({{"x", kX}})[output]);
}

// y = Exp(Relu(x)) + Exp(Relu(x)), each half computed on its own path.
std::unique_ptr<ir::Graph> repeated_chain() {
  auto g = new_graph();
  ir::Value* x = g->add_input("x", DType::kFloat32, {2, 3});
  ir::Value* a = unary(*g, "Exp", unary(*g, "Relu", x));
  ir::Value* b = unary(*g, "Exp", unary(*g, "Relu", x));
  g->add_output(binary(*g, "Add", a, b));
  ir::infer_types(*g);
  return g;
}

TEST(CommonSubexpressions, RepeatedChainsBecomeOne) {
  auto g = repeated_chain();
  EXPECT_TRUE(eliminate(*g));
  EXPECT_EQ(count_live_ops(*g, "Relu"), 1u);
  EXPECT_EQ(count_live_ops(*g, "Exp"), 1u);
  EXPECT_FALSE(eliminate(*g));  // a fixed point

  std::vector<float> want;
  for (int i = 0; i < 6; ++i) want.push_back(2.f * std::exp(std::max(kX.data<float>()[i], 0.f)));
  const std::vector<float> got = run_on_x(repeated_chain());  // at the default level, which runs the pass
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-5f * want[i]);
}

// y = (x + c1) * (x + c2), x of the constants' dtype and shape [2, 3].
std::unique_ptr<ir::Graph> sum_of_constants(const Tensor& c1, const Tensor& c2) {
  auto g = new_graph();
  ir::Value* x = g->add_input("x", c1.dtype(), {2, 3});
  ir::Value* a = binary(*g, "Add", x, g->add_constant("c1", c1));
  ir::Value* b = binary(*g, "Add", x, g->add_constant("c2", c2));
  g->add_output(binary(*g, "Mul", a, b));
  ir::infer_types(*g);
  return g;
}

TEST(CommonSubexpressions, EqualIntegerConstantsMakeTheirReadersOne) {
  const Tensor c = testing::i64({3}, {1, -2, 7});
  auto g = sum_of_constants(c, c.clone());
  EXPECT_TRUE(eliminate(*g));
  EXPECT_EQ(count_live_ops(*g, "Add"), 1u);

  const Tensor x = testing::i64({2, 3}, {5, -6, 0, 9, 10, -11});
  Session s = Session::from_graph(sum_of_constants(c, c.clone()));
  const std::vector<int64_t> got = testing::values<int64_t>(s.run({{"x", x}})[0]);
  ASSERT_EQ(got.size(), 6u);
  for (size_t i = 0; i < 6; ++i) {
    const int64_t sum = x.data<int64_t>()[i] + c.data<int64_t>()[i % 3];
    EXPECT_EQ(got[i], sum * sum);
  }
}

TEST(CommonSubexpressions, OtherConstantsStay) {
  // Float constants may be weights equal only at their initialization
  // (a model `anvil optimize` wrote may be trained): never merged.
  const Tensor w = f32({3}, {0.f, 0.f, 0.f});
  auto g = sum_of_constants(w, w.clone());
  EXPECT_FALSE(eliminate(*g));
  EXPECT_EQ(count_live_ops(*g, "Add"), 2u);
  // One element apart.
  g = sum_of_constants(testing::i64({3}, {1, 2, 3}), testing::i64({3}, {1, 2, 4}));
  EXPECT_FALSE(eliminate(*g));
  EXPECT_EQ(count_live_ops(*g, "Add"), 2u);
  // Same bytes, other shape.
  g = sum_of_constants(testing::i64({3}, {1, 2, 3}), testing::i64({1, 3}, {1, 2, 3}));
  EXPECT_FALSE(eliminate(*g));
  EXPECT_EQ(count_live_ops(*g, "Add"), 2u);
}

// Large constants are sampled by their first and last 4 KiB: ones that agree
// there are still compared in full.
TEST(CommonSubexpressions, LargeConstantsAreComparedInFull) {
  auto big_sum = [](bool differ_in_the_middle) {
    auto g = new_graph();
    ir::Value* x = g->add_input("x", DType::kInt32, {8192});
    std::vector<int32_t> values(8192);
    for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<int32_t>(i * 2654435761u % 1000);
    Tensor c1 = testing::i32({8192}, values);
    Tensor c2 = c1.clone();
    if (differ_in_the_middle) c2.data<int32_t>()[4096] += 1;
    ir::Value* a = binary(*g, "Add", x, g->add_constant("c1", c1));
    ir::Value* b = binary(*g, "Add", x, g->add_constant("c2", c2));
    g->add_output(binary(*g, "Sub", a, b));
    ir::infer_types(*g);
    return g;
  };
  auto g = big_sum(false);
  EXPECT_TRUE(eliminate(*g));
  EXPECT_EQ(count_live_ops(*g, "Add"), 1u);
  g = big_sum(true);
  EXPECT_FALSE(eliminate(*g));
  EXPECT_EQ(count_live_ops(*g, "Add"), 2u);
}

TEST(CommonSubexpressions, OtherAttributesStay) {
  auto g = new_graph();
  ir::Value* x = g->add_input("x", DType::kFloat32, {2, 3});
  ir::Node* a = g->add_node("LeakyRelu", {x}, 1);
  a->attrs.set("alpha", 0.1f);
  ir::Node* b = g->add_node("LeakyRelu", {x}, 1);
  b->attrs.set("alpha", 0.2f);
  g->add_output(binary(*g, "Add", a->output(0), b->output(0)));
  ir::infer_types(*g);
  EXPECT_FALSE(eliminate(*g));
  EXPECT_EQ(count_live_ops(*g, "LeakyRelu"), 2u);

  b->attrs.set("alpha", 0.1f);  // now the same: one
  EXPECT_TRUE(eliminate(*g));
  EXPECT_EQ(count_live_ops(*g, "LeakyRelu"), 1u);
}

TEST(CommonSubexpressions, ConstantNodesCompareTheirTensors) {
  auto constants = [](const Tensor& v1, const Tensor& v2) {
    auto g = new_graph();
    ir::Value* x = g->add_input("x", DType::kInt64, {3});
    ir::Node* c1 = g->add_node("Constant", {}, 1);
    c1->attrs.set("value", v1);
    ir::Node* c2 = g->add_node("Constant", {}, 1);
    c2->attrs.set("value", v2);
    g->add_output(binary(*g, "Mul", binary(*g, "Add", x, c1->output(0)), binary(*g, "Add", x, c2->output(0))));
    ir::infer_types(*g);
    return g;
  };
  auto g = constants(testing::i64({3}, {4, 5, 6}), testing::i64({3}, {4, 5, 6}));
  EXPECT_TRUE(eliminate(*g));
  EXPECT_EQ(count_live_ops(*g, "Constant"), 1u);
  EXPECT_EQ(count_live_ops(*g, "Add"), 1u);
  g = constants(testing::i64({3}, {4, 5, 6}), testing::i64({3}, {4, 5, 7}));
  EXPECT_FALSE(eliminate(*g));
  EXPECT_EQ(count_live_ops(*g, "Constant"), 2u);
}

TEST(CommonSubexpressions, RandomOpsAndTrainingDropoutDrawEachTime) {
  auto g = new_graph();
  ir::Value* x = g->add_input("x", DType::kFloat32, {2, 3});
  ir::Value* r1 = unary(*g, "RandomUniformLike", x);
  ir::Value* r2 = unary(*g, "RandomUniformLike", x);
  Tensor ratio = f32({}, {0.5f});
  Tensor training(DType::kBool, {});
  training.data<bool>()[0] = true;
  ir::Value* ratio_v = g->add_constant("ratio", ratio);
  ir::Value* training_v = g->add_constant("training", training);
  ir::Value* d1 = g->add_node("Dropout", {x, ratio_v, training_v}, 1)->output(0);
  ir::Value* d2 = g->add_node("Dropout", {x, ratio_v, training_v}, 1)->output(0);
  g->add_output(binary(*g, "Sub", r1, r2));
  g->add_output(binary(*g, "Sub", d1, d2));
  ir::infer_types(*g);
  EXPECT_FALSE(eliminate(*g));
  EXPECT_EQ(count_live_ops(*g, "RandomUniformLike"), 2u);
  EXPECT_EQ(count_live_ops(*g, "Dropout"), 2u);
}

TEST(CommonSubexpressions, GraphOutputsKeepTheirNodes) {
  auto g = new_graph();
  ir::Value* x = g->add_input("x", DType::kFloat32, {2, 3});
  ir::Value* first = unary(*g, "Relu", x);
  ir::Value* second = unary(*g, "Relu", x);
  second->name = "second";
  g->add_output(unary(*g, "Neg", first));
  g->add_output(second);  // its name must stay an output's
  ir::infer_types(*g);
  EXPECT_FALSE(eliminate(*g));
  EXPECT_EQ(count_live_ops(*g, "Relu"), 2u);
  EXPECT_EQ(g->outputs()[1]->name, "second");
}

TEST(CommonSubexpressions, ConstantsCallersMayFeedStay) {
  const Tensor c = testing::i64({3}, {1, 2, 3});
  auto g = sum_of_constants(c, c.clone());
  g->find_value("c2")->is_graph_input = true;  // an initializer that is also an input: a default value
  EXPECT_FALSE(eliminate(*g));
  EXPECT_EQ(count_live_ops(*g, "Add"), 2u);
}

}  // namespace
}  // namespace anvil
