// Common-subexpression elimination: a node that repeats an earlier one (same
// op, opset, attributes and inputs) is dropped and its readers take the
// earlier node's outputs; integer and bool constants equal in type and bytes
// become one value first, so that nodes reading copies of one compare equal.
//
// Exporters repeat work per layer: each of a decoder's layers slices its own
// copy of the causal-mask buffer with the same shape arithmetic, and each
// computes the sequence length from the same input.
//
// Left alone: nodes that draw random numbers (a second draw must differ),
// every Dropout (training mode draws), nodes with subgraphs, nodes whose
// outputs are graph outputs (their names must stay), float constants (maybe
// weights), constants that are graph inputs (a caller may feed them) or
// outputs. Constants are hashed in full and compared byte for byte only where
// their dtype, shape and sampled bytes agree, so that large ones (maybe
// mapped from external data) are not read in full.
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

// FNV-1a, eight bytes at a time, over bytes [from, to) of a tensor.
uint64_t bytes_hash(const Tensor& t, size_t from, size_t to, uint64_t h = 1469598103934665603ull) {
  const auto* bytes = static_cast<const unsigned char*>(t.raw());
  size_t i = from;
  for (uint64_t word; i + 8 <= to; i += 8) {
    std::memcpy(&word, bytes + i, 8);
    h = (h ^ word) * 1099511628211ull;
  }
  for (; i < to; ++i) h = (h ^ bytes[i]) * 1099511628211ull;
  return h;
}

// A tensor's first and last 4 KiB: a large one (maybe mapped from external
// data) is hashed in full only when another of its dtype and shape agrees
// with it there.
uint64_t sampled_hash(const Tensor& t) {
  constexpr size_t kSample = 4096;
  const size_t n = t.nbytes();
  if (n <= 2 * kSample) return bytes_hash(t, 0, n);
  return bytes_hash(t, n - kSample, n, bytes_hash(t, 0, kSample));
}

// Attribute names, the integers among their values and the bytes of their
// tensors: nodes that differ only there (Gathers of one shape by index,
// Slices of one input, Constants) fall in different buckets, so a model of
// many such nodes is not compared pair by pair.
size_t attributes_hash(const ir::Attributes& attrs) {
  size_t h = 0;
  for (const auto& [name, value] : attrs.all()) {
    h = h * 131u ^ std::hash<std::string>{}(name);
    if (const auto* i = std::get_if<int64_t>(&value)) h = h * 1000003u ^ std::hash<int64_t>{}(*i);
    if (const auto* v = std::get_if<std::vector<int64_t>>(&value))
      for (int64_t i : *v) h = h * 1000003u ^ std::hash<int64_t>{}(i);
    if (const auto* t = std::get_if<Tensor>(&value))
      if (!t->is_sequence() && !t->empty() && t->dtype() != DType::kString)
        h = h * 1000003u ^ static_cast<size_t>(bytes_hash(*t, 0, t->nbytes()));
  }
  return h;
}

size_t node_hash(const ir::Node& n) {
  size_t h = std::hash<std::string>{}(n.op_type) ^ (std::hash<std::string>{}(n.domain) << 1);
  for (const ir::Value* in : n.inputs) h = h * 1000003u ^ std::hash<const ir::Value*>{}(in);
  return (h ^ attributes_hash(n.attrs)) * 31u + n.outputs.size();
}

// Integer and bool constants only: float ones may be weights, and a model
// written by `anvil optimize` may be trained, where weights equal at their
// initialization (zero biases, a BatchNorm's ones) must stay apart.
bool mergeable_constant(const ir::Value& v) {
  if (!v.is_constant() || v.is_graph_input || v.is_graph_output || v.is_capture) return false;
  const Tensor& t = *v.constant;
  return !t.is_sequence() && !t.empty() && t.dtype() != DType::kString && !dtype_is_float(t.dtype());
}

// The graph's readers of each value, built once per run: rewiring through
// Graph::replace_uses scans every node, once per merge.
class Readers {
 public:
  explicit Readers(const ir::Graph& graph) : readers_(graph.consumers()) {}
  bool read(const ir::Value* v) const {
    auto it = readers_.find(v);
    return it != readers_.end() && !it->second.empty();
  }
  // Every reader of `from` (none a graph output: the callers skip those) reads `to`.
  void rewire(ir::Value* from, ir::Value* to) {
    auto it = readers_.find(from);
    if (it == readers_.end()) return;
    std::vector<ir::Node*> moved = std::move(it->second);
    readers_.erase(it);
    for (ir::Node* n : moved)
      for (ir::Value*& in : n->inputs)
        if (in == from) in = to;
    auto& kept = readers_[to];
    kept.insert(kept.end(), moved.begin(), moved.end());
  }

 private:
  std::map<const ir::Value*, std::vector<ir::Node*>> readers_;
};

// Readers of a constant equal to an earlier one read the earlier one.
bool merge_constants(ir::Graph& graph, Readers& readers) {
  std::map<std::pair<DType, Shape>, std::vector<ir::Value*>> by_type;
  for (const auto& v : graph.values())
    if (mergeable_constant(*v) && readers.read(v.get()))
      by_type[{v->constant->dtype(), v->constant->shape()}].push_back(v.get());
  bool changed = false;
  std::unordered_map<const ir::Value*, uint64_t> full;  // whole-tensor hashes, computed once where samples collide
  auto full_hash = [&](const ir::Value* v) {
    auto [it, added] = full.try_emplace(v, 0);
    if (added) it->second = bytes_hash(*v->constant, 0, v->constant->nbytes());
    return it->second;
  };
  for (const auto& [type, values] : by_type) {
    if (values.size() < 2) continue;
    std::unordered_map<uint64_t, std::vector<ir::Value*>> seen;
    for (ir::Value* v : values) {
      auto& bucket = seen[sampled_hash(*v->constant)];
      ir::Value* twin = nullptr;
      for (ir::Value* c : bucket)
        if (full_hash(c) == full_hash(v) && same_tensor(*c->constant, *v->constant)) {
          twin = c;
          break;
        }
      if (!twin) {
        bucket.push_back(v);
        continue;
      }
      readers.rewire(v, twin);
      changed = true;
    }
  }
  return changed;
}

class EliminateCommonSubexpressions : public Pass {
 public:
  std::string name() const override { return "eliminate_common_subexpressions"; }
  bool run(ir::Graph& graph) override {
    Readers readers(graph);
    bool changed = merge_constants(graph, readers);
    std::unordered_map<size_t, std::vector<ir::Node*>> seen;
    for (const auto& n : graph.nodes()) {  // in topological order: a repeat's inputs are already merged
      if (!may_merge(*n)) continue;
      auto& bucket = seen[node_hash(*n)];
      ir::Node* twin = nullptr;
      for (ir::Node* earlier : bucket)
        if (same_node(*earlier, *n)) {
          twin = earlier;
          break;
        }
      if (!twin) {
        bucket.push_back(n.get());
        continue;
      }
      if (has_graph_output(*n)) continue;
      for (size_t i = 0; i < n->outputs.size(); ++i)
        if (n->outputs[i]) readers.rewire(n->outputs[i], twin->outputs[i]);
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
