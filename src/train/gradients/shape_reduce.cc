// Gradients of shape ops (the gradient takes the input's shape back) and of
// the reductions (the gradient is spread back over the reduced axes).
#include "core/check.h"
#include "train/gradient_rule.h"

namespace anvil::train {
namespace {

void reshape_back(GradBuilder& b) { b.grad(0, b.op("Reshape", {b.dy(), b.op("Shape", {b.x(0)})})); }

void transpose(GradBuilder& b) {
  std::vector<int64_t> perm = b.node().attrs.get_ints("perm");
  if (perm.empty()) {
    const int rank = b.x(0)->type.rank();
    for (int i = rank - 1; i >= 0; --i) perm.push_back(i);
  }
  std::vector<int64_t> inverse(perm.size());
  for (size_t i = 0; i < perm.size(); ++i) inverse[static_cast<size_t>(perm[i])] = static_cast<int64_t>(i);
  ir::Attributes a;
  a.set("perm", inverse);
  b.grad(0, b.op("Transpose", {b.dy()}, a));
}

// The reduced axes, normalised (empty: all of them). Sets `identity` when the
// op reduced nothing (no axes and noop_with_empty_axes).
std::vector<int64_t> reduced_axes(GradBuilder& b, bool axes_from_input, bool& identity) {
  std::vector<int64_t> axes;
  if (axes_from_input && b.x(1)) {
    const Tensor* t = GradBuilder::constant_of(b.x(1));
    ANVIL_CHECK(t, ErrorKind::kUnsupported, "{}: gradients need reduction axes known before the run (a constant)",
                b.node().describe());
    for (int64_t i = 0; i < t->numel(); ++i) axes.push_back(t->data<int64_t>()[i]);
  } else if (!axes_from_input) {
    axes = b.node().attrs.get_ints("axes");
  }
  identity = axes.empty() && axes_from_input && b.node().attrs.get_int("noop_with_empty_axes", 0) != 0;
  const int rank = b.x(0)->type.rank();
  if (axes.empty())
    for (int i = 0; i < rank; ++i) axes.push_back(i);
  for (int64_t& a : axes) a = a < 0 ? a + rank : a;
  return axes;
}

// dy expanded back over the reduced axes to x's shape.
ir::Value* spread(GradBuilder& b, const std::vector<int64_t>& axes) {
  ANVIL_CHECK(b.x(0)->type.has_shape(), ErrorKind::kUnsupported, "{}: gradients need the input's rank",
              b.node().describe());
  ir::Value* g = b.dy();
  if (b.node().attrs.get_int("keepdims", 1) == 0) g = b.op("Unsqueeze", {g, b.ints(axes)});
  return b.op("Expand", {g, b.op("Shape", {b.x(0)})});
}

void reduce_sum(GradBuilder& b) {
  bool identity = false;
  const std::vector<int64_t> axes = reduced_axes(b, b.node().opset >= 13, identity);
  b.grad(0, identity ? b.dy() : spread(b, axes));
}

void reduce_mean(GradBuilder& b) {
  bool identity = false;
  const std::vector<int64_t> axes = reduced_axes(b, b.node().opset >= 18, identity);
  if (identity) {
    b.grad(0, b.dy());
    return;
  }
  ir::Value* g = spread(b, axes);
  ir::Attributes to_float;
  to_float.set("to", int64_t{1});
  ir::Value* count = b.op("Div", {b.op("Cast", {b.op("Size", {b.x(0)})}, to_float),
                                  b.op("Cast", {b.op("Size", {b.y(0)})}, to_float)});
  b.grad(0, b.op("Div", {g, count}));
}

const RegisterGradient kRules[] = {
    {"Reshape", reshape_back}, {"Flatten", reshape_back}, {"Squeeze", reshape_back},
    {"Unsqueeze", reshape_back}, {"Transpose", transpose}, {"ReduceSum", reduce_sum},
    {"ReduceMean", reduce_mean},
};

}  // namespace
}  // namespace anvil::train
