// Common-subexpression elimination: a node that repeats an earlier one (same
// op, opset, attributes and inputs) is dropped and its readers take the
// earlier node's outputs; small constants equal in type and bytes become one
// value first, so that nodes reading copies of a constant compare equal.
//
// Exporters repeat work per layer: each of a decoder's layers slices its own
// copy of the causal-mask buffer with the same shape arithmetic, and each
// computes the sequence length from the same input.
//
// Left alone: nodes that draw random numbers (a second draw must differ),
// every Dropout (training mode draws), nodes with subgraphs, nodes whose
// outputs are graph outputs (their names must stay), constants that are graph
// inputs (a caller may feed them) or outputs. Constants are compared byte for
// byte only where their dtype, shape and sampled bytes agree, so that large
// weights (maybe mapped from external data) are not read in full.
#include <cstring>
#include <functional>
#include <map>
#include <unordered_map>

#include "passes/pipeline.h"

namespace anvil::passes {

namespace {

bool same_tensor(const Tensor& a, const Tensor& b) {
  if (a.is_sequence() || b.is_sequence() || a.empty() || b.empty()) return false;
  if (a.dtype() != b.dtype() || a.shape() != b.shape() || a.dtype() == DType::kString) return false;
  return a.nbytes() == 0 || std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

// Attribute values compared by their bits (a NaN attribute equals itself,
// 0.0 and -0.0 differ); subgraphs never equal (nodes with them are skipped).
struct SameAttribute {
  template <typename T, typename U>
  bool operator()(const T&, const U&) const { return false; }
  template <typename T>
  bool operator()(const T& a, const T& b) const {
    if constexpr (std::is_same_v<T, float>) return std::memcmp(&a, &b, sizeof a) == 0;
    else if constexpr (std::is_same_v<T, std::vector<float>>)
      return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
    else if constexpr (std::is_same_v<T, Tensor>) return same_tensor(a, b);
    else if constexpr (std::is_same_v<T, ir::GraphPtr> || std::is_same_v<T, std::vector<ir::GraphPtr>>) return false;
    else return a == b;
  }
};

bool same_attributes(const ir::Attributes& a, const ir::Attributes& b) {
  const auto& x = a.all();
  const auto& y = b.all();
  if (x.size() != y.size()) return false;
  for (auto i = x.begin(), j = y.begin(); i != x.end(); ++i, ++j)
    if (i->first != j->first || !std::visit(SameAttribute{}, i->second, j->second)) return false;
  return true;
}

bool has_graph_output(const ir::Node& n) {
  for (const ir::Value* o : n.outputs)
    if (o && o->is_graph_output) return true;
  return false;
}

bool may_merge(const ir::Node& n) {
  if (n.dead || n.outputs.empty() || n.has_subgraphs() || ir::is_random_op(n)) return false;
  return n.op_type.find("Dropout") == std::string::npos;  // TrainingDropout too: each draws its own mask
}

bool same_node(const ir::Node& a, const ir::Node& b) {
  if (a.op_type != b.op_type || a.domain != b.domain || a.opset != b.opset || a.inputs != b.inputs ||
      a.num_implicit_inputs != b.num_implicit_inputs || a.outputs.size() != b.outputs.size())
    return false;
  for (size_t i = 0; i < a.outputs.size(); ++i)
    if ((a.outputs[i] == nullptr) != (b.outputs[i] == nullptr)) return false;
  return same_attributes(a.attrs, b.attrs);
}

size_t node_hash(const ir::Node& n) {
  size_t h = std::hash<std::string>{}(n.op_type) ^ (std::hash<std::string>{}(n.domain) << 1);
  for (const ir::Value* in : n.inputs) h = h * 1000003u ^ std::hash<const ir::Value*>{}(in);
  return h * 31u + n.outputs.size();
}

// FNV-1a over a tensor's first and last 4 KiB: equal tensors hash equal, and
// a large one (maybe memory-mapped external data) is read in full only when
// another of its dtype and shape agrees with it there.
size_t sampled_hash(const Tensor& t) {
  constexpr size_t kSample = 4096;
  uint64_t h = 1469598103934665603ull;
  auto mix = [&](const unsigned char* p, size_t n) {
    for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  };
  const auto* bytes = static_cast<const unsigned char*>(t.raw());
  const size_t n = t.nbytes();
  if (n <= 2 * kSample) {
    mix(bytes, n);
  } else {
    mix(bytes, kSample);
    mix(bytes + n - kSample, kSample);
  }
  return static_cast<size_t>(h);
}

bool mergeable_constant(const ir::Value& v) {
  if (!v.is_constant() || v.is_graph_input || v.is_graph_output || v.is_capture) return false;
  const Tensor& t = *v.constant;
  return !t.is_sequence() && !t.empty() && t.dtype() != DType::kString;
}

// Readers of a constant equal to an earlier one read the earlier one.
bool merge_constants(ir::Graph& graph) {
  std::map<std::pair<DType, Shape>, std::vector<ir::Value*>> by_type;
  for (const auto& v : graph.values())
    if (mergeable_constant(*v)) by_type[{v->constant->dtype(), v->constant->shape()}].push_back(v.get());
  bool changed = false;
  for (const auto& [type, values] : by_type) {
    if (values.size() < 2) continue;
    std::unordered_map<size_t, std::vector<ir::Value*>> seen;
    for (ir::Value* v : values) {
      auto& bucket = seen[sampled_hash(*v->constant)];
      ir::Value* twin = nullptr;
      for (ir::Value* c : bucket)
        if (same_tensor(*c->constant, *v->constant)) twin = c;
      if (!twin) {
        bucket.push_back(v);
      } else if (use_count(graph, v) > 0) {
        graph.replace_uses(v, twin);
        changed = true;
      }
    }
  }
  return changed;
}

class EliminateCommonSubexpressions : public Pass {
 public:
  std::string name() const override { return "eliminate_common_subexpressions"; }
  bool run(ir::Graph& graph) override {
    bool changed = merge_constants(graph);
    std::unordered_map<size_t, std::vector<ir::Node*>> seen;
    for (const auto& n : graph.nodes()) {  // in topological order: a repeat's inputs are already merged
      if (!may_merge(*n)) continue;
      auto& bucket = seen[node_hash(*n)];
      ir::Node* twin = nullptr;
      for (ir::Node* earlier : bucket)
        if (same_node(*earlier, *n)) twin = earlier;
      if (!twin || has_graph_output(*n)) {
        if (!twin) bucket.push_back(n.get());
        continue;
      }
      for (size_t i = 0; i < n->outputs.size(); ++i)
        if (n->outputs[i]) graph.replace_uses(n->outputs[i], twin->outputs[i]);
      n->dead = true;
      changed = true;
    }
    return changed;
  }
};

}  // namespace

std::unique_ptr<Pass> make_eliminate_common_subexpressions() {
  return std::make_unique<EliminateCommonSubexpressions>();
}

}  // namespace anvil::passes
