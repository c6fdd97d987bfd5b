// Products of one input by several constant weights (a transformer layer's
// Q, K and V projections) become one anvil.FusedMatMul over the weights side
// by side, then a Split of its output along the last axis:
//   FusedMatMul(A, W1, b1), FusedMatMul(A, W2, b2), ...
//   -> Split(FusedMatMul(A, [W1 W2 ...], [b1 b2 ...]), [N1, N2, ...])
// One product of N1 + N2 + ... columns reads A once and fills the cores
// better than several narrow ones (BERT's M is the sequence length). Each
// product must be float32 with a constant [K, Ni] weight of the same K, no
// transposed operand, no residual, and the same activation; biases are
// constants along the last axis, on all of them or on none. Runs with the
// late passes, on the FusedMatMuls fuse_matmul has formed.
#include <algorithm>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "passes/match.h"
#include "passes/pipeline.h"

namespace anvil::passes {

namespace {

bool is_fused_matmul(const ir::Node& n) { return !n.dead && n.domain == "anvil" && n.op_type == "FusedMatMul"; }

// The constant bias of `n` as a vector of its N values, or empty when it has none.
std::vector<float> bias_of(const ir::Node& n) {
  const ir::Value* b = n.input(2);
  if (!b) return {};
  return std::vector<float>(b->constant->data<float>(), b->constant->data<float>() + b->constant->numel());
}

// Whether `n` can join a merged product: checked per node; the group checks K and the rest.
bool mergeable(const ir::Node& n) {
  const ir::Value* a = n.input(0);
  const ir::Value* w = n.input(1);
  if (!is_fused_matmul(n) || !a || !is_float_constant(w) || a->dtype() != DType::kFloat32) return false;
  if (w->constant->rank() != 2 || n.input(3) || n.attrs.get_int("transA", 0) || n.attrs.get_int("transB", 0))
    return false;
  if (!a->type.has_shape() || a->type.rank() < 2 || !n.output(0)) return false;
  const ir::Value* bias = n.input(2);
  return !bias || (is_float_constant(bias) && bias->constant->numel() == w->constant->shape()[1]);
}

// The attributes that must agree for nodes to share one product (the activation's).
std::string activation_key(const ir::Node& n) {
  return n.attrs.get_string("activation", "") + "/" + std::to_string(n.attrs.get_float("activation_alpha", 0.f)) +
         "/" + std::to_string(n.attrs.get_float("activation_beta", 0.f));
}

class FuseSharedInputMatMuls : public Pass {
 public:
  std::string name() const override { return "fuse_shared_input_matmuls"; }

  bool run(ir::Graph& graph) override {
    // Groups by input, weight rows, activation and whether a bias is there,
    // in graph order (so the merged nodes' names do not depend on addresses).
    std::map<std::tuple<const ir::Value*, int64_t, std::string, bool>, size_t> group_of;
    std::vector<std::vector<ir::Node*>> groups;
    for (const auto& node : graph.nodes()) {
      if (!mergeable(*node)) continue;
      auto [it, added] = group_of.try_emplace(
          {node->input(0), node->input(1)->constant->shape()[0], activation_key(*node), node->input(2) != nullptr},
          groups.size());
      if (added) groups.emplace_back();
      groups[it->second].push_back(node.get());
    }
    bool changed = false;
    for (const auto& nodes : groups)
      if (nodes.size() >= 2) {
        merge(graph, nodes);
        changed = true;
      }
    return changed;
  }

 private:
  static void merge(ir::Graph& graph, const std::vector<ir::Node*>& nodes) {
    ir::Node& first = *nodes[0];
    const int64_t k = first.input(1)->constant->shape()[0];
    std::vector<int64_t> widths;
    int64_t n_total = 0;
    for (const ir::Node* n : nodes) n_total += widths.emplace_back(n->input(1)->constant->shape()[1]);

    Tensor weights(DType::kFloat32, {k, n_total});
    std::vector<float> bias;
    int64_t column = 0;
    for (size_t i = 0; i < nodes.size(); ++i) {
      const float* w = nodes[i]->input(1)->constant->data<float>();
      for (int64_t r = 0; r < k; ++r)
        std::copy(w + r * widths[i], w + (r + 1) * widths[i], weights.data<float>() + r * n_total + column);
      column += widths[i];
      const std::vector<float> b = bias_of(*nodes[i]);
      bias.insert(bias.end(), b.begin(), b.end());
    }
    ir::Value* w_value = graph.add_constant(graph.unique_name(first.name + "_merged_weights"), std::move(weights));
    ir::Value* b_value = nullptr;
    if (!bias.empty()) {
      Tensor b(DType::kFloat32, {n_total});
      std::copy(bias.begin(), bias.end(), b.data<float>());
      b_value = graph.add_constant(graph.unique_name(first.name + "_merged_bias"), std::move(b));
    }

    ir::Node* product = graph.add_node("FusedMatMul", {first.input(0), w_value, b_value, nullptr}, 1,
                                       graph.unique_name(first.name + "_merged"));
    product->domain = "anvil";
    product->opset = first.opset;
    product->attrs = first.attrs;
    ir::SymShape dims = first.input(0)->type.dims();
    dims.back() = ir::Dim::known(n_total);
    product->output(0)->type = ir::Type::tensor(DType::kFloat32, dims);

    // The Split writes the products' own output values, so their names and consumers stay.
    std::vector<ir::Value*> outputs;
    for (ir::Node* n : nodes) outputs.push_back(n->output(0));
    Tensor sizes(DType::kInt64, {static_cast<int64_t>(widths.size())});
    std::copy(widths.begin(), widths.end(), sizes.data<int64_t>());
    std::vector<ir::Value*> split_inputs{product->output(0)};
    const int opset = graph.opsets.count("") ? graph.opsets.at("") : 17;
    if (opset >= 13) split_inputs.push_back(graph.add_constant(graph.unique_name(first.name + "_split"), std::move(sizes)));
    ir::Node* split = graph.add_node_with_outputs("Split", split_inputs, outputs, graph.unique_name(first.name + "_split"));
    split->attrs.set("axis", int64_t{-1});
    if (opset < 13) split->attrs.set("split", widths);
    for (ir::Node* n : nodes) n->dead = true;
  }
};

}  // namespace

std::unique_ptr<Pass> make_fuse_shared_input_matmuls() { return std::make_unique<FuseSharedInputMatMuls>(); }

}  // namespace anvil::passes
