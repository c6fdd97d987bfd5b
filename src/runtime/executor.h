// runtime::GraphExecutor — runs one ir::Graph: plans per set of input shapes
// (a bounded LRU cache, plans built outside its lock), arenas pooled per plan,
// dynamic steps prepared at run time. The Session runs its main graph with
// one; control-flow kernels (If, Loop, Scan) run their bodies with others.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <vector>

#include "anvil/session.h"
#include "core/lru_cache.h"
#include "ir/graph.h"
#include "kernels/weight_cache.h"
#include "runtime/plan.h"

namespace anvil::runtime {

struct PlanEntry;
class Tuner;

class GraphExecutor {
 public:
  // `graph` and `weights` must outlive the executor.
  // `blocked_layouts`: see PlanOptions.
  // `release_weights`: after each new plan, drop the pages of the graph's
  // constants that every cached plan reads only packed (WeightCache::release).
  GraphExecutor(const ir::Graph& graph, kernels::WeightCache* weights, size_t plan_cache_size = 16,
                bool blocked_layouts = false, bool release_weights = false);
  ~GraphExecutor();

  // `inputs`: one tensor per graph input, then one per capture (subgraphs),
  // already checked against the declared types. Records into `profile` when given.
  std::vector<Tensor> run(const std::vector<Tensor>& inputs, int threads, RunProfile* profile = nullptr) const;

  // Plans built from now on time their kernels' alternatives (runtime/tuner.h).
  void set_tuner(Tuner* tuner) { tuner_ = tuner; }

  // The plan for these input shapes (built if needed).
  std::shared_ptr<PlanEntry> plan_for(const std::vector<Tensor>& inputs, int threads) const;
  const Plan& plan_of(const PlanEntry& entry) const;
  size_t cached_plans() const;

 private:
  std::vector<Tensor> execute(PlanEntry& entry, const std::vector<Tensor>& inputs, int threads,
                              RunProfile* profile) const;
  void run_dynamic_step(const Step& step, kernels::RunContext& ctx, std::vector<Tensor>& views) const;
  // Records the byte ranges of the constants `plan` reads unpacked: never released.
  void pin_unpacked_reads(const Plan& plan) const;
  // Releases the graph's constants that no plan ever built reads except packed.
  void release_packed_weights() const;

  const ir::Graph& graph_;
  kernels::WeightCache* weights_;
  bool blocked_layouts_;
  bool release_weights_;
  Tuner* tuner_ = nullptr;
  // Plan builds hold it shared, the release of weights exclusively: no
  // kernel reads a constant while its pages are being dropped.
  mutable std::shared_mutex release_mutex_;
  mutable std::mutex pinned_mutex_;
  mutable std::vector<std::pair<uintptr_t, uintptr_t>> pinned_;  // byte ranges read unpacked
  mutable std::mutex plans_mutex_;
  mutable LruCache<std::shared_ptr<PlanEntry>> plans_;
};

}  // namespace anvil::runtime
