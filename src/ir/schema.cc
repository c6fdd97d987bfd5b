#include "ir/schema.h"

#include <algorithm>

#include "core/check.h"
#include "ir/dim_math.h"
#include "ir/op_versions.h"

namespace anvil::ir {

OpSchema& OpSchema::versions(int min_version, int max_version) {
  min_version_ = min_version;
  max_version_ = max_version;
  return *this;
}

OpSchema& OpSchema::inputs(std::vector<unsigned> masks) {
  masks_ = std::move(masks);
  return *this;
}

OpSchema& OpSchema::attr(std::string name, AttrValue default_value) {
  attrs_.push_back({std::move(name), std::move(default_value)});
  return *this;
}

OpSchema& OpSchema::required_attr(std::string name) {
  attrs_.push_back({std::move(name), std::nullopt});
  return *this;
}

OpSchema& OpSchema::infer(InferFn fn) {
  infer_ = std::move(fn);
  return *this;
}

OpSchema& OpSchema::same_types(std::vector<size_t> inputs, std::vector<std::string> names) {
  ANVIL_CHECK(inputs.size() == names.size() && inputs.size() > 1, ErrorKind::kInternal,
              "{}: a type group names each of its two or more inputs", op_);
  type_groups_.push_back({std::move(inputs), std::move(names)});
  return *this;
}

SchemaRegistry& SchemaRegistry::global() {
  static SchemaRegistry r;
  return r;
}

void SchemaRegistry::add(OpSchema schema) {
  schemas_[{schema.domain(), schema.op_type()}].push_back(std::move(schema));
}

const OpSchema* SchemaRegistry::find(const Node& node) const {
  auto it = schemas_.find({node.domain, node.op_type});
  if (it == schemas_.end()) return nullptr;
  const int version = node.domain.empty() ? onnx_op_version(node.op_type, node.opset) : node.opset;
  for (const OpSchema& s : it->second)
    if (version >= s.min_version() && version <= s.max_version()) return &s;
  return nullptr;
}

// --- InferContext ---------------------------------------------------------------------------------------------------

const Type& InferContext::input(size_t i) const {
  if (!has_input(i)) fail("input {} is required but missing", i);
  if (!inputs_[i]->defined()) throw ShapeUnknown{};
  return *inputs_[i];
}

const SymShape& InferContext::dims(size_t i) const {
  const Type& t = input(i);
  if (!t.is_tensor() || !t.has_shape()) throw ShapeUnknown{};
  return t.dims();
}

const std::optional<SymValues>& InferContext::forwarded_values(size_t i) const {
  static const std::optional<SymValues> none;
  return i < values_.size() ? values_[i] : none;
}

const std::optional<SymValues>& InferContext::values(size_t i) const {
  const auto& v = forwarded_values(i);
  if (v) values_read_[i] = true;
  return v;
}

std::optional<std::vector<int64_t>> InferContext::known_values(size_t i) const { return numbers_of(values(i)); }

std::optional<std::vector<int64_t>> numbers_of(const std::optional<SymValues>& v) {
  if (!v) return std::nullopt;
  std::vector<int64_t> out;
  for (const SymInt& x : *v) {
    if (!x.is_number()) return std::nullopt;
    out.push_back(*x.number);
  }
  return out;
}

const AttrValue* InferContext::default_of(const std::string& name) const {
  for (const AttrSpec& a : schema_.attrs())
    if (a.name == name && a.default_value) return &*a.default_value;
  return nullptr;
}

int64_t InferContext::attr_int(const std::string& name) const {
  const AttrValue* d = default_of(name);
  return node_.attrs.get_int(name, d ? std::get<int64_t>(*d) : 0);
}

float InferContext::attr_float(const std::string& name) const {
  const AttrValue* d = default_of(name);
  return node_.attrs.get_float(name, d ? std::get<float>(*d) : 0.f);
}

std::string InferContext::attr_string(const std::string& name) const {
  const AttrValue* d = default_of(name);
  return node_.attrs.get_string(name, d ? std::get<std::string>(*d) : "");
}

std::vector<int64_t> InferContext::attr_ints(const std::string& name) const {
  const AttrValue* d = default_of(name);
  return node_.attrs.get_ints(name, d ? std::get<std::vector<int64_t>>(*d) : std::vector<int64_t>{});
}

void InferContext::set_output(size_t o, Type type) {
  if (o < outputs_.size()) outputs_[o] = std::move(type);
}

void InferContext::set_output_values(size_t o, SymValues values) {
  if (o < output_values_.size() && values.size() <= kMaxTrackedValues) output_values_[o] = std::move(values);
}

int64_t InferContext::axis(int64_t axis, int64_t rank) const {
  if (axis < -rank || axis >= rank) fail_input("axis {} is out of range for rank {}", axis, rank);
  return axis < 0 ? axis + rank : axis;
}

SymShape broadcast(const InferContext& ctx, const SymShape& a, const SymShape& b) {
  const size_t rank = std::max(a.size(), b.size());
  SymShape out(rank);
  for (size_t i = 0; i < rank; ++i) {
    const Dim one = Dim::known(1);
    const Dim& x = i + a.size() >= rank ? a[i + a.size() - rank] : one;
    const Dim& y = i + b.size() >= rank ? b[i + b.size() - rank] : one;
    if (x == y) out[i] = x;
    else if (is_min_of(x, y)) out[i] = y;
    else if (is_min_of(y, x)) out[i] = x;
    else if (x.is_known() && x.value == 1) out[i] = y;
    else if (y.is_known() && y.value == 1) out[i] = x;
    else if (x.is_known() && y.is_known())
      ctx.fail_input("shapes {} and {} cannot be broadcast", dims_str(a), dims_str(b));
    else if (x.is_known()) out[i] = x;  // the symbol must be x (or 1)
    else if (y.is_known()) out[i] = y;
    else out[i] = Dim::unknown();  // two symbols: either may be 1
  }
  return out;
}

// --- the driver -----------------------------------------------------------------------------------------------------

std::optional<SymValues> values_of(const Tensor& t) {
  if (t.shape().size() > 1 || t.numel() > static_cast<int64_t>(kMaxTrackedValues)) return std::nullopt;
  SymValues v;
  for (int64_t i = 0; i < t.numel(); ++i) {
    if (t.dtype() == DType::kInt64) v.push_back(SymInt::of(t.data<int64_t>()[i]));
    else if (t.dtype() == DType::kInt32) v.push_back(SymInt::of(t.data<int32_t>()[i]));
    else return std::nullopt;
  }
  return v;
}

namespace {

// Refines `declared` with `inferred`; throws on a contradiction.
Type merge(const Node& node, const Value& v, const Type& declared, const Type& inferred) {
  if (!declared.defined() || !declared.is_tensor() || !inferred.is_tensor()) return inferred.defined() ? inferred : declared;
  auto contradiction = [&] {
    fail(ErrorKind::kInvalidModel, "{}: output '{}' is declared {} but the op computes {}", node.describe(), v.name,
         declared.str(), inferred.str());
  };
  if (declared.dtype() != DType::kUndefined && inferred.dtype() != DType::kUndefined &&
      declared.dtype() != inferred.dtype())
    contradiction();
  const DType dtype = declared.dtype() != DType::kUndefined ? declared.dtype() : inferred.dtype();
  if (!inferred.has_shape()) return declared.has_shape() ? Type::tensor(dtype, declared.dims()) : Type::tensor(dtype);
  if (!declared.has_shape()) return Type::tensor(dtype, inferred.dims());
  if (declared.rank() != inferred.rank()) contradiction();
  SymShape dims = declared.dims();
  for (size_t i = 0; i < dims.size(); ++i) {
    const Dim& d = inferred.dims()[i];
    if (dims[i].is_known() && d.is_known() && dims[i] != d) contradiction();
    if (!dims[i].is_known() && (d.is_known() || !dims[i].is_symbol())) dims[i] = d;
  }
  return Type::tensor(dtype, std::move(dims));
}

// The ops that take sequences or optionals as inputs. Every other op reads
// tensors: a sequence (which holds no bytes of its own) fed to one would
// reach its kernel with the schema's shape checks skipped (dims() of a
// sequence is unknown).
bool takes_sequences(const Node& node) {
  static const char* const kOps[] = {"ConcatFromSequence", "Identity", "Optional", "OptionalGetElement",
                                     "OptionalHasElement", "SequenceAt", "SequenceConstruct", "SequenceEmpty",
                                     "SequenceErase", "SequenceInsert", "SequenceLength", "SplitToSequence"};
  return node.domain.empty() &&
         (is_control_flow_op(node.op_type) ||
          std::any_of(std::begin(kOps), std::end(kOps), [&](const char* op) { return node.op_type == op; }));
}

void check_tensor_inputs(const Node& node, const std::vector<const Type*>& inputs, ErrorKind kind) {
  if (takes_sequences(node)) return;
  for (size_t i = 0; i < inputs.size() && i < node.num_explicit_inputs(); ++i) {
    const Type* t = inputs[i];
    if (t && t->defined() && !t->is_tensor())
      fail(kind, "{}: input {} is a {}, but the op takes tensors", node.describe(), i,
           t->kind() == TypeKind::kSequence ? "sequence" : "optional");
  }
}

void check_input_dtypes(const Node& node, const OpSchema& schema, const std::vector<const Type*>& inputs) {
  const auto& masks = schema.input_masks();
  if (masks.empty()) return;
  for (size_t i = 0; i < inputs.size() && i < node.num_explicit_inputs(); ++i) {
    const Type* t = inputs[i];
    if (!t || !t->is_tensor() || t->dtype() == DType::kUndefined) continue;
    unsigned mask = masks[std::min(i, masks.size() - 1)];
    if (!dtype_in(t->dtype(), mask))
      fail(ErrorKind::kInvalidModel, "{}: input {} has type {}, but the op takes {}", node.describe(), i,
           dtype_name(t->dtype()), dtype_set_names(mask));
  }
}

// OpSchema::same_types: a kernel reads a group's inputs as one C++ type, so
// a file that gives them two (a float16 K beside a float32 Q in Attention,
// found by make fuzz) would have it read past a buffer's end.
void check_shared_dtypes(const Node& node, const OpSchema& schema, const std::vector<const Type*>& inputs,
                         ErrorKind kind = ErrorKind::kInvalidModel) {
  for (const OpSchema::TypeGroup& group : schema.type_groups()) {
    const Type* first = nullptr;
    const std::string* first_name = nullptr;
    for (size_t g = 0; g < group.inputs.size(); ++g) {
      const size_t i = group.inputs[g];
      if (i >= inputs.size() || i >= node.num_explicit_inputs()) continue;
      const Type* t = inputs[i];
      if (!t || !t->is_tensor() || t->dtype() == DType::kUndefined) continue;
      if (!first) {
        first = t;
        first_name = &group.names[g];
      } else if (t->dtype() != first->dtype()) {
        fail(kind, "{}: {} is {} but {} is {} (the op gives them one type)", node.describe(),
             group.names[g], dtype_name(t->dtype()), *first_name, dtype_name(first->dtype()));
      }
    }
  }
}

void check_required_attrs(const Node& node, const OpSchema& schema) {
  for (const AttrSpec& a : schema.attrs())
    if (!a.default_value && !node.attrs.has(a.name))
      fail(ErrorKind::kInvalidModel, "{}: required attribute '{}' is missing", node.describe(), a.name);
}

void run_inference(const OpSchema& schema, InferContext& ctx) {
  try {
    schema.infer_fn()(ctx);
  } catch (const ShapeUnknown&) {
    // Keep what inference set before it met the unknown shape (often the dtype).
  }
}

class Inferencer {
 public:
  explicit Inferencer(bool tolerant = false) : tolerant_(tolerant) {}

  size_t run(Graph& graph) {
    for (const auto& v : graph.values())
      if (v->is_constant())
        if (auto vals = values_of(*v->constant)) values_[v.get()] = std::move(*vals);
    // Subgraph captures take the type the enclosing graph gave the outer value.
    if (Node* owner = graph.owner)
      for (const auto& c : graph.captures) {
        const Value* outer = owner->input(owner->num_explicit_inputs() + c.implicit_index);
        if (outer && outer->type.defined()) c.inner->type = outer->type;
      }
    size_t inferred = 0;
    for (const auto& node : graph.nodes()) {
      if (node->dead) continue;
      for (Graph* sub : node->attrs.subgraphs()) inferred += run(*sub);
      if (!tolerant_) {
        inferred += infer_node(*node);
        continue;
      }
      try {
        inferred += infer_node(*node);
      } catch (const Error&) {
        // A type the rewritten graph cannot refine: kept as it was.
      }
    }
    return inferred;
  }

 private:
  bool infer_node(Node& node) {
    const OpSchema* schema = SchemaRegistry::global().find(node);
    if (!schema || !schema->infer_fn()) return false;
    std::vector<const Type*> inputs;
    std::vector<std::optional<SymValues>> values;
    for (const Value* v : node.inputs) {
      inputs.push_back(v ? &v->type : nullptr);
      auto it = v ? values_.find(v) : values_.end();
      values.push_back(it == values_.end() ? std::nullopt : std::optional<SymValues>(it->second));
    }
    check_input_dtypes(node, *schema, inputs);
    check_shared_dtypes(node, *schema, inputs);
    check_required_attrs(node, *schema);
    InferContext ctx(node, *schema, std::move(inputs), std::move(values));
    run_inference(*schema, ctx);
    for (size_t o = 0; o < node.outputs.size(); ++o) {
      Value* out = node.outputs[o];
      if (!out) continue;
      if (const auto& t = ctx.outputs()[o]) out->type = merge(node, *out, out->type, *t);
      if (const auto& v = ctx.output_values()[o]) values_[out] = *v;
    }
    return true;
  }

  bool tolerant_;
  std::map<const Value*, SymValues> values_;
};

// Inference from the graph inputs' declared types and the constants alone
// (infer_run_time_facts); it reads no other declared type and writes nothing.
class FactInferencer {
 public:
  InferredFacts run(const Graph& graph) {
    for (const Value* v : graph.inputs()) facts_.types[v] = v->type;
    for (const auto& v : graph.values()) {
      if (!v->is_constant()) continue;
      facts_.types[v.get()] = Type::tensor(v->constant->dtype(), v->constant->shape());
      if (auto vals = values_of(*v->constant)) facts_.values[v.get()] = std::move(*vals);
    }
    for (const auto& node : graph.nodes())
      if (!node->dead) infer_node(*node);
    return std::move(facts_);
  }

 private:
  void infer_node(const Node& node) {
    const OpSchema* schema = SchemaRegistry::global().find(node);
    if (!schema || !schema->infer_fn() || node.has_subgraphs()) return;  // outputs stay unknown
    static const Type unknown;
    std::vector<const Type*> inputs;
    std::vector<std::optional<SymValues>> values;
    for (const Value* v : node.inputs) {
      auto t = v ? facts_.types.find(v) : facts_.types.end();
      inputs.push_back(!v ? nullptr : t == facts_.types.end() ? &unknown : &t->second);  // nullptr: omitted
      auto it = v ? facts_.values.find(v) : facts_.values.end();
      values.push_back(it == facts_.values.end() ? std::nullopt : std::optional<SymValues>(it->second));
    }
    try {
      check_tensor_inputs(node, inputs, ErrorKind::kInvalidModel);
      check_input_dtypes(node, *schema, inputs);
      check_shared_dtypes(node, *schema, inputs);
      check_required_attrs(node, *schema);
      InferContext ctx(node, *schema, std::move(inputs), std::move(values));
      run_inference(*schema, ctx);
      for (size_t o = 0; o < node.outputs.size(); ++o) {
        const Value* out = node.outputs[o];
        if (!out) continue;
        if (const auto& t = ctx.outputs()[o]) facts_.types[out] = *t;
        if (const auto& v = ctx.output_values()[o]) facts_.values[out] = *v;
      }
    } catch (const Error&) {
      // A node these types do not fit (import reported it, or a run will): its outputs stay unknown.
    }
  }

  InferredFacts facts_;
};

}  // namespace

size_t infer_types(Graph& graph) { return Inferencer().run(graph); }

size_t refine_types(Graph& graph) { return Inferencer(/*tolerant=*/true).run(graph); }

const Type& InferredFacts::type_of(const Value* v) const {
  static const Type unknown;
  auto it = types.find(v);
  return it == types.end() ? unknown : it->second;
}

InferredFacts infer_run_time_facts(const Graph& graph) { return FactInferencer().run(graph); }

bool is_control_flow_op(const std::string& op_type) {
  return op_type == "If" || op_type == "Loop" || op_type == "Scan" || op_type == "SequenceMap";
}

std::optional<NodeInference> infer_node_outputs(const Node& node, const std::vector<Type>& inputs,
                                                const std::vector<const Tensor*>& constants) {
  const OpSchema* schema = SchemaRegistry::global().find(node);
  if (!schema || !schema->infer_fn() || node.has_subgraphs()) return std::nullopt;
  std::vector<const Type*> types;
  std::vector<std::optional<SymValues>> values;
  for (size_t i = 0; i < inputs.size(); ++i) {
    types.push_back(inputs[i].defined() ? &inputs[i] : nullptr);
    const Tensor* c = i < constants.size() ? constants[i] : nullptr;
    values.push_back(c ? values_of(*c) : std::nullopt);
  }
  // (import saw the declared types; a mismatch here comes from values the caller filled, e.g. a sequence's)
  check_tensor_inputs(node, types, ErrorKind::kInvalidArgument);
  check_shared_dtypes(node, *schema, types, ErrorKind::kInvalidArgument);
  InferContext ctx(node, *schema, std::move(types), std::move(values));
  ctx.set_input_error_kind(ErrorKind::kInvalidArgument);
  run_inference(*schema, ctx);
  return NodeInference{ctx.outputs(), ctx.values_read()};
}

}  // namespace anvil::ir
