#include "runtime/memory_plan.h"

#include <algorithm>
#include <numeric>

namespace anvil::runtime {

namespace {
size_t align_up(size_t n) { return (n + kArenaAlignment - 1) / kArenaAlignment * kArenaAlignment; }
bool lifetimes_overlap(const BufferUse& a, const BufferUse& b) { return a.first <= b.last && b.first <= a.last; }
}  // namespace

MemoryPlan plan_greedy_by_size(const MemoryPlanner& planner) {
  const auto& uses = planner.uses();
  std::vector<int> order(uses.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return uses[a].bytes > uses[b].bytes; });

  MemoryPlan plan;
  plan.offsets.assign(uses.size(), 0);
  std::vector<int> placed;
  for (int id : order) {
    const BufferUse& u = uses[id];
    // Busy ranges of live placed buffers, sorted by offset; take the first gap that fits.
    std::vector<std::pair<size_t, size_t>> busy;
    for (int p : placed)
      if (lifetimes_overlap(u, uses[p])) busy.emplace_back(plan.offsets[p], plan.offsets[p] + align_up(uses[p].bytes));
    std::sort(busy.begin(), busy.end());
    size_t offset = 0, need = align_up(u.bytes);
    for (const auto& [begin, end] : busy) {
      if (begin >= offset + need) break;
      offset = std::max(offset, end);
    }
    plan.offsets[id] = offset;
    plan.arena_bytes = std::max(plan.arena_bytes, offset + need);
    placed.push_back(id);
  }
  return plan;
}

MemoryPlan plan_linear(const MemoryPlanner& planner) {
  MemoryPlan plan;
  for (const BufferUse& u : planner.uses()) {
    plan.offsets.push_back(plan.arena_bytes);
    plan.arena_bytes += align_up(u.bytes);
  }
  return plan;
}

bool plan_is_valid(const MemoryPlanner& planner, const MemoryPlan& plan) {
  const auto& uses = planner.uses();
  for (size_t i = 0; i < uses.size(); ++i) {
    if (plan.offsets[i] + uses[i].bytes > plan.arena_bytes || plan.offsets[i] % kArenaAlignment) return false;
    for (size_t j = i + 1; j < uses.size(); ++j) {
      if (!lifetimes_overlap(uses[i], uses[j]) || !uses[i].bytes || !uses[j].bytes) continue;
      bool apart = plan.offsets[i] + uses[i].bytes <= plan.offsets[j] || plan.offsets[j] + uses[j].bytes <= plan.offsets[i];
      if (!apart) return false;
    }
  }
  return true;
}

}  // namespace anvil::runtime
