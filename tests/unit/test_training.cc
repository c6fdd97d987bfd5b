// The training loop end to end: an MLP learns a non-linear rule (the sign of
// x0 * x1) from seeded data and classifies held-out points.
#include <gtest/gtest.h>

#include <random>

#include "anvil/error.h"
#include "kernel_tester.h"
#include "train/trainer.h"

namespace anvil {
namespace {

using ir::Value;

Tensor scaled_normal(Shape shape, uint32_t seed, float scale) {
  Tensor t(DType::kFloat32, std::move(shape));
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.f, scale);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = d(rng);
  return t;
}

// logits = relu(x W1^T + b1) W2 + b2; loss = softmax cross-entropy (mean).
std::unique_ptr<ir::Graph> mlp(int64_t hidden) {
  auto g = std::make_unique<ir::Graph>();
  g->opsets[""] = 17;
  Value* x = g->add_input("x", DType::kFloat32, {-1, 2});
  x->type = ir::Type::tensor(DType::kFloat32, ir::SymShape{ir::Dim{-1, "batch"}, ir::Dim{2, ""}});
  Value* labels = g->add_input("labels", DType::kInt64, {-1});
  labels->type = ir::Type::tensor(DType::kInt64, ir::SymShape{ir::Dim{-1, "batch"}});
  Value* w1 = g->add_constant("W1", scaled_normal({hidden, 2}, 1, 0.7f));
  Value* b1 = g->add_constant("b1", Tensor(DType::kFloat32, {hidden}));
  Value* w2 = g->add_constant("W2", scaled_normal({hidden, 2}, 2, 0.2f));
  Value* b2 = g->add_constant("b2", Tensor(DType::kFloat32, {2}));
  ir::Node* gemm = g->add_node("Gemm", {x, w1, b1}, 1);
  gemm->attrs.set("transB", int64_t{1});
  ir::Node* relu = g->add_node("Relu", {gemm->outputs[0]}, 1);
  ir::Node* mm = g->add_node("MatMul", {relu->outputs[0], w2}, 1);
  ir::Node* add = g->add_node_with_outputs("Add", {mm->outputs[0], b2}, {g->add_value("logits")});
  ir::Node* loss = g->add_node_with_outputs("SoftmaxCrossEntropyLoss", {add->outputs[0], labels}, {g->add_value("loss")});
  g->add_output(loss->outputs[0]);
  return g;
}

std::map<std::string, Tensor> batch_of(int64_t n, uint32_t seed) {
  Tensor x = testing::random_f32({n, 2}, seed);
  Tensor labels(DType::kInt64, {n});
  for (int64_t i = 0; i < n; ++i) labels.data<int64_t>()[i] = x.data<float>()[2 * i] * x.data<float>()[2 * i + 1] > 0;
  return {{"x", x}, {"labels", labels}};
}

double accuracy(const Tensor& logits, const Tensor& labels) {
  int64_t right = 0;
  for (int64_t i = 0; i < labels.numel(); ++i) {
    const int64_t guess = logits.data<float>()[2 * i + 1] > logits.data<float>()[2 * i];
    right += guess == labels.data<int64_t>()[i];
  }
  return static_cast<double>(right) / static_cast<double>(labels.numel());
}

TEST(Training, MlpLearnsTheSignOfAProduct) {
  train::OptimizerOptions adam;
  adam.kind = "adam";
  SessionOptions session;
  session.num_threads = 2;
  train::Trainer trainer(mlp(32), "loss", {"W1", "b1", "W2", "b2"}, adam, session, {"logits"});
  auto held_out = batch_of(1000, 12345);
  const double before = trainer.evaluate(held_out).loss;
  double last = 0;
  for (int step = 0; step < 600; ++step) last = trainer.step(batch_of(64, 1000 + step), 0.02f).loss;
  const train::StepResult test = trainer.evaluate(held_out);
  EXPECT_LT(test.loss, before / 3) << "loss " << before << " -> " << test.loss << " (last batch " << last << ")";
  EXPECT_GE(accuracy(test.extra_outputs[0], held_out["labels"]), 0.95);
}

TEST(Training, NonFiniteLossStopsAndKeepsTheParameters) {
  train::OptimizerOptions sgd;
  sgd.kind = "sgd";
  train::Trainer trainer(mlp(32), "loss", {"W1", "b1", "W2", "b2"}, sgd);
  auto batch = batch_of(8, 7);
  batch["x"].data<float>()[0] = batch["x"].data<float>()[1] = std::numeric_limits<float>::infinity();
  const std::vector<float> w1(trainer.parameters()[0].data<float>(), trainer.parameters()[0].data<float>() + 8);
  try {
    trainer.step(batch, 0.1f);
    FAIL() << "a NaN loss was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("loss is nan"), std::string::npos) << e.what();
  }
  for (int i = 0; i < 8; ++i) EXPECT_EQ(trainer.parameters()[0].data<float>()[i], w1[static_cast<size_t>(i)]);
}

}  // namespace
}  // namespace anvil
