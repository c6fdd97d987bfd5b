// ir::Graph — the one intermediate representation of every Anvil path.
//
// A Graph owns Values (typed edges, possibly constant) and Nodes (an op with
// attributes, input and output Values). Nodes are kept in topological order
// by the importer and builder; passes that rewrite call compact() at the end.
//
//   ir::Graph g;
//   ir::Value* x = g.add_input("x", DType::kFloat32, {1, 3, 8, 8});
//   ir::Value* w = g.add_constant("w", weights_tensor);
//   ir::Node* conv = g.add_node("Conv", {x, w}, 1);
//   conv->attrs.set("pads", std::vector<int64_t>{1, 1, 1, 1});
//   g.add_output(conv->output(0));
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "anvil/tensor.h"
#include "ir/attribute.h"
#include "ir/type.h"

namespace anvil::ir {

struct Node;

struct Value {
  std::string name;
  Type type;  // undefined until import or inference sets it
  std::optional<Tensor> constant;
  Node* producer = nullptr;
  bool is_graph_input = false;
  bool is_graph_output = false;
  // A subgraph's stand-in for a value of an enclosing graph (see Graph::captures).
  bool is_capture = false;

  bool is_constant() const { return constant.has_value(); }
  DType dtype() const { return type.dtype(); }
  // Every dimension known: a tensor type the passes may reason about.
  bool is_static() const { return type.is_static(); }
};

struct Node {
  std::string op_type;
  std::string domain;  // "" for the default ONNX domain
  std::string name;
  int opset = 0;  // opset version of the node's domain in the model
  // The op's inputs (nullptr marks an omitted optional one), followed by its
  // implicit inputs: the values of this graph that its subgraphs read. Being
  // ordinary inputs, they are seen by every pass, dead-code and lifetime analysis.
  std::vector<Value*> inputs;
  std::vector<Value*> outputs;  // nullptr marks an omitted optional output
  Attributes attrs;
  bool dead = false;
  size_t num_implicit_inputs = 0;

  Value* input(size_t i) const { return i < inputs.size() ? inputs[i] : nullptr; }
  Value* output(size_t i) const { return i < outputs.size() ? outputs[i] : nullptr; }
  size_t num_inputs() const { return inputs.size(); }
  size_t num_explicit_inputs() const { return inputs.size() - num_implicit_inputs; }
  bool has_subgraphs() const { return !attrs.subgraphs().empty(); }
  // "Conv 'conv1'" — for error messages.
  std::string describe() const;
};

// RandomNormal, RandomUniform(Like), Bernoulli, Multinomial: never folded,
// whatever their inputs, since each run must draw new values.
bool is_random_op(const Node& node);

class Graph {
 public:
  Graph() = default;
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;

  Value* add_value(const std::string& name);
  Value* add_input(const std::string& name, DType dtype, Shape shape);
  Value* add_constant(const std::string& name, Tensor tensor);
  void add_output(Value* v);
  // Turns constant `v` into a graph input (appended to inputs()), keeping its
  // name, type and uses; its tensor is moved out and returned.
  Tensor make_input(Value* v);
  // Adds a node with `num_outputs` fresh output values named after the node.
  Node* add_node(const std::string& op_type, std::vector<Value*> inputs, int num_outputs,
                 const std::string& name = "");
  // Adds a node whose outputs already exist.
  Node* add_node_with_outputs(const std::string& op_type, std::vector<Value*> inputs,
                              std::vector<Value*> outputs, const std::string& name = "");

  Value* find_value(const std::string& name) const;
  std::string unique_name(const std::string& base);

  const std::vector<Value*>& inputs() const { return inputs_; }
  const std::vector<Value*>& outputs() const { return outputs_; }
  std::vector<Value*>& mutable_outputs() { return outputs_; }
  const std::vector<std::unique_ptr<Node>>& nodes() const { return nodes_; }
  const std::vector<std::unique_ptr<Value>>& values() const { return values_; }

  // Consumers of every value, computed on demand (passes change the graph).
  std::map<const Value*, std::vector<Node*>> consumers() const;
  // Rewires every use of `from` (node inputs and graph outputs) to `to`.
  void replace_uses(Value* from, Value* to);
  // Drops dead nodes and values nothing refers to; keeps topological order.
  void compact();
  // Re-sorts nodes topologically; throws kInvalidModel on a cycle.
  void topological_sort();

  std::map<std::string, int> opsets;  // domain -> version
  // The default domain's opset, which add_node gives new nodes (17 when the graph names none).
  int default_opset() const;
  std::string name;

  // Subgraphs: the enclosing graph and the node whose attribute holds this one.
  Graph* parent = nullptr;
  Node* owner = nullptr;
  // Outer-scope reads: capture k is the stand-in value (is_capture) that stands
  // for the owner's implicit input `implicit_index`.
  struct Capture {
    Value* inner;
    size_t implicit_index;
  };
  std::vector<Capture> captures;
  // Adds a capture of `outer` (a value visible in the parent graph) named `name`:
  // the owner gains `outer` as an implicit input unless it reads it already.
  Value* add_capture(const std::string& name, Value* outer);

 private:
  std::vector<std::unique_ptr<Value>> values_;
  std::vector<std::unique_ptr<Node>> nodes_;
  std::vector<Value*> inputs_;
  std::vector<Value*> outputs_;
  std::map<std::string, Value*> by_name_;
  int name_counter_ = 0;
};

}  // namespace anvil::ir
