// Gradients of Conv (oneDNN's backward primitives, src/kernels/dnnl/conv_grad.cc)
// and pooling: MaxPool (anvil.MaxPoolGrad: the gradient back to each window's maximum), AveragePool (a
// transposed convolution with a kernel of ones, over the window counts) and
// GlobalAveragePool (the gradient spread evenly over each plane).
#include "core/check.h"
#include "train/gradient_rule.h"

namespace anvil::train {
namespace {

// The forward node's spatial attributes, copied onto the nodes computing its gradient.
ir::Attributes spatial_attrs(const ir::Node& n, std::initializer_list<const char*> names) {
  ir::Attributes a;
  for (const char* name : names)
    if (n.attrs.has(name)) a.set(name, n.attrs.get_ints(name));
  return a;
}

void conv(GradBuilder& b) {
  const ir::Node& n = b.node();
  ir::Attributes a = spatial_attrs(n, {"strides", "pads", "dilations", "kernel_shape"});
  a.set("group", n.attrs.get_int("group", 1));
  if (n.attrs.has("auto_pad")) a.set("auto_pad", n.attrs.get_string("auto_pad", "NOTSET"));
  if (b.wants(0)) b.grad(0, b.anvil_op("ConvGradInput", {b.dy(), b.x(1), b.x(0)}, a));
  const bool bias = b.x(2) && b.wants(2);
  if (!b.wants(1) && !bias) return;
  std::vector<ir::Value*> g = b.anvil_op_n("ConvGradWeight", {b.dy(), b.x(0), b.x(1)}, bias ? 2 : 1, a);
  if (b.wants(1)) b.grad(1, g[0]);
  if (bias) b.grad(2, g[1]);
}

// dX = each output's gradient added at the element its window's maximum
// came from (anvil.MaxPoolGrad: MaxPool's Indices, found again in one pass).
// Y does not depend on storage_order, which orders only the Indices.
void max_pool(GradBuilder& b) {
  const ir::Node& n = b.node();
  ANVIL_CHECK(b.x(0)->dtype() == DType::kFloat32, ErrorKind::kUnsupported,
              "{}: gradients of MaxPool need a float32 input, not {}", n.describe(), dtype_name(b.x(0)->dtype()));
  b.grad(0, b.anvil_op("MaxPoolGrad", {b.dy(), b.x(0)}, n.attrs));
}

// dX = ConvTranspose(dY / count, ones[C, 1, k...], group = C): each window's
// gradient spread evenly over the elements its average counted.
void average_pool(GradBuilder& b) {
  const ir::Node& n = b.node();
  const ir::Type& x = b.x(0)->type;
  const ir::Type& y = b.y(0)->type;
  const Shape xs = x.shape_or_minus_one(), ys = y.has_shape() ? y.shape_or_minus_one() : Shape{};
  bool known = x.has_shape() && x.rank() >= 3 && ys.size() == xs.size();
  for (size_t i = 1; known && i < xs.size(); ++i) known = xs[i] >= 0 && ys[i] >= 0;
  ANVIL_CHECK(known && x.dtype() == DType::kFloat32, ErrorKind::kUnsupported,
              "{}: gradients of AveragePool need a float32 input with known channels and spatial sizes",
              n.describe());
  ANVIL_CHECK(n.attrs.get_string("auto_pad", "NOTSET") == "NOTSET" && n.attrs.get_int("ceil_mode", 0) == 0,
              ErrorKind::kUnsupported, "{}: gradients of AveragePool need explicit pads and ceil_mode 0",
              n.describe());
  const std::vector<int64_t> k = n.attrs.get_ints("kernel_shape");
  const size_t rank = k.size();
  std::vector<int64_t> strides = n.attrs.get_ints("strides"), pads = n.attrs.get_ints("pads");
  std::vector<int64_t> dilations = n.attrs.get_ints("dilations");
  strides.resize(rank, 1);
  pads.resize(2 * rank, 0);
  for (int64_t d : dilations)
    ANVIL_CHECK(d == 1, ErrorKind::kUnsupported, "{}: no AveragePool gradient with dilations", n.describe());
  const int64_t channels = xs[1];

  ir::Attributes window;
  window.set("strides", strides);
  window.set("pads", pads);
  // The divisor of each output position: the window's size, or (without
  // count_include_pad) the number of real elements in it, a convolution of ones.
  Shape kernel_shape = {1, 1};
  kernel_shape.insert(kernel_shape.end(), k.begin(), k.end());
  ir::Value* divisor;
  if (n.attrs.get_int("count_include_pad", 0)) {
    divisor = b.scalar(static_cast<float>(shape_numel(Shape(k.begin(), k.end()))), DType::kFloat32);
  } else {
    Shape plane = {1, 1};
    plane.insert(plane.end(), xs.begin() + 2, xs.end());
    divisor = b.op("Conv", {b.constant(filled(DType::kFloat32, plane, 1.f)),
                            b.constant(filled(DType::kFloat32, kernel_shape, 1.f))}, window);
  }
  kernel_shape[0] = channels;
  // The output padding that makes ConvTranspose's output X's size again.
  std::vector<int64_t> output_padding(rank);
  for (size_t i = 0; i < rank; ++i) {
    output_padding[i] = xs[2 + i] - ((ys[2 + i] - 1) * strides[i] + k[i] - pads[i] - pads[rank + i]);
    ANVIL_CHECK(output_padding[i] >= 0 && output_padding[i] < std::max<int64_t>(strides[i], 1) + k[i],
                ErrorKind::kUnsupported, "{}: the pooling windows do not tile the input", n.describe());
  }
  window.set("group", channels);
  window.set("output_padding", output_padding);
  b.grad(0, b.op("ConvTranspose", {b.op("Div", {b.dy(), divisor}),
                                   b.constant(filled(DType::kFloat32, kernel_shape, 1.f))}, window));
}

// dX = dY / (H x W ...) spread over each plane.
void global_average_pool(GradBuilder& b) {
  ir::Attributes to_float;
  to_float.set("to", int64_t{1});
  ir::Value* plane = b.op("Div", {b.op("Cast", {b.op("Size", {b.x(0)})}, to_float),
                                  b.op("Cast", {b.op("Size", {b.dy()})}, to_float)});
  b.grad(0, b.op("Expand", {b.op("Div", {b.dy(), plane}), b.op("Shape", {b.x(0)})}));
}

const RegisterGradient kRules[] = {{"Conv", conv},
                                   {"MaxPool", max_pool},
                                   {"AveragePool", average_pool},
                                   {"GlobalAveragePool", global_average_pool}};

}  // namespace
}  // namespace anvil::train
