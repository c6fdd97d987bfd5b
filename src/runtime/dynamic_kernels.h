// Kernels of a dynamic step: a node prepared at run time, because its output
// shape depends on values (a Reshape whose shape is a graph input, NonZero) or
// on the output of another dynamic step.
//
// Prepared kernels are cached per step, keyed by the input types and the
// values of the run-time inputs that prepare() read (PrepareContext::
// values_read()), so a steady stream of same-shaped requests prepares once.
// The cache is bounded and shared by concurrent runs.
#pragma once

#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "kernels/kernel.h"

namespace anvil::runtime {

class DynamicKernels {
 public:
  struct Prepared {
    std::unique_ptr<kernels::Kernel> kernel;
    std::vector<kernels::TensorType> output_types;
  };

  // `plan_constant[i]` is true when input i is the same tensor in every run
  // (a weight or a folded value): its value never needs comparing.
  DynamicKernels(const ir::Node& node, std::vector<bool> plan_constant, int num_threads,
                 kernels::WeightCache* weights)
      : node_(node), plan_constant_(std::move(plan_constant)), threads_(num_threads), weights_(weights) {}

  // The kernel prepared for these inputs (nullptr entries: omitted inputs).
  std::shared_ptr<const Prepared> get(const std::vector<const Tensor*>& inputs);

  static constexpr size_t kMaxEntries = 16;
  // Values larger than this are not kept as cache keys; such a node is
  // prepared on every run.
  static constexpr size_t kMaxKeyBytes = 64 << 10;

 private:
  struct Entry {
    std::string types;              // dtype and shape of every input
    std::vector<int> read;          // run-time inputs whose values prepare() read
    std::vector<std::string> values;
    std::shared_ptr<const Prepared> prepared;
  };
  bool matches(const Entry& e, const std::string& types, const std::vector<const Tensor*>& inputs) const;

  const ir::Node& node_;
  std::vector<bool> plan_constant_;
  int threads_;
  kernels::WeightCache* weights_;
  std::mutex mutex_;
  std::list<Entry> entries_;  // most recently used first
};

}  // namespace anvil::runtime
