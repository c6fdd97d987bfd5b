// Op schemas and type/shape inference, owned by the IR layer.
//
// A schema describes one op over a range of its ONNX versions: the dtypes each
// input takes, the attributes with their defaults, and an inference function
// that computes the output types from the input types. Dims stay symbolic:
// a BERT encoder's `batch` and `sequence` reach its output, and small integer
// tensors computed from shapes (Shape -> Gather -> Concat -> Reshape) are
// tracked as symbolic values, so the Reshape's output dims are known too.
//
//   ANVIL_SCHEMA(OpSchema("Relu").inputs({kFloats | kSignedInts}).infer(same_as_input(0)));
//   ir::infer_types(graph);   // after import: refines every value's type
//
// Output shapes that depend on data (NonZero, a Reshape fed by a graph input)
// get unknown dims here and are sized at run time by the planner.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "anvil/error.h"
#include "core/check.h"
#include "core/dtype_set.h"
#include "ir/graph.h"

namespace anvil::ir {

// One element of a small integer tensor tracked through inference (a Reshape
// target, Slice bounds): a number, which may be negative, or a symbolic dim.
struct SymInt {
  std::optional<int64_t> number;
  Dim dim;  // when not a number

  static SymInt of(int64_t n) { return {n, Dim::known(n >= 0 ? n : 0)}; }
  static SymInt of(const Dim& d) { return d.is_known() ? of(d.value) : SymInt{std::nullopt, d}; }
  bool is_number() const { return number.has_value(); }
  // As a dimension: a symbol, a known size, or unknown for a negative number.
  Dim as_dim() const { return number ? (*number >= 0 ? Dim::known(*number) : Dim::unknown()) : dim; }
};
using SymValues = std::vector<SymInt>;

// The values when every one is a known number.
std::optional<std::vector<int64_t>> numbers_of(const std::optional<SymValues>& values);
// Small tensors only: shapes, their elements, Reshape targets (a file may
// chain Concats of a Shape to billions of elements).
constexpr size_t kMaxTrackedValues = 64;

class InferContext;
using InferFn = std::function<void(InferContext&)>;

struct AttrSpec {
  std::string name;
  std::optional<AttrValue> default_value;  // nullopt: required
};

class OpSchema {
 public:
  explicit OpSchema(std::string op_type, std::string domain = "") : op_(std::move(op_type)), domain_(std::move(domain)) {}

  // ONNX versions (since_version) the schema describes; default: all.
  OpSchema& versions(int min_version, int max_version);
  // Dtype masks per input (the last one covers further inputs); empty: any.
  OpSchema& inputs(std::vector<unsigned> masks);
  OpSchema& attr(std::string name, AttrValue default_value);
  OpSchema& required_attr(std::string name);
  OpSchema& infer(InferFn fn);
  // Inputs that share one of ONNX's type variables (a "T" of the spec): the
  // present ones must have one dtype, checked wherever types are inferred
  // (at import and when a plan meets the real types), since kernels read
  // them as one C++ type. names[i] names inputs[i] in the error.
  OpSchema& same_types(std::vector<size_t> inputs, std::vector<std::string> names);

  const std::string& op_type() const { return op_; }
  const std::string& domain() const { return domain_; }
  int min_version() const { return min_version_; }
  int max_version() const { return max_version_; }
  const std::vector<unsigned>& input_masks() const { return masks_; }
  const std::vector<AttrSpec>& attrs() const { return attrs_; }
  const InferFn& infer_fn() const { return infer_; }
  struct TypeGroup {
    std::vector<size_t> inputs;
    std::vector<std::string> names;
  };
  const std::vector<TypeGroup>& type_groups() const { return type_groups_; }

 private:
  std::string op_, domain_;
  int min_version_ = 0, max_version_ = 1 << 30;
  std::vector<unsigned> masks_;
  std::vector<AttrSpec> attrs_;
  InferFn infer_;
  std::vector<TypeGroup> type_groups_;
};

class SchemaRegistry {
 public:
  static SchemaRegistry& global();
  void add(OpSchema schema);
  // The schema of the node's op at its opset, or nullptr.
  const OpSchema* find(const Node& node) const;

 private:
  std::map<std::pair<std::string, std::string>, std::vector<OpSchema>> schemas_;  // (domain, op)
};

struct SchemaRegistrar {
  explicit SchemaRegistrar(OpSchema schema) { SchemaRegistry::global().add(std::move(schema)); }
};
#define ANVIL_SCHEMA_CONCAT_INNER(a, b) a##b
#define ANVIL_SCHEMA_CONCAT(a, b) ANVIL_SCHEMA_CONCAT_INNER(a, b)
#define ANVIL_SCHEMA(...) \
  static ::anvil::ir::SchemaRegistrar ANVIL_SCHEMA_CONCAT(anvil_schema_, __COUNTER__)(__VA_ARGS__)

// Thrown by InferContext when an input's shape (or rank) is not known: the
// outputs then keep what the model declared.
struct ShapeUnknown {};

// What an inference function sees of one node.
class InferContext {
 public:
  InferContext(const Node& node, const OpSchema& schema, std::vector<const Type*> inputs,
               std::vector<std::optional<SymValues>> values)
      : node_(node), schema_(schema), inputs_(std::move(inputs)), values_(std::move(values)),
        outputs_(node.outputs.size()), output_values_(node.outputs.size()), values_read_(inputs_.size(), false) {}

  const Node& node() const { return node_; }
  int opset() const { return node_.opset; }
  size_t num_inputs() const { return inputs_.size(); }
  bool has_input(size_t i) const { return i < inputs_.size() && inputs_[i]; }
  // Throws kInvalidModel when a required input is missing, ShapeUnknown when its type is.
  const Type& input(size_t i) const;
  DType dtype(size_t i) const { return input(i).dtype(); }
  // The input's dims; throws ShapeUnknown when its rank is unknown.
  const SymShape& dims(size_t i) const;
  int rank(size_t i) const { return static_cast<int>(dims(i).size()); }
  // The input's value as dims, when it is a constant integer tensor of rank
  // <= 1 or computed from shapes (Shape, Gather, Concat...); nullopt otherwise.
  // For decisions about the output types: the read is recorded (values_read()),
  // so that a kernel prepared at run time is reused only for the same values.
  const std::optional<SymValues>& values(size_t i) const;
  // Like values(), but only when every element is a known number.
  std::optional<std::vector<int64_t>> known_values(size_t i) const;
  // The input's value only to compute output values from (a Concat of shape
  // values): not recorded, as the output types do not depend on it.
  const std::optional<SymValues>& forwarded_values(size_t i) const;
  const std::vector<bool>& values_read() const { return values_read_; }

  // Attributes, with the schema's default when the node lacks one.
  int64_t attr_int(const std::string& name) const;
  float attr_float(const std::string& name) const;
  std::string attr_string(const std::string& name) const;
  std::vector<int64_t> attr_ints(const std::string& name) const;
  bool has_attr(const std::string& name) const { return node_.attrs.has(name); }

  size_t num_outputs() const { return outputs_.size(); }
  void set_output(size_t o, Type type);
  void set_output_values(size_t o, SymValues values);
  const std::vector<std::optional<Type>>& outputs() const { return outputs_; }
  const std::vector<std::optional<SymValues>>& output_values() const { return output_values_; }

  // A normalized axis in [0, rank); throws kInvalidModel naming the node (always for rank 0).
  int64_t axis(int64_t axis, int64_t rank) const;

  // A node the op cannot have (attributes, ranks the op never takes): kInvalidModel.
  template <typename... Args>
  [[noreturn]] void fail(fmt::format_string<Args...> f, Args&&... args) const {
    throw Error(ErrorKind::kInvalidModel, node_.describe() + ": " + fmt::format(f, std::forward<Args>(args)...));
  }
  // A node valid in ONNX that Anvil cannot run (a type it lacks): kUnsupported.
  [[noreturn]] void fail_unsupported(const std::string& message) const {
    throw Error(ErrorKind::kUnsupported, node_.describe() + ": " + message);
  }
  // Inputs whose shapes or values do not fit each other or the attributes:
  // the model's fault while typing the graph from its declared types, the
  // caller's (kInvalidArgument) when planning for the inputs given.
  template <typename... Args>
  [[noreturn]] void fail_input(fmt::format_string<Args...> f, Args&&... args) const {
    throw Error(input_error_kind_, node_.describe() + ": " + fmt::format(f, std::forward<Args>(args)...));
  }
  void set_input_error_kind(ErrorKind kind) { input_error_kind_ = kind; }

 private:
  const AttrValue* default_of(const std::string& name) const;

  const Node& node_;
  const OpSchema& schema_;
  std::vector<const Type*> inputs_;
  std::vector<std::optional<SymValues>> values_;
  std::vector<std::optional<Type>> outputs_;
  std::vector<std::optional<SymValues>> output_values_;
  mutable std::vector<bool> values_read_;
  ErrorKind input_error_kind_ = ErrorKind::kInvalidModel;
};

// A constant integer tensor of rank <= 1 (at most 64 elements) as values.
std::optional<SymValues> values_of(const Tensor& t);

// Numpy broadcasting of symbolic shapes; throws kInvalidModel on known dims that disagree.
SymShape broadcast(const InferContext& ctx, const SymShape& a, const SymShape& b);

// Infers the type of every value of `graph` (and its subgraphs) in node order,
// merging with the types the model declared: an unknown dim becomes the
// inferred one; known dims that disagree, or dtypes, are kInvalidModel.
// Nodes without a schema, and inputs whose shapes are unknown, leave their
// outputs as declared. Returns the number of nodes inferred.
size_t infer_types(Graph& graph);

// infer_types again after passes have rewritten the graph (constant folding
// can settle values import could not see): a node whose inference fails
// keeps its outputs' types, and the others go on.
size_t refine_types(Graph& graph);

// What holds at every run of the top-level graph: the types inferred from
// the graph inputs' declared types (which each run's inputs are checked
// against) and the constants alone, and the values inference tracks through
// small integer tensors (shapes, their elements, Reshape targets). The types
// the model declares for other values are not read: they may be stale (a
// batch dim made symbolic on the inputs only). Symbols of one name are taken
// to be one length in every input. Values without a schema, or made by
// control flow, are absent (unknown). The graph is left unchanged
// (passes/fold_shapes.cc, passes/simplify_reshapes.cc).
struct InferredFacts {
  std::map<const Value*, Type> types;
  std::map<const Value*, SymValues> values;
  // `v`'s inferred type; an undefined Type when unknown.
  const Type& type_of(const Value* v) const;
};
InferredFacts infer_run_time_facts(const Graph& graph);

// What the node's schema computes for concrete inputs when a plan is built.
struct NodeInference {
  std::vector<std::optional<Type>> outputs;  // nullopt or not static: the kernel sizes it (NonZero)
  std::vector<bool> values_read;             // inputs whose values the output types depend on
};

// The ONNX control-flow ops (If, Loop, Scan, SequenceMap): the only ones that
// hold subgraphs, and with the sequence ops the only ones given sequences.
bool is_control_flow_op(const std::string& op_type);

// The output types the node's schema computes for these inputs (an undefined
// Type for an omitted one) and the values of `constants` (nullptr: not known).
// Inputs that do not fit fail with kInvalidArgument. nullopt: no schema.
std::optional<NodeInference> infer_node_outputs(const Node& node, const std::vector<Type>& inputs,
                                                const std::vector<const Tensor*>& constants);

}  // namespace anvil::ir
