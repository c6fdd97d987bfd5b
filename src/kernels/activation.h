// The activations a fused node may carry, applied in place (reference path).
#pragma once

#include <cstdint>
#include <string>

namespace anvil::kernels {

bool is_known_activation(const std::string& name);
// name as the fusion pass writes it ("Relu", "Clip", ...); "" is a no-op.
void apply_activation(float* data, int64_t n, const std::string& name, float alpha, float beta);

}  // namespace anvil::kernels
