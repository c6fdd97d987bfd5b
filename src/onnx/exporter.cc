#include "onnx/exporter.h"

#include <map>

#include <onnx/onnx_pb.h>

#include "core/check.h"
#include "onnx/anvil_domain.h"
#include "onnx/tensor_proto.h"

namespace anvil::onnx_io {

std::optional<AnvilDomainOp> anvil_domain_op(const std::string& op_type) {
  static const AnvilDomainOp kOps[] = {
      {"FusedConv", "anvil", 1}, {"FusedMatMul", "anvil", 1},      {"Gelu", "", 20},
      {"Attention", "", 23},     {"LayerNormalization", "", 17}, {"MaskedSoftmax", "anvil", 1}, {"ElementwiseChain", "anvil", 1},
      {"FusedConvDepthwise", "anvil", 1}, {"QkvAttention", "anvil", 1},
      {"Swish", "", 24},         {"FusedGemm", "anvil", 1},      {"HardSwish", "", 14},
      {"FusedBatchNorm", "anvil", 1},    {"SqueezeExcite", "anvil", 1},      {"ChannelShuffle", "anvil", 1},
      {"TokensToImage", "anvil", 1},     {"ImageToTokens", "anvil", 1},
      {"RMSNormalization", "", 23},      {"GroupNormalization", "", 21},
  };
  for (const AnvilDomainOp& op : kOps)
    if (op_type == op.op_type) return op;
  return std::nullopt;
}

namespace {

void type_to_proto(const ir::Type& t, onnx::TypeProto* p) {
  switch (t.kind()) {
    case ir::TypeKind::kSequence: type_to_proto(t.element(), p->mutable_sequence_type()->mutable_elem_type()); return;
    case ir::TypeKind::kOptional: type_to_proto(t.element(), p->mutable_optional_type()->mutable_elem_type()); return;
    case ir::TypeKind::kUndefined: return;
    case ir::TypeKind::kTensor: break;
  }
  auto* tt = p->mutable_tensor_type();
  tt->set_elem_type(dtype_to_onnx(t.dtype()));
  if (!t.has_shape()) return;
  auto* shape = tt->mutable_shape();
  for (const ir::Dim& d : t.dims()) {
    auto* dim = shape->add_dim();
    if (d.is_known()) dim->set_dim_value(d.value);
    else if (d.is_symbol()) dim->set_dim_param(d.symbol);
  }
}

class GraphExporter {
 public:
  explicit GraphExporter(const std::map<std::string, int>& opsets) : opsets_(opsets) {}

  bool uses_anvil_domain() const { return uses_anvil_domain_; }

  // `outer_names`: the names of the enclosing graphs' values a subgraph's captures stand for.
  void write(const ir::Graph& g, onnx::GraphProto* p, const std::map<const ir::Value*, std::string>& outer_names) {
    names_ = outer_names;
    for (const ir::Graph::Capture& c : g.captures) {
      const ir::Value* outer = g.owner->inputs[g.owner->num_explicit_inputs() + c.implicit_index];
      names_[c.inner] = name_of(outer);
    }
    p->set_name(g.name);
    for (const ir::Value* v : g.inputs()) value_info(v, p->add_input());
    for (const auto& v : g.values())
      if (v->is_constant()) tensor_to_proto(*v->constant, name_of(v.get()), p->add_initializer());
    for (const auto& n : g.nodes())
      if (!n->dead) node(*n, p->add_node());
    for (const ir::Value* v : g.outputs()) value_info(v, p->add_output());
  }

 private:
  std::string name_of(const ir::Value* v) {
    auto it = names_.find(v);
    return it != names_.end() ? it->second : v->name;
  }

  void value_info(const ir::Value* v, onnx::ValueInfoProto* p) {
    p->set_name(name_of(v));
    type_to_proto(v->type, p->mutable_type());
  }

  void node(const ir::Node& n, onnx::NodeProto* p) {
    p->set_op_type(n.op_type);
    p->set_name(n.name);
    p->set_domain(onnx_domain(n));
    for (size_t i = 0; i < n.num_explicit_inputs(); ++i) p->add_input(n.inputs[i] ? name_of(n.inputs[i]) : "");
    for (const ir::Value* o : n.outputs) p->add_output(o ? name_of(o) : "");
    for (const auto& [name, value] : n.attrs.all()) attribute(name, value, p->add_attribute());
  }

  std::string onnx_domain(const ir::Node& n) {
    auto model = opsets_.find(n.domain);
    const bool newer = n.domain.empty() && model != opsets_.end() && n.opset > model->second;
    if (n.domain != "anvil" && !newer) return n.domain;
    std::optional<AnvilDomainOp> op = anvil_domain_op(n.op_type);
    ANVIL_CHECK(op && op->domain == n.domain && (newer ? op->opset == n.opset : true), ErrorKind::kUnsupported,
                "{} (opset {}) cannot be written in a model of opset {}", n.describe(), n.opset,
                model == opsets_.end() ? 0 : model->second);
    uses_anvil_domain_ = true;
    return kAnvilOnnxDomain;
  }

  void attribute(const std::string& name, const ir::AttrValue& value, onnx::AttributeProto* p) {
    using A = onnx::AttributeProto;
    p->set_name(name);
    std::visit(
        [&](const auto& v) {
          using T = std::decay_t<decltype(v)>;
          if constexpr (std::is_same_v<T, int64_t>) {
            p->set_type(A::INT);
            p->set_i(v);
          } else if constexpr (std::is_same_v<T, float>) {
            p->set_type(A::FLOAT);
            p->set_f(v);
          } else if constexpr (std::is_same_v<T, std::string>) {
            p->set_type(A::STRING);
            p->set_s(v);
          } else if constexpr (std::is_same_v<T, std::vector<int64_t>>) {
            p->set_type(A::INTS);
            for (int64_t x : v) p->add_ints(x);
          } else if constexpr (std::is_same_v<T, std::vector<float>>) {
            p->set_type(A::FLOATS);
            for (float x : v) p->add_floats(x);
          } else if constexpr (std::is_same_v<T, std::vector<std::string>>) {
            p->set_type(A::STRINGS);
            for (const std::string& x : v) p->add_strings(x);
          } else if constexpr (std::is_same_v<T, Tensor>) {
            p->set_type(A::TENSOR);
            tensor_to_proto(v, "", p->mutable_t());
          } else if constexpr (std::is_same_v<T, ir::GraphPtr>) {
            p->set_type(A::GRAPH);
            subgraph(*v, p->mutable_g());
          } else if constexpr (std::is_same_v<T, std::vector<ir::GraphPtr>>) {
            p->set_type(A::GRAPHS);
            for (const ir::GraphPtr& g : v) subgraph(*g, p->add_graphs());
          } else {
            p->set_type(A::TYPE_PROTO);
            type_to_proto(v, p->mutable_tp());
          }
        },
        value);
  }

  void subgraph(const ir::Graph& g, onnx::GraphProto* p) {
    GraphExporter inner(opsets_);
    inner.write(g, p, names_);
    uses_anvil_domain_ |= inner.uses_anvil_domain_;
  }

  const std::map<std::string, int>& opsets_;
  std::map<const ir::Value*, std::string> names_;
  bool uses_anvil_domain_ = false;
};

// The IR version a model of this default-domain opset declares (ONNX's versioning table).
int ir_version_for(int opset) {
  if (opset <= 8) return 3;
  if (opset <= 10) return 5;
  if (opset <= 11) return 6;
  if (opset <= 14) return 7;
  if (opset <= 18) return 8;
  if (opset <= 20) return 9;
  if (opset <= 22) return 10;
  return 11;
}

}  // namespace

std::string export_model(const ir::Graph& graph) {
  onnx::ModelProto model;
  model.set_producer_name("anvil optimize");
  GraphExporter exporter(graph.opsets);
  exporter.write(graph, model.mutable_graph(), {});
  int default_opset = 1;
  for (const auto& [domain, version] : graph.opsets) {
    if (domain == "anvil" || domain == kAnvilOnnxDomain) continue;
    auto* op = model.add_opset_import();
    op->set_domain(domain);
    op->set_version(version);
    if (domain.empty()) default_opset = version;
  }
  if (exporter.uses_anvil_domain()) {
    auto* op = model.add_opset_import();
    op->set_domain(kAnvilOnnxDomain);
    op->set_version(kAnvilOnnxDomainVersion);
  }
  model.set_ir_version(ir_version_for(default_opset));
  std::string bytes;
  ANVIL_CHECK(model.SerializeToString(&bytes), ErrorKind::kInvalidArgument,
              "the optimized model does not fit a protobuf message (2 GiB)");
  return bytes;
}

}  // namespace anvil::onnx_io
