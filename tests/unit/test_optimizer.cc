// Optimizers and schedules against hand-computed updates (PyTorch's rules).
#include <gtest/gtest.h>

#include <cmath>

#include "anvil/error.h"
#include "train/optimizer.h"

namespace anvil {
namespace {

Tensor values(std::vector<float> v) {
  Tensor t(DType::kFloat32, {static_cast<int64_t>(v.size())});
  std::copy(v.begin(), v.end(), t.data<float>());
  return t;
}

TEST(Optimizer, SgdWithMomentumAndWeightDecay) {
  train::OptimizerOptions o;
  o.kind = "sgd";
  o.momentum = 0.9f;
  o.weight_decay = 0.1f;
  std::vector<Tensor> p = {values({1.f, -2.f})};
  train::Optimizer opt(o, p);
  opt.step(p, {values({0.5f, 1.f})}, 0.1f);
  // g = 0.5 + 0.1*1 = 0.6, buf = 0.6, p = 1 - 0.06; g2 = 1 + 0.1*-2 = 0.8, p = -2 - 0.08
  EXPECT_FLOAT_EQ(p[0].data<float>()[0], 0.94f);
  EXPECT_FLOAT_EQ(p[0].data<float>()[1], -2.08f);
  opt.step(p, {values({0.5f, 1.f})}, 0.1f);
  // g = 0.5 + 0.094 = 0.594, buf = 0.9*0.6 + 0.594 = 1.134, p = 0.94 - 0.1134
  EXPECT_NEAR(p[0].data<float>()[0], 0.8266f, 1e-6);
}

TEST(Optimizer, SgdNesterov) {
  train::OptimizerOptions o;
  o.kind = "sgd";
  o.momentum = 0.5f;
  o.nesterov = true;
  std::vector<Tensor> p = {values({1.f})};
  train::Optimizer opt(o, p);
  opt.step(p, {values({2.f})}, 0.1f);  // buf = 2, g = 2 + 0.5*2 = 3, p = 1 - 0.3
  EXPECT_FLOAT_EQ(p[0].data<float>()[0], 0.7f);
}

TEST(Optimizer, AdamAndAdamW) {
  train::OptimizerOptions o;
  o.kind = "adam";
  std::vector<Tensor> p = {values({1.f, 1.f})};
  train::Optimizer adam(o, p);
  adam.step(p, {values({0.5f, -3.f})}, 0.01f);
  // First step: m_hat = g, v_hat = g^2, so p -= lr * g / (|g| + eps) = lr * sign(g).
  EXPECT_NEAR(p[0].data<float>()[0], 0.99f, 1e-6);
  EXPECT_NEAR(p[0].data<float>()[1], 1.01f, 1e-6);
  adam.step(p, {values({0.5f, 1.f})}, 0.01f);
  // g2 = 1 for element 1: m = 0.9*0.1*-3 + 0.1*1 = -0.17, v = 0.999*0.001*9 + 0.001*1 = 0.009991
  const double m = -0.17 / (1 - 0.81), v = 0.009991 / (1 - 0.998001);
  EXPECT_NEAR(p[0].data<float>()[1], 1.01 - 0.01 * m / (std::sqrt(v) + 1e-8), 1e-6);

  o.kind = "adamw";
  o.weight_decay = 0.5f;
  std::vector<Tensor> q = {values({2.f})};
  train::Optimizer adamw(o, q);
  adamw.step(q, {values({1.f})}, 0.1f);  // p = 2 - 0.1*0.5*2 = 1.9, then - 0.1*sign(1)
  EXPECT_NEAR(q[0].data<float>()[0], 1.8f, 1e-6);
}

TEST(Optimizer, ClippingScalesByTheGlobalNorm) {
  train::OptimizerOptions o;
  o.kind = "sgd";
  o.clip_norm = 1.f;
  std::vector<Tensor> p = {values({0.f}), values({0.f})};
  train::Optimizer opt(o, p);
  const double norm = opt.step(p, {values({3.f}), values({4.f})}, 1.f);
  EXPECT_DOUBLE_EQ(norm, 5.0);
  EXPECT_NEAR(p[0].data<float>()[0], -0.6f, 1e-5);
  EXPECT_NEAR(p[1].data<float>()[0], -0.8f, 1e-5);
}

TEST(Optimizer, ManyChunksUpdateEveryElement) {
  train::OptimizerOptions o;
  o.kind = "sgd";
  std::vector<Tensor> p = {Tensor(DType::kFloat32, {100000}), Tensor(DType::kFloat32, {3})};
  std::vector<Tensor> g = {Tensor(DType::kFloat32, {100000}), Tensor(DType::kFloat32, {3})};
  for (auto& t : g)
    for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = static_cast<float>(i % 7);
  train::Optimizer opt(o, p);
  opt.step(p, g, 0.5f);
  for (size_t t = 0; t < p.size(); ++t)
    for (int64_t i = 0; i < p[t].numel(); ++i) ASSERT_EQ(p[t].data<float>()[i], -0.5f * static_cast<float>(i % 7));
}

TEST(Optimizer, SchedulesAndBadOptions) {
  train::Schedule step{"step", 10, 0.5f};
  EXPECT_FLOAT_EQ(step.lr_at(1.f, 9), 1.f);
  EXPECT_FLOAT_EQ(step.lr_at(1.f, 25), 0.25f);
  train::Schedule cosine;
  cosine.kind = "cosine";
  cosine.total_steps = 100;
  EXPECT_FLOAT_EQ(cosine.lr_at(2.f, 0), 2.f);
  EXPECT_NEAR(cosine.lr_at(2.f, 50), 1.f, 1e-6);
  EXPECT_NEAR(cosine.lr_at(2.f, 100), 0.f, 1e-6);
  std::vector<Tensor> p = {values({1.f})};
  for (auto bad : {[] { train::OptimizerOptions o; o.kind = "adagrad"; return o; }(),
                   [] { train::OptimizerOptions o; o.lr = -1; return o; }(),
                   [] { train::OptimizerOptions o; o.kind = "sgd"; o.nesterov = true; return o; }()}) {
    try {
      train::Optimizer opt(bad, p);
      FAIL() << "accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
    }
  }
}

}  // namespace
}  // namespace anvil
