#include "onnx/importer.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <optional>
#include <set>
#include <sstream>

#include <google/protobuf/io/zero_copy_stream_impl.h>
#include <fmt/ranges.h>
#include <onnx/onnx_pb.h>

#include "anvil/model_info.h"
#include "core/check.h"
#include "ir/schema.h"
#include "onnx/anvil_domain.h"
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

// Every node, subgraphs included, must use an imported domain and an op Anvil has.
void check_ops_supported(const onnx::GraphProto& g, const std::map<std::string, int>& opsets,
                         const OpSupported& supported) {
  for (const auto& n : g.node()) {
    std::string domain = normalize_domain(n.domain());
    ANVIL_CHECK(opsets.count(domain), ErrorKind::kInvalidModel, "node {} uses domain '{}' that the model does not import",
                node_label(n), domain);
    int opset = opsets.at(domain);
    // Anvil's internal ops (training's gradients among them) are not read
    // from files; its fused ones come only under com.anvil, checked below.
    ANVIL_CHECK(domain != "anvil", ErrorKind::kUnsupported,
                "node {}: domain 'anvil' is Anvil's internal one (files name its fused ops in {})", node_label(n),
                kAnvilOnnxDomain);
    if (domain == kAnvilOnnxDomain) {
      ANVIL_CHECK(opset >= 1 && opset <= kAnvilOnnxDomainVersion, ErrorKind::kUnsupported,
                  "node {}: the model imports {} version {}; Anvil reads versions 1 to {}", node_label(n),
                  kAnvilOnnxDomain, opset, kAnvilOnnxDomainVersion);
      std::optional<AnvilDomainOp> op = anvil_domain_op(n.op_type());
      ANVIL_CHECK(op, ErrorKind::kUnsupported, "node {}: {} has no op {} (its ops: the fused ones `anvil optimize` writes)",
                  node_label(n), kAnvilOnnxDomain, n.op_type());
      domain = op->domain;
      opset = domain.empty() ? op->opset : (opsets.count("") ? opsets.at("") : 1);
    }
    if (std::optional<OpProblem> problem = supported(domain, n.op_type(), opset))
      throw Error(problem->kind, "node " + node_label(n) + ": " + problem->message);
    for (const auto& a : n.attribute()) {
      if (a.has_g()) check_ops_supported(a.g(), opsets, supported);
      for (const auto& sub : a.graphs()) check_ops_supported(sub, opsets, supported);
    }
  }
}

// ONNX TypeProto -> ir::Type; nullopt for kinds Anvil does not carry (maps, sparse tensors).
std::optional<ir::Type> type_from_onnx(const onnx::TypeProto& type) {
  if (type.has_tensor_type()) {
    const auto& tt = type.tensor_type();
    DType d = dtype_from_onnx(tt.elem_type());
    if (d == DType::kUndefined) return std::nullopt;
    if (!tt.has_shape()) return ir::Type::tensor(d);
    ir::SymShape dims;
    // A dim_param written like the symbols inference makes ("64*seq",
    // "min(seq,512)", or digits, which it reads as a factor) would be read
    // as one: it stays an unknown dim.
    auto symbol = [](const std::string& p) {
      const bool digits = std::all_of(p.begin(), p.end(), [](char c) { return c >= '0' && c <= '9'; });
      return digits || p.find_first_of("*(),") != std::string::npos ? ir::Dim::unknown() : ir::Dim::named(p);
    };
    for (const auto& dim : tt.shape().dim())
      dims.push_back(dim.has_dim_value() ? ir::Dim::known(dim.dim_value())
                                         : dim.has_dim_param() ? symbol(dim.dim_param()) : ir::Dim::unknown());
    return ir::Type::tensor(d, std::move(dims));
  }
  if (type.has_sequence_type()) {
    auto elem = type_from_onnx(type.sequence_type().elem_type());
    return elem ? std::optional<ir::Type>(ir::Type::sequence(*elem)) : std::nullopt;
  }
  if (type.has_optional_type()) {
    auto elem = type_from_onnx(type.optional_type().elem_type());
    return elem ? std::optional<ir::Type>(ir::Type::optional(*elem)) : std::nullopt;
  }
  return std::nullopt;
}

// Graph inputs must have a type Anvil carries; value_info and outputs may leave it out.
void set_type(ir::Value* v, const onnx::TypeProto& type, bool required) {
  std::optional<ir::Type> t = type_from_onnx(type);
  if (!t) {
    ANVIL_CHECK(!required, ErrorKind::kUnsupported,
                "value '{}' has a type Anvil does not support (maps, sparse tensors or an unknown element type)",
                v->name);
    return;
  }
  v->type = *t;
}

// Builds one ir::Graph from a GraphProto; subgraphs recurse with the enclosing
// graph as their scope, and a name a subgraph reads from an enclosing graph
// becomes a capture (and an implicit input of the node that owns it).
class GraphImporter {
 public:
  GraphImporter(const std::map<std::string, int>& opsets, const std::string& base_dir)
      : opsets_(opsets), base_dir_(base_dir) {}

  // `release` (the main graph of a model the importer owns): each
  // initializer's bytes are freed once converted, so that the model's weights
  // are held once, not twice, while the graph is built.
  void build(const onnx::GraphProto& g, ir::Graph& graph, bool is_main, onnx::GraphProto* release = nullptr) {
    graph.name = g.name();
    graph.opsets = opsets_;
    for (int i = 0; i < g.initializer_size(); ++i) {
      const onnx::TensorProto& init = g.initializer(i);
      ANVIL_CHECK(!init.name().empty(), ErrorKind::kInvalidModel, "an initializer has no name");
      ANVIL_CHECK(!graph.find_value(init.name()), ErrorKind::kInvalidModel, "initializer '{}' is defined twice",
                  init.name());
      if (!release) {
        graph.add_constant(init.name(), tensor_from_proto(init, base_dir_));
        continue;
      }
      graph.add_constant(init.name(), tensor_from_proto_consuming(init, base_dir_));
      std::string().swap(*release->mutable_initializer(i)->mutable_raw_data());  // frees the capacity
    }
    for (const auto& in : g.input()) {
      if (graph.find_value(in.name())) continue;  // an input with an initializer is a constant here
      ANVIL_CHECK(!in.name().empty(), ErrorKind::kInvalidModel, "graph '{}' has an input without a name", g.name());
      ir::Value* v = graph.add_input(in.name(), DType::kUndefined, {});
      v->type = {};
      set_type(v, in.type(), /*required=*/is_main);
    }
    for (const auto& n : g.node()) add_node(n, graph);
    for (const auto& vi : g.value_info())
      if (ir::Value* v = graph.find_value(vi.name()); v && !v->is_constant()) set_type(v, vi.type(), false);
    for (const auto& out : g.output()) {
      ir::Value* v = resolve(out.name(), graph);
      ANVIL_CHECK(v, ErrorKind::kInvalidModel, "graph output '{}' is not produced by any node", out.name());
      if (!v->is_constant() && !v->is_graph_input) set_type(v, out.type(), false);
      graph.add_output(v);
    }
    ANVIL_CHECK(!graph.outputs().empty(), ErrorKind::kInvalidModel, "graph '{}' has no outputs", g.name());
  }

 private:
  // The value `name` as seen from `graph`: its own, or a capture of an enclosing graph's.
  ir::Value* resolve(const std::string& name, ir::Graph& graph) {
    if (ir::Value* v = graph.find_value(name)) return v;
    if (!graph.parent) return nullptr;
    ir::Value* outer = resolve(name, *graph.parent);
    return outer ? graph.add_capture(name, outer) : nullptr;
  }

  void add_node(const onnx::NodeProto& n, ir::Graph& graph) {
    std::vector<ir::Value*> inputs;
    for (const std::string& name : n.input()) {
      if (name.empty()) {
        inputs.push_back(nullptr);
        continue;
      }
      ir::Value* v = resolve(name, graph);
      ANVIL_CHECK(v, ErrorKind::kInvalidModel, "node {} reads '{}', which no input, initializer or earlier node defines",
                  node_label(n), name);
      inputs.push_back(v);
    }
    std::vector<ir::Value*> outputs;
    for (const std::string& name : n.output()) {
      if (name.empty()) {
        outputs.push_back(nullptr);
        continue;
      }
      ANVIL_CHECK(!graph.find_value(name), ErrorKind::kInvalidModel, "node {} writes '{}', which is already defined",
                  node_label(n), name);
      outputs.push_back(graph.add_value(name));
    }
    ir::Node* node = graph.add_node_with_outputs(n.op_type(), std::move(inputs), std::move(outputs), n.name());
    node->domain = normalize_domain(n.domain());
    auto opset = opsets_.find(node->domain);
    ANVIL_CHECK(opset != opsets_.end(), ErrorKind::kInvalidModel, "node {} uses domain '{}' that the model does not import",
                node_label(n), node->domain);
    node->opset = opset->second;
    if (node->domain == kAnvilOnnxDomain) as_anvil_op(*node);
    for (const auto& a : n.attribute()) {
      if (!a.ref_attr_name().empty()) continue;  // only meaningful inside functions
      node->attrs.set(a.name(), convert_attribute(a, n, graph, node));
    }
  }

  // A com.anvil node (as `anvil optimize` writes them) becomes the IR node it was written from.
  void as_anvil_op(ir::Node& node) const {
    std::optional<AnvilDomainOp> op = anvil_domain_op(node.op_type);
    ANVIL_INTERNAL_CHECK(op);  // check_ops_supported refused the others
    node.domain = op->domain;
    if (node.domain.empty()) node.opset = op->opset;  // the ONNX op at the version it was written as
    else if (auto it = opsets_.find(""); it != opsets_.end()) node.opset = it->second;
  }

  ir::GraphPtr subgraph(const onnx::GraphProto& g, ir::Graph& parent, ir::Node* owner) {
    auto sub = std::make_shared<ir::Graph>();
    sub->parent = &parent;
    sub->owner = owner;
    build(g, *sub, /*is_main=*/false);
    return sub;
  }

  // Only control flow runs subgraphs, each under its one name (If's two
  // branches, the others' body). Elsewhere a graph attribute would make the
  // node look like control flow to the planner, which then skips the
  // schema's checks of its shapes, which its kernel relies on; a stray one on
  // control flow would become a body no kernel runs.
  static void check_takes_subgraphs(const onnx::NodeProto& n, const onnx::AttributeProto& a) {
    const std::string& op = n.op_type();
    ANVIL_CHECK(ir::is_control_flow_op(op) && normalize_domain(n.domain()).empty(), ErrorKind::kInvalidModel,
                "node {}: {} takes no graph attribute, but has '{}'", node_label(n), op, a.name());
    const bool expected = op == "If" ? a.name() == "then_branch" || a.name() == "else_branch" : a.name() == "body";
    ANVIL_CHECK(expected && a.type() == onnx::AttributeProto::GRAPH, ErrorKind::kInvalidModel,
                "node {}: {} takes no graph attribute '{}'{}", node_label(n), op, a.name(),
                expected ? " holding several graphs" : "");
  }

  ir::AttrValue convert_attribute(const onnx::AttributeProto& a, const onnx::NodeProto& n, ir::Graph& graph,
                                  ir::Node* node) {
    using A = onnx::AttributeProto;
    switch (a.type()) {
      case A::INT: return a.i();
      case A::FLOAT: return a.f();
      case A::STRING: return a.s();
      case A::INTS: return std::vector<int64_t>(a.ints().begin(), a.ints().end());
      case A::FLOATS: return std::vector<float>(a.floats().begin(), a.floats().end());
      case A::STRINGS: return std::vector<std::string>(a.strings().begin(), a.strings().end());
      case A::TENSOR: return tensor_from_proto(a.t(), base_dir_);
      case A::GRAPH:
        check_takes_subgraphs(n, a);
        return subgraph(a.g(), graph, node);
      case A::TYPE_PROTO: {
        std::optional<ir::Type> type = type_from_onnx(a.tp());
        ANVIL_CHECK(type.has_value(), ErrorKind::kUnsupported, "node {}: attribute '{}' names a type Anvil does not carry",
                    node_label(n), a.name());
        return *type;
      }
      case A::GRAPHS: {
        check_takes_subgraphs(n, a);
        std::vector<ir::GraphPtr> graphs;
        for (const auto& g : a.graphs()) graphs.push_back(subgraph(g, graph, node));
        return graphs;
      }
      default:
        fail(ErrorKind::kUnsupported, "node {}: attribute '{}' has a kind Anvil does not support (sparse tensors, "
             "lists of types)", node_label(n), a.name());
    }
  }

  const std::map<std::string, int>& opsets_;
  const std::string& base_dir_;
};

// Consumes the model's initializer bytes (see GraphImporter::build).
std::unique_ptr<ir::Graph> build_graph(onnx::ModelProto& model, std::map<std::string, int> opsets,
                                       const std::string& base_dir) {
  auto graph = std::make_unique<ir::Graph>();
  GraphImporter(opsets, base_dir).build(model.graph(), *graph, /*is_main=*/true, model.mutable_graph());
  graph->opsets = std::move(opsets);
  return graph;
}

}  // namespace

namespace {

constexpr const char* kNotOnnx = "not an ONNX model: the file does not parse as a ModelProto (truncated or not ONNX)";

std::unique_ptr<ir::Graph> import_parsed(onnx::ModelProto& model, const std::string& base_dir,
                                         const OpSupported& supported) {
  // The file is untrusted: every size is checked before anything allocates.
  // libonnx's checker and shape inference are not run at all; they crash on
  // hostile input, and Anvil's planner infers every shape itself.
  validate_model(model);
  std::map<std::string, int> opsets;
  check_opsets(model, opsets);
  check_ops_supported(model.graph(), opsets, supported);
  return build_graph(model, std::move(opsets), base_dir);
}

}  // namespace

std::unique_ptr<ir::Graph> import_model_bytes(const std::string& bytes, const std::string& base_dir,
                                              const OpSupported& supported) {
  onnx::ModelProto model;
  ANVIL_CHECK(!bytes.empty(), ErrorKind::kInvalidModel, "the model file is empty");
  ANVIL_CHECK(model.ParseFromString(bytes), ErrorKind::kInvalidModel, kNotOnnx);
  return import_parsed(model, base_dir, supported);
}

namespace {

// The bytes of a model file, or an error naming what is wrong with the path.
std::string read_model_file(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  ANVIL_CHECK(fs::exists(path, ec), ErrorKind::kInvalidArgument, "model file '{}' does not exist", path);
  ANVIL_CHECK(!fs::is_directory(path, ec), ErrorKind::kInvalidArgument, "model path '{}' is a directory", path);
  std::ifstream in(path, std::ios::binary);
  ANVIL_CHECK(in.good(), ErrorKind::kInvalidArgument, "cannot read model file '{}'", path);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Parses the file at `path` into `model` through a buffered stream.
void parse_model_file(const std::string& path, onnx::ModelProto& model) {
  namespace fs = std::filesystem;
  std::error_code ec;
  ANVIL_CHECK(fs::exists(path, ec), ErrorKind::kInvalidArgument, "model file '{}' does not exist", path);
  ANVIL_CHECK(!fs::is_directory(path, ec), ErrorKind::kInvalidArgument, "model path '{}' is a directory", path);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  ANVIL_CHECK(fd >= 0, ErrorKind::kInvalidArgument, "cannot read model file '{}'", path);
  struct stat st {};
  const bool empty = ::fstat(fd, &st) == 0 && st.st_size == 0;
  bool parsed = false;
  if (!empty) {
    google::protobuf::io::FileInputStream stream(fd);
    parsed = model.ParseFromZeroCopyStream(&stream);
  }
  ::close(fd);
  ANVIL_CHECK(!empty, ErrorKind::kInvalidModel, "the model file is empty");
  ANVIL_CHECK(parsed, ErrorKind::kInvalidModel, kNotOnnx);
}

void collect_operators(const onnx::GraphProto& g, std::set<std::string>& ops) {
  for (const auto& n : g.node()) {
    const std::string domain = normalize_domain(n.domain());
    ops.insert(domain.empty() ? n.op_type() : domain + "." + n.op_type());
    for (const auto& a : n.attribute()) {
      if (a.has_g()) collect_operators(a.g(), ops);
      for (const auto& sub : a.graphs()) collect_operators(sub, ops);
    }
  }
}

}  // namespace

std::unique_ptr<ir::Graph> import_model_file(const std::string& path, const OpSupported& supported) {
  const std::string dir = std::filesystem::absolute(path).parent_path().string();
  try {
    // Parsed as a stream from the file: the file's bytes are never all in
    // memory next to the parsed model (BERT-base: 420 MiB less at the peak).
    onnx::ModelProto model;
    parse_model_file(path, model);
    return import_parsed(model, dir, supported);
  } catch (const Error& e) {
    throw Error(e.kind(), path + ": " + e.what());
  }
}

namespace {

// Replaces the initializers named in `values` (same dtype and shape) and
// inlines external ones, so the bytes stand alone. `label` names the model in errors.
std::string with_initializers(onnx::ModelProto& model, const std::map<std::string, Tensor>& values,
                              const std::string& label, const std::string& dir) {
  validate_model(model);
  std::set<std::string> unplaced;
  for (const auto& v : values) unplaced.insert(v.first);
  for (onnx::TensorProto& init : *model.mutable_graph()->mutable_initializer()) {
    const std::string name = init.name();  // a copy: tensor_to_proto clears `init` first
    auto it = values.find(name);
    if (it != values.end()) {
      const Shape dims(init.dims().begin(), init.dims().end());
      ANVIL_CHECK(init.data_type() == dtype_to_onnx(it->second.dtype()) && dims == it->second.shape(),
                  ErrorKind::kInvalidArgument, "{}: initializer '{}' is {} of shape {}, the new value {} of {}", label,
                  name, onnx_type_name(init.data_type()), shape_str(dims), dtype_name(it->second.dtype()),
                  shape_str(it->second.shape()));
      tensor_to_proto(it->second, name, &init);
      unplaced.erase(name);
    } else if (init.data_location() == onnx::TensorProto::EXTERNAL) {
      ANVIL_CHECK(!dir.empty(), ErrorKind::kInvalidModel, "{}: external data needs a model file", label);
      tensor_to_proto(tensor_from_proto(init, dir), name, &init);
    }
  }
  ANVIL_CHECK(unplaced.empty(), ErrorKind::kInvalidArgument, "{}: the model has no initializer named {}", label,
              fmt::join(unplaced, ", "));
  std::string bytes;
  ANVIL_CHECK(model.SerializeToString(&bytes), ErrorKind::kInvalidArgument,
              "the trained model does not fit a protobuf message (2 GiB)");
  return bytes;
}

}  // namespace

std::string model_with_initializers(const std::string& path, const std::map<std::string, Tensor>& values) {
  const std::string dir = std::filesystem::absolute(path).parent_path().string();
  onnx::ModelProto model;
  parse_model_file(path, model);
  return with_initializers(model, values, path, dir);
}

std::string model_bytes_with_initializers(const std::string& bytes, const std::map<std::string, Tensor>& values) {
  onnx::ModelProto model;
  ANVIL_CHECK(model.ParseFromString(bytes), ErrorKind::kInvalidModel, "not an ONNX model (the bytes do not parse)");
  return with_initializers(model, values, "the model", "");
}

std::vector<std::string> operators_of_model_file(const std::string& path) {
  onnx::ModelProto model;
  const std::string bytes = read_model_file(path);
  ANVIL_CHECK(!bytes.empty() && model.ParseFromString(bytes), ErrorKind::kInvalidModel,
              "{}: not an ONNX model (the file does not parse as a ModelProto)", path);
  try {
    validate_model(model);
  } catch (const Error& e) {
    throw Error(e.kind(), path + ": " + e.what());
  }
  std::set<std::string> ops;
  collect_operators(model.graph(), ops);
  return {ops.begin(), ops.end()};
}

}  // namespace anvil::onnx_io

namespace anvil {

std::vector<std::string> model_operators(const std::string& path) { return onnx_io::operators_of_model_file(path); }

}  // namespace anvil
