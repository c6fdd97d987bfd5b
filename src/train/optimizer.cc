#include "train/optimizer.h"

#include <omp.h>

#include <cmath>

#include "core/check.h"

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

double Optimizer::step(std::vector<Tensor>& params, const std::vector<Tensor>& grads, float lr) {
  ANVIL_CHECK(params.size() == first_.size() && grads.size() == first_.size(), ErrorKind::kInvalidArgument,
              "the optimizer was made for {} parameters, got {} and {} gradients", first_.size(), params.size(),
              grads.size());
  for (size_t t = 0; t < params.size(); ++t)
    ANVIL_CHECK(params[t].dtype() == DType::kFloat32 && grads[t].dtype() == DType::kFloat32 &&
                    params[t].shape() == shapes_[t] && grads[t].shape() == shapes_[t],
                ErrorKind::kInvalidArgument, "parameter {} or its gradient is not float32 of shape {}", t,
                shape_str(shapes_[t]));
  const int64_t chunks = static_cast<int64_t>(chunks_.size());

  double squares = 0;
#pragma omp parallel for reduction(+ : squares) schedule(static)
  for (int64_t c = 0; c < chunks; ++c) {
    const Chunk& ch = chunks_[static_cast<size_t>(c)];
    const float* g = grads[ch.tensor].data<float>();
    for (int64_t i = ch.begin; i < ch.end; ++i) squares += static_cast<double>(g[i]) * g[i];
  }
  const double norm = std::sqrt(squares);
  const float clip = options_.clip_norm > 0 && norm > options_.clip_norm
                         ? static_cast<float>(options_.clip_norm / (norm + 1e-6))
                         : 1.f;

  ++steps_;
  const OptimizerOptions& o = options_;
  const bool sgd = o.kind == "sgd", decoupled = o.kind == "adamw";
  const float bias1 = 1.f - std::pow(o.beta1, static_cast<float>(steps_));
  const float bias2 = 1.f - std::pow(o.beta2, static_cast<float>(steps_));
  const bool first_step = steps_ == 1;
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < chunks; ++c) {
    const Chunk& ch = chunks_[static_cast<size_t>(c)];
    float* p = params[ch.tensor].data<float>();
    const float* gr = grads[ch.tensor].data<float>();
    float* m = first_[ch.tensor].empty() ? nullptr : first_[ch.tensor].data<float>();
    float* v = second_[ch.tensor].empty() ? nullptr : second_[ch.tensor].data<float>();
    for (int64_t i = ch.begin; i < ch.end; ++i) {
      float g = gr[i] * clip;
      if (sgd) {
        g += o.weight_decay * p[i];
        if (m) {
          m[i] = first_step ? g : o.momentum * m[i] + g;  // PyTorch: the buffer starts as the first gradient
          g = o.nesterov ? g + o.momentum * m[i] : m[i];
        }
        p[i] -= lr * g;
        continue;
      }
      if (decoupled)
        p[i] -= lr * o.weight_decay * p[i];
      else
        g += o.weight_decay * p[i];
      m[i] = o.beta1 * m[i] + (1 - o.beta1) * g;
      v[i] = o.beta2 * v[i] + (1 - o.beta2) * g * g;
      p[i] -= lr * (m[i] / bias1) / (std::sqrt(v[i] / bias2) + o.eps);
    }
  }
  return norm;
}

}  // namespace anvil::train
