// Session: planning, passes (before/after), concurrent runs, input checks.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <sys/wait.h>
#include <unistd.h>

#include <thread>

#include "anvil/error.h"
#include "anvil/session.h"
#include "ir/builder.h"

namespace anvil {
namespace {

std::unique_ptr<ir::Graph> small_resnet() {
  ir::GraphBuilder b(123);
  ir::Value* x = b.input("x", {1, 3, 16, 16});
  ir::Value* y = b.relu(b.batch_norm(b.conv(x, 3, 8, 3, 1, 1), 8));
  ir::Value* z = b.batch_norm(b.conv(y, 8, 8, 3, 1, 1), 8);
  y = b.relu(b.add(z, y));
  b.output(b.gemm(b.flatten(b.global_average_pool(y)), 8, 4), "logits");
  return b.finish();
}

Tensor random_input(Shape shape, uint32_t seed) {
  Tensor t(DType::kFloat32, std::move(shape));
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(-1.f, 1.f);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = d(rng);
  return t;
}

float max_diff(const Tensor& a, const Tensor& b) {
  float m = 0;
  for (int64_t i = 0; i < a.numel(); ++i) m = std::max(m, std::fabs(a.data<float>()[i] - b.data<float>()[i]));
  return m;
}

TEST(Session, FusionPassesKeepResultsAndRemoveNodes) {
  SessionOptions none, full;
  none.optimization_level = 0;
  full.optimization_level = 2;
  Session plain = Session::from_graph(small_resnet(), none);
  Session fused = Session::from_graph(small_resnet(), full);
  std::map<std::string, Tensor> in = {{"x", random_input({1, 3, 16, 16}, 1)}};
  Tensor a = plain.run(in)[0], b = fused.run(in)[0];
  ASSERT_EQ(a.shape(), (Shape{1, 4}));
  EXPECT_LE(max_diff(a, b), 1e-4f);
  // Conv+BN+Relu, Conv+BN+Add+Relu fold into two fused convs: 2 convs + GAP + flatten + gemm.
  EXPECT_EQ(fused.plan_stats(in).num_steps, 5u);
  EXPECT_GT(plain.plan_stats(in).num_steps, 8u);
  EXPECT_EQ(fused.outputs()[0].name, "logits");
}

std::unique_ptr<ir::Graph> conv_chain(int depth) {
  ir::GraphBuilder b(9);
  ir::Value* x = b.input("x", {1, 8, 16, 16});
  for (int i = 0; i < depth; ++i) x = b.relu(b.conv(x, 8, 8, 3, 1, 1));
  b.output(x);
  return b.finish();
}

TEST(Session, ArenaDoesNotGrowWithDepth) {
  std::map<std::string, Tensor> in = {{"x", random_input({1, 8, 16, 16}, 2)}};
  size_t shallow = Session::from_graph(conv_chain(4)).plan_stats(in).arena_bytes;
  size_t deep = Session::from_graph(conv_chain(12)).plan_stats(in).arena_bytes;
  EXPECT_GT(shallow, 0u);
  // Twelve 8 KiB activations in a chain: live ones are reused, so the arena stays the same.
  EXPECT_EQ(deep, shallow);
}

TEST(Session, ConcurrentRunsMatchSequentialRuns) {
  Session s = Session::from_graph(small_resnet());
  constexpr int kThreads = 4, kRuns = 20;
  std::vector<Tensor> inputs, expected;
  for (int i = 0; i < kThreads; ++i) {
    inputs.push_back(random_input({1, 3, 16, 16}, 100 + i));
    expected.push_back(s.run({{"x", inputs.back()}})[0]);
  }
  std::vector<float> worst(kThreads, 0.f);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      for (int r = 0; r < kRuns; ++r) worst[t] = std::max(worst[t], max_diff(s.run({{"x", inputs[t]}})[0], expected[t]));
    });
  for (auto& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(worst[t], 0.f) << "thread " << t;
}

TEST(Session, ReplansForNewShapesOfSymbolicDims) {
  ir::GraphBuilder b(5);
  ir::Value* x = b.input("x", {-1, 3, 8, 8});
  b.output(b.relu(b.conv(x, 3, 4, 3, 1, 1)));
  Session s = Session::from_graph(b.finish());
  EXPECT_EQ(s.run({{"x", random_input({1, 3, 8, 8}, 3)}})[0].shape(), (Shape{1, 4, 8, 8}));
  EXPECT_EQ(s.run({{"x", random_input({3, 3, 8, 8}, 4)}})[0].shape(), (Shape{3, 4, 8, 8}));
}

ErrorKind kind_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.kind();
  }
  return ErrorKind::kInternal;
}

TEST(Session, BadInputsAreInvalidArguments) {
  Session s = Session::from_graph(small_resnet());
  Tensor good = random_input({1, 3, 16, 16}, 6);
  EXPECT_EQ(kind_of([&] { s.run({}); }), ErrorKind::kInvalidArgument);
  EXPECT_EQ(kind_of([&] { s.run({{"x", good}, {"nosuch", good}}); }), ErrorKind::kInvalidArgument);
  EXPECT_EQ(kind_of([&] { s.run({{"x", random_input({1, 3, 16, 15}, 7)}}); }), ErrorKind::kInvalidArgument);
  EXPECT_EQ(kind_of([&] { s.run({{"x", random_input({3, 16, 16}, 7)}}); }), ErrorKind::kInvalidArgument);
  EXPECT_EQ(kind_of([&] { s.run({{"x", Tensor(DType::kInt64, {1, 3, 16, 16})}}); }), ErrorKind::kInvalidArgument);
}

// ONNX gives one dim_param one size in every input: inputs a [n, 2] and b
// [n] bound to different sizes are the caller's error, named; sizes that
// agree run (Add broadcasts [n, 2] with [n, 1] by hand below).
TEST(Session, InputsThatGiveOneSymbolTwoSizesAreInvalidArguments) {
  auto g = std::make_unique<ir::Graph>();
  g->opsets[""] = 17;
  ir::Value* a = g->add_input("a", DType::kFloat32, {});
  a->type = ir::Type::tensor(DType::kFloat32, ir::SymShape{ir::Dim::named("n"), ir::Dim::known(2)});
  ir::Value* b = g->add_input("b", DType::kFloat32, {});
  b->type = ir::Type::tensor(DType::kFloat32, ir::SymShape{ir::Dim::named("n"), ir::Dim::known(1)});
  g->add_output(g->add_node("Add", {a, b}, 1)->output(0));
  Session s = Session::from_graph(std::move(g));
  const Tensor y = s.run({{"a", random_input({3, 2}, 1)}, {"b", random_input({3, 1}, 2)}})[0];
  EXPECT_EQ(y.shape(), (Shape{3, 2}));
  try {
    s.run({{"a", random_input({3, 2}, 1)}, {"b", random_input({1, 1}, 2)}});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("input 'b' has n = 1 (axis 0), but input 'a' has n = 3"), std::string::npos)
        << e.what();
  }
}

TEST(Session, ForkedChildCanRun) {
  Session s = Session::from_graph(small_resnet());
  Tensor in = random_input({1, 3, 16, 16}, 8);
  Tensor expected = s.run({{"x", in}})[0];
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    alarm(60);  // a child that hangs (thread pools are not fork-safe everywhere) fails instead
    Tensor got = s.run({{"x", in}})[0];
    _exit(max_diff(got, expected) == 0.f ? 0 : 1);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

}  // namespace
}  // namespace anvil

// Sanitizer builds check each typed read of a tensor's elements: the arena is
// one allocation to ASan, so a kernel reading a slot as a wider type would
// otherwise overread its neighbours unreported.
#ifdef ANVIL_CHECK_ELEMENT_SIZES
TEST(Tensor, SanitizerBuildsRefuseReadsAsAnotherElementSize) {
  anvil::Tensor t(anvil::DType::kInt32, {4});
  EXPECT_NE(t.data<int32_t>(), nullptr);
  EXPECT_NE(t.data<float>(), nullptr);          // same size: a bit cast
  EXPECT_NE(t.data<unsigned char>(), nullptr);  // bytes
  EXPECT_DEATH(t.data<int64_t>(), "int32 tensor of shape \\[4\\] read as elements of 8 bytes");
}
#endif
