// Plans keyed by input shapes, never values: value-dependent shapes become
// dynamic steps, integer inputs do not multiply plans, the cache is bounded.
#include <gtest/gtest.h>

#include <numeric>
#include <thread>

#include "anvil/error.h"
#include "anvil/session.h"
#include "ir/graph.h"

namespace anvil {
namespace {

Tensor int64_tensor(std::vector<int64_t> values, Shape shape = {}) {
  if (shape.empty()) shape = {static_cast<int64_t>(values.size())};
  Tensor t(DType::kInt64, shape);
  std::copy(values.begin(), values.end(), t.data<int64_t>());
  return t;
}

Tensor iota(Shape shape) {
  Tensor t(DType::kFloat32, std::move(shape));
  std::iota(t.data<float>(), t.data<float>() + t.numel(), 0.f);
  return t;
}

// y = Relu(Reshape(x, shape)): the shape is a graph input, known only per run.
std::unique_ptr<ir::Graph> reshape_by_input() {
  auto g = std::make_unique<ir::Graph>();
  g->opsets[""] = 17;
  ir::Value* x = g->add_input("x", DType::kFloat32, {2, 6});
  ir::Value* shape = g->add_input("shape", DType::kInt64, {-1});
  ir::Node* reshape = g->add_node("Reshape", {x, shape}, 1);
  ir::Node* relu = g->add_node("Relu", {reshape->output(0)}, 1);
  g->add_output(relu->output(0));
  return g;
}

TEST(DynamicPlans, ReshapeByGraphInputRunsWithEveryValue) {
  Session s = Session::from_graph(reshape_by_input());
  Tensor x = iota({2, 6});
  for (auto [spec, expect] : std::vector<std::pair<std::vector<int64_t>, Shape>>{
           {{3, 4}, {3, 4}}, {{4, 3}, {4, 3}}, {{-1, 2}, {6, 2}}, {{12}, {12}}}) {
    std::vector<Tensor> out = s.run({{"x", x}, {"shape", int64_tensor(spec)}});
    ASSERT_EQ(out[0].shape(), expect);
    for (int64_t i = 0; i < 12; ++i) EXPECT_EQ(out[0].data<float>()[i], static_cast<float>(i));
  }
  // One plan serves all four values: shape [2] (and [1]) are the only keys.
  EXPECT_EQ(s.cached_plans(), 2u);
  EXPECT_GE(s.plan_stats({{"x", x}, {"shape", int64_tensor({3, 4})}}).dynamic_steps, 2u);
}

TEST(DynamicPlans, BadValueAtRunTimeIsAnInvalidArgument) {
  Session s = Session::from_graph(reshape_by_input());
  try {
    s.run({{"x", iota({2, 6})}, {"shape", int64_tensor({5, 5})}});
    FAIL() << "reshape of 12 elements to [5,5] ran";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument) << e.what();
    EXPECT_NE(std::string(e.what()).find("Reshape"), std::string::npos) << e.what();
  }
}

// Token ids are data, not shape: Gather(table, ids) must not re-plan per sentence.
TEST(DynamicPlans, IntegerInputsDoNotMultiplyPlans) {
  auto g = std::make_unique<ir::Graph>();
  g->opsets[""] = 17;
  Tensor table = iota({10, 2});
  ir::Value* ids = g->add_input("ids", DType::kInt64, {1, -1});
  ir::Value* t = g->add_constant("table", table);
  ir::Node* gather = g->add_node("Gather", {t, ids}, 1);
  g->add_output(gather->output(0));
  Session s = Session::from_graph(std::move(g));
  for (int64_t first = 0; first < 8; ++first) {
    std::vector<Tensor> out = s.run({{"ids", int64_tensor({first, first + 2}, {1, 2})}});
    ASSERT_EQ(out[0].shape(), (Shape{1, 2, 2}));
    EXPECT_EQ(out[0].data<float>()[0], 2.f * first);
    EXPECT_EQ(out[0].data<float>()[3], 2.f * (first + 2) + 1);
  }
  EXPECT_EQ(s.cached_plans(), 1u);
  EXPECT_EQ(s.plan_stats({{"ids", int64_tensor({0, 1}, {1, 2})}}).dynamic_steps, 0u);
}

TEST(DynamicPlans, PlanCacheIsBoundedLeastRecentlyUsed) {
  auto g = std::make_unique<ir::Graph>();
  g->opsets[""] = 17;
  ir::Value* x = g->add_input("x", DType::kFloat32, {-1, 4});
  g->add_output(g->add_node("Relu", {x}, 1)->output(0));
  SessionOptions opts;
  opts.plan_cache_size = 2;
  Session s = Session::from_graph(std::move(g), opts);
  for (int64_t batch = 1; batch <= 5; ++batch) {
    std::vector<Tensor> out = s.run({{"x", iota({batch, 4})}});
    EXPECT_EQ(out[0].shape(), (Shape{batch, 4}));
    EXPECT_LE(s.cached_plans(), 2u);
  }
  EXPECT_EQ(s.cached_plans(), 2u);
}

TEST(DynamicPlans, ConcurrentRunsWithDifferentValues) {
  Session s = Session::from_graph(reshape_by_input());
  Tensor x = iota({2, 6});
  std::vector<std::thread> threads;
  std::atomic<int> wrong{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      std::vector<int64_t> spec = t % 2 ? std::vector<int64_t>{3, 4} : std::vector<int64_t>{6, 2};
      for (int i = 0; i < 50; ++i) {
        std::vector<Tensor> out = s.run({{"x", x}, {"shape", int64_tensor(spec)}});
        if (out[0].shape() != Shape{spec[0], spec[1]} || out[0].data<float>()[11] != 11.f) ++wrong;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(wrong.load(), 0);
}

TEST(DynamicPlans, InvalidCacheSizeIsRejected) {
  SessionOptions opts;
  opts.plan_cache_size = 0;
  EXPECT_THROW(Session::from_graph(reshape_by_input(), opts), Error);
}

}  // namespace
}  // namespace anvil

namespace anvil {
namespace {

// Plans for new shapes reuse the session's packed weights instead of packing
// (and holding) another copy each.
TEST(DynamicPlans, PlansShareThePackedWeights) {
  auto g = std::make_unique<ir::Graph>();
  g->opsets[""] = 17;
  ir::Value* x = g->add_input("x", DType::kFloat32, {-1, 16, 8, 8});
  Tensor w(DType::kFloat32, {32, 16, 3, 3});
  for (int64_t i = 0; i < w.numel(); ++i) w.data<float>()[i] = static_cast<float>(i % 7) - 3.f;
  ir::Node* conv = g->add_node("Conv", {x, g->add_constant("w", w)}, 1);
  conv->attrs.set("pads", std::vector<int64_t>{1, 1, 1, 1});
  g->add_output(conv->output(0));
  Session s = Session::from_graph(std::move(g));
  size_t first = s.plan_stats({{"x", iota({1, 16, 8, 8})}}).weight_bytes;
  EXPECT_GE(first, 2 * w.nbytes()) << "the constant and one packed copy";
  for (int64_t batch = 2; batch <= 4; ++batch) {
    Tensor in = iota({batch, 16, 8, 8});
    EXPECT_EQ(s.run({{"x", in}})[0].shape(), (Shape{batch, 32, 8, 8}));
    EXPECT_EQ(s.plan_stats({{"x", in}}).weight_bytes, first) << "batch " << batch;
  }
  EXPECT_EQ(s.cached_plans(), 4u);
}

}  // namespace
}  // namespace anvil
