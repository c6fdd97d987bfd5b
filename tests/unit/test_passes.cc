// Graph passes: each test builds a small graph, optimizes it, and checks both
// the rewritten graph and the values it computes (hand-computed).
#include <gtest/gtest.h>

#include <cmath>

#include "anvil/session.h"
#include "ir/builder.h"
#include "passes/pipeline.h"
#include "runtime/constant_evaluator.h"

namespace anvil {
namespace {

size_t count_ops(const ir::Graph& g, const std::string& op) {
  size_t n = 0;
  for (const auto& node : g.nodes()) n += node->op_type == op;
  return n;
}

Tensor ints(Shape shape, std::vector<int64_t> v) {
  Tensor t(DType::kInt64, std::move(shape));
  for (size_t i = 0; i < v.size(); ++i) t.data<int64_t>()[i] = v[i];
  return t;
}

// x -> Shape -> Gather(0) -> Unsqueeze -> Concat([-1]) -> Reshape(x): the
// batch-preserving flatten PyTorch exports.
std::unique_ptr<ir::Graph> dynamic_flatten() {
  auto g = std::make_unique<ir::Graph>();
  g->opsets[""] = 13;
  ir::Value* x = g->add_input("x", DType::kFloat32, {2, 3, 4});
  ir::Value* shape = g->add_node("Shape", {x}, 1)->output(0);
  ir::Node* gather = g->add_node("Gather", {shape, g->add_constant("zero", ints({}, {0}))}, 1);
  ir::Value* batch = g->add_node("Unsqueeze", {gather->output(0), g->add_constant("axes", ints({1}, {0}))}, 1)->output(0);
  ir::Node* concat = g->add_node("Concat", {batch, g->add_constant("minus1", ints({1}, {-1}))}, 1);
  concat->attrs.set("axis", int64_t{0});
  ir::Node* reshape = g->add_node("Reshape", {x, concat->output(0)}, 1);
  g->add_output(reshape->output(0));
  return g;
}

TEST(Passes, ShapeArithmeticIsFoldedAtPlanTime) {
  Session s = Session::from_graph(dynamic_flatten());
  Tensor x(DType::kFloat32, {2, 3, 4});
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = static_cast<float>(i);
  std::map<std::string, Tensor> in = {{"x", x}};
  std::vector<Tensor> out = s.run(in);
  ASSERT_EQ(out[0].shape(), (Shape{2, 12}));
  for (int64_t i = 0; i < 24; ++i) EXPECT_EQ(out[0].data<float>()[i], static_cast<float>(i));
  EXPECT_EQ(s.plan_stats(in).num_steps, 1u);  // only the Reshape runs
}

TEST(Passes, ConstantSubgraphsFoldIntoOneValue) {
  auto g = std::make_unique<ir::Graph>();
  g->opsets[""] = 13;
  ir::Value* x = g->add_input("x", DType::kInt64, {2});
  ir::Value* a = g->add_constant("a", ints({2}, {3, 4}));
  ir::Value* b = g->add_constant("b", ints({2}, {10, 20}));
  ir::Value* ab = g->add_node("Mul", {a, b}, 1)->output(0);           // [30, 80], constant
  g->add_output(g->add_node("Add", {x, ab}, 1)->output(0));
  passes::optimize(*g, 1, runtime::reference_evaluator());
  EXPECT_EQ(count_ops(*g, "Mul"), 0u);
  EXPECT_EQ(count_ops(*g, "Add"), 1u);
  const ir::Value* folded = g->nodes()[0]->input(1);
  ASSERT_TRUE(folded->is_constant());
  EXPECT_EQ(folded->constant->data<int64_t>()[0], 30);
  EXPECT_EQ(folded->constant->data<int64_t>()[1], 80);
}

TEST(Passes, IdentityAndDeadNodesAreRemoved) {
  auto g = std::make_unique<ir::Graph>();
  g->opsets[""] = 13;
  ir::Value* x = g->add_input("x", DType::kFloat32, {4});
  ir::Value* id = g->add_node("Identity", {x}, 1)->output(0);
  g->add_node("Exp", {x}, 1);  // nobody reads it
  ir::Node* relu = g->add_node("Relu", {id}, 1, "relu");
  g->add_output(relu->output(0));
  passes::optimize(*g, 1, runtime::reference_evaluator());
  ASSERT_EQ(g->nodes().size(), 1u);
  EXPECT_EQ(g->nodes()[0]->op_type, "Relu");
  EXPECT_EQ(g->nodes()[0]->input(0), x);
}

TEST(Passes, ConvBatchNormFoldsIntoWeights) {
  // 1x1 conv, one channel, weight 2, bias 1; BN gamma 3, beta 0.5, mean 1, var 3 (eps 1):
  // y = 3 * ((2x + 1) - 1) / sqrt(3 + 1) + 0.5 = 3x + 0.5.
  auto g = std::make_unique<ir::Graph>();
  g->opsets[""] = 13;
  auto scalar = [&](const char* name, float v, Shape shape) {
    Tensor t(DType::kFloat32, std::move(shape));
    t.data<float>()[0] = v;
    return g->add_constant(name, t);
  };
  ir::Value* x = g->add_input("x", DType::kFloat32, {1, 1, 2, 2});
  ir::Node* conv = g->add_node("Conv", {x, scalar("w", 2.f, {1, 1, 1, 1}), scalar("b", 1.f, {1})}, 1);
  ir::Node* bn = g->add_node("BatchNormalization", {conv->output(0), scalar("gamma", 3.f, {1}), scalar("beta", 0.5f, {1}),
                                                    scalar("mean", 1.f, {1}), scalar("var", 3.f, {1})}, 1);
  bn->attrs.set("epsilon", 1.f);
  g->add_output(bn->output(0));
  Session s = Session::from_graph(std::move(g));
  Tensor in(DType::kFloat32, {1, 1, 2, 2});
  const float xs[4] = {0.f, 1.f, -2.f, 4.f};
  for (int i = 0; i < 4; ++i) in.data<float>()[i] = xs[i];
  Tensor y = s.run({{"x", in}})[0];
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(y.data<float>()[i], 3.f * xs[i] + 0.5f, 1e-5f);
  PlanStats stats = s.plan_stats({{"x", in}});
  EXPECT_EQ(stats.num_steps - stats.reorders, 1u);  // one conv (and the layout reorders it asks for)
}

}  // namespace
}  // namespace anvil
