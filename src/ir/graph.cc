#include "ir/graph.h"

#include <algorithm>
#include <set>

#include "core/check.h"

namespace anvil::ir {

bool is_random_op(const Node& node) {
  static const std::set<std::string> kRandom = {"RandomNormal", "RandomNormalLike", "RandomUniform",
                                                "RandomUniformLike", "Bernoulli", "Multinomial"};
  if (!node.domain.empty()) return false;
  // Dropout draws when training_mode (input 2, opset 12+) is given and true.
  return kRandom.count(node.op_type) || (node.op_type == "Dropout" && node.opset >= 12 && node.input(2) != nullptr);
}

std::string Node::describe() const {
  std::string s = domain.empty() ? op_type : domain + "." + op_type;
  if (!name.empty()) s += " '" + name + "'";
  return s;
}

Value* Graph::add_value(const std::string& name) {
  auto v = std::make_unique<Value>();
  v->name = name.empty() ? unique_name("v") : name;
  Value* p = v.get();
  values_.push_back(std::move(v));
  by_name_[p->name] = p;
  return p;
}

Value* Graph::add_input(const std::string& name, DType dtype, Shape shape) {
  Value* v = add_value(name);
  v->type = Type::tensor(dtype, shape);
  v->is_graph_input = true;
  inputs_.push_back(v);
  return v;
}

Tensor Graph::make_input(Value* v) {
  ANVIL_INTERNAL_CHECK(v->is_constant());
  Tensor t = std::move(*v->constant);
  v->constant.reset();
  v->is_graph_input = true;
  inputs_.push_back(v);
  return t;
}

Value* Graph::add_constant(const std::string& name, Tensor tensor) {
  Value* v = add_value(name.empty() ? unique_name("const") : name);
  v->type = Type::tensor(tensor.dtype(), tensor.shape());
  v->constant = std::move(tensor);
  return v;
}

void Graph::add_output(Value* v) {
  v->is_graph_output = true;
  outputs_.push_back(v);
}

Node* Graph::add_node(const std::string& op_type, std::vector<Value*> inputs, int num_outputs,
                      const std::string& name) {
  std::string node_name = name.empty() ? unique_name(op_type) : name;
  std::vector<Value*> outs;
  for (int i = 0; i < num_outputs; ++i)
    outs.push_back(add_value(num_outputs == 1 ? unique_name(node_name + ":out")
                                              : unique_name(node_name + ":out" + std::to_string(i))));
  return add_node_with_outputs(op_type, std::move(inputs), std::move(outs), node_name);
}

int Graph::default_opset() const {
  auto it = opsets.find("");
  return it == opsets.end() ? 17 : it->second;
}

Node* Graph::add_node_with_outputs(const std::string& op_type, std::vector<Value*> inputs,
                                   std::vector<Value*> outputs, const std::string& name) {
  auto n = std::make_unique<Node>();
  n->op_type = op_type;
  n->name = name;
  n->inputs = std::move(inputs);
  n->outputs = std::move(outputs);
  n->opset = default_opset();
  for (Value* o : n->outputs)
    if (o) o->producer = n.get();
  nodes_.push_back(std::move(n));
  return nodes_.back().get();
}

Value* Graph::add_capture(const std::string& name, Value* outer) {
  ANVIL_INTERNAL_CHECK(owner != nullptr);
  Node* node = owner;
  size_t first = node->num_explicit_inputs(), index = node->num_implicit_inputs;
  for (size_t k = 0; k < node->num_implicit_inputs; ++k)
    if (node->inputs[first + k] == outer) index = k;
  if (index == node->num_implicit_inputs) {
    node->inputs.push_back(outer);
    ++node->num_implicit_inputs;
  }
  Value* inner = add_value(name);
  inner->type = outer->type;
  inner->is_capture = true;
  captures.push_back({inner, index});
  return inner;
}

Value* Graph::find_value(const std::string& name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : it->second;
}

std::string Graph::unique_name(const std::string& base) {
  std::string n = base;
  while (by_name_.count(n)) n = base + "_" + std::to_string(++name_counter_);
  return n;
}

std::map<const Value*, std::vector<Node*>> Graph::consumers() const {
  std::map<const Value*, std::vector<Node*>> m;
  for (const auto& n : nodes_) {
    if (n->dead) continue;
    for (Value* v : n->inputs)
      if (v) m[v].push_back(n.get());
  }
  return m;
}

void Graph::replace_uses(Value* from, Value* to) {
  for (auto& n : nodes_)
    for (Value*& v : n->inputs)
      if (v == from) v = to;
  for (Value*& v : outputs_) {
    if (v != from) continue;
    // A graph output keeps its name: the replacement takes it over.
    v = to;
    to->is_graph_output = true;
  }
}

void Graph::compact() {
  nodes_.erase(std::remove_if(nodes_.begin(), nodes_.end(), [](const auto& n) { return n->dead; }),
               nodes_.end());
  std::set<const Value*> used(inputs_.begin(), inputs_.end());
  used.insert(outputs_.begin(), outputs_.end());
  for (const Capture& c : captures) used.insert(c.inner);
  for (const auto& n : nodes_) {
    used.insert(n->inputs.begin(), n->inputs.end());
    used.insert(n->outputs.begin(), n->outputs.end());
  }
  std::vector<std::unique_ptr<Value>> kept;
  for (auto& v : values_) {
    if (used.count(v.get())) {
      kept.push_back(std::move(v));
    } else {
      by_name_.erase(v->name);
    }
  }
  values_ = std::move(kept);
}

void Graph::topological_sort() {
  std::set<const Value*> ready(inputs_.begin(), inputs_.end());
  for (const auto& v : values_)
    if (v->is_constant() || !v->producer) ready.insert(v.get());
  std::vector<std::unique_ptr<Node>> sorted;
  std::vector<std::unique_ptr<Node>> pending = std::move(nodes_);
  while (!pending.empty()) {
    size_t before = pending.size();
    std::vector<std::unique_ptr<Node>> rest;
    for (auto& n : pending) {
      bool ok = std::all_of(n->inputs.begin(), n->inputs.end(),
                            [&](const Value* v) { return !v || ready.count(v); });
      if (ok) {
        for (Value* o : n->outputs)
          if (o) ready.insert(o);
        sorted.push_back(std::move(n));
      } else {
        rest.push_back(std::move(n));
      }
    }
    pending = std::move(rest);
    if (pending.size() == before) {
      nodes_ = std::move(sorted);
      for (auto& n : pending) nodes_.push_back(std::move(n));
      fail(ErrorKind::kInvalidModel, "graph has a cycle or an input that nothing produces (at node {})",
           nodes_[nodes_.size() - before]->describe());
    }
  }
  nodes_ = std::move(sorted);
}

}  // namespace anvil::ir
