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
#include "runtime/dynamic_kernels.h"

namespace anvil::runtime {

struct Slot {
  enum class Kind {
    kInput,     // index: graph input
    kConstant,  // constant: a graph initializer or a tensor folded at plan time
    kArena,     // offset into the run's arena
    kOutput,    // index: graph output, a tensor handed to the caller
    kAlias,     // index: the slot whose memory this one shares (reshape views, in-place ops)
    kDynamic,   // computed by a dynamic step: shape and memory known only at run time
  };
  Kind kind = Kind::kArena;
  kernels::TensorType type;
  int index = -1;
  const Tensor* constant = nullptr;
  size_t offset = 0;  // kArena: into the arena; kAlias: into the slot it shares (an input's range of a concat)
  int buffer = -1;    // kArena: id in the memory planner
};

struct Step {
  const ir::Node* node = nullptr;
  std::unique_ptr<kernels::Kernel> kernel;    // null for a dynamic step
  std::unique_ptr<DynamicKernels> dynamic;    // set for a dynamic step
  std::vector<int> inputs;   // slot ids; -1 for omitted inputs
  std::vector<int> outputs;  // slot ids; -1 for omitted outputs
  size_t scratch_offset = 0;
};

struct Plan {
  std::vector<Slot> slots;
  std::deque<ir::Node> reorder_nodes;  // the nodes of the reorder steps the planner inserted
  std::vector<Step> steps;
  std::vector<kernels::TensorType> output_types;  // per graph output
  // Graph outputs no step writes (inputs, constants, repeated outputs): copied after the steps.
  std::vector<std::pair<int, int>> final_copies;  // (graph output index, source slot)
  std::deque<Tensor> owned_constants;             // folded values and specialised inputs
  size_t arena_bytes = 0;
  size_t weight_bytes = 0;
  size_t folded_nodes = 0;
  size_t dynamic_steps = 0;
  size_t reorders = 0;
  size_t concats_in_place = 0;  // concats whose inputs were written straight into the output
};

class Tuner;

struct PlanOptions {
  int num_threads = 1;
  // The session's packed-weight cache, shared by all its plans.
  kernels::WeightCache* weights = nullptr;
  // Keep activations in the layouts kernels choose (oneDNN's blocked formats),
  // reordering only where a producer and a consumer disagree, and to plain at
  // graph outputs and dynamic steps. Off: every value between nodes is plain.
  bool blocked_layouts = false;
  // Drop each constant's pages as soon as every node reading it has been
  // prepared with a kernel that reads it only packed (WeightCache::release),
  // so that the originals and their packed copies never all coexist. Only
  // while no other plan of the graph exists or is being built.
  bool release_weights_early = false;
  // Times the alternatives of kernels that have several (runtime/tuner.h); null: their rules pick.
  Tuner* tuner = nullptr;
};

// A plan is made for the shapes of the graph inputs, never their values:
// `input_types` holds one type per graph input, already checked against the
// model's declared types. A node whose output shape depends on a value known
// only at run time (a Reshape fed by a graph input, NonZero) becomes a dynamic
// step, and so does everything that reads its outputs. Throws anvil::Error
// naming the node that fails.
std::unique_ptr<Plan> build_plan(const ir::Graph& graph, const std::vector<kernels::TensorType>& input_types,
                                 const PlanOptions& options);

// Makes the kernel for `node`, best backend first; a backend that declines or
// whose prepare() throws kUnsupported gives way to the next.
struct PreparedKernel {
  std::unique_ptr<kernels::Kernel> kernel;
  std::vector<kernels::TensorType> output_types;
};
// What a kernel prepared in a plan may do with layouts (PrepareContext::allow_blocked_layouts).
struct LayoutFreedom {
  bool inputs = false;
  bool outputs = false;
  std::vector<kernels::Layout> incoming;  // per input: its producer's layout
  bool feeds_channel_concat = false;       // PrepareContext::output_feeds_channel_concat
};
// `values_read`, when given, receives which inputs prepare() looked at.
// Throws kernels::ValueNeeded when every backend needs an input's value that
// `constants` lacks.
PreparedKernel prepare_kernel(const ir::Node& node, const std::vector<kernels::TensorType>& types,
                              const std::vector<const Tensor*>& constants, int num_threads, bool ref_only,
                              std::vector<bool>* values_read = nullptr, kernels::WeightCache* weights = nullptr,
                              const LayoutFreedom* layouts = nullptr, Tuner* tuner = nullptr);

// Runs a prepared kernel on tensors it allocates (constant folding).
std::vector<Tensor> evaluate_kernel(const PreparedKernel& prepared, const std::vector<const Tensor*>& inputs);

}  // namespace anvil::runtime
