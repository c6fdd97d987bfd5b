#include "onnx/importer.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include <onnx/onnx_pb.h>

#include "core/check.h"
#include "onnx/tensor_proto.h"
#include "onnx/validate.h"

namespace anvil::onnx_io {

namespace {

std::string normalize_domain(const std::string& d) { return d == "ai.onnx" ? "" : d; }

std::string node_label(const onnx::NodeProto& n) {
  std::string s = n.domain().empty() ? n.op_type() : n.domain() + "." + n.op_type();
  if (!n.name().empty()) s += " '" + n.name() + "'";
  return s;
}

void check_opsets(const onnx::ModelProto& model, std::map<std::string, int>& opsets) {
  for (const auto& op : model.opset_import()) opsets[normalize_domain(op.domain())] = static_cast<int>(op.version());
  if (!opsets.count("") && model.opset_import_size() == 0) opsets[""] = 1;  // IR v3 default
  auto it = opsets.find("");
  if (it != opsets.end())
    ANVIL_CHECK(it->second >= kMinOpset && it->second <= kMaxOpset, ErrorKind::kUnsupported,
                "the model uses ONNX opset {}; Anvil supports opsets {} to {}", it->second, kMinOpset, kMaxOpset);
}

void check_ops_supported(const onnx::GraphProto& g, const std::map<std::string, int>& opsets,
                         const OpSupported& supported) {
  for (const auto& n : g.node()) {
    std::string domain = normalize_domain(n.domain());
    ANVIL_CHECK(opsets.count(domain), ErrorKind::kInvalidModel, "node {} uses domain '{}' that the model does not import",
                node_label(n), domain);
    ANVIL_CHECK(supported(domain, n.op_type()), ErrorKind::kUnsupported,
                "node {}: operator {} is not supported by Anvil", node_label(n),
                domain.empty() ? n.op_type() : domain + "." + n.op_type());
  }
}

void set_type(ir::Value* v, const onnx::TypeProto& type, bool required) {
  if (!type.has_tensor_type()) {
    ANVIL_CHECK(!required, ErrorKind::kUnsupported, "value '{}' is not a tensor (sequences, maps and optionals are "
                "not supported)", v->name);
    return;
  }
  const auto& tt = type.tensor_type();
  DType d = dtype_from_onnx(tt.elem_type());
  ANVIL_CHECK(d != DType::kUndefined || !required, ErrorKind::kUnsupported,
              "value '{}' has element type {}, which Anvil does not support", v->name, onnx_type_name(tt.elem_type()));
  v->dtype = d;
  if (tt.has_shape()) {
    v->shape.clear();
    for (const auto& dim : tt.shape().dim()) v->shape.push_back(dim.has_dim_value() ? dim.dim_value() : -1);
    v->has_shape = true;
  }
}

ir::AttrValue convert_attribute(const onnx::AttributeProto& a, const onnx::NodeProto& n, const std::string& base_dir) {
  using A = onnx::AttributeProto;
  switch (a.type()) {
    case A::INT: return a.i();
    case A::FLOAT: return a.f();
    case A::STRING: return a.s();
    case A::INTS: return std::vector<int64_t>(a.ints().begin(), a.ints().end());
    case A::FLOATS: return std::vector<float>(a.floats().begin(), a.floats().end());
    case A::STRINGS: return std::vector<std::string>(a.strings().begin(), a.strings().end());
    case A::TENSOR: return tensor_from_proto(a.t(), base_dir);
    default:
      fail(ErrorKind::kUnsupported, "node {}: attribute '{}' has a kind Anvil does not support (graphs, sparse "
           "tensors, type protos)", node_label(n), a.name());
  }
}

std::unique_ptr<ir::Graph> build_graph(const onnx::ModelProto& model, std::map<std::string, int> opsets,
                                       const std::string& base_dir) {
  const onnx::GraphProto& g = model.graph();
  auto graph = std::make_unique<ir::Graph>();
  graph->name = g.name();
  graph->opsets = std::move(opsets);

  for (const auto& init : g.initializer()) {
    ANVIL_CHECK(!init.name().empty(), ErrorKind::kInvalidModel, "an initializer has no name");
    ANVIL_CHECK(!graph->find_value(init.name()), ErrorKind::kInvalidModel, "initializer '{}' is defined twice",
                init.name());
    graph->add_constant(init.name(), tensor_from_proto(init, base_dir));
  }
  for (const auto& in : g.input()) {
    if (graph->find_value(in.name())) continue;  // an input with an initializer is a constant here
    ir::Value* v = graph->add_input(in.name(), DType::kUndefined, {});
    v->has_shape = false;
    set_type(v, in.type(), /*required=*/true);
  }
  for (const auto& n : g.node()) {
    std::vector<ir::Value*> inputs;
    for (const std::string& name : n.input()) {
      if (name.empty()) { inputs.push_back(nullptr); continue; }
      ir::Value* v = graph->find_value(name);
      ANVIL_CHECK(v, ErrorKind::kInvalidModel, "node {} reads '{}', which no input, initializer or earlier node defines",
                  node_label(n), name);
      inputs.push_back(v);
    }
    std::vector<ir::Value*> outputs;
    for (const std::string& name : n.output()) {
      if (name.empty()) { outputs.push_back(nullptr); continue; }
      ANVIL_CHECK(!graph->find_value(name), ErrorKind::kInvalidModel, "node {} writes '{}', which is already defined",
                  node_label(n), name);
      outputs.push_back(graph->add_value(name));
    }
    ir::Node* node = graph->add_node_with_outputs(n.op_type(), std::move(inputs), std::move(outputs), n.name());
    node->domain = normalize_domain(n.domain());
    node->opset = graph->opsets.at(node->domain);
    for (const auto& a : n.attribute()) {
      if (!a.ref_attr_name().empty()) continue;  // only meaningful inside functions
      node->attrs.set(a.name(), convert_attribute(a, n, base_dir));
    }
  }
  for (const auto& vi : g.value_info())
    if (ir::Value* v = graph->find_value(vi.name()); v && !v->is_constant()) set_type(v, vi.type(), false);
  for (const auto& out : g.output()) {
    ir::Value* v = graph->find_value(out.name());
    ANVIL_CHECK(v, ErrorKind::kInvalidModel, "graph output '{}' is not produced by any node", out.name());
    if (!v->is_constant()) set_type(v, out.type(), false);
    graph->add_output(v);
  }
  ANVIL_CHECK(!graph->outputs().empty(), ErrorKind::kInvalidModel, "the model has no outputs");
  return graph;
}

}  // namespace

std::unique_ptr<ir::Graph> import_model_bytes(const std::string& bytes, const std::string& base_dir,
                                              const OpSupported& supported) {
  onnx::ModelProto model;
  ANVIL_CHECK(!bytes.empty(), ErrorKind::kInvalidModel, "the model file is empty");
  ANVIL_CHECK(model.ParseFromString(bytes), ErrorKind::kInvalidModel,
              "not an ONNX model: the file does not parse as a ModelProto (truncated or not ONNX)");
  // The file is untrusted: every size is checked before anything allocates.
  // libonnx's checker and shape inference are not run at all; they crash on
  // hostile input, and Anvil's planner infers every shape itself.
  validate_model(model);
  std::map<std::string, int> opsets;
  check_opsets(model, opsets);
  check_ops_supported(model.graph(), opsets, supported);
  return build_graph(model, std::move(opsets), base_dir);
}

std::unique_ptr<ir::Graph> import_model_file(const std::string& path, const OpSupported& supported) {
  namespace fs = std::filesystem;
  std::error_code ec;
  ANVIL_CHECK(fs::exists(path, ec), ErrorKind::kInvalidArgument, "model file '{}' does not exist", path);
  ANVIL_CHECK(!fs::is_directory(path, ec), ErrorKind::kInvalidArgument, "model path '{}' is a directory", path);
  std::ifstream in(path, std::ios::binary);
  ANVIL_CHECK(in.good(), ErrorKind::kInvalidArgument, "cannot read model file '{}'", path);
  std::ostringstream ss;
  ss << in.rdbuf();
  std::string dir = fs::absolute(path).parent_path().string();
  try {
    return import_model_bytes(ss.str(), dir, supported);
  } catch (const Error& e) {
    throw Error(e.kind(), path + ": " + e.what());
  }
}

}  // namespace anvil::onnx_io
