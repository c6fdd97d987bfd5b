#include "kernels/activation.h"

#include <algorithm>
#include <cmath>

namespace anvil::kernels {

bool is_known_activation(const std::string& n) {
  return n.empty() || n == "Relu" || n == "LeakyRelu" || n == "Elu" || n == "Clip" || n == "Sigmoid" ||
         n == "Tanh" || n == "HardSigmoid" || n == "HardSwish" || n == "Gelu" || n == "GeluTanh" || n == "Swish";
}

FusedActivationSpec take_activation(ir::Node& node) {
  FusedActivationSpec spec{node.attrs.get_string("activation", ""), node.attrs.get_float("activation_alpha", 0.f),
                           node.attrs.get_float("activation_beta", 0.f)};
  for (const char* a : {"activation", "activation_alpha", "activation_beta"}) node.attrs.erase(a);
  return spec;
}

namespace {
template <typename F>
void apply(float* d, int64_t n, F f) {
#pragma omp parallel for if (n > 32768)
  for (int64_t i = 0; i < n; ++i) d[i] = f(d[i]);
}
}  // namespace

void apply_activation(float* d, int64_t n, const std::string& name, float alpha, float beta) {
  if (name.empty()) return;
  if (name == "Relu") apply(d, n, [](float x) { return x > 0.f ? x : 0.f; });
  else if (name == "LeakyRelu") apply(d, n, [=](float x) { return x >= 0.f ? x : alpha * x; });
  else if (name == "Elu") apply(d, n, [=](float x) { return x >= 0.f ? x : alpha * (std::exp(x) - 1.f); });
  else if (name == "Clip") apply(d, n, [=](float x) { return std::min(std::max(x, alpha), beta); });
  else if (name == "Sigmoid") apply(d, n, [](float x) { return 1.f / (1.f + std::exp(-x)); });
  else if (name == "Tanh") apply(d, n, [](float x) { return std::tanh(x); });
  else if (name == "HardSigmoid") apply(d, n, [=](float x) { return std::min(1.f, std::max(0.f, alpha * x + beta)); });
  else if (name == "HardSwish") apply(d, n, [](float x) { return x * std::min(1.f, std::max(0.f, x / 6.f + 0.5f)); });
  else if (name == "Gelu") apply(d, n, [](float x) { return 0.5f * x * (1.f + std::erf(x * 0.70710678f)); });
  else if (name == "Swish") apply(d, n, [=](float x) { return x / (1.f + std::exp(-alpha * x)); });
  else if (name == "GeluTanh")
    apply(d, n, [](float x) { return 0.5f * x * (1.f + std::tanh(0.79788456f * (x + 0.044715f * x * x * x))); });
}

void relu_grad(const float* dy, const float* y, float* dx, int64_t n) {
#pragma omp parallel for simd if (n > 65536) schedule(static)
  for (int64_t i = 0; i < n; ++i) dx[i] = y[i] > 0.f ? dy[i] : 0.f;
}

}  // namespace anvil::kernels
