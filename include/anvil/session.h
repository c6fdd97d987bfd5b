// anvil::Session — load a model once, plan it, run it many times.
//
//   anvil::SessionOptions opts;
//   opts.num_threads = 2;
//   anvil::Session s = anvil::Session::from_file("model.onnx", opts);
//   std::vector<anvil::Tensor> out = s.run({{"input", x}});
//
// run() may be called from several threads at once: each call takes its own
// activation arena; weights and prepared kernels are shared. run_async()
// queues a request for the session's streams (see ExecutionMode).
#pragma once

#include <exception>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "anvil/tensor.h"

namespace anvil {

namespace ir { class Graph; }

// How a session spends its threads.
enum class ExecutionMode {
  // One request at a time on all num_threads threads: the lowest latency.
  kLatency,
  // `streams` requests at once, each on its own thread with an OpenMP team of
  // num_threads / streams threads: the most requests per second. run() from
  // several threads gets the same split (each call uses a stream's team size).
  kThroughput,
};
const char* execution_mode_name(ExecutionMode mode);

struct SessionOptions {
  int num_threads = 0;        // 0: all cores of the machine
  // 0: none, 1: basic cleanup, 2: fusions, 3: fusions and activations kept in
  // the kernels' blocked layouts between nodes (reordered only where needed).
  int optimization_level = 3;
  // Plans kept for distinct input shapes (least recently used dropped first).
  // A plan holds its arena pool and per-shape kernels; weights are shared.
  int plan_cache_size = 16;
  ExecutionMode mode = ExecutionMode::kLatency;
  // Throughput mode: concurrent requests (at most num_threads). 0 picks by
  // the cores and the model's weight size (Session::streams() tells).
  int streams = 0;
  // Time the alternatives of nodes that have several implementations (oneDNN
  // or Anvil's packed GEMM for a MatMul, ...) when each plan is built, and
  // keep the fastest; choices are saved in `tune_cache` (empty: the default,
  // $ANVIL_TUNE_CACHE, else $XDG_CACHE_HOME/anvil/tune.json, else
  // ~/.cache/anvil/tune.json), keyed by model, node, shapes, threads and CPU,
  // so later sessions plan without timing. Off: each kernel's rule picks.
  bool tune = false;
  std::string tune_cache;
};

// Called on a stream's thread when an asynchronous run ends: the outputs, or
// the error (an anvil::Error for a bad input) and no outputs. It must not
// throw (what it throws is dropped) and should return quickly: the stream
// waits for it.
using RunCallback = std::function<void(std::vector<Tensor> outputs, std::exception_ptr error)>;

struct ValueInfo {
  std::string name;
  DType dtype = DType::kUndefined;  // of the tensor, or of a sequence's or optional's elements
  ValueKind kind = ValueKind::kTensor;
  Shape shape;  // -1 for a dimension the model leaves symbolic
  std::vector<std::string> dim_names;  // per dimension: its symbol ("batch"), or "" when it has none
  bool rank_known = true;              // false: neither the model nor inference gives a shape
};

struct PlanStats {
  size_t arena_bytes = 0;    // planned activation arena of one run
  size_t weight_bytes = 0;   // resident weights: constants (less the originals dropped for packed copies) and packed copies
  size_t num_steps = 0;      // kernels executed per run
  size_t dynamic_steps = 0;  // steps prepared at run time (shapes depend on values)
  size_t reorders = 0;       // layout conversions the planner inserted between nodes (included in num_steps)
  size_t concats_in_place = 0;  // concats whose inputs their producers wrote straight into the output
};

// SessionOptions::tune so far: nodes whose alternatives were timed, and
// nodes planned from the tuning cache's choices.
struct TuningStats {
  size_t timed_nodes = 0;
  size_t cached_nodes = 0;
  std::string cache_path;
};

// What one profiled run spent, node by node (Session::run with a profile).
struct NodeProfile {
  std::string node;     // "Conv 'conv1'"
  std::string op;       // "Conv"
  std::string impl;     // "dnnl:brg:avx512_core", "ref", "dynamic"
  std::string layout;   // "plain", "aBcd16b (staged)"
  Shape output_shape;   // of output 0
  double start_us = 0;  // from the start of the run
  double duration_us = 0;
};

struct RunProfile {
  double total_us = 0;
  std::vector<NodeProfile> nodes;  // in execution order
};

class Session {
 public:
  static Session from_file(const std::string& path, const SessionOptions& options = {});
  // A model serialized in memory (a ModelProto); it cannot use external data.
  static Session from_bytes(const std::string& bytes, const SessionOptions& options = {});
  static Session from_graph(std::unique_ptr<ir::Graph> graph, const SessionOptions& options = {});
  Session(Session&&) noexcept;
  Session& operator=(Session&&) noexcept;
  ~Session();

  const std::vector<ValueInfo>& inputs() const;
  const std::vector<ValueInfo>& outputs() const;

  // Runs the model; `inputs` maps every graph input name to a tensor.
  // Returns the outputs in the order of outputs().
  std::vector<Tensor> run(const std::map<std::string, Tensor>& inputs) const;
  // The same, recording each step's time into `profile` (when not null).
  std::vector<Tensor> run(const std::map<std::string, Tensor>& inputs, RunProfile* profile) const;

  // Checks inputs as run() does (names, kinds, dtypes, declared dimensions)
  // without running; throws anvil::Error (invalid argument).
  void check_inputs(const std::map<std::string, Tensor>& inputs) const;

  // Queues a run for the session's streams and returns at once; inputs are
  // checked before it returns (a bad input throws here). Tensors that are
  // views must stay alive until the run ends. Runs start in queue order.
  std::future<std::vector<Tensor>> run_async(const std::map<std::string, Tensor>& inputs) const;
  void run_async(const std::map<std::string, Tensor>& inputs, RunCallback done) const;
  // Concurrent requests of run_async (1 in latency mode) and the threads of each.
  int streams() const;
  int threads_per_stream() const;
  // Requests queued by run_async that no stream has started yet.
  size_t queued_requests() const;
  // Blocks until every request queued by run_async has finished.
  void wait_idle() const;
  // True on a stream's thread (inside a RunCallback). A session must not be
  // destroyed there: its destructor waits for its streams, this one included.
  static bool on_stream_thread();

  // Statistics of the plan for the given input shapes (plans if needed).
  PlanStats plan_stats(const std::map<std::string, Tensor>& inputs) const;
  // Zero counts when the session does not tune.
  TuningStats tuning_stats() const;
  // Plans held in the cache now (at most SessionOptions::plan_cache_size).
  size_t cached_plans() const;
  // True when some node draws random values (RandomNormal, Bernoulli,
  // training-mode Dropout...): the outputs then differ from run to run.
  bool draws_random_values() const;
  // One line per step: node name, op, kernel implementation.
  std::vector<std::string> describe_plan(const std::map<std::string, Tensor>& inputs) const;

 private:
  struct Impl;
  explicit Session(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace anvil
