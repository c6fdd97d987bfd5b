#include "train/autodiff.h"

#include <algorithm>
#include <map>
#include <set>

#include <fmt/ranges.h>

#include "core/check.h"
#include "ir/schema.h"
#include "train/gradient_rule.h"

namespace anvil::train {

namespace {

constexpr int kRuleOpset = 17;

std::map<std::string, GradientRule>& rules() {
  static std::map<std::string, GradientRule> table;
  return table;
}

}  // namespace

RegisterGradient::RegisterGradient(const char* op_type, GradientRule rule) { rules()[op_type] = rule; }

const GradientRule* find_gradient_rule(const std::string& op_type) {
  auto it = rules().find(op_type);
  return it == rules().end() ? nullptr : &it->second;
}

std::vector<std::string> differentiable_ops() {
  std::vector<std::string> names;
  for (const auto& r : rules()) names.push_back(r.first);
  return names;
}

GradBuilder::GradBuilder(ir::Graph& graph, const ir::Node& node, std::vector<ir::Value*> output_grads,
                         std::vector<bool> wanted, std::map<const ir::Value*, ir::Value*>& grads)
    : graph_(graph), node_(node), output_grads_(std::move(output_grads)), wanted_(std::move(wanted)), grads_(grads) {}

void GradBuilder::grad(size_t i, ir::Value* g) {
  if (!wants(i) || !g) return;
  ir::Value* input = node_.input(i);
  auto it = grads_.find(input);
  grads_[input] = it == grads_.end() ? g : op("Add", {it->second, g});
}

std::vector<ir::Value*> GradBuilder::op_n(const std::string& op_type, std::vector<ir::Value*> inputs, int outputs,
                                          ir::Attributes attrs) {
  ir::Node* n = graph_.add_node(op_type, std::move(inputs), outputs, graph_.unique_name("grad_" + op_type));
  n->opset = kRuleOpset;
  n->attrs = std::move(attrs);
  return n->outputs;
}

ir::Value* GradBuilder::op(const std::string& op_type, std::vector<ir::Value*> inputs, ir::Attributes attrs) {
  return op_n(op_type, std::move(inputs), 1, std::move(attrs))[0];
}

ir::Value* GradBuilder::anvil_op(const std::string& op_type, std::vector<ir::Value*> inputs, ir::Attributes attrs) {
  return anvil_op_n(op_type, std::move(inputs), 1, std::move(attrs))[0];
}

std::vector<ir::Value*> GradBuilder::anvil_op_n(const std::string& op_type, std::vector<ir::Value*> inputs,
                                                int outputs, ir::Attributes attrs) {
  ir::Node* n = op_n(op_type, std::move(inputs), outputs, std::move(attrs))[0]->producer;
  n->domain = "anvil";
  n->opset = 1;
  return n->outputs;
}

const Tensor* GradBuilder::constant_of(const ir::Value* v) {
  if (!v) return nullptr;
  if (v->is_constant()) return &*v->constant;
  if (v->producer && v->producer->op_type == "Constant" && v->producer->domain.empty()) {
    return v->producer->attrs.get_tensor("value");
  }
  return nullptr;
}

ir::Value* GradBuilder::ints(std::vector<int64_t> values) {
  Tensor t(DType::kInt64, {static_cast<int64_t>(values.size())});
  std::copy(values.begin(), values.end(), t.data<int64_t>());
  return graph_.add_constant(graph_.unique_name("grad_ints"), std::move(t));
}

Tensor filled(DType dtype, const Shape& shape, double value) {
  ANVIL_CHECK(dtype == DType::kFloat32 || dtype == DType::kFloat64, ErrorKind::kInternal,
              "filled() makes float32 or float64 tensors, not {}", dtype_name(dtype));
  Tensor t(dtype, shape);
  for (int64_t i = 0; i < t.numel(); ++i) {
    if (dtype == DType::kFloat64)
      t.data<double>()[i] = value;
    else
      t.data<float>()[i] = static_cast<float>(value);
  }
  return t;
}

ir::Value* GradBuilder::constant(Tensor value) {
  return graph_.add_constant(graph_.unique_name("grad_const"), std::move(value));
}

ir::Value* GradBuilder::scalar(float value, DType dtype) {
  return graph_.add_constant(graph_.unique_name("grad_scalar"), filled(dtype, {}, value));
}

ir::Value* GradBuilder::unbroadcast(ir::Value* g, const ir::Value* like, const ir::Value* shaped_as) {
  const ir::Type& in = like->type;
  const ir::Type& out = shaped_as->type;
  ANVIL_CHECK(in.has_shape() && out.has_shape(), ErrorKind::kUnsupported,
              "{}: the gradient needs the ranks of '{}' and '{}'", node_.describe(), like->name, shaped_as->name);
  const int r = in.rank(), rank = out.rank();
  std::vector<int64_t> axes;
  bool ambiguous = false;
  for (int a = 0; a < rank - r; ++a) axes.push_back(a);
  for (int i = 0; i < r; ++i) {
    const ir::Dim& di = in.dims()[static_cast<size_t>(i)];
    const ir::Dim& dout = out.dims()[static_cast<size_t>(rank - r + i)];
    // Equal only when both are known or both the same named symbol: two unknown dims may differ.
    const bool same = (di.is_known() || di.is_symbol()) && di == dout;
    if (same || (di.is_known() && di.value != 1)) continue;
    if (di.is_known() && di.value == 1) {
      if (!(dout.is_known() && dout.value == 1)) axes.push_back(rank - r + i);
      continue;
    }
    ambiguous = true;  // unknown or different symbols: decided at run time
  }
  if (ambiguous) return unbroadcast_at_run_time(g, like, r, rank);
  if (axes.empty()) return g;
  ir::Attributes keep;
  keep.set("keepdims", int64_t{1});
  ir::Value* summed = op("ReduceSum", {g, ints(axes)}, keep);
  if (r == rank) return summed;
  return op("Reshape", {summed, op("Shape", {const_cast<ir::Value*>(like)})});
}

// The reduced axes computed from the shapes at run time: those where `like`
// (padded with leading 1s to the gradient's rank) is 1 and the gradient is not.
ir::Value* GradBuilder::unbroadcast_at_run_time(ir::Value* g, const ir::Value* like, int rank_like, int rank) {
  ir::Value* like_shape = op("Shape", {const_cast<ir::Value*>(like)});
  if (rank > rank_like) {
    std::vector<int64_t> ones(static_cast<size_t>(rank - rank_like), 1);
    ir::Attributes axis0;
    axis0.set("axis", int64_t{0});
    like_shape = op("Concat", {ints(ones), like_shape}, axis0);
  }
  ir::Value* one = ints({1});
  ir::Value* broadcast = op("And", {op("Equal", {like_shape, one}), op("Not", {op("Equal", {op("Shape", {g}), one})})});
  ir::Value* axes = op("Reshape", {op("NonZero", {broadcast}), ints({-1})});
  ir::Attributes reduce;
  reduce.set("keepdims", int64_t{1});
  reduce.set("noop_with_empty_axes", int64_t{1});
  return op("Reshape", {op("ReduceSum", {g, axes}, reduce), op("Shape", {const_cast<ir::Value*>(like)})});
}

GradientGraph build_gradient_graph(std::unique_ptr<ir::Graph> forward, const std::string& loss_name,
                                   const std::vector<std::string>& parameters,
                                   const std::vector<std::string>& extra_outputs) {
  ir::Graph& g = *forward;
  ir::Value* loss = g.find_value(loss_name);
  ANVIL_CHECK(loss, ErrorKind::kInvalidArgument, "the model has no value named '{}' for the loss", loss_name);
  GradientGraph result;
  std::set<const ir::Value*> params;
  for (const std::string& name : parameters) {
    ir::Value* v = g.find_value(name);
    ANVIL_CHECK(v && v->is_constant(), ErrorKind::kInvalidArgument, "parameter '{}' is not a constant of the model",
                name);
    ANVIL_CHECK(v->dtype() == DType::kFloat32, ErrorKind::kInvalidArgument,
                "parameter '{}' is {}; only float32 parameters are trained", name, dtype_name(v->dtype()));
    ANVIL_CHECK(params.insert(v).second, ErrorKind::kInvalidArgument, "parameter '{}' is listed twice", name);
    result.parameters.push_back(name);
    result.initial_values.push_back(g.make_input(v));
  }
  ir::infer_types(g);
  ANVIL_CHECK(loss->type.is_tensor() && loss->type.has_shape() && loss->dtype() == DType::kFloat32,
              ErrorKind::kInvalidArgument, "the loss '{}' must be a float32 tensor of known shape", loss_name);
  for (const ir::Dim& d : loss->type.dims())
    ANVIL_CHECK(d.is_known() && d.value == 1, ErrorKind::kInvalidArgument,
                "the loss '{}' must have one element, its shape is {}", loss_name, loss->type.str());

  // Values that depend on a parameter, and nodes on a path from a parameter to the loss.
  std::set<const ir::Value*> depends(params.begin(), params.end());
  std::vector<ir::Node*> order;
  for (const auto& n : g.nodes()) {
    if (n->dead) continue;
    order.push_back(n.get());
    const bool any = std::any_of(n->inputs.begin(), n->inputs.end(), [&](ir::Value* v) { return depends.count(v); });
    if (any)
      for (ir::Value* o : n->outputs)
        if (o) depends.insert(o);
  }
  ANVIL_CHECK(depends.count(loss), ErrorKind::kInvalidArgument, "the loss '{}' depends on no parameter", loss_name);

  std::map<const ir::Value*, ir::Value*> grads;
  grads[loss] = g.add_constant(g.unique_name("grad_seed"), filled(DType::kFloat32, loss->type.shape_or_minus_one(), 1));
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    ir::Node* n = *it;
    std::vector<ir::Value*> output_grads;
    bool flows = false;
    for (ir::Value* o : n->outputs) {
      auto found = o ? grads.find(o) : grads.end();
      output_grads.push_back(found == grads.end() ? nullptr : found->second);
      flows |= found != grads.end();
    }
    std::vector<bool> wanted;
    bool wants_any = false;
    for (ir::Value* in : n->inputs) {
      wanted.push_back(in && depends.count(in) && in->dtype() == DType::kFloat32);
      wants_any |= wanted.back();
    }
    if (!flows || !wants_any) continue;
    // Rules of Anvil's own ops are registered as "anvil.Op".
    const std::string key = n->domain.empty() ? n->op_type : n->domain + "." + n->op_type;
    const GradientRule* rule = find_gradient_rule(key);
    ANVIL_CHECK(rule, ErrorKind::kUnsupported, "{}: Anvil has no gradient for {} (it has: {})", n->describe(),
                key, fmt::join(differentiable_ops(), ", "));
    GradBuilder builder(g, *n, std::move(output_grads), std::move(wanted), grads);
    (*rule)(builder);
  }

  for (ir::Value* o : g.outputs()) o->is_graph_output = false;
  g.mutable_outputs().clear();
  g.add_output(loss);
  for (const std::string& name : extra_outputs) {
    ir::Value* v = g.find_value(name);
    ANVIL_CHECK(v && !v->is_constant(), ErrorKind::kInvalidArgument, "the model has no computed value named '{}'",
                name);
    g.add_output(v);
  }
  for (size_t k = 0; k < result.parameters.size(); ++k) {
    ir::Value* p = g.find_value(result.parameters[k]);
    auto it = grads.find(p);
    ANVIL_CHECK(it != grads.end(), ErrorKind::kInvalidArgument,
                "no gradient reaches parameter '{}' (the loss does not depend on it, or only through ops without "
                "gradients such as Shape or comparisons)", result.parameters[k]);
    const std::string name = g.unique_name(result.parameters[k] + "_grad");
    ir::Value* out = g.add_value(name);
    ir::Node* id = g.add_node_with_outputs("Identity", {it->second}, {out}, name);
    id->opset = kRuleOpset;
    g.add_output(out);
    result.gradient_outputs.push_back(name);
  }
  ir::infer_types(g);
  result.graph = std::move(forward);
  return result;
}

}  // namespace anvil::train
