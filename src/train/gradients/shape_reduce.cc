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

// The reduced axes, normalised (empty: all of them).
std::vector<int64_t> reduced_axes(GradBuilder& b, bool axes_from_input) {
  std::vector<int64_t> axes;
  if (axes_from_input && b.x(1)) {
    const ir::Value* v = b.x(1);
    ANVIL_CHECK(v->is_constant(), ErrorKind::kUnsupported, "{}: gradients need constant reduction axes",
                b.node().describe());
    for (int64_t i = 0; i < v->constant->numel(); ++i) axes.push_back(v->constant->data<int64_t>()[i]);
  } else if (!axes_from_input) {
    axes = b.node().attrs.get_ints("axes");
  }
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
  ANVIL_CHECK(b.node().attrs.get_int("noop_with_empty_axes", 0) == 0 || b.x(1), ErrorKind::kUnsupported,
              "{}: no gradient for noop_with_empty_axes", b.node().describe());
  b.grad(0, spread(b, reduced_axes(b, b.node().opset >= 13)));
}

void reduce_mean(GradBuilder& b) {
  ir::Value* g = spread(b, reduced_axes(b, b.node().opset >= 18));
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
