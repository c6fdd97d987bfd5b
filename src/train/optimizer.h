// train::Optimizer — SGD (momentum, Nesterov, weight decay), Adam and AdamW,
// with PyTorch's update rules, global-norm gradient clipping, and step and
// cosine learning-rate schedules.
//
// step() updates every parameter in one parallel pass: the parameters are cut
// once into chunks of the same size, whatever tensor they belong to, so a
// model of many small tensors costs one OpenMP loop per step, not one per tensor.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "anvil/tensor.h"

namespace anvil::train {

struct OptimizerOptions {
  std::string kind = "adam";  // sgd | adam | adamw
  float lr = 1e-3f;
  float momentum = 0.f;       // sgd
  bool nesterov = false;      // sgd (needs momentum > 0)
  float weight_decay = 0.f;   // L2 added to the gradient (sgd, adam); decoupled for adamw
  float beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f;  // adam, adamw
  float clip_norm = 0.f;      // > 0: gradients scaled so their global L2 norm is at most this
};

struct Schedule {
  std::string kind = "constant";  // constant | step | cosine
  int64_t step_size = 1;          // step: multiply by gamma every step_size steps
  float gamma = 0.1f;
  int64_t total_steps = 1;        // cosine: from lr to min_lr over total_steps
  float min_lr = 0.f;
  float lr_at(float base_lr, int64_t step) const;
};

class Optimizer {
 public:
  // Throws anvil::Error (invalid argument) for an unknown kind or a bad value.
  Optimizer(const OptimizerOptions& options, const std::vector<Tensor>& params);
  ~Optimizer();

  // One update of `params` (float32, the shapes given at construction) from
  // `grads` at learning rate `lr`. Returns the gradients' global L2 norm
  // before clipping; throws anvil::Error (kInvalidArgument), the parameters
  // untouched, when it is not finite.
  double step(std::vector<Tensor>& params, const std::vector<Tensor>& grads, float lr);
  int64_t steps() const { return steps_; }
  // What a checkpoint keeps: the step count and the moment buffers (SGD's
  // momentum in `first`; an empty tensor where the optimizer keeps none).
  const std::vector<Tensor>& first_moments() const { return first_; }
  const std::vector<Tensor>& second_moments() const { return second_; }
  // Puts a checkpoint's state back; throws anvil::Error (kInvalidArgument)
  // when a buffer's shape or presence differs from this optimizer's.
  void restore(int64_t steps, const std::vector<Tensor>& first, const std::vector<Tensor>& second);
  const OptimizerOptions& options() const { return options_; }

 private:
  struct Chunk {
    size_t tensor;
    int64_t begin, end;
  };
  template <typename Fn>
  double sum_over_chunks(Fn&& fn) const;

  OptimizerOptions options_;
  std::vector<Chunk> chunks_;
  mutable std::vector<double> partial_;  // per chunk, summed in order
  std::vector<Shape> shapes_;           // of the parameters, as given at construction
  std::vector<Tensor> first_, second_;  // momentum / Adam's moments, per parameter
  int64_t steps_ = 0;
};

}  // namespace anvil::train
