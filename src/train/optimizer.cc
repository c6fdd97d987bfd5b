#include "train/optimizer.h"

#include <omp.h>

#include <cmath>
#include <cstring>

#include "core/check.h"
#include "train/update/update_kernels.h"

namespace anvil::train {

namespace {

constexpr int64_t kChunk = 16384;  // elements per unit of parallel work
constexpr double kPi = 3.14159265358979323846;

}  // namespace

float Schedule::lr_at(float base_lr, int64_t step) const {
  if (kind == "step") return base_lr * std::pow(gamma, static_cast<float>(step / std::max<int64_t>(1, step_size)));
  if (kind == "cosine") {
    const double t = std::min<double>(1.0, static_cast<double>(step) / static_cast<double>(std::max<int64_t>(1, total_steps)));
    return static_cast<float>(min_lr + (base_lr - min_lr) * 0.5 * (1.0 + std::cos(kPi * t)));
  }
  return base_lr;
}

Optimizer::Optimizer(const OptimizerOptions& options, const std::vector<Tensor>& params) : options_(options) {
  const std::string& k = options.kind;
  ANVIL_CHECK(k == "sgd" || k == "adam" || k == "adamw", ErrorKind::kInvalidArgument,
              "unknown optimizer '{}' (optimizers: sgd, adam, adamw)", k);
  ANVIL_CHECK(options.lr >= 0 && std::isfinite(options.lr), ErrorKind::kInvalidArgument,
              "the learning rate must be a finite number >= 0, got {}", options.lr);
  ANVIL_CHECK(options.momentum >= 0 && options.momentum < 1, ErrorKind::kInvalidArgument,
              "momentum must be in [0, 1), got {}", options.momentum);
  ANVIL_CHECK(!options.nesterov || options.momentum > 0, ErrorKind::kInvalidArgument,
              "Nesterov momentum needs momentum > 0");
  ANVIL_CHECK(k == "sgd" || (options.momentum == 0 && !options.nesterov), ErrorKind::kInvalidArgument,
              "momentum and Nesterov are SGD's options, not {}'s", k);
  ANVIL_CHECK(options.beta1 >= 0 && options.beta1 < 1 && options.beta2 >= 0 && options.beta2 < 1,
              ErrorKind::kInvalidArgument, "Adam's betas must be in [0, 1), got {} and {}", options.beta1,
              options.beta2);
  ANVIL_CHECK(options.weight_decay >= 0 && options.clip_norm >= 0 && options.eps > 0, ErrorKind::kInvalidArgument,
              "weight decay and clip norm must be >= 0 and eps > 0");
  for (size_t t = 0; t < params.size(); ++t) {
    ANVIL_CHECK(params[t].dtype() == DType::kFloat32, ErrorKind::kInvalidArgument,
                "parameter {} is {}; the optimizers update float32", t, dtype_name(params[t].dtype()));
    shapes_.push_back(params[t].shape());
    for (int64_t b = 0; b < params[t].numel(); b += kChunk) chunks_.push_back({t, b, std::min(params[t].numel(), b + kChunk)});
    const bool needs_first = k != "sgd" || options.momentum > 0;
    first_.push_back(needs_first ? Tensor(DType::kFloat32, params[t].shape()) : Tensor());
    second_.push_back(k != "sgd" ? Tensor(DType::kFloat32, params[t].shape()) : Tensor());
  }
}

Optimizer::~Optimizer() = default;

void Optimizer::restore(int64_t steps, const std::vector<Tensor>& first, const std::vector<Tensor>& second) {
  ANVIL_CHECK(steps >= 0 && first.size() == first_.size() && second.size() == second_.size(),
              ErrorKind::kInvalidArgument, "the optimizer state is for {} parameters, this optimizer has {}",
              first.size(), first_.size());
  auto fits = [](const Tensor& mine, const Tensor& theirs) {
    return mine.empty() ? theirs.empty() : theirs.dtype() == DType::kFloat32 && theirs.shape() == mine.shape();
  };
  for (size_t t = 0; t < first_.size(); ++t)
    ANVIL_CHECK(fits(first_[t], first[t]) && fits(second_[t], second[t]), ErrorKind::kInvalidArgument,
                "the optimizer state of parameter {} does not fit its shape {}", t, shape_str(shapes_[t]));
  for (size_t t = 0; t < first_.size(); ++t) {
    if (!first_[t].empty()) std::memcpy(first_[t].raw(), first[t].raw(), first_[t].nbytes());
    if (!second_[t].empty()) std::memcpy(second_[t].raw(), second[t].raw(), second_[t].nbytes());
  }
  steps_ = steps;
}

// Runs `fn` over every chunk in parallel and sums what it returns, in chunk
// order (a fixed order: the result does not depend on the thread count).
template <typename Fn>
double Optimizer::sum_over_chunks(Fn&& fn) const {
  const int64_t n = static_cast<int64_t>(chunks_.size());
  partial_.assign(chunks_.size(), 0.0);
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < n; ++c) partial_[static_cast<size_t>(c)] = fn(chunks_[static_cast<size_t>(c)]);
  double sum = 0;
  for (double v : partial_) sum += v;
  return sum;
}

double Optimizer::step(std::vector<Tensor>& params, const std::vector<Tensor>& grads, float lr) {
  ANVIL_CHECK(params.size() == first_.size() && grads.size() == first_.size(), ErrorKind::kInvalidArgument,
              "the optimizer was made for {} parameters, got {} and {} gradients", first_.size(), params.size(),
              grads.size());
  for (size_t t = 0; t < params.size(); ++t)
    ANVIL_CHECK(params[t].dtype() == DType::kFloat32 && grads[t].dtype() == DType::kFloat32 &&
                    params[t].shape() == shapes_[t] && grads[t].shape() == shapes_[t],
                ErrorKind::kInvalidArgument, "parameter {} or its gradient is not float32 of shape {}", t,
                shape_str(shapes_[t]));
  const UpdateKernels& k = update_kernels();
  const OptimizerOptions& o = options_;

  // The norm before the update (a read of the gradients only): clipping
  // needs it, and a gradient that is not finite must stop the step before
  // it reaches the parameters.
  const double norm = std::sqrt(sum_over_chunks([&](const Chunk& ch) {
    return k.sum_squares(grads[ch.tensor].data<float>() + ch.begin, ch.end - ch.begin);
  }));
  ANVIL_CHECK(std::isfinite(norm), ErrorKind::kInvalidArgument,
              "the gradients are not finite at step {}: lower the learning rate, or check the data", steps_ + 1);
  float clip = 1.f;
  if (o.clip_norm > 0 && norm > o.clip_norm) clip = static_cast<float>(o.clip_norm / (norm + 1e-6));

  ++steps_;
  if (o.kind == "sgd") {
    const SgdStep st{lr, o.weight_decay, o.momentum, clip, o.nesterov, steps_ == 1};
    sum_over_chunks([&](const Chunk& ch) {
      float* buf = first_[ch.tensor].empty() ? nullptr : first_[ch.tensor].data<float>() + ch.begin;
      return k.sgd(params[ch.tensor].data<float>() + ch.begin, grads[ch.tensor].data<float>() + ch.begin, buf,
                   ch.end - ch.begin, st);
    });
  } else {
    const bool decoupled = o.kind == "adamw";
    const float bias1 = 1.f - std::pow(o.beta1, static_cast<float>(steps_));
    const float bias2 = 1.f - std::pow(o.beta2, static_cast<float>(steps_));
    const AdamStep st{o.beta1, o.beta2, o.eps, lr / bias1, 1.f / std::sqrt(bias2),
                      decoupled ? 0.f : o.weight_decay, decoupled ? lr * o.weight_decay : 0.f, clip};
    sum_over_chunks([&](const Chunk& ch) {
      const size_t t = ch.tensor;
      return k.adam(params[t].data<float>() + ch.begin, grads[t].data<float>() + ch.begin,
                    first_[t].data<float>() + ch.begin, second_[t].data<float>() + ch.begin, ch.end - ch.begin, st);
    });
  }
  return norm;
}

}  // namespace anvil::train
