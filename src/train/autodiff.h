// train::build_gradient_graph — reverse-mode differentiation over the IR.
//
// The forward graph's float constants named as parameters become graph inputs
// (their values are handed back, so a trainer owns and updates them), and the
// graph gains, after its loss, one output per parameter: d loss / d parameter.
// Gradients are ordinary IR nodes emitted by one rule per op (gradients/,
// registered like kernels), so the planner, fusions and kernels that run
// inference run training too.
//
//   auto g = train::build_gradient_graph(std::move(forward), "loss", {"W1", "b1"});
//   Session s = Session::from_graph(std::move(g.graph));
//   // inputs: the forward inputs + {"W1": w1, "b1": b1}; outputs: loss, dW1, db1
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "anvil/tensor.h"
#include "ir/graph.h"

namespace anvil::train {

struct GradientGraph {
  std::unique_ptr<ir::Graph> graph;  // outputs: the loss, the extra outputs, then one gradient per parameter
  std::vector<std::string> parameters;
  std::vector<Tensor> initial_values;  // the parameters' values, as the constants held them
  std::vector<std::string> gradient_outputs;  // the names of the gradient outputs, per parameter
};

// `loss` names a float value with one element. Throws anvil::Error: kInvalidArgument
// for an unknown name, a parameter that is not a float constant, or a loss that
// does not depend on a parameter; kUnsupported for an op on the path from a
// parameter to the loss that has no gradient rule.
// `extra_outputs` names forward values to output after the loss (e.g. the
// logits, for accuracy while training).
GradientGraph build_gradient_graph(std::unique_ptr<ir::Graph> forward, const std::string& loss,
                                   const std::vector<std::string>& parameters,
                                   const std::vector<std::string>& extra_outputs = {});

// The ops that have a gradient rule.
std::vector<std::string> differentiable_ops();

}  // namespace anvil::train
