// Gradients of element-wise ops: arithmetic with broadcasting, activations.
#include "core/check.h"
#include "train/gradient_rule.h"

namespace anvil::train {
namespace {

DType dtype_of(const GradBuilder& b) { return b.x(0)->dtype(); }

void add(GradBuilder& b) {
  if (b.wants(0)) b.grad(0, b.unbroadcast(b.dy(), b.x(0)));
  if (b.wants(1)) b.grad(1, b.unbroadcast(b.dy(), b.x(1)));
}

void sub(GradBuilder& b) {
  if (b.wants(0)) b.grad(0, b.unbroadcast(b.dy(), b.x(0)));
  if (b.wants(1)) b.grad(1, b.unbroadcast(b.op("Neg", {b.dy()}), b.x(1)));
}

void mul(GradBuilder& b) {
  if (b.wants(0)) b.grad(0, b.unbroadcast(b.op("Mul", {b.dy(), b.x(1)}), b.x(0)));
  if (b.wants(1)) b.grad(1, b.unbroadcast(b.op("Mul", {b.dy(), b.x(0)}), b.x(1)));
}

// y = a / b: da = dy / b, db = -dy * y / b.
void div(GradBuilder& b) {
  if (b.wants(0)) b.grad(0, b.unbroadcast(b.op("Div", {b.dy(), b.x(1)}), b.x(0)));
  if (b.wants(1))
    b.grad(1, b.unbroadcast(b.op("Neg", {b.op("Div", {b.op("Mul", {b.dy(), b.y(0)}), b.x(1)})}), b.x(1)));
}

void neg(GradBuilder& b) { b.grad(0, b.op("Neg", {b.dy()})); }
void identity(GradBuilder& b) { b.grad(0, b.dy()); }

// One fused kernel for float32 (anvil.ReluGrad); composed for other types.
void relu(GradBuilder& b) {
  if (dtype_of(b) == DType::kFloat32) return b.grad(0, b.anvil_op("ReluGrad", {b.dy(), b.y(0)}));
  ir::Value* positive = b.op("Greater", {b.x(0), b.scalar(0, dtype_of(b))});
  b.grad(0, b.op("Where", {positive, b.dy(), b.scalar(0, dtype_of(b))}));
}

void leaky_relu(GradBuilder& b) {
  const float alpha = b.node().attrs.get_float("alpha", 0.01f);
  ir::Value* positive = b.op("Greater", {b.x(0), b.scalar(0, dtype_of(b))});
  b.grad(0, b.op("Where", {positive, b.dy(), b.op("Mul", {b.dy(), b.scalar(alpha, dtype_of(b))})}));
}

// dy * y * (1 - y)
void sigmoid(GradBuilder& b) {
  ir::Value* one_minus = b.op("Sub", {b.scalar(1, dtype_of(b)), b.y(0)});
  b.grad(0, b.op("Mul", {b.dy(), b.op("Mul", {b.y(0), one_minus})}));
}

// dy * (1 - y^2)
void tanh_(GradBuilder& b) {
  ir::Value* one_minus = b.op("Sub", {b.scalar(1, dtype_of(b)), b.op("Mul", {b.y(0), b.y(0)})});
  b.grad(0, b.op("Mul", {b.dy(), one_minus}));
}

void exp_(GradBuilder& b) { b.grad(0, b.op("Mul", {b.dy(), b.y(0)})); }
void log_(GradBuilder& b) { b.grad(0, b.op("Div", {b.dy(), b.x(0)})); }

// dy / (2 y)
void sqrt_(GradBuilder& b) {
  b.grad(0, b.op("Div", {b.dy(), b.op("Mul", {b.scalar(2, dtype_of(b)), b.y(0)})}));
}

// x ^ p for a constant scalar p: dy * p * x^(p-1).
void pow_(GradBuilder& b) {
  const Tensor* p = GradBuilder::constant_of(b.x(1));
  ANVIL_CHECK(p && p->numel() == 1 && !b.wants(1), ErrorKind::kUnsupported,
              "{}: gradients of Pow need a constant scalar exponent", b.node().describe());
  const double e = element_as_double(*p, 0);
  ir::Value* power = b.op("Pow", {b.x(0), b.scalar(static_cast<float>(e - 1), dtype_of(b))});
  ir::Value* g = b.op("Mul", {b.dy(), b.op("Mul", {power, b.scalar(static_cast<float>(e), dtype_of(b))})});
  b.grad(0, b.unbroadcast(g, b.x(0)));
}

// dy * 2 / sqrt(pi) * exp(-x^2): GELU as PyTorch exports it is x * (1 + erf(x / sqrt 2)) / 2.
void erf_(GradBuilder& b) {
  ir::Value* gauss = b.op("Exp", {b.op("Neg", {b.op("Mul", {b.x(0), b.x(0)})})});
  b.grad(0, b.op("Mul", {b.dy(), b.op("Mul", {gauss, b.scalar(1.1283791670955126f, dtype_of(b))})}));
}

// dy * sign(x) (0 at 0)
void abs_(GradBuilder& b) { b.grad(0, b.op("Mul", {b.dy(), b.op("Sign", {b.x(0)})})); }

// Dropout in inference: the identity. In training (anvil.TrainingDropout, made
// by to_training_mode): the kept elements' gradients, scaled as the forward was.
void dropout(GradBuilder& b) { b.grad(0, b.dy()); }

void training_dropout(GradBuilder& b) {
  const ir::Node& n = b.node();
  ANVIL_CHECK(n.output(1), ErrorKind::kUnsupported, "{}: training needs the mask output", n.describe());
  const float ratio = n.attrs.get_float("ratio", 0.5f);
  ir::Attributes to;
  to.set("to", int64_t{1});
  ir::Value* kept = b.op("Cast", {n.output(1)}, to);
  b.grad(0, b.op("Mul", {b.dy(), b.op("Mul", {kept, b.scalar(1.f / (1.f - ratio), DType::kFloat32)})}));
}

// dy * sigmoid(x)
void softplus(GradBuilder& b) { b.grad(0, b.op("Mul", {b.dy(), b.op("Sigmoid", {b.x(0)})})); }

const RegisterGradient kRules[] = {
    {"Erf", erf_},      {"Abs", abs_},        {"Dropout", dropout}, {"anvil.TrainingDropout", training_dropout},
    {"Softplus", softplus},
    {"Add", add},       {"Sub", sub},         {"Mul", mul},         {"Div", div},     {"Neg", neg},
    {"Identity", identity}, {"Relu", relu},   {"LeakyRelu", leaky_relu}, {"Sigmoid", sigmoid},
    {"Tanh", tanh_},    {"Exp", exp_},        {"Log", log_},        {"Sqrt", sqrt_},  {"Pow", pow_},
};

}  // namespace
}  // namespace anvil::train
