// Offsets for buffers in one arena, from their lifetimes.
//
//   MemoryPlanner p;
//   int a = p.add(4096, /*first=*/0, /*last=*/2);   // live during steps 0..2
//   int b = p.add(1024, 1, 3);
//   MemoryPlan plan = plan_greedy_by_size(p);     // plan.offsets[a], plan.arena_bytes
//
// Greedy by size places the largest buffers first, each at the lowest offset
// that overlaps no placed buffer whose lifetime intersects its own.
// plan_linear gives every buffer its own range: the oracle in tests.
#pragma once

#include <cstddef>
#include <vector>

namespace anvil::runtime {

constexpr size_t kArenaAlignment = 64;

struct BufferUse {
  size_t bytes;
  int first;  // first step that touches the buffer
  int last;   // last step that touches it
};

class MemoryPlanner {
 public:
  int add(size_t bytes, int first, int last) {
    uses_.push_back({bytes, first, last});
    return static_cast<int>(uses_.size()) - 1;
  }
  const std::vector<BufferUse>& uses() const { return uses_; }

 private:
  std::vector<BufferUse> uses_;
};

struct MemoryPlan {
  std::vector<size_t> offsets;
  size_t arena_bytes = 0;
};

MemoryPlan plan_greedy_by_size(const MemoryPlanner& planner);
MemoryPlan plan_linear(const MemoryPlanner& planner);
// True when no two buffers that are live at the same step overlap in memory.
bool plan_is_valid(const MemoryPlanner& planner, const MemoryPlan& plan);

}  // namespace anvil::runtime
