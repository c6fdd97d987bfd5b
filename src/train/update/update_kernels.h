// The optimizers' inner loops, one chunk of one parameter tensor at a time,
// compiled once per vector ISA (update_kernels_{sse41,avx2,avx512}.cc) and
// picked at start-up by vector_isa(). The updates also return the sum of the
// squared raw gradients of their chunk.
#pragma once

#include <cstdint>

#include "core/vector_isa.h"

namespace anvil::train {

struct AdamStep {
  float beta1, beta2, eps;
  float step_size;        // lr / (1 - beta1^t)
  float inv_sqrt_bias2;   // 1 / sqrt(1 - beta2^t)
  float l2;               // weight decay added to the gradient (adam)
  float decay;            // decoupled: p *= 1 - lr * wd before the update (adamw); 0 otherwise
  float clip;             // the gradients' scale (1 when clipping is off)
};

struct SgdStep {
  float lr, l2, momentum, clip;
  bool nesterov, first_step;  // PyTorch's momentum buffer starts as the first gradient
};

struct UpdateKernels {
  // p, m, v updated in place; returns the sum of g^2 over the chunk (g unclipped).
  double (*adam)(float* p, const float* g, float* m, float* v, int64_t n, const AdamStep& s);
  // `buf` is null without momentum.
  double (*sgd)(float* p, const float* g, float* buf, int64_t n, const SgdStep& s);
  double (*sum_squares)(const float* g, int64_t n);
};

const UpdateKernels& update_kernels();                 // for vector_isa()
const UpdateKernels& update_kernels_for(VectorIsa isa);  // tests: each path

}  // namespace anvil::train
