// runtime::Plan — a graph prepared for one set of input shapes: a kernel per
// node, where every value lives, and the arena size. Built once by build_plan()
// and executed by many run() calls, possibly at the same time.
#pragma once

#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "kernels/kernel.h"

namespace anvil::runtime {

struct Slot {
  enum class Kind {
    kInput,     // index: graph input
    kConstant,  // constant: a graph initializer or a tensor folded at plan time
    kArena,     // offset into the run's arena
    kOutput,    // index: graph output, a tensor handed to the caller
    kAlias,     // index: the slot whose memory this one shares (reshape views, in-place ops)
  };
  Kind kind = Kind::kArena;
  kernels::TensorType type;
  int index = -1;
  const Tensor* constant = nullptr;
  size_t offset = 0;
  int buffer = -1;  // kArena: id in the memory planner
};

struct Step {
  const ir::Node* node = nullptr;
  std::unique_ptr<kernels::Kernel> kernel;
  std::vector<int> inputs;   // slot ids; -1 for omitted inputs
  std::vector<int> outputs;  // slot ids; -1 for omitted outputs
  size_t scratch_offset = 0;
};

struct Plan {
  std::vector<Slot> slots;
  std::vector<Step> steps;
  std::vector<kernels::TensorType> output_types;  // per graph output
  // Graph outputs no step writes (inputs, constants, repeated outputs): copied after the steps.
  std::vector<std::pair<int, int>> final_copies;  // (graph output index, source slot)
  std::deque<Tensor> owned_constants;             // folded values and specialised inputs
  size_t arena_bytes = 0;
  size_t weight_bytes = 0;
  size_t folded_nodes = 0;
};

// Graph inputs of an integer type with at most this many elements are treated
// as constants when planning (their values become part of the plan's key), so
// shape-like inputs (Reshape's shape, Slice's starts) are known to kernels.
constexpr int64_t kMaxSpecialisedInputElements = 64;
bool is_specialised_input(const Tensor& t);

// `inputs` holds one tensor per graph input, already checked against the
// model's declared types. Throws anvil::Error naming the node that fails.
std::unique_ptr<Plan> build_plan(const ir::Graph& graph, const std::vector<Tensor>& inputs, int num_threads);

// Makes the kernel for `node`, best backend first; a backend that declines or
// whose prepare() throws kUnsupported gives way to the next.
struct PreparedKernel {
  std::unique_ptr<kernels::Kernel> kernel;
  std::vector<kernels::TensorType> output_types;
};
PreparedKernel prepare_kernel(const ir::Node& node, const std::vector<kernels::TensorType>& types,
                              const std::vector<const Tensor*>& constants, int num_threads, bool ref_only);

// Runs a prepared kernel on tensors it allocates (constant folding).
std::vector<Tensor> evaluate_kernel(const PreparedKernel& prepared, const std::vector<const Tensor*>& inputs);

}  // namespace anvil::runtime
