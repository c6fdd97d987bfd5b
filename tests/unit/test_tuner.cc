// SessionOptions::tune: a node with alternatives (a MatMul with constant
// weights: oneDNN's matmul or Anvil's packed GEMM) is timed both ways when
// planned, the faster kept and written to the tuning cache; a later session
// plans from the cache without timing, whatever choice the file holds; a
// malformed cache is replaced. Results against a product computed here.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "anvil/session.h"
#include "ir/graph.h"
#include "runtime/tuner.h"

namespace anvil {
namespace {

constexpr int64_t kM = 24, kK = 96, kN = 80;

Tensor filled(Shape shape, int mul, int mod) {
  Tensor t(DType::kFloat32, std::move(shape));
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = static_cast<float>((i * mul) % mod) * 0.125f - 0.5f;
  return t;
}

std::unique_ptr<ir::Graph> matmul_graph() {
  auto g = std::make_unique<ir::Graph>();
  g->opsets[""] = 17;
  ir::Value* x = g->add_input("x", DType::kFloat32, {kM, kK});
  ir::Node* mm = g->add_node("MatMul", {x, g->add_constant("w", filled({kK, kN}, 7, 13))}, 1, "mm");
  g->add_output(mm->output(0));
  return g;
}

void expect_product(const Tensor& y) {
  const Tensor x = filled({kM, kK}, 5, 11), w = filled({kK, kN}, 7, 13);
  for (int64_t i = 0; i < kM; ++i)
    for (int64_t j = 0; j < kN; ++j) {
      double acc = 0;
      for (int64_t k = 0; k < kK; ++k) acc += double(x.data<float>()[i * kK + k]) * w.data<float>()[k * kN + j];
      ASSERT_NEAR(y.data<float>()[i * kN + j], acc, 1e-4) << i << "," << j;
    }
}

std::string temp_path(const char* name) {
  return (std::filesystem::temp_directory_path() / (std::string("anvil_tuner_") + name + "_" +
                                                    std::to_string(::getpid()) + ".json"))
      .string();
}

// The cache and the lock file the tuner keeps beside it (Tuner::save).
void remove_cache(const std::string& path) {
  std::remove(path.c_str());
  std::remove((path + ".lock").c_str());
}

nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

// Plans and runs the MatMul; returns its plan line.
std::string plan_and_check(const std::string& cache, TuningStats* stats) {
  SessionOptions o;
  o.tune = true;
  o.tune_cache = cache;
  Session s = Session::from_graph(matmul_graph(), o);
  const std::map<std::string, Tensor> in{{"x", filled({kM, kK}, 5, 11)}};
  expect_product(s.run(in)[0]);
  *stats = s.tuning_stats();
  for (const std::string& line : s.describe_plan(in))
    if (line.find("'mm'") != std::string::npos) return line;
  return "";
}

TEST(Tuner, TimesTheAlternativesThenPlansFromTheCache) {
  const std::string cache = temp_path("cache");
  remove_cache(cache);
  TuningStats stats;
  plan_and_check(cache, &stats);
  EXPECT_EQ(stats.timed_nodes, 1u);
  EXPECT_EQ(stats.cached_nodes, 0u);
  EXPECT_EQ(stats.cache_path, cache);
  nlohmann::json doc = read_json(cache);
  ASSERT_EQ(doc["choices"].size(), 1u) << doc.dump();
  nlohmann::json& entry = doc["choices"].begin().value();
  const std::string chosen = entry["choice"];
  EXPECT_TRUE(entry["median_ms"].contains("dnnl") && entry["median_ms"].contains("packed_gemm")) << doc.dump();
  const double dnnl_ms = entry["median_ms"]["dnnl"], packed_ms = entry["median_ms"]["packed_gemm"];
  EXPECT_EQ(chosen, dnnl_ms <= packed_ms ? "dnnl" : "packed_gemm");  // the faster one

  // The file drives later sessions, whichever choice it holds.
  for (const char* forced : {"dnnl", "packed_gemm"}) {
    entry["choice"] = forced;
    std::ofstream(cache) << doc.dump();
    const std::string line = plan_and_check(cache, &stats);
    EXPECT_EQ(stats.timed_nodes, 0u);
    EXPECT_EQ(stats.cached_nodes, 1u);
    EXPECT_EQ(line.find(":packed_gemm") != std::string::npos, std::string(forced) == "packed_gemm") << line;
  }
  remove_cache(cache);
}

TEST(Tuner, AMalformedCacheIsReplaced) {
  const std::string cache = temp_path("malformed");
  for (const char* bad : {"{not json", R"({"version": 1, "choices": {"k": 3}})", R"({"version": 99, "choices": {}})"}) {
    std::ofstream(cache) << bad;
    TuningStats stats;
    plan_and_check(cache, &stats);
    EXPECT_EQ(stats.timed_nodes, 1u) << bad;
    EXPECT_EQ(read_json(cache)["choices"].size(), 1u) << bad;  // rewritten, valid
  }
  remove_cache(cache);
}

// The tuning cache's model key changes with the wiring and the attributes
// of nodes whose names and constants stay the same, and only with them.
TEST(Tuner, TheModelFingerprintSeesWiringAndAttributes) {
  auto graph = [](bool swapped, int64_t axis) {
    auto g = std::make_unique<ir::Graph>();
    g->opsets[""] = 17;
    ir::Value* x = g->add_input("x", DType::kFloat32, {2, 3});
    ir::Value* y = g->add_input("y", DType::kFloat32, {2, 3});
    ir::Value* d = g->add_node("Sub", {swapped ? y : x, swapped ? x : y}, 1, "sub")->output(0);
    ir::Node* c = g->add_node("Concat", {d, x}, 1, "cat");
    c->attrs.set("axis", axis);
    g->add_output(c->output(0));
    return g;
  };
  const std::string base = runtime::model_fingerprint(*graph(false, 0));
  EXPECT_EQ(runtime::model_fingerprint(*graph(false, 0)), base);
  EXPECT_NE(runtime::model_fingerprint(*graph(true, 0)), base);
  EXPECT_NE(runtime::model_fingerprint(*graph(false, 1)), base);
}

TEST(Tuner, OffByDefault) {
  Session s = Session::from_graph(matmul_graph());
  expect_product(s.run({{"x", filled({kM, kK}, 5, 11)}})[0]);
  EXPECT_TRUE(s.tuning_stats().cache_path.empty());
}

}  // namespace
}  // namespace anvil
