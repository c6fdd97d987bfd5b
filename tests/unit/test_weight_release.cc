// One copy of each weight: once every reader of a constant reads its packed
// copy, the session drops the original's pages and rebuilds them before any
// other reader sees them. Values are checked against sums computed here.
#include <gtest/gtest.h>

#include <cstring>

#include "anvil/session.h"
#include "ir/graph.h"
#include "kernels/weight_cache.h"

namespace anvil {
namespace {

constexpr int64_t kK = 256, kN = 256;  // a 256 KiB weight: worth releasing

Tensor weight() {
  Tensor w(DType::kFloat32, {kK, kN});
  for (int64_t i = 0; i < w.numel(); ++i) w.data<float>()[i] = static_cast<float>((i * 7) % 13) - 6.f;
  return w;
}

Tensor rows(int64_t m) {
  Tensor x(DType::kFloat32, {m, kK});
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = static_cast<float>((i * 5) % 11) * 0.25f - 1.f;
  return x;
}

// y = x W (+ W's first row broadcast when `also_added`), computed here.
std::vector<float> expected(const Tensor& x, const Tensor& w, bool also_added) {
  const int64_t m = x.dim(0);
  std::vector<float> y(static_cast<size_t>(m * kN));
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < kN; ++j) {
      double acc = 0;
      for (int64_t k = 0; k < kK; ++k) acc += double(x.data<float>()[i * kK + k]) * w.data<float>()[k * kN + j];
      y[static_cast<size_t>(i * kN + j)] = static_cast<float>(acc);
    }
  return y;
}

// x [m, K] -> MatMul(W) -> y; with `also_added`, W is also an input of an Add
// (y + W): a reader of the original bytes at run time.
Session matmul_session(bool also_added) {
  auto g = std::make_unique<ir::Graph>();
  g->opsets[""] = 13;
  ir::Value* x = g->add_input("x", DType::kFloat32, {-1, kK});
  ir::Value* w = g->add_constant("w", weight());
  ir::Value* y = g->add_node("MatMul", {x, w}, 1)->output(0);
  if (also_added) y = g->add_node("Add", {y, w}, 1)->output(0);  // [m, N] + [K, N]: m must be K
  g->add_output(y);
  SessionOptions options;
  options.num_threads = 1;
  return Session::from_graph(std::move(g), options);
}

void expect_close(const Tensor& y, const std::vector<float>& want) {
  ASSERT_EQ(static_cast<size_t>(y.numel()), want.size());
  for (size_t i = 0; i < want.size(); ++i) ASSERT_NEAR(y.data<float>()[i], want[i], 1e-3f) << i;
}

TEST(WeightRelease, PackedOnlyWeightIsHeldOnceAndServesNewShapes) {
  Session s = matmul_session(false);
  const Tensor w = weight();
  for (int64_t m : {4, 9, 4}) {  // a second plan packs from the cache; the first is reused
    Tensor x = rows(m);
    expect_close(s.run({{"x", x}})[0], expected(x, w, false));
  }
  // Resident weights: the packed copy, and of the original at most its partial edge pages.
  const size_t original = static_cast<size_t>(w.nbytes());
  const PlanStats stats = s.plan_stats({{"x", rows(4)}});
  EXPECT_LT(stats.weight_bytes, original + original / 4) << "the original was not released";
}

TEST(WeightRelease, WeightAlsoReadUnpackedIsKept) {
  Session s = matmul_session(true);
  const Tensor w = weight();
  Tensor x = rows(kK);
  std::vector<float> want = expected(x, w, false);
  for (size_t i = 0; i < want.size(); ++i) want[i] += w.data<float>()[i];
  expect_close(s.run({{"x", x}})[0], want);
  EXPECT_GE(s.plan_stats({{"x", x}}).weight_bytes, static_cast<size_t>(2 * w.nbytes()));
}

TEST(WeightRelease, CallersTensorIsNeverReleased) {
  // The graph shares the caller's bytes (Tensor copies are shallow): they must stay intact.
  const Tensor w = weight(), original = w.clone();
  auto g = std::make_unique<ir::Graph>();
  g->opsets[""] = 13;
  ir::Value* x = g->add_input("x", DType::kFloat32, {-1, kK});
  g->add_output(g->add_node("MatMul", {x, g->add_constant("w", w)}, 1)->output(0));
  Session s = Session::from_graph(std::move(g));
  Tensor in = rows(3);
  expect_close(s.run({{"x", in}})[0], expected(in, original, false));
  EXPECT_EQ(std::memcmp(w.raw(), original.raw(), original.nbytes()), 0);
}

TEST(WeightRelease, CacheRestoresReleasedBytesExactly) {
  kernels::WeightCache cache;
  Tensor source = weight();
  const Tensor original = source.clone();
  auto negate = [&](const Tensor& from) {
    Tensor t(DType::kFloat32, from.shape());
    for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = -from.data<float>()[i];
    return t;
  };
  Tensor packed = cache.get(source, "negated", [&] { return negate(source); }, [&](const Tensor& p, void* dst) {
    for (int64_t i = 0; i < p.numel(); ++i) static_cast<float*>(dst)[i] = -p.data<float>()[i];
  });
  ASSERT_GT(cache.release(source), 0u);
  EXPECT_GT(cache.released_bytes(), 0u);
  EXPECT_EQ(cache.release(source), 0u);  // already released
  cache.restore(source);
  EXPECT_EQ(cache.released_bytes(), 0u);
  EXPECT_EQ(std::memcmp(source.raw(), original.raw(), original.nbytes()), 0);
  // Without an unpack function, or too small to matter, nothing is released.
  Tensor other = weight();
  cache.get(other, "copy", [&] { return other.clone(); });
  EXPECT_EQ(cache.release(other), 0u);
  Tensor small(DType::kFloat32, {16});
  cache.get(small, "copy", [&] { return small.clone(); }, [](const Tensor&, void*) {});
  EXPECT_EQ(cache.release(small), 0u);
}

}  // namespace
}  // namespace anvil
