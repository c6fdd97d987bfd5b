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
#include <cstring>
#include <map>
#include <numeric>
#include <string>
#include <tuple>
#include <vector>

#include "core/pages.h"
#include "passes/match.h"
#include "passes/pipeline.h"

namespace anvil::passes {

namespace {

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
  if (!is_anvil_op(&n, "FusedMatMul") || !a || !is_float_constant(w) || a->dtype() != DType::kFloat32) return false;
  if (w->constant->rank() != 2 || n.input(3) || n.attrs.get_int("transA", 0) || n.attrs.get_int("transB", 0))
    return false;
  if (!a->type.has_shape() || a->type.rank() < 2 || !n.output(0)) return false;
  const ir::Value* bias = n.input(2);
  return !bias || (is_float_constant(bias) && bias->constant->numel() == w->constant->shape()[1]);
}

// The attributes that must agree for nodes to share one product (the
// activation's), its parameters by their exact bits.
std::string activation_key(const ir::Node& n) {
  auto bits = [&](const char* name) {
    const float f = n.attrs.get_float(name, 0.f);
    uint32_t u;
    std::memcpy(&u, &f, sizeof u);
    return std::to_string(u);
  };
  return n.attrs.get_string("activation", "") + "/" + bits("activation_alpha") + "/" + bits("activation_beta");
}

// Each product's N, the columns of its weights.
std::vector<int64_t> widths_of(const std::vector<ir::Node*>& nodes) {
  std::vector<int64_t> widths;
  for (const ir::Node* n : nodes) widths.push_back(n->input(1)->constant->shape()[1]);
  return widths;
}

class FuseSharedInputMatMuls : public Pass {
 public:
  std::string name() const override { return "fuse_shared_input_matmuls"; }

  bool run(ir::Graph& graph) override {
    if (graph.default_opset() < 2) return false;  // Split has a kernel from opset 2
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
    merged_.clear();
    return changed;
  }

 private:
  std::map<std::vector<const ir::Value*>, std::pair<ir::Value*, ir::Value*>> merged_;

  // The merged weights and bias of a list of weight and bias values, made
  // once: layers that share their weights (ALBERT) share the merged ones too.
  std::pair<ir::Value*, ir::Value*> merged_constants(ir::Graph& graph, const std::vector<ir::Node*>& nodes) {
    std::vector<const ir::Value*> key;
    for (const ir::Node* n : nodes) key.insert(key.end(), {n->input(1), n->input(2)});
    auto it = merged_.find(key);
    if (it != merged_.end()) return it->second;
    return merged_[key] = make_merged_constants(graph, nodes);
  }

  static std::pair<ir::Value*, ir::Value*> make_merged_constants(ir::Graph& graph, const std::vector<ir::Node*>& nodes) {
    const ir::Node& first = *nodes[0];
    const int64_t k = first.input(1)->constant->shape()[0];
    const std::vector<int64_t> widths = widths_of(nodes);
    const int64_t n_total = std::accumulate(widths.begin(), widths.end(), int64_t{0});
    Tensor weights = Tensor::uninitialized(DType::kFloat32, {k, n_total});  // every column is copied below
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
    return {w_value, b_value};
  }

  void merge(ir::Graph& graph, const std::vector<ir::Node*>& nodes) {
    ir::Node& first = *nodes[0];
    const std::vector<int64_t> widths = widths_of(nodes);
    const int64_t n_total = std::accumulate(widths.begin(), widths.end(), int64_t{0});
    const auto [w_value, b_value] = merged_constants(graph, nodes);
    ir::Node* product = graph.add_node("FusedMatMul", {first.input(0), w_value, b_value, nullptr}, 1,
                                       graph.unique_name(first.name + "_merged"));
    product->domain = "anvil";
    product->opset = first.opset;
    product->attrs = first.attrs;
    ir::SymShape dims = first.input(0)->type.dims();
    const auto last_axis = static_cast<int64_t>(dims.size()) - 1;  // Split takes negative axes only from opset 11
    dims.back() = ir::Dim::known(n_total);
    product->output(0)->type = ir::Type::tensor(DType::kFloat32, dims);

    // The Split writes the products' own output values, so their names and consumers stay.
    std::vector<ir::Value*> outputs;
    for (ir::Node* n : nodes) outputs.push_back(n->output(0));
    std::vector<ir::Value*> split_inputs{product->output(0)};
    const int opset = graph.default_opset();
    if (opset >= 13) split_inputs.push_back(int64_constant(graph, first.name + "_split", widths));
    ir::Node* split = graph.add_node_with_outputs("Split", split_inputs, outputs, graph.unique_name(first.name + "_split"));
    split->attrs.set("axis", last_axis);
    if (opset < 13) split->attrs.set("split", widths);
    for (ir::Node* n : nodes) n->dead = true;
    // The originals' pages go now, not when dead code drops them after the
    // round: else every layer's Q, K and V weights are held twice at once
    // (BERT-base: 85 MB at the session's peak).
    for (ir::Node* n : nodes) drop_unread_constant(graph, n->input(1));
  }

  // Drops the pages of constant `v` when no live node reads it, it is not a
  // graph output or input (an input's default may be written out) and no
  // tensor but its value holds its bytes (a caller's weights given to
  // Session::from_graph are never touched).
  static void drop_unread_constant(const ir::Graph& graph, const ir::Value* v) {
    if (!v || !v->is_constant() || v->is_graph_output || v->is_graph_input || v->constant->use_count() != 1) return;
    if (use_count(graph, v) == 0) drop_inner_pages(v->constant->raw(), v->constant->nbytes());
  }
};

}  // namespace

std::unique_ptr<Pass> make_fuse_shared_input_matmuls() { return std::make_unique<FuseSharedInputMatMuls>(); }

}  // namespace anvil::passes
