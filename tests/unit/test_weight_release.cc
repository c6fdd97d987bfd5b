// One copy of each weight: once every reader of a constant reads its packed
// copy, the session drops the original's pages and rebuilds them before any
// other reader sees them. Values are checked against sums computed here.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "anvil/session.h"
#include "ir/graph.h"
#include "kernels/dnnl/common.h"
#include "kernels/weight_cache.h"
#include "onnx/exporter.h"

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

// A pack that reads its source front to back may drop it as it goes, but
// only where the planner marked the source consumable and nothing else holds
// it; what it dropped restores exactly from the packed copy.
TEST(WeightRelease, ConsumingPackDropsOnlyWhatItMayAndRestoresExactly) {
  constexpr int64_t kElements = int64_t{1} << 20;  // 4 MiB
  auto fresh = [] {
    Tensor t(DType::kFloat32, {kElements});
    for (int64_t i = 0; i < kElements; ++i) t.data<float>()[i] = static_cast<float>(i % 1000) - 500.f;
    return t;
  };
  const Tensor original = fresh();
  // Negated a quarter at a time, each quarter reported once read.
  auto negate_in_quarters = [](const Tensor& from) {
    return [&from](const kernels::WeightCache::Consumed& consumed) {
      Tensor t(DType::kFloat32, from.shape());
      for (int64_t q = 0; q < 4; ++q) {
        for (int64_t i = q * kElements / 4; i < (q + 1) * kElements / 4; ++i) t.data<float>()[i] = -from.data<float>()[i];
        if (consumed) consumed(static_cast<size_t>((q + 1) * kElements / 4) * sizeof(float));
      }
      return t;
    };
  };
  auto unnegate = [](const Tensor& p, void* dst) {
    for (int64_t i = 0; i < p.numel(); ++i) static_cast<float*>(dst)[i] = -p.data<float>()[i];
  };
  auto resident_zeros = [](const Tensor& t) {  // dropped pages read as zeros (about 0.1% of the values are)
    int64_t zeros = 0;
    for (int64_t i = 0; i < t.numel(); ++i) zeros += t.data<float>()[i] == 0.f;
    return zeros;
  };

  {  // Marked and held by nobody else: dropped while packed, all but the partial edge pages.
    kernels::WeightCache cache;
    Tensor source = fresh();
    cache.set_consumable(source, true);
    const Tensor packed = cache.get_consuming(source, "negated", negate_in_quarters(source), unnegate);
    EXPECT_GT(cache.released_bytes(), static_cast<size_t>(source.nbytes()) - 8192);
    EXPECT_GT(resident_zeros(source), kElements - 2048);
    for (int64_t i = 0; i < kElements; i += 4099) ASSERT_EQ(packed.data<float>()[i], -original.data<float>()[i]) << i;
    cache.restore(source);
    EXPECT_EQ(cache.released_bytes(), 0u);
    EXPECT_EQ(std::memcmp(source.raw(), original.raw(), original.nbytes()), 0);
  }
  {  // Not marked: kept.
    kernels::WeightCache cache;
    Tensor source = fresh();
    cache.get_consuming(source, "negated", negate_in_quarters(source), unnegate);
    EXPECT_EQ(cache.released_bytes(), 0u);
    EXPECT_EQ(std::memcmp(source.raw(), original.raw(), original.nbytes()), 0);
  }
  {  // Marked, but a caller holds the bytes too: kept.
    kernels::WeightCache cache;
    Tensor source = fresh();
    const Tensor callers = source;
    cache.set_consumable(source, true);
    cache.get_consuming(source, "negated", negate_in_quarters(source), unnegate);
    EXPECT_EQ(cache.released_bytes(), 0u);
    EXPECT_EQ(std::memcmp(callers.raw(), original.raw(), original.nbytes()), 0);
  }
  {  // A pack that fails before its first report leaves the source whole; one that fails
     // after it leaves it lost, and every later use of it says so.
    kernels::WeightCache cache;
    Tensor source = fresh();
    cache.set_consumable(source, true);
    auto failing = [&](bool after_report) {
      return [&source, after_report](const kernels::WeightCache::Consumed& consumed) -> Tensor {
        if (after_report) consumed(static_cast<size_t>(source.nbytes()) / 2);
        throw Error(ErrorKind::kOutOfMemory, "no memory for the packed copy");
      };
    };
    EXPECT_THROW(cache.get_consuming(source, "negated", failing(false), unnegate), Error);
    EXPECT_EQ(std::memcmp(source.raw(), original.raw(), original.nbytes()), 0);
    EXPECT_THROW(cache.get_consuming(source, "negated", failing(true), unnegate), Error);
    try {
      cache.get_consuming(source, "negated", negate_in_quarters(source), unnegate);
      ADD_FAILURE() << "a lost source was packed again";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kInternal) << e.what();
    }
    EXPECT_THROW(cache.restore(source), Error);
  }
  {  // Marked, but no unpack to restore it from: kept.
    kernels::WeightCache cache;
    Tensor source = fresh();
    cache.set_consumable(source, true);
    cache.get_consuming(source, "negated", negate_in_quarters(source), nullptr);
    EXPECT_EQ(cache.released_bytes(), 0u);
    EXPECT_EQ(std::memcmp(source.raw(), original.raw(), original.nbytes()), 0);
  }
}

// du::pack_in_slabs against oneDNN's one reorder, for a matmul's B read
// transposed ([K, N] over W [N, K]: slabs along N) and a convolution's
// weights into 16x16 channel blocks (slabs along O): the same bytes, and
// each slab reads only source bytes not yet reported consumed, which the
// test overwrites with NaN as each report comes.
TEST(WeightRelease, SlabPackingMatchesOneReorderAndReadsEachSlabOnce) {
  namespace du = kernels::dnnl_util;
  using tag = dnnl::memory::format_tag;
  using dt = dnnl::memory::data_type;
  struct Case {
    const char* what;
    dnnl::memory::desc from, to;
  };
  const Case cases[] = {
      {"B transposed", dnnl::memory::desc({96, 160}, dt::f32, dnnl::memory::dims{1, 96}),
       dnnl::memory::desc({96, 160}, dt::f32, tag::BA16a16b)},
      {"conv weights", dnnl::memory::desc({64, 32, 3, 3}, dt::f32, tag::oihw),
       dnnl::memory::desc({64, 32, 3, 3}, dt::f32, tag::OIhw16i16o)},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    const size_t bytes = c.from.get_size();
    Tensor original(DType::kFloat32, {static_cast<int64_t>(bytes / 4)});
    for (int64_t i = 0; i < original.numel(); ++i) original.data<float>()[i] = static_cast<float>(i % 251) - 125.f;
    const Tensor want = du::pack(c.from, original.raw(), c.to).storage;
    Tensor source = original.clone();
    std::vector<size_t> ends;
    auto poison = [&](size_t end) {
      const size_t begin = ends.empty() ? 0 : ends.back();
      ASSERT_GT(end, begin);
      for (size_t i = begin / 4; i < end / 4; ++i) source.data<float>()[i] = std::nanf("");
      ends.push_back(end);
    };
    const std::optional<Tensor> packed = du::pack_in_slabs(c.from, source.raw(), c.to, poison, 8 << 10);
    ASSERT_TRUE(packed.has_value());
    EXPECT_GE(ends.size(), 2u);
    EXPECT_EQ(ends.back(), bytes);
    ASSERT_EQ(packed->nbytes(), want.nbytes());
    EXPECT_EQ(std::memcmp(packed->raw(), want.raw(), want.nbytes()), 0);
    // One slab (the whole source fits): not done.
    EXPECT_FALSE(du::pack_in_slabs(c.from, original.raw(), c.to, poison, bytes).has_value());
  }
}

// y = x W^T with W [N, K] large enough (40 MiB) that its packing runs in
// slabs and consumes it; from bytes, so that the import also copies it in
// chunks. Values computed here.
TEST(WeightRelease, LargeWeightPackedInSlabsGivesTheProduct) {
  constexpr int64_t kRows = 2560, kDepth = 4096;
  Tensor w(DType::kFloat32, {kRows, kDepth});
  for (int64_t i = 0; i < w.numel(); ++i) w.data<float>()[i] = static_cast<float>((i * 7 + i / kDepth) % 17) - 8.f;
  auto g = std::make_unique<ir::Graph>();
  g->opsets[""] = 13;
  ir::Value* x = g->add_input("x", DType::kFloat32, {2, kDepth});
  ir::Node* gemm = g->add_node("Gemm", {x, g->add_constant("w", w)}, 1);
  gemm->attrs.set("transB", int64_t{1});
  g->add_output(gemm->output(0));
  SessionOptions options;
  options.num_threads = 2;
  Session s = Session::from_bytes(onnx_io::export_model(*g), options);
  Tensor in(DType::kFloat32, {2, kDepth});
  for (int64_t i = 0; i < in.numel(); ++i) in.data<float>()[i] = static_cast<float>(i % 5) * 0.5f - 1.f;
  const Tensor y = s.run({{"x", in}})[0];
  ASSERT_EQ(y.shape(), Shape({2, kRows}));
  for (int64_t r = 0; r < 2; ++r)
    for (int64_t n = 0; n < kRows; ++n) {
      double acc = 0;
      for (int64_t k = 0; k < kDepth; ++k) acc += double(in.data<float>()[r * kDepth + k]) * w.data<float>()[n * kDepth + k];
      ASSERT_NEAR(y.data<float>()[r * kRows + n], acc, 1e-3 * (1 + std::abs(acc))) << r << "," << n;
    }
  // Held once: the packed copy, not the original as well.
  EXPECT_LT(s.plan_stats({{"x", in}}).weight_bytes, static_cast<size_t>(w.nbytes()) * 5 / 4);
}

}  // namespace
}  // namespace anvil
