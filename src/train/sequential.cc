// anvil::nn::Sequential (include/anvil/nn.h): layers checked as they are
// added, then written as an ir::Graph and exported as ONNX.
#include <cmath>
#include <fstream>
#include <random>
#include <sstream>

#include <nlohmann/json.hpp>

#include "anvil/nn.h"
#include "core/check.h"
#include "core/checked.h"
#include "ir/graph.h"
#include "onnx/exporter.h"

namespace anvil::nn {

namespace {

constexpr int kOpset = 17;

constexpr int64_t kMaxSize = int64_t{1} << 31;  // any one size of a spec: no arithmetic on it overflows

// The output size of a window sliding over `in`; 0 when no window fits.
int64_t pooled(int64_t in, int64_t kernel, int64_t stride, int64_t padding) {
  const int64_t padded = in + 2 * padding;
  return padded < kernel ? 0 : (padded - kernel) / stride + 1;
}

void check_sizes(size_t layer, const char* type, std::initializer_list<int64_t> sizes) {
  for (int64_t v : sizes)
    ANVIL_CHECK(v <= kMaxSize, ErrorKind::kInvalidArgument, "layer {} ({}): {} is too large (at most 2^31)", layer,
                type, v);
}

// Writes the layers into a graph, with PyTorch's default initialisation:
// weights and biases uniform in +-1/sqrt(fan_in) (kaiming_uniform with a =
// sqrt(5)); batch norms with scale 1, bias 0, mean 0, variance 1.
class GraphWriter {
 public:
  explicit GraphWriter(uint64_t seed) : rng_(seed) { g_.opsets[""] = kOpset; }

  ir::Graph& graph() { return g_; }

  ir::Value* op(const std::string& type, std::vector<ir::Value*> in, ir::Attributes attrs = {}) {
    // Node names are not values' names: unique_name() does not see them.
    ir::Node* n = g_.add_node(type, std::move(in), 1, type + "_" + std::to_string(nodes_++));
    n->opset = kOpset;
    n->attrs = std::move(attrs);
    return n->outputs[0];
  }
  ir::Value* uniform(const std::string& name, std::vector<int64_t> shape, float bound) {
    Tensor t(DType::kFloat32, Shape(shape.begin(), shape.end()));
    std::uniform_real_distribution<float> d(-bound, bound);
    for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = d(rng_);
    return g_.add_constant(name, std::move(t));
  }
  ir::Value* filled(const std::string& name, std::vector<int64_t> shape, float value) {
    Tensor t(DType::kFloat32, Shape(shape.begin(), shape.end()));
    for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = value;
    return g_.add_constant(name, std::move(t));
  }
  ir::Value* scalar(float v) { return filled(g_.unique_name("const"), {}, v); }

 private:
  ir::Graph g_;
  std::mt19937_64 rng_;
  int nodes_ = 0;
};

ir::Attributes ints_attrs(std::initializer_list<std::pair<const char*, std::vector<int64_t>>> list) {
  ir::Attributes a;
  for (const auto& [k, v] : list) a.set(k, v);
  return a;
}

ir::Value* write_layer(GraphWriter& w, const Sequential::Layer& l, size_t index, ir::Value* x) {
  const std::string p = std::to_string(index) + ".";
  const std::vector<int64_t>& in = l.in_shape;
  if (l.type == "linear") {
    const float bound = 1.f / std::sqrt(static_cast<float>(in[0]));
    std::vector<ir::Value*> inputs = {x, w.uniform(p + "weight", {l.out, in[0]}, bound)};
    if (l.bias) inputs.push_back(w.uniform(p + "bias", {l.out}, bound));
    ir::Attributes a;
    a.set("transB", int64_t{1});
    return w.op("Gemm", inputs, a);
  }
  if (l.type == "conv2d") {
    const float bound = 1.f / std::sqrt(static_cast<float>(in[0] * l.kernel * l.kernel));
    std::vector<ir::Value*> inputs = {x, w.uniform(p + "weight", {l.out, in[0], l.kernel, l.kernel}, bound)};
    if (l.bias) inputs.push_back(w.uniform(p + "bias", {l.out}, bound));
    return w.op("Conv", inputs,
                ints_attrs({{"kernel_shape", {l.kernel, l.kernel}}, {"strides", {l.stride, l.stride}},
                            {"pads", {l.padding, l.padding, l.padding, l.padding}}}));
  }
  if (l.type == "batch_norm") {
    const int64_t c = in[0];
    ir::Attributes a;
    a.set("epsilon", l.eps);
    a.set("momentum", 1.f - l.alpha);  // ONNX keeps 1 - PyTorch's momentum
    return w.op("BatchNormalization", {x, w.filled(p + "weight", {c}, 1.f), w.filled(p + "bias", {c}, 0.f),
                                       w.filled(p + "running_mean", {c}, 0.f), w.filled(p + "running_var", {c}, 1.f)},
                a);
  }
  if (l.type == "max_pool2d" || l.type == "avg_pool2d") {
    ir::Attributes a = ints_attrs({{"kernel_shape", {l.kernel, l.kernel}}, {"strides", {l.stride, l.stride}},
                                   {"pads", {l.padding, l.padding, l.padding, l.padding}}});
    if (l.type == "max_pool2d") return w.op("MaxPool", {x}, a);
    a.set("count_include_pad", int64_t{1});  // PyTorch's AvgPool2d default: padding counts in the divisor
    return w.op("AveragePool", {x}, a);
  }
  if (l.type == "global_avg_pool") return w.op("GlobalAveragePool", {x});
  if (l.type == "flatten") return w.op("Flatten", {x});
  if (l.type == "relu") return w.op("Relu", {x});
  if (l.type == "sigmoid") return w.op("Sigmoid", {x});
  if (l.type == "tanh") return w.op("Tanh", {x});
  if (l.type == "leaky_relu") {
    ir::Attributes a;
    a.set("alpha", l.alpha);
    return w.op("LeakyRelu", {x}, a);
  }
  if (l.type == "gelu") {  // x * (1 + erf(x / sqrt 2)) / 2, as PyTorch exports it before opset 20
    ir::Value* erf = w.op("Erf", {w.op("Div", {x, w.scalar(1.4142135623730951f)})});
    return w.op("Mul", {w.op("Mul", {x, w.op("Add", {erf, w.scalar(1.f)})}), w.scalar(0.5f)});
  }
  if (l.type == "dropout") {
    Tensor ratio(DType::kFloat32, {});
    *ratio.data<float>() = l.alpha;
    return w.op("Dropout", {x, w.graph().add_constant(p + "ratio", std::move(ratio))});
  }
  fail(ErrorKind::kInternal, "layer {}: unknown type '{}'", index, l.type);
}

}  // namespace

Sequential::Sequential(std::vector<int64_t> sample_shape) : input_(sample_shape), shape_(std::move(sample_shape)) {
  ANVIL_CHECK(!input_.empty() && input_.size() <= 3, ErrorKind::kInvalidArgument,
              "the input shape (one sample, no batch axis) needs 1 to 3 dimensions, got {}", input_.size());
  for (int64_t d : input_)
    ANVIL_CHECK(d > 0 && d <= (int64_t{1} << 31), ErrorKind::kInvalidArgument,
                "the input shape's sizes must be in [1, 2^31], got {}", d);
}

Sequential::Layer Sequential::check(const std::string& type, size_t rank, const char* needs) const {
  ANVIL_CHECK(rank == 0 || shape_.size() == rank, ErrorKind::kInvalidArgument,
              "layer {} ({}) needs {}, the shape before it is [N, {}]", layers_.size(), type, needs,
              fmt::join(shape_, ", "));
  Layer l;
  l.type = type;
  l.in_shape = shape_;
  return l;
}

Sequential& Sequential::add(Layer layer, std::vector<int64_t> out_shape) {
  for (int64_t d : out_shape)
    ANVIL_CHECK(d > 0, ErrorKind::kInvalidArgument, "layer {} ({}) leaves nothing: its output would be [N, {}]",
                layers_.size(), layer.type, fmt::join(out_shape, ", "));
  layers_.push_back(std::move(layer));
  shape_ = std::move(out_shape);
  return *this;
}

Sequential& Sequential::linear(int64_t out_features, bool bias) {
  Layer l = check("linear", 1, "a flat input [N, F] (add a flatten before it)");
  ANVIL_CHECK(out_features > 0, ErrorKind::kInvalidArgument, "layer {} (linear): out must be > 0, got {}",
              layers_.size(), out_features);
  check_sizes(layers_.size(), "linear", {out_features});
  checked_mul(out_features, shape_[0], "the linear layer's weights");
  l.out = out_features;
  l.bias = bias;
  return add(l, {out_features});
}

Sequential& Sequential::conv2d(int64_t out_channels, int64_t kernel, int64_t stride, int64_t padding, bool bias) {
  Layer l = check("conv2d", 3, "an image input [N, C, H, W]");
  ANVIL_CHECK(out_channels > 0 && kernel > 0 && stride > 0 && padding >= 0, ErrorKind::kInvalidArgument,
              "layer {} (conv2d): out, kernel and stride must be > 0 and padding >= 0", layers_.size());
  check_sizes(layers_.size(), "conv2d", {out_channels, kernel, stride, padding});
  checked_mul(checked_mul(out_channels, shape_[0], "the convolution's weights"), kernel * kernel,
              "the convolution's weights");
  l.out = out_channels, l.kernel = kernel, l.stride = stride, l.padding = padding, l.bias = bias;
  return add(l, {out_channels, pooled(shape_[1], kernel, stride, padding), pooled(shape_[2], kernel, stride, padding)});
}

Sequential& Sequential::batch_norm(float momentum, float eps) {
  Layer l = check("batch_norm", 0, "");
  ANVIL_CHECK(shape_.size() == 1 || shape_.size() == 3, ErrorKind::kInvalidArgument,
              "layer {} (batch_norm) needs [N, F] or [N, C, H, W], the shape before it is [N, {}]", layers_.size(),
              fmt::join(shape_, ", "));
  ANVIL_CHECK(momentum >= 0 && momentum <= 1 && eps > 0, ErrorKind::kInvalidArgument,
              "layer {} (batch_norm): momentum must be in [0, 1] and eps > 0", layers_.size());
  l.alpha = momentum, l.eps = eps;
  return add(l, shape_);
}

Sequential& Sequential::max_pool2d(int64_t kernel, int64_t stride, int64_t padding) {
  return pool("max_pool2d", kernel, stride, padding);
}

Sequential& Sequential::avg_pool2d(int64_t kernel, int64_t stride, int64_t padding) {
  return pool("avg_pool2d", kernel, stride, padding);
}

Sequential& Sequential::pool(const char* type, int64_t kernel, int64_t stride, int64_t padding) {
  Layer l = check(type, 3, "an image input [N, C, H, W]");
  if (stride == 0) stride = kernel;
  ANVIL_CHECK(kernel > 0 && stride > 0 && padding >= 0 && padding < kernel, ErrorKind::kInvalidArgument,
              "layer {} ({}): kernel and stride must be > 0, padding in [0, kernel)", layers_.size(), type);
  check_sizes(layers_.size(), type, {kernel, stride, padding});
  l.kernel = kernel, l.stride = stride, l.padding = padding;
  return add(l, {shape_[0], pooled(shape_[1], kernel, stride, padding), pooled(shape_[2], kernel, stride, padding)});
}


Sequential& Sequential::global_avg_pool() {
  Layer l = check("global_avg_pool", 3, "an image input [N, C, H, W]");
  return add(l, {shape_[0], 1, 1});
}

Sequential& Sequential::flatten() {
  Layer l = check("flatten", 0, "");
  int64_t n = 1;
  for (int64_t d : shape_) n = checked_mul(n, d, "the flattened size");
  return add(l, {n});
}

Sequential& Sequential::relu() { return add(check("relu", 0, ""), shape_); }
Sequential& Sequential::sigmoid() { return add(check("sigmoid", 0, ""), shape_); }
Sequential& Sequential::tanh() { return add(check("tanh", 0, ""), shape_); }
Sequential& Sequential::gelu() { return add(check("gelu", 0, ""), shape_); }

Sequential& Sequential::leaky_relu(float alpha) {
  Layer l = check("leaky_relu", 0, "");
  l.alpha = alpha;
  return add(l, shape_);
}

Sequential& Sequential::dropout(float p) {
  Layer l = check("dropout", 0, "");
  ANVIL_CHECK(p >= 0 && p < 1, ErrorKind::kInvalidArgument, "layer {} (dropout): p must be in [0, 1), got {}",
              layers_.size(), p);
  l.alpha = p;
  return add(l, shape_);
}

std::string Sequential::to_onnx(uint64_t seed) const {
  ANVIL_CHECK(!layers_.empty(), ErrorKind::kInvalidArgument, "the network has no layers");
  GraphWriter w(seed);
  ir::Graph& g = w.graph();
  ir::SymShape in_dims = {ir::Dim::named("batch")};
  for (int64_t d : input_) in_dims.push_back(ir::Dim::known(d));
  ir::Value* x = g.add_input("x", DType::kFloat32, {});
  x->type = ir::Type::tensor(DType::kFloat32, in_dims);
  for (size_t i = 0; i < layers_.size(); ++i) x = write_layer(w, layers_[i], i, x);
  ir::Value* logits = g.add_value("logits");
  g.add_node_with_outputs("Identity", {x}, {logits}, "output")->opset = kOpset;
  ir::SymShape out_dims = {ir::Dim::named("batch")};
  for (int64_t d : shape_) out_dims.push_back(ir::Dim::known(d));
  logits->type = ir::Type::tensor(DType::kFloat32, out_dims);
  g.add_output(logits);
  return onnx_io::export_model(g);
}

void Sequential::save(const std::string& path, uint64_t seed) const {
  const std::string bytes = to_onnx(seed);
  std::ofstream out(path, std::ios::binary);
  ANVIL_CHECK(out.good(), ErrorKind::kInvalidArgument, "cannot write '{}'", path);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ANVIL_CHECK(out.good(), ErrorKind::kInvalidArgument, "cannot write '{}'", path);
}

namespace {

int64_t int_field(const nlohmann::json& layer, const char* key, int64_t fallback, size_t index) {
  if (!layer.contains(key)) {
    ANVIL_CHECK(fallback != INT64_MIN, ErrorKind::kInvalidArgument, "layer {} ({}): '{}' is required", index,
                layer.value("type", std::string("?")), key);
    return fallback;
  }
  const nlohmann::json& v = layer.at(key);
  ANVIL_CHECK(v.is_number_integer(), ErrorKind::kInvalidArgument, "layer {}: '{}' must be an integer, got {}", index,
              key, v.dump());
  return v.get<int64_t>();
}

float float_field(const nlohmann::json& layer, const char* key, float fallback, size_t index) {
  if (!layer.contains(key)) return fallback;
  const nlohmann::json& v = layer.at(key);
  ANVIL_CHECK(v.is_number(), ErrorKind::kInvalidArgument, "layer {}: '{}' must be a number, got {}", index, key,
              v.dump());
  return v.get<float>();
}

bool bool_field(const nlohmann::json& layer, const char* key, bool fallback, size_t index) {
  if (!layer.contains(key)) return fallback;
  ANVIL_CHECK(layer.at(key).is_boolean(), ErrorKind::kInvalidArgument, "layer {}: '{}' must be true or false", index,
              key);
  return layer.at(key).get<bool>();
}

void add_layer(Sequential& net, const nlohmann::json& l, size_t i) {
  ANVIL_CHECK(l.is_object() && l.contains("type") && l.at("type").is_string(), ErrorKind::kInvalidArgument,
              "layer {}: each layer is an object with a \"type\"", i);
  const std::string type = l.at("type").get<std::string>();
  constexpr int64_t kRequired = INT64_MIN;
  if (type == "linear") net.linear(int_field(l, "out", kRequired, i), bool_field(l, "bias", true, i));
  else if (type == "conv2d")
    net.conv2d(int_field(l, "out", kRequired, i), int_field(l, "kernel", kRequired, i), int_field(l, "stride", 1, i),
               int_field(l, "padding", 0, i), bool_field(l, "bias", true, i));
  else if (type == "batch_norm") net.batch_norm(float_field(l, "momentum", 0.1f, i), float_field(l, "eps", 1e-5f, i));
  else if (type == "max_pool2d" || type == "avg_pool2d") {
    const int64_t k = int_field(l, "kernel", kRequired, i), s = int_field(l, "stride", 0, i);
    const int64_t p = int_field(l, "padding", 0, i);
    type == "max_pool2d" ? net.max_pool2d(k, s, p) : net.avg_pool2d(k, s, p);
  } else if (type == "global_avg_pool") net.global_avg_pool();
  else if (type == "flatten") net.flatten();
  else if (type == "relu") net.relu();
  else if (type == "leaky_relu") net.leaky_relu(float_field(l, "alpha", 0.01f, i));
  else if (type == "sigmoid") net.sigmoid();
  else if (type == "tanh") net.tanh();
  else if (type == "gelu") net.gelu();
  else if (type == "dropout") net.dropout(float_field(l, "p", 0.5f, i));
  else
    fail(ErrorKind::kInvalidArgument,
         "layer {}: unknown type '{}' (types: linear, conv2d, batch_norm, max_pool2d, avg_pool2d, global_avg_pool, "
         "flatten, relu, leaky_relu, sigmoid, tanh, gelu, dropout)", i, type);
}

}  // namespace

Sequential Sequential::from_json(const std::string& text) {
  nlohmann::json spec;
  try {
    spec = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    fail(ErrorKind::kInvalidArgument, "the model spec is not valid JSON: {}", e.what());
  }
  ANVIL_CHECK(spec.is_object() && spec.contains("input") && spec.at("input").is_array() && spec.contains("layers") &&
                  spec.at("layers").is_array(),
              ErrorKind::kInvalidArgument,
              "the model spec needs \"input\" (one sample's shape, e.g. [1, 8, 8]) and \"layers\" (a list)");
  std::vector<int64_t> input;
  for (const auto& d : spec.at("input")) {
    ANVIL_CHECK(d.is_number_integer(), ErrorKind::kInvalidArgument, "\"input\" must list integers, got {}", d.dump());
    input.push_back(d.get<int64_t>());
  }
  Sequential net(input);
  const auto& layers = spec.at("layers");
  ANVIL_CHECK(!layers.empty(), ErrorKind::kInvalidArgument, "the model spec has no layers");
  for (size_t i = 0; i < layers.size(); ++i) add_layer(net, layers[i], i);
  return net;
}

Sequential Sequential::from_json_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  ANVIL_CHECK(in.good(), ErrorKind::kInvalidArgument, "cannot read '{}'", path);
  ANVIL_CHECK(in.tellg() <= (1 << 20), ErrorKind::kInvalidArgument, "{}: a model spec is at most 1 MiB", path);
  in.seekg(0);
  std::ostringstream text;
  text << in.rdbuf();
  try {
    return from_json(text.str());
  } catch (const Error& e) {
    throw Error(e.kind(), path + ": " + e.what());
  }
}

}  // namespace anvil::nn
