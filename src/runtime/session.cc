#include "anvil/session.h"

#include <omp.h>
#include <pthread.h>

#include <cxxabi.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <set>

#include "core/check.h"
#include "ir/schema.h"
#include "ir/verify.h"
#include "kernels/fusion_advice.h"
#include "kernels/registry.h"
#include "kernels/weight_cache.h"
#include "onnx/importer.h"
#include "passes/pipeline.h"
#include "runtime/constant_evaluator.h"
#include "runtime/executor.h"
#include "runtime/tuner.h"
#include "runtime/kernel_support.h"
#include "runtime/stream_pool.h"
#include "runtime/type_propagation.h"

namespace anvil {

namespace {

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

ValueInfo info_of(const ir::Value* v) {
  // Sequences and optionals: the kind, and their (innermost) element's type.
  ir::Type t = v->type;
  ValueKind kind = ValueKind::kTensor;
  if (t.kind() == ir::TypeKind::kOptional) {
    t = t.element();
    kind = t.kind() == ir::TypeKind::kSequence ? ValueKind::kOptionalSequence : ValueKind::kOptionalTensor;
  }
  if (t.kind() == ir::TypeKind::kSequence) {
    t = t.element();
    if (kind == ValueKind::kTensor) kind = ValueKind::kSequence;
  }
  const bool tensor = kind == ValueKind::kTensor || kind == ValueKind::kOptionalTensor;
  ValueInfo info;
  info.name = v->name;
  info.dtype = t.is_tensor() ? t.dtype() : v->dtype();
  info.kind = kind;
  if (tensor && t.has_shape()) info.shape = t.shape_or_minus_one();
  if (tensor)
    for (const ir::Dim& d : t.dims()) info.dim_names.push_back(d.symbol);
  info.rank_known = tensor && t.has_shape();
  return info;
}

size_t constant_bytes(const ir::Graph& graph) {
  size_t bytes = 0;
  for (const auto& v : graph.values())
    if (v->is_constant() && !v->constant->is_sequence()) bytes += v->constant->nbytes();
  return bytes;
}

// The bytes of the constant weights the products (MatMul, Gemm, Conv and
// their fused forms) read on every run: what streams through the caches,
// unlike an embedding table, of which a run gathers a few rows.
size_t product_weight_bytes(const ir::Graph& graph) {
  static const std::set<std::string> kProducts = {"MatMul", "Gemm",      "Conv",     "ConvTranspose",
                                                  "FusedMatMul", "FusedGemm", "FusedConv", "FusedConvDepthwise"};
  std::set<const ir::Value*> weights;
  for (const auto& n : graph.nodes())
    if (kProducts.count(n->op_type) && n->inputs.size() > 1 && n->inputs[1] && n->inputs[1]->is_constant() &&
        !n->inputs[1]->constant->is_sequence())
      weights.insert(n->inputs[1]);
  size_t bytes = 0;
  for (const ir::Value* w : weights) bytes += w->constant->nbytes();
  return bytes;
}

// The fusions that pay only on some machines, asked of this machine's
// kernels at the thread count each run gets.
passes::FusionAdvisor fusion_advisor(int threads) {
  return [threads](const ir::Node& fused) {
    if (fused.domain != "anvil") return false;
    if (fused.op_type == "FusedConvDepthwise") return kernels::conv_depthwise_fusion_pays(fused, threads);
    if (fused.op_type == "TwoClassReluGrad") return kernels::two_class_gate_fusion_pays(fused);
    if (fused.op_type == "ChannelsLastTranspose") return kernels::channels_last_transpose_reads_layout(fused);
    return false;
  };
}

// Throughput streams when the caller leaves the choice to us. One thread per
// stream keeps every core busy without the synchronisation of a team; on
// more than 4 cores a model with large weights gets teams of two, which halves
// the arenas and keeps more of its weights in the caches. (Measured on 2
// cores only; see docs/serving.md.)
int auto_streams(int cores, size_t weight_bytes) {
  const int per_stream = cores > 4 && weight_bytes > (size_t{64} << 20) ? 2 : 1;
  return std::max(1, cores / per_stream);
}

}  // namespace

const char* execution_mode_name(ExecutionMode mode) {
  return mode == ExecutionMode::kThroughput ? "throughput" : "latency";
}

struct Session::Impl {
  std::unique_ptr<ir::Graph> graph;
  SessionOptions options;
  int threads = 1;             // all the session's threads
  int streams = 1;             // concurrent requests of run_async
  int threads_per_stream = 1;  // threads of one request
  std::vector<ValueInfo> inputs, outputs;
  // Declared before the executor: its plans' kernels hold packed weights from it.
  kernels::WeightCache weights;
  std::unique_ptr<runtime::Tuner> tuner;  // SessionOptions::tune
  std::unique_ptr<runtime::GraphExecutor> executor;
  // Started by the first run_async; declared last, so it finishes its queue
  // while the executor and weights still exist.
  mutable std::once_flag pool_started;
  mutable std::unique_ptr<runtime::StreamPool> pool;
  mutable std::atomic<const runtime::StreamPool*> started_pool{nullptr};  // for queued_requests()

  std::vector<Tensor> order_inputs(const std::map<std::string, Tensor>& given) const;
  std::shared_ptr<runtime::PlanEntry> plan_for(const std::map<std::string, Tensor>& inputs) const {
    return executor->plan_for(order_inputs(inputs), effective_threads());
  }
  int effective_threads() const { return g_in_forked_child ? 1 : threads_per_stream; }
  runtime::StreamPool& stream_pool() const {
    std::call_once(pool_started, [this] {
      pool = std::make_unique<runtime::StreamPool>(g_in_forked_child ? 1 : streams, effective_threads());
      started_pool = pool.get();
    });
    return *pool;
  }
};

Session::Session(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Session::Session(Session&&) noexcept = default;
Session& Session::operator=(Session&&) noexcept = default;
Session::~Session() = default;

Session Session::from_file(const std::string& path, const SessionOptions& options) {
  return from_graph(onnx_io::import_model_file(path, runtime::kernel_support), options);
}

Session Session::from_bytes(const std::string& bytes, const SessionOptions& options) {
  return from_graph(onnx_io::import_model_bytes(bytes, /*base_dir=*/"", runtime::kernel_support), options);
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
  impl->threads = options.num_threads > 0 ? options.num_threads : default_threads();
  ANVIL_CHECK(options.streams >= 0 && options.streams <= impl->threads, ErrorKind::kInvalidArgument,
              "streams must be between 0 (auto) and the thread count {}, got {}", impl->threads, options.streams);
  if (options.mode == ExecutionMode::kThroughput) {
    impl->streams = options.streams > 0 ? options.streams : auto_streams(impl->threads, constant_bytes(*graph));
    impl->threads_per_stream = std::max(1, impl->threads / impl->streams);
  } else {
    impl->threads_per_stream = impl->threads;
  }
  ir::infer_types(*graph);  // schemas: symbolic dims and shape values, refining the declared types
  // Names and types as the model declares (and inference refines) them, before passes rewrite values.
  for (const ir::Value* v : graph->inputs()) impl->inputs.push_back(info_of(v));
  for (const ir::Value* v : graph->outputs()) impl->outputs.push_back(info_of(v));
  runtime::propagate_types(*graph);  // static shapes of ops that have no schema yet, from their kernels
  passes::optimize(*graph, options.optimization_level, runtime::reference_evaluator(),
                   fusion_advisor(impl->threads_per_stream));
  impl->weights.set_model_weight_bytes(product_weight_bytes(*graph));
  impl->graph = std::move(graph);
  impl->executor = std::make_unique<runtime::GraphExecutor>(
      *impl->graph, &impl->weights, static_cast<size_t>(options.plan_cache_size), options.optimization_level >= 3,
      /*release_weights=*/true);
  if (options.tune) {
    impl->tuner = std::make_unique<runtime::Tuner>(
        options.tune_cache.empty() ? runtime::default_tune_cache_path() : options.tune_cache,
        runtime::model_fingerprint(*impl->graph));
    impl->executor->set_tuner(impl->tuner.get());
  }
  return Session(std::move(impl));
}

TuningStats Session::tuning_stats() const {
  if (!impl_->tuner) return {};
  return {impl_->tuner->timed_nodes(), impl_->tuner->cached_nodes(), impl_->tuner->path()};
}

const std::vector<ValueInfo>& Session::inputs() const { return impl_->inputs; }
const std::vector<ValueInfo>& Session::outputs() const { return impl_->outputs; }

namespace {

// A tensor for a tensor input, a sequence (of the input's element type) for a
// sequence, and either or nothing for an optional.
void check_kind(const ValueInfo& info, const Tensor& t) {
  const bool optional = info.kind == ValueKind::kOptionalTensor || info.kind == ValueKind::kOptionalSequence;
  const bool sequence = info.kind == ValueKind::kSequence || info.kind == ValueKind::kOptionalSequence;
  if (t.empty()) {
    ANVIL_CHECK(optional, ErrorKind::kInvalidArgument, "input '{}' ({}) has no value", info.name,
                value_kind_name(info.kind));
    return;
  }
  ANVIL_CHECK(t.is_sequence() == sequence, ErrorKind::kInvalidArgument, "input '{}' must be a {}, got a {}", info.name,
              value_kind_name(info.kind), t.is_sequence() ? "sequence" : "tensor");
  if (sequence && info.dtype != DType::kUndefined)
    ANVIL_CHECK(t.dtype() == info.dtype, ErrorKind::kInvalidArgument, "input '{}' must be a sequence of {}, got one of {}",
                info.name, dtype_name(info.dtype), dtype_name(t.dtype()));
}

}  // namespace

std::vector<Tensor> Session::Impl::order_inputs(const std::map<std::string, Tensor>& given) const {
  for (const auto& given_input : given) {
    const std::string& name = given_input.first;
    bool known = std::any_of(inputs.begin(), inputs.end(), [&](const ValueInfo& i) { return i.name == name; });
    if (!known) {
      std::string names;
      for (const auto& i : inputs) {  // appended piece by piece: GCC 12 warns falsely about operator+ here
        names += names.empty() ? "'" : ", '";
        names += i.name;
        names += "'";
      }
      fail(ErrorKind::kInvalidArgument, "the model has no input named '{}' (its inputs: {})", name, names);
    }
  }
  std::vector<Tensor> ordered;
  // ONNX gives a dim_param one size across the inputs (schema inference and
  // the passes rely on it): the first input that has it binds it.
  std::vector<std::pair<const std::string*, std::pair<int64_t, const std::string*>>> bound;
  for (const ValueInfo& info : inputs) {
    auto it = given.find(info.name);
    ANVIL_CHECK(it != given.end(), ErrorKind::kInvalidArgument, "input '{}' is missing", info.name);
    const Tensor& t = it->second;
    check_kind(info, t);
    if (t.empty() || t.is_sequence()) {  // an optional without a value, or a sequence: its items are checked by the ops
      ordered.push_back(t);
      continue;
    }
    ANVIL_CHECK(t.dtype() == info.dtype, ErrorKind::kInvalidArgument, "input '{}' must be {}, got {}", info.name,
                dtype_name(info.dtype), dtype_name(t.dtype()));
    if (!info.shape.empty() || t.rank() == 0) {
      bool ok = static_cast<size_t>(t.rank()) == info.shape.size();
      for (size_t d = 0; ok && d < info.shape.size(); ++d) ok = info.shape[d] < 0 || info.shape[d] == t.shape()[d];
      ANVIL_CHECK(ok, ErrorKind::kInvalidArgument, "input '{}' must have shape {}, got {}", info.name,
                  shape_str(info.shape), shape_str(t.shape()));
    }
    for (size_t d = 0; d < info.dim_names.size() && d < static_cast<size_t>(t.rank()); ++d) {
      if (info.dim_names[d].empty()) continue;
      const std::string& symbol = info.dim_names[d];
      auto b = std::find_if(bound.begin(), bound.end(), [&](const auto& e) { return *e.first == symbol; });
      if (b == bound.end()) {
        bound.push_back({&symbol, {t.shape()[d], &info.name}});
        continue;
      }
      ANVIL_CHECK(b->second.first == t.shape()[d], ErrorKind::kInvalidArgument,
                  "input '{}' has {} = {} (axis {}), but input '{}' has {} = {}: one name is one size", info.name,
                  symbol, t.shape()[d], d, *b->second.second, symbol, b->second.first);
    }
    ordered.push_back(t);
  }
  return ordered;
}

std::vector<Tensor> Session::run(const std::map<std::string, Tensor>& inputs) const { return run(inputs, nullptr); }

std::vector<Tensor> Session::run(const std::map<std::string, Tensor>& inputs, RunProfile* profile) const {
  return impl_->executor->run(impl_->order_inputs(inputs), impl_->effective_threads(), profile);
}

void Session::check_inputs(const std::map<std::string, Tensor>& inputs) const { impl_->order_inputs(inputs); }

std::future<std::vector<Tensor>> Session::run_async(const std::map<std::string, Tensor>& inputs) const {
  auto promise = std::make_shared<std::promise<std::vector<Tensor>>>();
  std::future<std::vector<Tensor>> result = promise->get_future();
  run_async(inputs, [promise](std::vector<Tensor> outputs, std::exception_ptr error) {
    if (error)
      promise->set_exception(error);
    else
      promise->set_value(std::move(outputs));
  });
  return result;
}

void Session::run_async(const std::map<std::string, Tensor>& inputs, RunCallback done) const {
  ANVIL_CHECK(done != nullptr, ErrorKind::kInvalidArgument, "run_async needs a callback");
  std::vector<Tensor> ordered = impl_->order_inputs(inputs);
  const Impl* impl = impl_.get();
  impl->stream_pool().submit([impl, ordered = std::move(ordered), done = std::move(done)] {
    std::vector<Tensor> outputs;
    std::exception_ptr error;
    try {
      outputs = impl->executor->run(ordered, impl->effective_threads(), nullptr);
    } catch (...) {
      error = std::current_exception();
    }
    try {
      done(std::move(outputs), error);
    } catch (abi::__forced_unwind&) {
      throw;  // thread cancellation (e.g. Python finalizing) must unwind on
    } catch (...) {
      // RunCallback must not throw; dropping what it threw keeps the stream serving.
    }
  });
}

int Session::streams() const { return impl_->streams; }
int Session::threads_per_stream() const { return impl_->threads_per_stream; }
void Session::wait_idle() const {
  const runtime::StreamPool* pool = impl_->started_pool.load();
  if (pool) pool->wait_idle();
}

bool Session::on_stream_thread() { return runtime::StreamPool::on_stream_thread(); }

size_t Session::queued_requests() const {
  const runtime::StreamPool* pool = impl_->started_pool.load();
  return pool ? pool->queued() : 0;
}

PlanStats Session::plan_stats(const std::map<std::string, Tensor>& inputs) const {
  const runtime::Plan& plan = impl_->executor->plan_of(*impl_->plan_for(inputs));
  // Resident weights: the constants, less the pages dropped for packed copies, plus the packed copies.
  const size_t weights = plan.weight_bytes - impl_->weights.released_bytes() + impl_->weights.packed_bytes();
  return {plan.arena_bytes, weights, plan.steps.size(), plan.dynamic_steps, plan.reorders, plan.concats_in_place};
}

size_t Session::cached_plans() const { return impl_->executor->cached_plans(); }

namespace {

bool has_random_op(const ir::Graph& graph) {
  for (const auto& node : graph.nodes()) {
    if (node->dead) continue;
    if (ir::is_random_op(*node)) return true;
    for (const ir::Graph* sub : node->attrs.subgraphs())
      if (has_random_op(*sub)) return true;
  }
  return false;
}

}  // namespace

bool Session::draws_random_values() const { return has_random_op(*impl_->graph); }

std::vector<std::string> Session::describe_plan(const std::map<std::string, Tensor>& inputs) const {
  const runtime::Plan& plan = impl_->executor->plan_of(*impl_->plan_for(inputs));
  std::vector<std::string> lines;
  for (const runtime::Step& step : plan.steps) {
    std::string out;
    for (int s : step.outputs)
      if (s >= 0) out += shape_str(plan.slots[s].type.shape);
    std::string impl = step.dynamic ? "dynamic (prepared per run)" : step.kernel->impl_name();
    std::string layout = step.dynamic ? "plain" : step.kernel->layout_name();
    if (step.dynamic) out.assign(1, '?');  // not = "?": GCC 12 warns falsely (-Wrestrict)
    lines.push_back(fmt::format("{:<40} {:<28} {:<18} {}", step.node->describe(), impl, layout, out));
  }
  return lines;
}

}  // namespace anvil
