// The IR verifier (src/ir/verify.cc) on hand-built graphs: what it must accept
// (subgraphs reading outer values through captures) and each invariant it must catch.
#include <gtest/gtest.h>

#include "anvil/error.h"
#include "ir/graph.h"
#include "ir/verify.h"

namespace anvil {
namespace {

std::string verify_error(const ir::Graph& g) {
  try {
    ir::verify(g, ErrorKind::kInternal, "in the test");
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInternal);
    return e.what();
  }
  return "";
}

// y = If(cond) then { Relu(x) } else { Neg(x) }: x is read by both branches through captures.
std::unique_ptr<ir::Graph> if_graph() {
  auto g = std::make_unique<ir::Graph>();
  g->opsets[""] = 17;
  ir::Value* cond = g->add_input("cond", DType::kBool, {});
  ir::Value* x = g->add_input("x", DType::kFloat32, {4});
  ir::Node* node = g->add_node("If", {cond}, 1, "if0");
  for (const char* branch : {"then_branch", "else_branch"}) {
    auto sub = std::make_shared<ir::Graph>();
    sub->parent = g.get();
    sub->owner = node;
    ir::Value* inner = sub->add_capture("x", x);
    ir::Node* op = sub->add_node(std::string(branch) == "then_branch" ? "Relu" : "Neg", {inner}, 1);
    sub->add_output(op->output(0));
    node->attrs.set(branch, sub);
  }
  g->add_output(node->output(0));
  return g;
}

TEST(Verify, CapturesBecomeOneImplicitInput) {
  auto g = if_graph();
  const ir::Node& node = *g->nodes()[0];
  EXPECT_EQ(node.num_implicit_inputs, 1u);  // both branches read x: one implicit input
  EXPECT_EQ(node.num_explicit_inputs(), 1u);
  EXPECT_EQ(node.inputs[1]->name, "x");
  EXPECT_EQ(verify_error(*g), "");
  // Dead-code and lifetime analysis see the read: x has a consumer.
  EXPECT_EQ(g->consumers()[g->inputs()[1]].size(), 1u);
}

TEST(Verify, SubgraphReadingAnOuterValueDirectlyIsCaught) {
  auto g = if_graph();
  ir::Graph* then = g->nodes()[0]->attrs.get_graph("then_branch");
  then->nodes()[0]->inputs[0] = g->inputs()[1];  // bypasses the capture
  EXPECT_NE(verify_error(*g).find("another graph"), std::string::npos) << verify_error(*g);
}

TEST(Verify, ReadBeforeDefinitionIsCaught) {
  ir::Graph g;
  ir::Value* x = g.add_input("x", DType::kFloat32, {2});
  ir::Value* later = g.add_value("later");
  ir::Node* a = g.add_node("Relu", {later}, 1, "a");
  g.add_node_with_outputs("Neg", {x}, {later}, "b");
  g.add_output(a->output(0));
  EXPECT_NE(verify_error(g).find("before it is defined"), std::string::npos) << verify_error(g);
}

TEST(Verify, SecondProducerIsCaught) {
  ir::Graph g;
  ir::Value* x = g.add_input("x", DType::kFloat32, {2});
  ir::Node* a = g.add_node("Relu", {x}, 1, "a");
  ir::Node* b = g.add_node("Neg", {x}, 1, "b");
  b->outputs[0] = a->output(0);  // a's output claimed by b too
  g.add_output(a->output(0));
  EXPECT_NE(verify_error(g).find("another producer"), std::string::npos) << verify_error(g);
}

TEST(Verify, MistypedConstantIsCaught) {
  ir::Graph g;
  ir::Value* x = g.add_input("x", DType::kFloat32, {2});
  ir::Value* c = g.add_constant("c", Tensor(DType::kFloat32, {2}));
  c->type = ir::Type::tensor(DType::kFloat32, Shape{3});
  g.add_output(g.add_node("Add", {x, c}, 1)->output(0));
  EXPECT_NE(verify_error(g).find("constant 'c'"), std::string::npos) << verify_error(g);
}

TEST(Verify, CaptureIndexOutOfRangeIsCaught) {
  auto g = if_graph();
  g->nodes()[0]->attrs.get_graph("else_branch")->captures[0].implicit_index = 5;
  EXPECT_NE(verify_error(*g).find("implicit input 5"), std::string::npos) << verify_error(*g);
}

TEST(Type, SymbolicDimsAndNesting) {
  ir::Type t = ir::Type::tensor(DType::kInt64, {ir::Dim::named("batch"), ir::Dim::known(128)});
  EXPECT_EQ(t.str(), "int64[batch,128]");
  EXPECT_FALSE(t.is_static());
  EXPECT_EQ(t.shape_or_minus_one(), (Shape{-1, 128}));
  ir::Type seq = ir::Type::sequence(ir::Type::tensor(DType::kFloat32));
  EXPECT_EQ(seq.str(), "seq(float32[...])");
  EXPECT_EQ(ir::Type::optional(seq).element(), seq);
  EXPECT_NE(seq, ir::Type::sequence(ir::Type::tensor(DType::kFloat64)));
  EXPECT_TRUE(ir::Type::tensor(DType::kFloat32, Shape{2, 3}).is_static());
}

}  // namespace
}  // namespace anvil
