#include "anvil/session.h"

#include <omp.h>
#include <pthread.h>

#include <atomic>
#include <chrono>

#include <cstdlib>
#include <cstring>
#include <mutex>

#include "core/check.h"
#include "kernels/registry.h"
#include "kernels/weight_cache.h"
#include "ir/verify.h"
#include "onnx/importer.h"
#include "passes/pipeline.h"
#include "core/lru_cache.h"
#include "runtime/constant_evaluator.h"
#include "runtime/memory_plan.h"
#include "runtime/plan.h"
#include "runtime/type_propagation.h"

namespace anvil {

namespace {

struct ArenaDeleter {
  void operator()(void* p) const { std::free(p); }
};
using ArenaBuffer = std::unique_ptr<void, ArenaDeleter>;

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

// GNU OpenMP cannot start a thread team in a child forked after the parent used
// one (the child hangs), so a forked child runs sessions on its own thread with
// plans made for one thread — what data-loader workers want anyway.
std::atomic<bool> g_in_forked_child{false};

void watch_for_fork() {
  static bool registered = [] {
    pthread_atfork(nullptr, nullptr, [] { g_in_forked_child = true; });
    return true;
  }();
  (void)registered;
}

int default_threads() {
  int n = omp_get_num_procs();
  return n > 0 ? n : 1;
}

using ProfileClock = std::chrono::steady_clock;

double micros_between(ProfileClock::time_point a, ProfileClock::time_point b) {
  return std::chrono::duration<double, std::micro>(b - a).count();
}

// One profile entry for a step that just ran; `views` hold its outputs.
void record_step(RunProfile& profile, const runtime::Step& step, const std::vector<Tensor>& views,
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

ValueInfo info_of(const ir::Value* v) {
  ValueInfo info{v->name, v->dtype(), v->type.has_shape() ? v->type.shape_or_minus_one() : Shape{}, {}};
  for (const ir::Dim& d : v->type.dims()) info.dim_names.push_back(d.symbol);
  return info;
}

}  // namespace

struct Session::Impl {
  std::unique_ptr<ir::Graph> graph;
  SessionOptions options;
  int threads = 1;
  std::vector<ValueInfo> inputs, outputs;
  // Declared before the plans: their kernels hold packed weights from it.
  mutable kernels::WeightCache weights;
  mutable std::mutex plans_mutex;
  mutable LruCache<std::shared_ptr<PlanEntry>> plans;

  std::vector<Tensor> order_inputs(const std::map<std::string, Tensor>& given) const;
  std::shared_ptr<PlanEntry> plan_for(const std::vector<Tensor>& inputs) const;
  std::vector<Tensor> execute(PlanEntry& entry, const std::vector<Tensor>& inputs, RunProfile* profile) const;
  void run_dynamic_step(const runtime::Step& step, kernels::RunContext& ctx, std::vector<Tensor>& views) const;
  int effective_threads() const { return g_in_forked_child ? 1 : threads; }
};

Session::Session(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Session::Session(Session&&) noexcept = default;
Session& Session::operator=(Session&&) noexcept = default;
Session::~Session() = default;

Session Session::from_file(const std::string& path, const SessionOptions& options) {
  auto supported = [](const std::string& domain, const std::string& op) {
    return kernels::Registry::global().has_op(domain, op);
  };
  return from_graph(onnx_io::import_model_file(path, supported), options);
}

Session Session::from_graph(std::unique_ptr<ir::Graph> graph, const SessionOptions& options) {
  ANVIL_CHECK(options.num_threads >= 0, ErrorKind::kInvalidArgument, "thread count must be >= 0, got {}",
              options.num_threads);
  for (const auto& n : graph->nodes())
    ANVIL_CHECK(kernels::Registry::global().has_op(n->domain, n->op_type), ErrorKind::kUnsupported,
                "{}: operator {} is not supported by Anvil", n->describe(), n->op_type);
  watch_for_fork();
  if (ir::verification_enabled()) ir::verify(*graph, ErrorKind::kInvalidModel, "on the imported graph");
  auto impl = std::make_unique<Impl>();
  ANVIL_CHECK(options.plan_cache_size >= 1, ErrorKind::kInvalidArgument, "plan cache size must be >= 1, got {}",
              options.plan_cache_size);
  impl->options = options;
  impl->plans.set_capacity(static_cast<size_t>(options.plan_cache_size));
  impl->threads = options.num_threads > 0 ? options.num_threads : default_threads();
  // Names and types as the model declares them, before passes rewrite values.
  for (const ir::Value* v : graph->inputs()) impl->inputs.push_back(info_of(v));
  for (const ir::Value* v : graph->outputs()) impl->outputs.push_back(info_of(v));
  runtime::propagate_types(*graph);
  passes::optimize(*graph, options.optimization_level, runtime::reference_evaluator());
  impl->graph = std::move(graph);
  return Session(std::move(impl));
}

const std::vector<ValueInfo>& Session::inputs() const { return impl_->inputs; }
const std::vector<ValueInfo>& Session::outputs() const { return impl_->outputs; }

std::vector<Tensor> Session::Impl::order_inputs(const std::map<std::string, Tensor>& given) const {
  for (const auto& given_input : given) {
    const std::string& name = given_input.first;
    bool known = std::any_of(inputs.begin(), inputs.end(), [&](const ValueInfo& i) { return i.name == name; });
    if (!known) {
      std::string names;
      for (const auto& i : inputs) names += (names.empty() ? "'" : ", '") + i.name + "'";
      fail(ErrorKind::kInvalidArgument, "the model has no input named '{}' (its inputs: {})", name, names);
    }
  }
  std::vector<Tensor> ordered;
  for (const ValueInfo& info : inputs) {
    auto it = given.find(info.name);
    ANVIL_CHECK(it != given.end(), ErrorKind::kInvalidArgument, "input '{}' is missing", info.name);
    const Tensor& t = it->second;
    ANVIL_CHECK(t.dtype() == info.dtype, ErrorKind::kInvalidArgument, "input '{}' must be {}, got {}", info.name,
                dtype_name(info.dtype), dtype_name(t.dtype()));
    if (!info.shape.empty() || t.rank() == 0) {
      bool ok = static_cast<size_t>(t.rank()) == info.shape.size();
      for (size_t d = 0; ok && d < info.shape.size(); ++d) ok = info.shape[d] < 0 || info.shape[d] == t.shape()[d];
      ANVIL_CHECK(ok, ErrorKind::kInvalidArgument, "input '{}' must have shape {}, got {}", info.name,
                  shape_str(info.shape), shape_str(t.shape()));
    }
    ordered.push_back(t);
  }
  return ordered;
}

std::shared_ptr<PlanEntry> Session::Impl::plan_for(const std::vector<Tensor>& ordered) const {
  int threads = effective_threads();
  // Plans depend on input shapes only: values never enter the key.
  std::string key = std::to_string(threads) + "t;";
  std::vector<kernels::TensorType> types;
  for (const Tensor& t : ordered) {
    key += shape_str(t.shape()) + ";";
    types.push_back({t.dtype(), t.shape()});
  }
  {
    std::lock_guard<std::mutex> lock(plans_mutex);
    if (auto entry = plans.find(key)) return entry;
  }
  // Built outside the lock: runs of other shapes go on meanwhile. Two runs
  // that miss together both build; the first to finish is kept.
  omp_set_num_threads(threads);
  auto entry = std::make_shared<PlanEntry>();
  entry->plan = runtime::build_plan(*graph, types, threads, &weights);
  std::lock_guard<std::mutex> lock(plans_mutex);
  if (auto existing = plans.find(key)) return existing;
  plans.insert(key, entry);
  return entry;
}

std::vector<Tensor> Session::Impl::execute(PlanEntry& entry, const std::vector<Tensor>& inputs,
                                           RunProfile* profile) const {
  const runtime::Plan& plan = *entry.plan;
  std::vector<Tensor> outputs(plan.output_types.size());
  for (size_t k = 0; k < outputs.size(); ++k)
    if (plan.output_types[k].dtype != DType::kUndefined)
      outputs[k] = Tensor(plan.output_types[k].dtype, plan.output_types[k].shape);

  ArenaBuffer arena = entry.acquire();
  char* base = static_cast<char*>(arena.get());
  std::vector<Tensor> views(plan.slots.size());
  auto memory_of = [&](int slot) -> void* {
    while (plan.slots[slot].kind == runtime::Slot::Kind::kAlias) slot = plan.slots[slot].index;
    const runtime::Slot& s = plan.slots[slot];
    switch (s.kind) {
      case runtime::Slot::Kind::kInput: return const_cast<void*>(inputs[s.index].raw());
      case runtime::Slot::Kind::kConstant: return const_cast<void*>(s.constant->raw());
      case runtime::Slot::Kind::kArena: return base + s.offset;
      case runtime::Slot::Kind::kOutput: return outputs[s.index].raw();
      case runtime::Slot::Kind::kAlias: case runtime::Slot::Kind::kDynamic: break;
    }
    return nullptr;
  };
  for (size_t i = 0; i < plan.slots.size(); ++i)
    if (plan.slots[i].kind != runtime::Slot::Kind::kDynamic)
      views[i] = Tensor::view(plan.slots[i].type.dtype, plan.slots[i].type.shape, memory_of(static_cast<int>(i)));

  omp_set_num_threads(effective_threads());
  kernels::RunContext ctx;
  const auto run_start = ProfileClock::now();
  for (const runtime::Step& step : plan.steps) {
    const auto step_start = profile ? ProfileClock::now() : run_start;
    ctx.inputs.clear();
    ctx.outputs.clear();
    for (int s : step.inputs) ctx.inputs.push_back(s < 0 ? nullptr : &views[s]);
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
    if (plan.slots[slot].kind == runtime::Slot::Kind::kDynamic) {
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

void Session::Impl::run_dynamic_step(const runtime::Step& step, kernels::RunContext& ctx,
                                     std::vector<Tensor>& views) const {
  std::shared_ptr<const runtime::DynamicKernels::Prepared> prepared = step.dynamic->get(ctx.inputs);
  const auto& types = prepared->output_types;
  ANVIL_CHECK(types.size() >= step.outputs.size() || std::all_of(step.outputs.begin() + types.size(),
                                                                 step.outputs.end(), [](int s) { return s < 0; }),
              ErrorKind::kUnsupported, "{}: an output is not produced by Anvil's kernel", step.node->describe());
  for (size_t o = 0; o < step.outputs.size(); ++o) {
    int s = step.outputs[o];
    if (s < 0) {
      ctx.outputs.push_back(nullptr);
      continue;
    }
    views[s] = Tensor(types[o].dtype, types[o].shape);
    ctx.outputs.push_back(&views[s]);
  }
  std::vector<unsigned char> scratch(prepared->kernel->scratch_bytes() + runtime::kArenaAlignment);
  ctx.scratch = scratch.data() +
                (runtime::kArenaAlignment - reinterpret_cast<uintptr_t>(scratch.data()) % runtime::kArenaAlignment);
  prepared->kernel->run(ctx);
}

std::vector<Tensor> Session::run(const std::map<std::string, Tensor>& inputs) const { return run(inputs, nullptr); }

std::vector<Tensor> Session::run(const std::map<std::string, Tensor>& inputs, RunProfile* profile) const {
  std::vector<Tensor> ordered = impl_->order_inputs(inputs);
  std::shared_ptr<PlanEntry> entry = impl_->plan_for(ordered);
  if (profile) *profile = {};
  return impl_->execute(*entry, ordered, profile);
}

PlanStats Session::plan_stats(const std::map<std::string, Tensor>& inputs) const {
  std::shared_ptr<PlanEntry> entry = impl_->plan_for(impl_->order_inputs(inputs));
  return {entry->plan->arena_bytes, entry->plan->weight_bytes + impl_->weights.packed_bytes(),
          entry->plan->steps.size(), entry->plan->dynamic_steps};
}

size_t Session::cached_plans() const {
  std::lock_guard<std::mutex> lock(impl_->plans_mutex);
  return impl_->plans.size();
}

std::vector<std::string> Session::describe_plan(const std::map<std::string, Tensor>& inputs) const {
  std::shared_ptr<PlanEntry> entry = impl_->plan_for(impl_->order_inputs(inputs));
  std::vector<std::string> lines;
  for (const runtime::Step& step : entry->plan->steps) {
    std::string out;
    for (int s : step.outputs)
      if (s >= 0) out += shape_str(entry->plan->slots[s].type.shape);
    std::string impl = step.dynamic ? "dynamic (prepared per run)" : step.kernel->impl_name();
    std::string layout = step.dynamic ? "plain" : step.kernel->layout_name();
    if (step.dynamic) out = "?";
    lines.push_back(fmt::format("{:<40} {:<28} {:<18} {}", step.node->describe(), impl, layout, out));
  }
  return lines;
}

}  // namespace anvil
