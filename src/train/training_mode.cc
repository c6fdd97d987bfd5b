#include "train/training_mode.h"

#include "core/check.h"

namespace anvil::train {

namespace {

constexpr int kOpset = 17;  // the semantics the emitted nodes are written for

class Emitter {
 public:
  Emitter(ir::Graph& g, const std::string& prefix) : g_(g), prefix_(prefix) {}

  ir::Value* op(const std::string& type, std::vector<ir::Value*> inputs, ir::Attributes attrs = {}) {
    ir::Node* n = g_.add_node(type, std::move(inputs), 1, g_.unique_name(prefix_ + "_" + type));
    n->opset = kOpset;
    n->attrs = std::move(attrs);
    return n->outputs[0];
  }
  ir::Value* ints(std::vector<int64_t> v) {
    Tensor t(DType::kInt64, {static_cast<int64_t>(v.size())});
    std::copy(v.begin(), v.end(), t.data<int64_t>());
    return g_.add_constant(g_.unique_name(prefix_ + "_ints"), std::move(t));
  }
  ir::Value* scalar(float v) {
    Tensor t(DType::kFloat32, {});
    *t.data<float>() = v;
    return g_.add_constant(g_.unique_name(prefix_ + "_scalar"), std::move(t));
  }
  ir::Value* mean_over(ir::Value* x, const std::vector<int64_t>& axes) {
    ir::Attributes a;
    a.set("axes", axes);
    a.set("keepdims", int64_t{1});
    return op("ReduceMean", {x}, a);
  }

 private:
  ir::Graph& g_;
  std::string prefix_;
};

// y = (x - mean_b) / sqrt(var_b + eps) * scale + bias, over every axis but 1.
RunningStatistics rewrite_batch_norm(ir::Graph& g, ir::Node& bn) {
  ir::Value* x = bn.input(0);
  ANVIL_CHECK(x->type.has_shape() && x->type.rank() >= 2, ErrorKind::kUnsupported,
              "{}: training needs the input's rank", bn.describe());
  for (size_t i = 3; i <= 4; ++i)
    ANVIL_CHECK(bn.input(i) && bn.input(i)->is_constant(), ErrorKind::kUnsupported,
                "{}: training needs the running mean and variance as initializers", bn.describe());
  Emitter e(g, bn.name.empty() ? "bn" : bn.name);
  const int rank = x->type.rank();
  std::vector<int64_t> axes = {0}, channel_shape(static_cast<size_t>(rank), 1);
  for (int a = 2; a < rank; ++a) axes.push_back(a);
  channel_shape[1] = -1;
  const float eps = bn.attrs.get_float("epsilon", 1e-5f);

  ir::Value* mean = e.mean_over(x, axes);
  ir::Value* centered = e.op("Sub", {x, mean});
  ir::Value* var = e.mean_over(e.op("Mul", {centered, centered}), axes);
  ir::Value* inv_std = e.op("Div", {e.scalar(1.f), e.op("Sqrt", {e.op("Add", {var, e.scalar(eps)})})});
  ir::Value* shape = e.ints(channel_shape);
  ir::Value* scaled = e.op("Mul", {e.op("Mul", {centered, inv_std}), e.op("Reshape", {bn.input(1), shape})});
  ir::Value* y = e.op("Add", {scaled, e.op("Reshape", {bn.input(2), shape})});
  g.replace_uses(bn.output(0), y);
  bn.dead = true;

  // The statistics handed out: the mean, and the variance made unbiased with
  // n = (elements / channels) of this batch.
  ir::Attributes to_float;
  to_float.set("to", int64_t{1});
  ir::Value* n = e.op("Div", {e.op("Cast", {e.op("Size", {x})}, to_float),
                              e.op("Cast", {e.op("Size", {mean})}, to_float)});
  ir::Value* unbiased = e.op("Mul", {var, e.op("Div", {n, e.op("Sub", {n, e.scalar(1.f)})})});
  RunningStatistics stats;
  stats.mean = bn.input(3)->name;
  stats.var = bn.input(4)->name;
  stats.batch_mean = e.op("Reshape", {mean, e.ints({-1})})->name;
  stats.batch_var = e.op("Reshape", {unbiased, e.ints({-1})})->name;
  stats.momentum = bn.attrs.get_float("momentum", 0.9f);
  stats.initial_mean = bn.input(3)->constant->clone();
  stats.initial_var = bn.input(4)->constant->clone();
  return stats;
}

// Dropout(x[, ratio]) -> anvil.TrainingDropout(x, step) with its mask output
// and a seed of its own.
void rewrite_dropout(ir::Graph& g, ir::Node& dropout, uint64_t seed, ir::Value* step) {
  float ratio = dropout.attrs.get_float("ratio", 0.5f);  // before opset 12: an attribute
  if (dropout.opset >= 12 && dropout.input(1)) {
    const ir::Value* r = dropout.input(1);
    ANVIL_CHECK(r->is_constant() && r->constant->numel() == 1, ErrorKind::kUnsupported,
                "{}: training needs a constant dropout ratio", dropout.describe());
    ratio = static_cast<float>(element_as_double(*r->constant, 0));
  }
  ANVIL_CHECK(ratio >= 0 && ratio < 1, ErrorKind::kInvalidModel, "{}: the ratio {} is not in [0, 1)",
              dropout.describe(), ratio);
  ir::Node* n = g.add_node("TrainingDropout", {dropout.input(0), step}, 2,
                           g.unique_name(dropout.name.empty() ? "TrainingDropout" : dropout.name));
  n->domain = "anvil";
  n->opset = 1;
  n->attrs.set("ratio", ratio);
  n->attrs.set("seed", static_cast<int64_t>(seed));
  g.replace_uses(dropout.output(0), n->outputs[0]);
  if (dropout.output(1)) g.replace_uses(dropout.output(1), n->outputs[1]);
  dropout.dead = true;
}

}  // namespace

TrainingMode to_training_mode(ir::Graph& graph, uint64_t seed) {
  TrainingMode mode;
  std::vector<ir::Node*> batch_norms, dropouts;
  for (const auto& n : graph.nodes()) {
    if (!n->domain.empty()) continue;
    if (n->op_type == "BatchNormalization") batch_norms.push_back(n.get());
    if (n->op_type == "Dropout") dropouts.push_back(n.get());
  }
  for (ir::Node* bn : batch_norms) mode.batch_norms.push_back(rewrite_batch_norm(graph, *bn));
  if (!dropouts.empty()) {
    ir::Value* step = graph.add_input(graph.unique_name("train_step"), DType::kInt64, {});
    mode.step_input = step->name;
    for (ir::Node* d : dropouts) rewrite_dropout(graph, *d, seed * 0x9E3779B97F4A7C15ULL + ++mode.dropouts, step);
  }
  // The replaced nodes go; the statistics stay, though nothing reads them
  // yet (the trainer asks for them as outputs).
  std::vector<ir::Value*>& outputs = graph.mutable_outputs();
  const size_t kept = outputs.size();
  for (const RunningStatistics& s : mode.batch_norms) {
    outputs.push_back(graph.find_value(s.batch_mean));
    outputs.push_back(graph.find_value(s.batch_var));
  }
  graph.compact();
  outputs.resize(kept);
  graph.topological_sort();
  return mode;
}

}  // namespace anvil::train
