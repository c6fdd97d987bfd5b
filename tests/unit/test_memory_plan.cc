#include <gtest/gtest.h>

#include <random>

#include "runtime/memory_plan.h"

namespace anvil::runtime {
namespace {

TEST(MemoryPlan, DisjointLifetimesShareMemory) {
  MemoryPlanner p;
  p.add(1000, 0, 1);
  p.add(1000, 2, 3);
  MemoryPlan plan = plan_greedy_by_size(p);
  EXPECT_TRUE(plan_is_valid(p, plan));
  EXPECT_EQ(plan.offsets[0], plan.offsets[1]);
  EXPECT_EQ(plan.arena_bytes, 1024u);  // one 64-byte aligned block
}

TEST(MemoryPlan, OverlappingLifetimesDoNotOverlapInMemory) {
  MemoryPlanner p;
  p.add(100, 0, 2);
  p.add(200, 1, 3);
  p.add(50, 2, 2);
  MemoryPlan plan = plan_greedy_by_size(p);
  EXPECT_TRUE(plan_is_valid(p, plan));
  EXPECT_EQ(plan.arena_bytes, 256u + 128u + 64u);
}

TEST(MemoryPlan, ChainReusesTwoBuffers) {
  // A chain a->b->c->d where each value dies after its consumer: two buffers suffice.
  MemoryPlanner p;
  for (int i = 0; i < 6; ++i) p.add(4096, i, i + 1);
  MemoryPlan plan = plan_greedy_by_size(p);
  EXPECT_TRUE(plan_is_valid(p, plan));
  EXPECT_EQ(plan.arena_bytes, 2u * 4096u);
}

TEST(MemoryPlan, RandomPlansAreValidAndNoLargerThanLinear) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 50; ++trial) {
    MemoryPlanner p;
    for (int i = 0; i < 40; ++i) {
      int first = static_cast<int>(rng() % 30);
      p.add(1 + rng() % 10000, first, first + static_cast<int>(rng() % 8));
    }
    MemoryPlan greedy = plan_greedy_by_size(p), linear = plan_linear(p);
    EXPECT_TRUE(plan_is_valid(p, greedy));
    EXPECT_TRUE(plan_is_valid(p, linear));
    EXPECT_LE(greedy.arena_bytes, linear.arena_bytes);
  }
}

TEST(MemoryPlan, ValidatorCatchesOverlap) {
  MemoryPlanner p;
  p.add(100, 0, 1);
  p.add(100, 1, 2);
  MemoryPlan bad;
  bad.offsets = {0, 0};
  bad.arena_bytes = 128;
  EXPECT_FALSE(plan_is_valid(p, bad));
}

}  // namespace
}  // namespace anvil::runtime
