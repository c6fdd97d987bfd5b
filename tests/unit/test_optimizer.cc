// Optimizers and schedules against hand-computed updates (PyTorch's rules).
#include <gtest/gtest.h>

#include <cmath>

#include "anvil/error.h"
#include "anvil/cpu.h"
#include "core/vector_isa.h"
#include "train/optimizer.h"
#include "train/update/update_kernels.h"

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

namespace anvil {
namespace {

// Every ISA path the CPU has (ANVIL_MAX_ISA only caps the dispatch), against
// AdamW and SGD with Nesterov momentum computed in double, on a length that
// leaves a vector tail; each also returns the sum of the squared gradients.
// A gradient that is not finite stops the step before any parameter changes.
TEST(Optimizer, NonFiniteGradientsLeaveTheParameters) {
  for (const char* kind : {"sgd", "adam"}) {
    train::OptimizerOptions o;
    o.kind = kind;
    std::vector<Tensor> p = {values({1.f, 2.f}), values({3.f})};
    train::Optimizer opt(o, p);
    Tensor bad = values({0.5f});
    bad.data<float>()[0] = std::nanf("");
    EXPECT_THROW(opt.step(p, {values({0.1f, 0.2f}), bad}, 0.1f), Error);
    EXPECT_EQ(p[0].data<float>()[0], 1.f);
    EXPECT_EQ(p[0].data<float>()[1], 2.f);
    EXPECT_EQ(opt.steps(), 0);
  }
}

TEST(UpdateKernels, EachIsaMatchesTheFormulas) {
  const int64_t n = 1037;
  std::vector<float> g0(n), p0(n), m0(n), v0(n);
  for (int64_t i = 0; i < n; ++i) {
    g0[i] = std::sin(0.37f * i) * 2.f;
    p0[i] = std::cos(0.11f * i);
    m0[i] = 0.01f * std::sin(0.5f * i);
    v0[i] = 0.001f * (1.f + std::cos(0.3f * i));
  }
  double squares = 0;
  for (float g : g0) squares += double(g) * g;
  const train::AdamStep a{0.9f, 0.999f, 1e-8f, 0.01f / 0.19f, 1.f / std::sqrt(0.002f), 0.f, 0.005f, 0.5f};
  const train::SgdStep s{0.1f, 0.01f, 0.9f, 1.f, true, false};
  for (VectorIsa isa : supported_vector_isas()) {
    SCOPED_TRACE(vector_isa_name(isa));
    const train::UpdateKernels& k = train::update_kernels_for(isa);
    std::vector<float> p = p0, m = m0, v = v0;
    EXPECT_NEAR(k.adam(p.data(), g0.data(), m.data(), v.data(), n, a), squares, 1e-4 * squares);
    for (int64_t i = 0; i < n; ++i) {
      const double pi = p0[i] * (1.0 - 0.005), gi = g0[i] * 0.5;
      const double mi = 0.9 * m0[i] + 0.1 * gi, vi = 0.999 * v0[i] + 0.001 * gi * gi;
      ASSERT_NEAR(m[i], mi, 1e-6);
      ASSERT_NEAR(v[i], vi, 1e-7);
      ASSERT_NEAR(p[i], pi - (0.01 / 0.19) * mi / (std::sqrt(vi) / std::sqrt(0.002) + 1e-8), 2e-5) << i;
    }
    p = p0;
    m = m0;
    EXPECT_NEAR(k.sgd(p.data(), g0.data(), m.data(), n, s), squares, 1e-4 * squares);
    for (int64_t i = 0; i < n; ++i) {
      const double gi = g0[i] + 0.01 * p0[i], bi = 0.9 * m0[i] + gi;
      ASSERT_NEAR(m[i], bi, 1e-5);
      ASSERT_NEAR(p[i], p0[i] - 0.1 * (gi + 0.9 * bi), 1e-5) << i;
    }
    EXPECT_NEAR(k.sum_squares(g0.data(), n), squares, 1e-4 * squares);
  }
}

}  // namespace
}  // namespace anvil
