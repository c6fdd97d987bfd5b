// The interface of gradient rules: one function per op, registered by name.
// A rule reads the node and the gradients of its outputs, and emits the nodes
// that compute the gradients of the inputs that need one.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "ir/graph.h"

namespace anvil::train {

class GradBuilder {
 public:
  GradBuilder(ir::Graph& graph, const ir::Node& node, std::vector<ir::Value*> output_grads,
              std::vector<bool> wanted, std::map<const ir::Value*, ir::Value*>& grads);

  const ir::Node& node() const { return node_; }
  ir::Value* x(size_t input) const { return node_.input(input); }
  ir::Value* y(size_t output) const { return node_.output(output); }
  // The gradient flowing into output `k` (nullptr when the loss does not depend on it).
  ir::Value* dy(size_t k = 0) const { return k < output_grads_.size() ? output_grads_[k] : nullptr; }
  // Whether input `i` needs a gradient (it depends on a parameter).
  bool wants(size_t i) const { return i < wanted_.size() && wanted_[i]; }
  // Adds `g` to input `i`'s gradient (several consumers accumulate).
  void grad(size_t i, ir::Value* g);

  // A node of the default domain at opset 17 (the semantics every rule is written for).
  ir::Value* op(const std::string& op_type, std::vector<ir::Value*> inputs, ir::Attributes attrs = {});
  // A node of Anvil's own domain (a fused gradient kernel).
  ir::Value* anvil_op(const std::string& op_type, std::vector<ir::Value*> inputs, ir::Attributes attrs = {});
  std::vector<ir::Value*> anvil_op_n(const std::string& op_type, std::vector<ir::Value*> inputs, int outputs,
                                     ir::Attributes attrs = {});
  std::vector<ir::Value*> op_n(const std::string& op_type, std::vector<ir::Value*> inputs, int outputs,
                               ir::Attributes attrs = {});
  ir::Value* ints(std::vector<int64_t> values);
  ir::Value* constant(Tensor value);
  // The value of a constant, or of a Constant node's output; nullptr otherwise.
  static const Tensor* constant_of(const ir::Value* v);
  ir::Value* scalar(float value, DType dtype);
  // `g` (shaped like the forward value `shaped_as`, a broadcast result) summed
  // over the axes `like` was broadcast along, and shaped like `like`.
  ir::Value* unbroadcast(ir::Value* g, const ir::Value* like, const ir::Value* shaped_as);
  // Shorthand: the broadcast result is the node's output 0.
  ir::Value* unbroadcast(ir::Value* g, const ir::Value* like) { return unbroadcast(g, like, y(0)); }

 private:
  ir::Value* unbroadcast_at_run_time(ir::Value* g, const ir::Value* like, int rank_like, int rank);

  ir::Graph& graph_;
  const ir::Node& node_;
  std::vector<ir::Value*> output_grads_;
  std::vector<bool> wanted_;
  std::map<const ir::Value*, ir::Value*>& grads_;
};

using GradientRule = void (*)(GradBuilder&);

// A float32 or float64 tensor of `shape` holding `value` everywhere.
Tensor filled(DType dtype, const Shape& shape, double value);

// Registers `rule` for the default-domain op `op_type` (static objects in gradients/).
struct RegisterGradient {
  RegisterGradient(const char* op_type, GradientRule rule);
};

const GradientRule* find_gradient_rule(const std::string& op_type);

}  // namespace anvil::train
