#include "train/trainer.h"

#include <chrono>
#include <cmath>

#include "core/check.h"
#include "core/denormals.h"

namespace anvil::train {

Trainer::Trainer(std::unique_ptr<ir::Graph> forward, const std::string& loss,
                 const std::vector<std::string>& parameters, const OptimizerOptions& optimizer,
                 const SessionOptions& session, const std::vector<std::string>& extra_outputs)
    : grad_(build_gradient_graph(std::move(forward), loss, parameters, extra_outputs)),
      extra_count_(extra_outputs.size()),
      threads_(session.num_threads) {
  for (const Tensor& t : grad_.initial_values) params_.push_back(t.clone());  // trained here, in place
  optimizer_ = std::make_unique<Optimizer>(optimizer, params_);
  session_ = std::make_unique<Session>(Session::from_graph(std::move(grad_.graph), session));
}

std::vector<Tensor> Trainer::run(const std::map<std::string, Tensor>& batch, RunProfile* profile) const {
  std::map<std::string, Tensor> feed = batch;
  for (size_t k = 0; k < params_.size(); ++k) {
    const std::string& name = grad_.parameters[k];
    ANVIL_CHECK(!batch.count(name), ErrorKind::kInvalidArgument, "'{}' is a parameter, not an input", name);
    feed[name] = params_[k];  // shares the bytes: the optimizer updates them after the run
  }
  return session_->run(feed, profile);
}

StepResult Trainer::evaluate(const std::map<std::string, Tensor>& batch) const {
  const ScopedFlushDenormals flush(flush_denormals_, threads_);
  std::vector<Tensor> out = run(batch);
  StepResult result;
  result.loss = element_as_double(out[0], 0);
  result.extra_outputs.assign(out.begin() + 1, out.begin() + 1 + static_cast<std::ptrdiff_t>(extra_count_));
  return result;
}

StepResult Trainer::step(const std::map<std::string, Tensor>& batch, float lr, RunProfile* profile) {
  const ScopedFlushDenormals flush(flush_denormals_, threads_);
  std::vector<Tensor> out = run(batch, profile);
  StepResult result;
  result.loss = element_as_double(out[0], 0);
  ANVIL_CHECK(std::isfinite(result.loss), ErrorKind::kInvalidArgument,
              "the loss is {} at step {}: lower the learning rate, or check the data", result.loss,
              optimizer_->steps() + 1);
  result.extra_outputs.assign(out.begin() + 1, out.begin() + 1 + static_cast<std::ptrdiff_t>(extra_count_));
  std::vector<Tensor> grads(out.begin() + 1 + static_cast<std::ptrdiff_t>(extra_count_), out.end());
  for (size_t k = 0; k < grads.size(); ++k)
    ANVIL_CHECK(grads[k].dtype() == DType::kFloat32 && grads[k].shape() == params_[k].shape(), ErrorKind::kInternal,
                "the gradient of '{}' has shape {}, the parameter {}", grad_.parameters[k],
                shape_str(grads[k].shape()), shape_str(params_[k].shape()));
  const auto update_start = std::chrono::steady_clock::now();
  result.grad_norm = optimizer_->step(params_, grads, lr);
  if (profile) {
    const double us =
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - update_start).count();
    profile->nodes.push_back(
        {"optimizer update", "Optimizer", optimizer_->options().kind, "", {}, profile->total_us, us});
    profile->total_us += us;
  }
  return result;
}

}  // namespace anvil::train
