#include "runtime/executor.h"
#include "runtime/tuner.h"

#include <map>

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>

#include "core/check.h"
#include "ir/verify.h"
#include "runtime/memory_plan.h"

namespace anvil::runtime {

namespace {

struct ArenaDeleter {
  void operator()(void* p) const { std::free(p); }
};
using ArenaBuffer = std::unique_ptr<void, ArenaDeleter>;

// A step's output, which its kernel writes in full: not zeroed first (a
// multi-megabyte memset per run otherwise). Under ANVIL_VERIFY (the tests)
// it is filled with NaN bytes instead, so a kernel that leaves some of its
// output unwritten gives visibly wrong results rather than lucky zeros.
Tensor output_tensor(const kernels::TensorType& type) {
  Tensor t = Tensor::uninitialized(type.dtype, type.shape);
  if (ir::verification_enabled() && type.dtype != DType::kString && t.nbytes() > 0)
    std::memset(t.raw(), 0xff, t.nbytes());
  return t;
}

}  // namespace

// A plan and the arenas that finished runs hand back for reuse.
struct PlanEntry {
  std::unique_ptr<runtime::Plan> plan;
  std::mutex pool_mutex;
  std::vector<ArenaBuffer> free_arenas;

  ArenaBuffer acquire() {
    {
      std::lock_guard<std::mutex> lock(pool_mutex);
      if (!free_arenas.empty()) {
        ArenaBuffer a = std::move(free_arenas.back());
        free_arenas.pop_back();
        return a;
      }
    }
    size_t bytes = (std::max<size_t>(plan->arena_bytes, 64) + 63) / 64 * 64;
    void* p = std::aligned_alloc(64, bytes);
    ANVIL_CHECK(p, ErrorKind::kOutOfMemory, "cannot allocate the {}-byte activation arena", bytes);
    return ArenaBuffer(p);
  }
  void release(ArenaBuffer a) {
    std::lock_guard<std::mutex> lock(pool_mutex);
    free_arenas.push_back(std::move(a));
  }
};

namespace {

using ProfileClock = std::chrono::steady_clock;

double micros_between(ProfileClock::time_point a, ProfileClock::time_point b) {
  return std::chrono::duration<double, std::micro>(b - a).count();
}

// One profile entry for a step that just ran; `views` hold its outputs.
void record_step(RunProfile& profile, const Step& step, const std::vector<Tensor>& views,
                 ProfileClock::time_point run_start, ProfileClock::time_point step_start) {
  auto end = ProfileClock::now();
  NodeProfile p;
  p.node = step.node->describe();
  p.op = step.node->op_type;
  p.impl = step.dynamic ? "dynamic" : step.kernel->impl_name();
  p.layout = step.dynamic ? "plain" : step.kernel->layout_name();
  for (int s : step.outputs)
    if (s >= 0) {
      p.output_shape = views[s].shape();
      break;
    }
  p.start_us = micros_between(run_start, step_start);
  p.duration_us = micros_between(step_start, end);
  profile.nodes.push_back(std::move(p));
}

}  // namespace

GraphExecutor::GraphExecutor(const ir::Graph& graph, kernels::WeightCache* weights, size_t plan_cache_size,
                             bool blocked_layouts, bool release_weights)
    : graph_(graph), weights_(weights), blocked_layouts_(blocked_layouts),
      release_weights_(release_weights && weights), plans_(plan_cache_size) {}

GraphExecutor::~GraphExecutor() = default;

std::vector<Tensor> GraphExecutor::run(const std::vector<Tensor>& inputs, int threads, RunProfile* profile) const {
  std::shared_ptr<PlanEntry> entry = plan_for(inputs, threads);
  if (profile) *profile = {};
  return execute(*entry, inputs, threads, profile);
}

const Plan& GraphExecutor::plan_of(const PlanEntry& entry) const { return *entry.plan; }

size_t GraphExecutor::cached_plans() const {
  std::lock_guard<std::mutex> lock(plans_mutex_);
  return plans_.size();
}

std::shared_ptr<PlanEntry> GraphExecutor::plan_for(const std::vector<Tensor>& ordered, int threads) const {
  // Plans depend on input shapes only: values never enter the key.
  std::string key = std::to_string(threads) + "t;";
  std::vector<kernels::TensorType> types;
  for (const Tensor& t : ordered) {
    if (t.is_sequence()) key += "seq:";
    key += std::string(t.empty() ? "none" : dtype_name(t.dtype())) + shape_str(t.shape()) + ";";
    types.push_back({t.dtype(), t.shape(), nullptr, t.is_sequence()});
  }
  {
    std::lock_guard<std::mutex> lock(plans_mutex_);
    if (auto entry = plans_.find(key)) return entry;
  }
  // Built outside the lock: runs of other shapes go on meanwhile. Two runs
  // that miss together both build; the first to finish is kept.
  omp_set_num_threads(threads);
  auto entry = std::make_shared<PlanEntry>();
  PlanOptions options{.num_threads = threads, .weights = weights_, .blocked_layouts = blocked_layouts_,
                      .tuner = tuner_};
  {
    // The first plan is built alone and releases weights as it packs them;
    // later ones are built side by side and release afterwards.
    std::shared_lock<std::shared_mutex> building(release_mutex_, std::defer_lock);
    std::unique_lock<std::shared_mutex> first(release_mutex_, std::defer_lock);
    if (release_weights_) {
      first.lock();
      std::lock_guard<std::mutex> lock(plans_mutex_);
      options.release_weights_early = plans_.size() == 0;
    }
    if (!options.release_weights_early) {
      if (first.owns_lock()) first.unlock();
      building.lock();
    }
    entry->plan = build_plan(graph_, types, options);
    if (tuner_) {  // the alternatives that lost are no longer held: drop their packed weights
      tuner_->save();
      if (weights_) weights_->prune_unused();
    }
    if (release_weights_) pin_unpacked_reads(*entry->plan);  // before anything can run it
    std::lock_guard<std::mutex> lock(plans_mutex_);
    if (auto existing = plans_.find(key)) return existing;
    plans_.insert(key, entry);
  }
  if (release_weights_) release_packed_weights();
  return entry;
}

void GraphExecutor::pin_unpacked_reads(const Plan& plan) const {
  // Every plan ever built counts, not only the cached ones: a run may still
  // hold a plan the cache has evicted.
  std::lock_guard<std::mutex> lock(pinned_mutex_);
  auto pin = [&](const Tensor* t) {
    const auto begin = reinterpret_cast<uintptr_t>(t->raw());
    pinned_.emplace_back(begin, begin + t->nbytes());
  };
  for (const Step& step : plan.steps)
    for (size_t i = 0; i < step.inputs.size(); ++i) {
      if (step.inputs[i] < 0) continue;
      const Slot& slot = plan.slots[static_cast<size_t>(step.inputs[i])];
      if (slot.kind == Slot::Kind::kConstant && !(step.kernel && step.kernel->reads_input_packed_only(i)))
        pin(slot.constant);
    }
  for (const auto& [output, source] : plan.final_copies)
    if (plan.slots[static_cast<size_t>(source)].kind == Slot::Kind::kConstant)
      pin(plan.slots[static_cast<size_t>(source)].constant);
}

void GraphExecutor::release_packed_weights() const {
  std::unique_lock<std::shared_mutex> exclusive(release_mutex_);
  std::lock_guard<std::mutex> lock(pinned_mutex_);
  for (const auto& v : graph_.values()) {
    if (!v->is_constant() || v->is_graph_output) continue;
    const auto begin = reinterpret_cast<uintptr_t>(v->constant->raw());
    const uintptr_t end = begin + v->constant->nbytes();
    const bool pinned = std::any_of(pinned_.begin(), pinned_.end(),
                                    [&](const auto& r) { return r.first < end && begin < r.second; });
    if (!pinned) weights_->release(*v->constant);  // kept unless it has a packed copy (WeightCache::release)
  }
}

std::vector<Tensor> GraphExecutor::execute(PlanEntry& entry, const std::vector<Tensor>& inputs, int threads,
                                           RunProfile* profile) const {
  const Plan& plan = *entry.plan;
  std::vector<Tensor> outputs(plan.output_types.size());
  for (size_t k = 0; k < outputs.size(); ++k)
    if (plan.output_types[k].dtype != DType::kUndefined)
      outputs[k] = output_tensor(plan.output_types[k]);

  ArenaBuffer arena = entry.acquire();
  char* base = static_cast<char*>(arena.get());
  std::vector<Tensor> views(plan.slots.size());
  auto memory_of = [&](int slot) -> void* {
    size_t within = 0;  // an alias's offset into the slot it shares: nonzero only into the arena
    for (; plan.slots[slot].kind == Slot::Kind::kAlias; slot = plan.slots[slot].index) within += plan.slots[slot].offset;
    const Slot& s = plan.slots[slot];
    switch (s.kind) {
      case Slot::Kind::kInput: return const_cast<void*>(inputs[s.index].raw());
      case Slot::Kind::kConstant: return const_cast<void*>(s.constant->raw());
      case Slot::Kind::kArena: return base + s.offset + within;
      case Slot::Kind::kOutput: return outputs[s.index].raw();
      case Slot::Kind::kAlias: case Slot::Kind::kDynamic: break;
    }
    return nullptr;
  };
  for (size_t i = 0; i < plan.slots.size(); ++i) {
    const Slot& s = plan.slots[i];
    if (s.kind == Slot::Kind::kInput && (inputs[s.index].is_sequence() || inputs[s.index].empty()))
      views[i] = inputs[s.index];  // sequences and empty optionals pass as they are
    else if (s.kind != Slot::Kind::kDynamic)
      views[i] = Tensor::view(s.type.dtype, s.type.shape, memory_of(static_cast<int>(i)));
  }

  omp_set_num_threads(threads);
  kernels::RunContext ctx;
  const auto run_start = ProfileClock::now();
  for (const Step& step : plan.steps) {
    const auto step_start = profile ? ProfileClock::now() : run_start;
    ctx.inputs.clear();
    ctx.outputs.clear();
    // An optional without a value reaches kernels as an omitted input.
    for (int s : step.inputs) ctx.inputs.push_back(s < 0 || views[s].empty() ? nullptr : &views[s]);
    if (step.dynamic) {
      run_dynamic_step(step, ctx, views);
    } else {
      for (int s : step.outputs) ctx.outputs.push_back(s < 0 ? nullptr : &views[s]);
      ctx.scratch = base + step.scratch_offset;
      step.kernel->run(ctx);
    }
    if (profile) record_step(*profile, step, views, run_start, step_start);
  }
  if (profile) profile->total_us = micros_between(run_start, ProfileClock::now());
  for (const auto& copy : plan.final_copies) {
    const int k = copy.first, slot = copy.second;
    if (plan.slots[slot].kind == Slot::Kind::kDynamic || views[slot].is_sequence() || views[slot].empty() ||
        views[slot].dtype() == DType::kString) {
      // A tensor the run allocated: handed over, or copied when another output has it already.
      bool shared = std::any_of(outputs.begin(), outputs.end(),
                                [&](const Tensor& o) { return !o.empty() && o.raw() == views[slot].raw(); });
      outputs[k] = shared ? views[slot].clone() : views[slot];
      continue;
    }
    if (outputs[k].nbytes()) std::memcpy(outputs[k].raw(), views[slot].raw(), outputs[k].nbytes());
  }
  entry.release(std::move(arena));
  return outputs;
}

void GraphExecutor::run_dynamic_step(const Step& step, kernels::RunContext& ctx, std::vector<Tensor>& views) const {
  std::shared_ptr<const DynamicKernels::Prepared> prepared = step.dynamic->get(ctx.inputs);
  const auto& types = prepared->output_types;
  ANVIL_CHECK(types.size() >= step.outputs.size() || std::all_of(step.outputs.begin() + types.size(),
                                                                 step.outputs.end(), [](int s) { return s < 0; }),
              ErrorKind::kUnsupported, "{}: an output is not produced by Anvil's kernel", step.node->describe());
  // Identity and other alias kernels pass a sequence or an optional through as it is.
  const int alias = prepared->kernel->output_aliases_input();
  if (alias >= 0 && !step.outputs.empty() && step.outputs[0] >= 0 && alias < static_cast<int>(ctx.inputs.size()) &&
      ctx.inputs[alias] && ctx.inputs[alias]->is_sequence()) {
    views[step.outputs[0]] = *ctx.inputs[alias];
    return;
  }
  const bool preallocate = !prepared->kernel->allocates_outputs();
  for (size_t o = 0; o < step.outputs.size(); ++o) {
    int s = step.outputs[o];
    if (s < 0) {
      ctx.outputs.push_back(nullptr);
      continue;
    }
    views[s] = preallocate ? output_tensor(types[o]) : Tensor();
    ctx.outputs.push_back(&views[s]);
  }
  std::vector<unsigned char> scratch(prepared->kernel->scratch_bytes() + kArenaAlignment);
  ctx.scratch = scratch.data() +
                (kArenaAlignment - reinterpret_cast<uintptr_t>(scratch.data()) % kArenaAlignment);
  prepared->kernel->run(ctx);
}

}  // namespace anvil::runtime
