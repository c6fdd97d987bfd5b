// Per-node implementation choice by timing (SessionOptions::tune, `anvil
// --tune`): where a kernel has alternatives (Kernel::alternatives: oneDNN's
// matmul or Anvil's packed GEMM, oneDNN's pooling or Anvil's loop), the
// planner prepares each, times it on the plan's shapes and keeps the fastest.
// Choices are remembered in a JSON file keyed by the model, the node, its
// input types, the thread count and the CPU, so the next session with that
// file plans without timing.
#pragma once

#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "kernels/kernel.h"

namespace anvil::runtime {

class Tuner {
 public:
  // Reads `cache_path` when it exists (a malformed file is reported on stderr
  // and replaced). `model_id` identifies the model (a hash of its graph).
  Tuner(std::string cache_path, std::string model_id);

  std::string key(const ir::Node& node, const std::vector<kernels::TensorType>& types,
                  const std::vector<kernels::Layout>& incoming, int threads) const;
  // The alternative chosen for `key` before, if any.
  std::optional<std::string> cached(const std::string& key) const;
  // Records a timed choice (median milliseconds per alternative, by name).
  void record(const std::string& key, const std::string& choice, const std::map<std::string, double>& ms);
  // Writes the file (to a temporary, then renamed) when a choice was added.
  void save();

  const std::string& path() const { return path_; }
  size_t timed_nodes() const;
  size_t cached_nodes() const;
  void count_cached();

 private:
  std::string path_, model_id_, cpu_id_;
  mutable std::mutex mutex_;
  std::map<std::string, std::string> choices_;
  std::map<std::string, std::map<std::string, double>> timings_;
  bool dirty_ = false;
  size_t timed_ = 0, cached_hits_ = 0;
};

// Median milliseconds per run of a prepared kernel on inputs of `types`
// (random floats, in the layouts the kernel reads; constants as given).
double time_kernel(const kernels::Kernel& kernel, const std::vector<kernels::TensorType>& types,
                   const std::vector<const Tensor*>& constants, const std::vector<kernels::TensorType>& outputs);

// A hash of the graph's structure and initializer shapes, for Tuner keys.
std::string model_fingerprint(const ir::Graph& graph);

// The default cache file: $ANVIL_TUNE_CACHE, else $XDG_CACHE_HOME/anvil/tune.json,
// else ~/.cache/anvil/tune.json.
std::string default_tune_cache_path();

}  // namespace anvil::runtime
