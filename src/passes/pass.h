// The graph pass interface.
//
// A pass rewrites an ir::Graph in place and says whether it changed anything;
// the pipeline runs each level's passes until none does. Passes know nothing of
// kernels: constant folding gets an evaluator from the runtime, and fusions
// that pay only on some machines ask an advisor from the runtime.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "ir/graph.h"

namespace anvil::passes {

// Computes a node's outputs from constant inputs; nullopt when it cannot.
using ConstantEvaluator =
    std::function<std::optional<std::vector<Tensor>>(const ir::Node& node, const std::vector<const Tensor*>& inputs)>;

// Whether the fused node `fused` (its inputs typed, not yet in the graph)
// runs faster than the nodes it replaces on the machine and thread count
// the graph is optimized for. Without an advisor such fusions stay off.
using FusionAdvisor = std::function<bool(const ir::Node& fused)>;

class Pass {
 public:
  virtual ~Pass() = default;
  virtual std::string name() const = 0;
  virtual bool run(ir::Graph& graph) = 0;
};

// Consumers of `v` (nodes reading it) — the fusions' "used once" test.
size_t use_count(const ir::Graph& graph, const ir::Value* v);
// True when `v` has exactly one consumer and is not a graph output.
bool used_once(const ir::Graph& graph, const ir::Value* v);
// The single live node reading `v`, or nullptr.
ir::Node* single_consumer(const ir::Graph& graph, const ir::Value* v);
// Calls `rewrite_at` on each node the graph held when called: rewrites
// append nodes, which wait for the pass's next round. True when any call
// rewrote (returned true).
bool rewrite_each_node(ir::Graph& graph, const std::function<bool(ir::Node&)>& rewrite_at);
// The tensor of constant input `index` of `node`, to rewrite: the value's
// own when `node` alone reads it and nothing else holds its bytes (import's
// copy, rewritten where it lies: one copy of the weights at a time), else a
// copy, made a new constant that only `node` reads.
Tensor& writable_constant(ir::Graph& graph, ir::Node& node, size_t index);
// Makes `v` the constant `t` in place, so that its name (maybe a graph
// output's) survives; the caller kills the node that produced it.
void become_constant(ir::Value& v, Tensor t);

}  // namespace anvil::passes
