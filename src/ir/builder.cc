#include "ir/builder.h"

#include <cmath>

namespace anvil::ir {

GraphBuilder::GraphBuilder(uint64_t seed, int opset) : graph_(std::make_unique<Graph>()), rng_(seed) {
  graph_->opsets[""] = opset;
}

Value* GraphBuilder::input(const std::string& name, Shape shape, DType dtype) {
  return graph_->add_input(name, dtype, std::move(shape));
}

void GraphBuilder::output(Value* v, const std::string& name) {
  if (!name.empty()) {
    // Route through Identity so the output carries the requested name; passes remove it.
    Value* named = graph_->add_value(name);
    graph_->add_node_with_outputs("Identity", {v}, {named}, graph_->unique_name("Identity"));
    v = named;
  }
  graph_->add_output(v);
}

Tensor GraphBuilder::random_tensor(Shape shape, float scale) {
  Tensor t(DType::kFloat32, std::move(shape));
  std::normal_distribution<float> dist(0.f, scale);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = dist(rng_);
  return t;
}

Tensor GraphBuilder::uniform_tensor(Shape shape, float lo, float hi) {
  Tensor t(DType::kFloat32, std::move(shape));
  std::uniform_real_distribution<float> dist(lo, hi);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = dist(rng_);
  return t;
}

Value* GraphBuilder::constant(const std::string& base, Tensor t) {
  return graph_->add_constant(graph_->unique_name(base + std::to_string(counter_++)), std::move(t));
}

Node* GraphBuilder::node(const std::string& op, std::vector<Value*> inputs) {
  return graph_->add_node(op, std::move(inputs), 1, graph_->unique_name(op + "_" + std::to_string(counter_++)));
}

Value* GraphBuilder::conv(Value* x, int64_t cin, int64_t cout, int64_t kernel, int64_t stride, int64_t pad,
                          int64_t group, bool bias) {
  float fan_in = static_cast<float>(cin / group * kernel * kernel);
  std::vector<Value*> ins = {x, constant("conv_w", random_tensor({cout, cin / group, kernel, kernel},
                                                                  std::sqrt(2.f / fan_in)))};
  if (bias) ins.push_back(constant("conv_b", uniform_tensor({cout}, -0.1f, 0.1f)));
  Node* n = node("Conv", ins);
  n->attrs.set("kernel_shape", std::vector<int64_t>{kernel, kernel});
  n->attrs.set("strides", std::vector<int64_t>{stride, stride});
  n->attrs.set("pads", std::vector<int64_t>{pad, pad, pad, pad});
  n->attrs.set("group", group);
  return n->output(0);
}

Value* GraphBuilder::batch_norm(Value* x, int64_t c) {
  Node* n = node("BatchNormalization",
                 {x, constant("bn_scale", uniform_tensor({c}, 0.5f, 1.5f)), constant("bn_bias", uniform_tensor({c}, -0.1f, 0.1f)),
                  constant("bn_mean", uniform_tensor({c}, -0.1f, 0.1f)), constant("bn_var", uniform_tensor({c}, 0.5f, 1.5f))});
  n->attrs.set("epsilon", 1e-5f);
  return n->output(0);
}

Value* GraphBuilder::relu(Value* x) { return node("Relu", {x})->output(0); }

Value* GraphBuilder::clip(Value* x, float lo, float hi) {
  Tensor tlo(DType::kFloat32, {}), thi(DType::kFloat32, {});
  *tlo.data<float>() = lo;
  *thi.data<float>() = hi;
  return node("Clip", {x, constant("clip_min", tlo), constant("clip_max", thi)})->output(0);
}

Value* GraphBuilder::add(Value* a, Value* b) { return node("Add", {a, b})->output(0); }

Value* GraphBuilder::max_pool(Value* x, int64_t kernel, int64_t stride, int64_t pad) {
  Node* n = node("MaxPool", {x});
  n->attrs.set("kernel_shape", std::vector<int64_t>{kernel, kernel});
  n->attrs.set("strides", std::vector<int64_t>{stride, stride});
  n->attrs.set("pads", std::vector<int64_t>{pad, pad, pad, pad});
  return n->output(0);
}

Value* GraphBuilder::global_average_pool(Value* x) { return node("GlobalAveragePool", {x})->output(0); }

Value* GraphBuilder::flatten(Value* x) {
  Node* n = node("Flatten", {x});
  n->attrs.set("axis", int64_t{1});
  return n->output(0);
}

Value* GraphBuilder::gemm(Value* x, int64_t in, int64_t out) {
  Node* n = node("Gemm", {x, constant("fc_w", random_tensor({out, in}, std::sqrt(1.f / static_cast<float>(in)))),
                          constant("fc_b", uniform_tensor({out}, -0.1f, 0.1f))});
  n->attrs.set("transB", int64_t{1});
  return n->output(0);
}

std::unique_ptr<Graph> GraphBuilder::finish() { return std::move(graph_); }

}  // namespace anvil::ir
