// Gradients of Softmax, LogSoftmax and the softmax cross-entropy loss.
#include "core/check.h"
#include "train/gradient_rule.h"

namespace anvil::train {
namespace {

ir::Attributes axis_attrs(const GradBuilder&) {
  ir::Attributes a;
  a.set("keepdims", int64_t{1});
  return a;
}

ir::Value* sum_over_axis(GradBuilder& b, ir::Value* v) {
  ANVIL_CHECK(b.node().opset >= 13, ErrorKind::kUnsupported, "{}: gradients need opset 13's Softmax (one axis)",
              b.node().describe());
  return b.op("ReduceSum", {v, b.ints({b.node().attrs.get_int("axis", -1)})}, axis_attrs(b));
}

// dx = y * (dy - sum(dy * y))
void softmax(GradBuilder& b) {
  ir::Value* inner = sum_over_axis(b, b.op("Mul", {b.dy(), b.y(0)}));
  b.grad(0, b.op("Mul", {b.y(0), b.op("Sub", {b.dy(), inner})}));
}

// dx = dy - exp(y) * sum(dy)
void log_softmax(GradBuilder& b) {
  b.grad(0, b.op("Sub", {b.dy(), b.op("Mul", {b.op("Exp", {b.y(0)}), sum_over_axis(b, b.dy())})}));
}

// loss = reduce(-log softmax(scores)[label]) over scores [N, C], labels [N]:
// d scores = (softmax(scores) - onehot(labels)) * d loss (/ N for the mean).
void softmax_cross_entropy(GradBuilder& b) {
  const ir::Node& n = b.node();
  ANVIL_CHECK(!n.input(2) && !n.attrs.has("ignore_index"), ErrorKind::kUnsupported,
              "{}: no gradient with class weights or ignore_index yet", n.describe());
  ANVIL_CHECK(!b.dy(1), ErrorKind::kUnsupported, "{}: no gradient through the log_prob output", n.describe());
  const ir::Type& scores = b.x(0)->type;
  ANVIL_CHECK(scores.has_shape() && scores.rank() == 2 && scores.dims()[1].is_known(), ErrorKind::kUnsupported,
              "{}: gradients need scores of shape [N, C] with C known", n.describe());
  const int64_t classes = scores.dims()[1].value;
  ir::Attributes last;
  last.set("axis", int64_t{-1});
  ir::Value* probs = b.op("Softmax", {b.x(0)}, last);
  ir::Value* values = b.op("Cast", {b.ints({0, 1})}, [] {
    ir::Attributes a;
    a.set("to", int64_t{1});
    return a;
  }());
  ir::Value* onehot = b.op("OneHot", {b.x(1), b.ints({classes}), values}, last);
  ir::Value* diff = b.op("Sub", {probs, onehot});
  const std::string reduction = n.attrs.get_string("reduction", "mean");
  ir::Value* scale = b.dy();
  if (reduction == "none") {
    scale = b.op("Unsqueeze", {b.dy(), b.ints({1})});
  } else if (reduction == "mean") {
    ir::Attributes to_float;
    to_float.set("to", int64_t{1});
    ir::Value* rows = b.op("Cast", {b.op("Size", {b.x(1)})}, to_float);
    scale = b.op("Div", {b.dy(), rows});
  }
  b.grad(0, b.op("Mul", {diff, scale}));
}

const RegisterGradient kRules[] = {
    {"Softmax", softmax}, {"LogSoftmax", log_softmax}, {"SoftmaxCrossEntropyLoss", softmax_cross_entropy}};

}  // namespace
}  // namespace anvil::train
