// Gradients of shape ops (the gradient takes the input's shape back) and of
// the reductions (the gradient is spread back over the reduced axes).
#include <algorithm>

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

// The gradient split back along the axis, one piece per input.
void concat(GradBuilder& b) {
  const int rank = b.y(0)->type.rank();
  int64_t axis = b.node().attrs.get_int("axis", 0);
  if (axis < 0) axis += rank;
  std::vector<int64_t> sizes;
  for (size_t i = 0; i < b.node().num_explicit_inputs(); ++i) {
    const ir::Type& t = b.x(i)->type;
    ANVIL_CHECK(t.has_shape() && t.rank() == rank && t.dims()[static_cast<size_t>(axis)].is_known(),
                ErrorKind::kUnsupported, "{}: gradients of Concat need every input's size along the axis",
                b.node().describe());
    sizes.push_back(t.dims()[static_cast<size_t>(axis)].value);
  }
  ir::Attributes a;
  a.set("axis", axis);
  std::vector<ir::Value*> pieces = b.op_n("Split", {b.dy(), b.ints(sizes)}, static_cast<int>(sizes.size()), a);
  for (size_t i = 0; i < pieces.size(); ++i) b.grad(i, pieces[i]);
}

std::vector<int64_t> constant_ints(GradBuilder& b, size_t input, std::vector<int64_t> fallback) {
  if (!b.x(input)) return fallback;
  const Tensor* t = GradBuilder::constant_of(b.x(input));
  ANVIL_CHECK(t && (t->dtype() == DType::kInt64 || t->dtype() == DType::kInt32), ErrorKind::kUnsupported,
              "{}: gradients of Slice need constant starts, ends, axes and steps", b.node().describe());
  std::vector<int64_t> v;
  for (int64_t i = 0; i < t->numel(); ++i) v.push_back(static_cast<int64_t>(element_as_double(*t, i)));
  return v;
}

// The gradient padded with zeros back to the input's shape (steps of 1, opset 10+).
void slice(GradBuilder& b) {
  const ir::Type& t = b.x(0)->type;
  ANVIL_CHECK(b.node().opset >= 10 && t.is_static(), ErrorKind::kUnsupported,
              "{}: gradients of Slice need opset 10+ and an input of known shape", b.node().describe());
  const int rank = t.rank();
  const std::vector<int64_t> starts = constant_ints(b, 1, {}), ends = constant_ints(b, 2, {});
  std::vector<int64_t> axes = constant_ints(b, 3, {}), steps = constant_ints(b, 4, {});
  if (axes.empty())
    for (size_t i = 0; i < starts.size(); ++i) axes.push_back(static_cast<int64_t>(i));
  std::vector<int64_t> pads(static_cast<size_t>(2 * rank), 0);
  for (size_t k = 0; k < axes.size() && k < starts.size() && k < ends.size(); ++k) {
    ANVIL_CHECK(steps.empty() || steps[k] == 1, ErrorKind::kUnsupported, "{}: gradients of Slice need steps of 1",
                b.node().describe());
    const int64_t axis = axes[k] < 0 ? axes[k] + rank : axes[k];
    const int64_t dim = t.dims()[static_cast<size_t>(axis)].value;
    auto clamp = [dim](int64_t v) { return std::clamp(v < 0 ? v + dim : v, int64_t{0}, dim); };
    const int64_t begin = clamp(starts[k]), end = std::max(begin, clamp(ends[k]));
    pads[static_cast<size_t>(axis)] = begin;
    pads[static_cast<size_t>(axis + rank)] = dim - end;
  }
  b.grad(0, b.op("Pad", {b.dy(), b.ints(pads)}));
}

const RegisterGradient kRules[] = {
    {"Concat", concat}, {"Slice", slice},
    {"Reshape", reshape_back}, {"Flatten", reshape_back}, {"Squeeze", reshape_back},
    {"Unsqueeze", reshape_back}, {"Transpose", transpose}, {"ReduceSum", reduce_sum},
    {"ReduceMean", reduce_mean},
};

}  // namespace
}  // namespace anvil::train
