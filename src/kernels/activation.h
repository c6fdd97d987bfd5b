// The activations a fused node may carry, applied in place (reference path).
#pragma once

#include <cstdint>
#include <string>

#include "ir/graph.h"

namespace anvil::kernels {

bool is_known_activation(const std::string& name);

// The activation attributes of a fused node (activation, activation_alpha,
// activation_beta), removed from `node` so that it reads as the plain op.
struct FusedActivationSpec {
  std::string name;
  float alpha = 0.f, beta = 0.f;
};
FusedActivationSpec take_activation(ir::Node& node);
// name as the fusion pass writes it ("Relu", "Clip", ...); "" is a no-op.
void apply_activation(float* data, int64_t n, const std::string& name, float alpha, float beta);
// ReLU's gradient: dx[i] = y[i] > 0 ? dy[i] : 0 for i < n (dx may be dy),
// split over the OpenMP team when n is large.
void relu_grad(const float* dy, const float* y, float* dx, int64_t n);

}  // namespace anvil::kernels
